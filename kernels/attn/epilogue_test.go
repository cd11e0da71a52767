package attn

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
)

// TestEpilogueKernels compares the AVX2 and AVX-512 epilogue and staging
// kernels (where this CPU has them) with the portable ones bit for bit:
// every BF16 pattern through decodeBF16 and axpyBF16, every e4m3 pattern
// through decodeE4M3, and special plus random float32 values through
// storeBF16 and scaleF32.
func TestEpilogueKernels(t *testing.T) { forVecLevels(t, epilogueKernels) }

func epilogueKernels(t *testing.T, lv vec) {
	// storeBF16 on special values and random bit patterns.
	rng := rand.New(rand.NewPCG(1, 2))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(0xff800001), math.Float32frombits(0x7f7fffff),
		math.Float32frombits(0x00008000), math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000),
		math.Float32frombits(0x3f807fff), math.Float32frombits(0x7f7f8000)}
	src := make([]float32, 1<<16+7)
	for i := range src {
		if i < len(special) {
			src[i] = special[i]
		} else {
			src[i] = math.Float32frombits(rng.Uint32())
		}
	}
	got := make([]lowp.BFloat16, len(src))
	want := make([]lowp.BFloat16, len(src))
	storeBF16(got, src, 1, lv)
	lowp.EncodeBF16(want, src)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("storeBF16(%#08x) = %#04x, want %#04x", math.Float32bits(src[i]), got[i], want[i])
		}
	}
	// Lengths whose last SIMD group is 16 values (the VPMOVDW path), plus
	// a scalar tail, from several offsets (the specials sit at offset 0).
	for _, n := range []int{16, 48, 80, 85} {
		for _, off := range []int{0, 3, 1000, 40000} {
			g, w := got[:n], want[:n]
			storeBF16(g, src[off:off+n], 1, lv)
			lowp.EncodeBF16(w, src[off:off+n])
			for i := range g {
				if g[i] != w[i] {
					t.Fatalf("n=%d off=%d: storeBF16(%#08x) = %#04x, want %#04x", n, off, math.Float32bits(src[off+i]), g[i], w[i])
				}
			}
		}
	}
	// Scaled store and scaled copy against the portable loops.
	scaled := make([]float32, len(src))
	for i := range scaled {
		scaled[i] = src[i] * 0.7
	}
	storeBF16(got, src, 0.7, lv)
	lowp.EncodeBF16(want, scaled)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("storeBF16(%#08x, 0.7) = %#04x, want %#04x", math.Float32bits(src[i]), got[i], want[i])
		}
	}
	sc := make([]float32, len(src))
	scaleF32(sc, src, 0.7, lv)
	for i := range sc {
		if math.Float32bits(sc[i]) != math.Float32bits(scaled[i]) && !math.IsNaN(float64(sc[i])) {
			t.Fatalf("scaleF32[%d] = %g, want %g", i, sc[i], scaled[i])
		}
	}
	storeBF16(got[:32], src[:32], 0, lv)
	for _, x := range got[:32] {
		if x != 0 {
			t.Fatal("zero-scale store must write zeros")
		}
	}
	// decodeE4M3 over every pattern (repeated to exercise the loop), bit
	// for bit; NaN must stay NaN with its sign.
	// With AVX512_VBMI the avx512 level runs the byte-table kernel first;
	// run once with it and once without, so both AVX-512 kernels are
	// covered. Offsets shift the patterns across the 64-, 32- and 16-groups.
	for _, vbmi := range []bool{false, true} {
		if vbmi && (lv != vecAVX512 || !hasVBMI()) {
			continue
		}
		for _, off := range []int{0, 7, 40} {
			checkDecodeE4M3(t, lv, vbmi, off)
		}
	}
	// decodeBF16 over every pattern, bit for bit.
	every := make([]lowp.BFloat16, 1<<16+5)
	for i := range every {
		every[i] = lowp.BFloat16(i)
	}
	d1 := make([]float32, len(every))
	d2 := make([]float32, len(every))
	decodeBF16(d1, every, lv)
	lowp.DecodeBF16(d2, every)
	for i := range d1 {
		if math.Float32bits(d1[i]) != math.Float32bits(d2[i]) {
			t.Fatalf("decodeBF16(%#04x) = %#08x, want %#08x", every[i], math.Float32bits(d1[i]), math.Float32bits(d2[i]))
		}
	}
	// axpy over every BF16 pattern (non-NaN: NaN arithmetic is not compared).
	var all []lowp.BFloat16
	for b := 0; b < 1<<16; b++ {
		if x := lowp.BFloat16(b); !math.IsNaN(float64(x.Float32())) {
			all = append(all, x)
		}
	}
	all = all[:len(all)&^15+3]
	acc1 := make([]float32, len(all))
	acc2 := make([]float32, len(all))
	acc0 := make([]float32, len(all))
	for i := range acc1 {
		acc1[i] = float32(rng.NormFloat64())
		acc2[i], acc0[i] = acc1[i], acc1[i]
	}
	axpyBF16(acc1, 0.37, all, lv)
	axpyBF16(acc2, 0.37, all, vecGo)
	f1 := make([]float32, len(all))
	f2 := make([]float32, len(all))
	copy(f1, acc1)
	copy(f2, acc1)
	axpyF32(f1, -1.5, acc2, lv)
	axpyF32(f2, -1.5, acc2, vecGo)
	for i := range acc1 {
		// FMA rounds once, the portable loop twice: allow one float32
		// rounding of the product, relative to the operands (the sum may
		// cancel).
		p := math.Abs(0.37 * float64(all[i].Float32()))
		if d := math.Abs(float64(acc1[i] - acc2[i])); d > 1.2e-7*(p+math.Abs(float64(acc0[i]))) && !math.IsInf(p, 0) {
			t.Fatalf("axpyBF16[%d]: %g vs %g", i, acc1[i], acc2[i])
		}
		p = math.Abs(1.5 * float64(acc2[i]))
		if d := math.Abs(float64(f1[i] - f2[i])); d > 1.2e-7*(p+math.Abs(float64(acc1[i]))) && !math.IsInf(p, 0) {
			t.Fatalf("axpyF32[%d]: %g vs %g", i, f1[i], f2[i])
		}
	}
}

// TestDecodeNVFP4 compares the AVX-512 NVFP4 row decoder with
// lowp.DequantizeNVFP4Row bit for bit (NaN only as NaN: both sides
// propagate the NaN scale, but the payload of NaN*NaN is not compared):
// every packed byte and every E4M3 scale byte (NaN and subnormal scales
// included) at D = 16..512, on several global scales.
func TestDecodeNVFP4(t *testing.T) {
	useTier(t, "avx512")
	if vecLevel() != vecAVX512 {
		t.Skip("AVX-512 decoders not in use on this CPU/tier")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range []int{16, 64, 128, 256, 512} {
		rows := 300 // more than one 128-row scale tile, and a partial one
		cols := d / lowp.NVFP4BlockSize
		packed := make([]uint8, rows*d/2)
		for i := range packed {
			packed[i] = uint8(i) // every byte pattern, shifted per row
		}
		pr, pc := lowp.Scale128x4Shape(rows, cols)
		scales := make([]uint8, pr*pc)
		for i := range scales {
			scales[i] = uint8(rng.Uint32())
		}
		scales[lowp.Scale128x4Offset(0, 0, cols)] = 0x7f // NaN scale
		scales[lowp.Scale128x4Offset(1, 0, cols)] = 0x01 // smallest subnormal
		got := make([]float32, d)
		want := make([]float32, d)
		scratch := make([]float32, maxNVFP4Blocks)
		for _, global := range []float32{1, 0.37, 3e-5, 1e30, float32(math.Inf(1))} {
			for r := 0; r < rows; r++ {
				decodeNVFP4Row(got, packed, scales, r, d, global, scratch, true)
				lowp.DequantizeNVFP4Row(want, packed, scales, r, d, global)
				for c := range got {
					g, w := got[c], want[c]
					if math.IsNaN(float64(w)) && math.IsNaN(float64(g)) {
						continue
					}
					if math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("d=%d global=%g row %d col %d: %g (%#08x), want %g (%#08x)", d, global, r, c, g, math.Float32bits(g), w, math.Float32bits(w))
					}
				}
			}
		}
	}
}

// checkDecodeE4M3 decodes every e4m3 pattern (three times, after off
// leading values, then a 16-group and a tail) with the vec level's kernels
// (the VBMI one when vbmi) and compares with lowp bit for bit; NaN must
// stay NaN with its sign.
func checkDecodeE4M3(t *testing.T, lv vec, vbmi bool, off int) {
	t.Helper()
	defer func(prev bool) { e4m3VBMI = prev }(e4m3VBMI)
	e4m3VBMI = vbmi
	e := make([]lowp.Float8E4M3FN, off+256*3+16+5)
	for i := range e {
		e[i] = lowp.Float8E4M3FN(i - off)
	}
	g := make([]float32, len(e))
	decodeE4M3(g, e, lv)
	for i, x := range e {
		w := x.Float32()
		if math.IsNaN(float64(w)) {
			if !math.IsNaN(float64(g[i])) || math.Signbit(float64(g[i])) != math.Signbit(float64(w)) {
				t.Fatalf("decodeE4M3(%#02x) = %g, want NaN with sign %v", uint8(x), g[i], math.Signbit(float64(w)))
			}
			continue
		}
		if math.Float32bits(g[i]) != math.Float32bits(w) {
			t.Fatalf("decodeE4M3(%#02x) = %g (%#08x), want %g", uint8(x), g[i], math.Float32bits(g[i]), w)
		}
	}
}

// TestSumSlots compares Partials.sumSlots on every vec level this CPU has
// (the fused AVX-512 kernels for BF16 and float32 rows of a D that is a
// multiple of 64, the axpy loop otherwise) with clearing acc and adding
// each slot of nonzero weight by the same level's axpy: bit for bit, with zero
// weights (their rows hold NaN and Inf, which must not reach acc), one
// slot, many slots and a slot stride of one row.
func TestSumSlots(t *testing.T) {
	forVecLevels(t, func(t *testing.T, lv vec) {
		rng := rand.New(rand.NewPCG(9, 10))
		for _, dt := range []PartialDtype{PartialBF16, PartialF32, PartialF16} {
			for _, d := range []int{16, 64, 128, 192, 256} {
				for _, ns := range []int{1, 2, 7, 16} {
					for _, stride := range []int{1, 3} {
						var pt Partials
						rows := ns*stride + 1
						pt.Ensure(dt, d, rows, false)
						src := make([]float32, d)
						ws := make([]float32, ns)
						for s := range ws {
							row := 1 + s*stride
							zero := s > 0 && rng.IntN(3) == 0
							for i := range src {
								src[i] = float32(rng.NormFloat64()) * 4
								if zero && i%5 == 0 {
									src[i] = float32(math.Inf(1))
								} else if zero && i%7 == 0 {
									src[i] = float32(math.NaN())
								}
							}
							pt.vec = vecGo
							pt.store(row, src, 1, make([]float32, d))
							if !zero {
								ws[s] = rng.Float32()
							}
						}
						want := make([]float32, d)
						pt.vec = lv
						for s, w := range ws {
							if w != 0 {
								pt.axpy(want, w, 1+s*stride, make([]float32, d))
							}
						}
						pt.vec = lv
						got := make([]float32, d)
						for i := range got {
							got[i] = float32(math.NaN()) // sumSlots must overwrite acc
						}
						pt.sumSlots(got, ws, 1, stride, make([]float32, d))
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%v d=%d ns=%d stride=%d: acc[%d] = %g, want %g", dt, d, ns, stride, i, got[i], want[i])
							}
						}
					}
				}
			}
		}
	})
}

// TestStoreRowsBF16 checks the one-call row store of the prefill tiles
// against lowp.BF16 row by row (the portable definition), on each SIMD
// tier and on the portable path: shuffled destination rows, zero scales of
// either sign (the row becomes zeros whatever it held, NaN included),
// random bit patterns with NaN and Inf, head dimensions whose last SIMD
// group is 16 values, and a dimension that is not a multiple of 16 (the
// per-row fallback). Rows not named in idx must stay untouched, and an
// index outside dst must panic rather than write. Each case runs with
// plain and with streamed (non-temporal) stores, into a destination that
// starts on a 64-byte boundary and into one 16 bytes past it (rows the
// kernels must store the plain way).
func TestStoreRowsBF16(t *testing.T) {
	check := func(t *testing.T, lv vec) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, c := range []struct {
			d      int
			stream bool
			skew   int // values past a 64-byte boundary
		}{{16, false, 0}, {48, false, 0}, {128, false, 0}, {40, false, 0},
			{128, true, 0}, {128, true, 8}, {48, true, 0}, {16, true, 8}, {40, true, 0}} {
			d := c.d
			const m, rows = 13, 20
			src := make([]float32, m*d)
			for i := range src {
				src[i] = math.Float32frombits(rng.Uint32())
				if i%7 == 0 {
					src[i] = float32(rng.NormFloat64())
				}
			}
			src[0], src[1] = float32(math.NaN()), float32(math.Inf(-1))
			scales := make([]float32, m)
			for r := range scales {
				scales[r] = float32(rng.Float64() + 0.5)
			}
			scales[3], scales[8] = 0, float32(math.Copysign(0, -1))
			idx := make([]int32, m)
			for r, i := range rng.Perm(rows)[:m] {
				idx[r] = int32(i)
			}
			const sentinel = lowp.BFloat16(0x1234)
			buf := make([]lowp.BFloat16, rows*d+64)
			a := int(uintptr(unsafe.Pointer(&buf[0])) % 64 / 2) // values past a boundary
			dst := buf[(32-a)%32+c.skew:][:rows*d]
			for i := range dst {
				dst[i] = sentinel
			}
			storeRowsBF16(dst, idx, src, scales, d, c.stream, lv)
			named := map[int32]int{}
			for r, i := range idx {
				named[i] = r
			}
			for i := range rows {
				r, ok := named[int32(i)]
				for col := range d {
					got := dst[i*d+col]
					want := sentinel
					if ok {
						want = 0
						if scales[r] != 0 {
							want = lowp.BF16(src[r*d+col] * scales[r])
						}
					}
					if got != want {
						t.Fatalf("%+v: dst row %d col %d = %#04x, want %#04x", c, i, col, got, want)
					}
				}
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Fatalf("d=%d: index %d of %d rows accepted", d, rows, rows)
					}
				}()
				storeRowsBF16(dst, []int32{0, rows}, src, scales, d, c.stream, lv)
			}()
		}
	}
	forVecLevels(t, check)
	t.Run("portable", func(t *testing.T) { check(t, vecGo) })
}

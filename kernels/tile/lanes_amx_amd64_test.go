//go:build amd64 && !purego

package tile

import (
	"math"
	"math/rand"
	"slices"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
)

// checkLanesAMX runs p with a Lanes accumulator on the amxbf16 tier (the
// AMX lane path for d a multiple of 32, else the float32 lane kernels) and
// checks it with checkLanesBF16Path.
func checkLanesAMX(t *testing.T, lanes map[int]*Lanes, p *problem) {
	checkLanesBF16Path(t, lanes, p, "amxbf16", lanesAMX)
}

// checkLanesBF16Path runs p with a Lanes accumulator that asks for bf16
// products (SetBF16Products) on tier tn, whose kernel set for d a multiple
// of 32 must be kern (the AMX lane path on amxbf16, the bf16-product
// kernels on avx512bf16; else the float32 lane kernels), and checks it as
// TestBF16Tier checks the bf16 tiers' block path:
//
//   - UpdateStaged equals Update bit for bit (the chunks run the same
//     products in the same order), also with every bf16 operand buffer and
//     the score buffer poisoned with NaN beforehand (a product that read
//     past the keys it was given, or padding that was not zeroed, would
//     turn O into NaN);
//   - against the generic tier on the problem with Q, K, V rounded to bf16
//     (and RoundNone as RoundBF16), the bf16 tier's own data path, within
//     float32 reassociation error (score eps 2^-22 per sqrt(d)*scale*
//     sum|q k|, 2^-20 relative elsewhere: the products are exact, only
//     TDPBF16PS's order of additions differs);
//   - against the generic tier on the original inputs within bf16 error
//     (2^-8 relative per operand).
func checkLanesBF16Path(t *testing.T, lanes map[int]*Lanes, p *problem, tn string, kern lanesKern) {
	l := lanes[p.d]
	if l == nil {
		l = NewLanes(p.d)
		l.SetBF16Products(true)
		lanes[p.d] = l
	}
	useTier(t, "generic")
	pr := p.bf16Inputs()
	wantR := pr.run()
	want := p.run()
	useTier(t, tn)
	got := p.runLanes(l)
	if p.d%32 == 0 && l.kern != kern {
		t.Fatalf("d = %d: kernel set %d, want %d", p.d, l.kern, kern)
	}
	if msg, ok := sameResult(p.runLanesStaged(t, l), got); !ok {
		t.Errorf("%s Lanes: UpdateStaged differs from Update: %s", tn, msg)
	}
	if a := l.amx; a != nil {
		nan := math.Float32bits(float32(math.NaN()))
		for _, b := range [][]uint32{a.qb, a.pt, a.pa, a.vb} {
			for i := range b {
				b[i] = nan
			}
		}
		for i := range a.kb {
			a.kb[i] = uint16(nan >> 16)
		}
		for i := range l.s {
			l.s[i] = float32(math.NaN())
		}
		if msg, ok := sameResult(p.runLanesStaged(t, l), got); !ok {
			t.Errorf("%s Lanes: with stale NaN in its buffers: %s", tn, msg)
		}
	}
	if p.d%32 != 0 {
		return // the float32 lane kernels: TestLanes
	}
	compare(t, tn+" Lanes vs generic on bf16 inputs", got, wantR, pr.tolerance(math.Ldexp(1, -22), math.Ldexp(1, -20)))
	tol := p.tolerance(math.Ldexp(1, -8)/math.Sqrt(float64(p.d)), math.Ldexp(1, -8))
	tol.flip = math.Max(tol.flip, pr.tolerance(0, 0).flip)
	compare(t, tn+" Lanes vs generic", got, want, tol)
}

// TestLanesAMX runs the Lanes test grid on the amxbf16 tier (checkLanesAMX).
func TestLanesAMX(t *testing.T) {
	useTier(t, "amxbf16")
	lanes := map[int]*Lanes{}
	lanesCases(t, func(t *testing.T, p *problem) { checkLanesAMX(t, lanes, p) })
}

// TestLanesAMXTails covers the AMX lane path's splits: key groups of 16
// (four at a time, then one at a time), the 32-key steps of P.V with their
// zero padding, odd value chunks (a value row without a partner), the
// staging chunk boundaries (64 rows) and the query-pair steps of 32
// columns (d = 32, 96, 160), with all 16 rows.
func TestLanesAMXTails(t *testing.T) {
	useTier(t, "amxbf16")
	lanes := map[int]*Lanes{}
	lanesTailCases(t, 13, func(t *testing.T, p *problem) { checkLanesAMX(t, lanes, p) })
}

// TestAMXOperandKernels checks the bf16 operand kernels of the AMX lane
// path against Go: e4m3Rows and e4m3Pairs give the bf16 bits of every
// e4m3fn pattern (NaN as the quiet NaN with its sign) in column order;
// bf16PairsMax interleaves bf16 rows as they are and finds the largest
// finite magnitude (every bit pattern, Inf and NaN skipped);
// bf16Rows and bf16Pairs round float32 to nearest even (lowp.BF16) for
// finite values (subnormal float32 inputs, which the decode operands never
// hold, are flushed to a signed zero by VCVTNE2PS2BF16).
func TestAMXOperandKernels(t *testing.T) {
	useTier(t, "amxbf16")
	e4bf := func(x byte) uint16 {
		if x&0x7f == 0x7f {
			return 0x7fc0 | uint16(x&0x80)<<8
		}
		return uint16(math.Float32bits(lowp.Float8E4M3FN(x).Float32()) >> 16)
	}
	rng := rand.New(rand.NewSource(5))
	const d = 192
	for _, rows := range []int{1, 2, 5} {
		src := make([]byte, 2*rows*d)
		for i := range src {
			src[i] = byte(i*7 + rng.Intn(3))
		}
		got := make([]uint16, rows*d+8)
		e4m3Rows(unsafe.Pointer(&got[0]), unsafe.Pointer(&src[0]), rows*d, &E4M3Tab, &testAMXConfig, &testPrefetch)
		for i := 0; i < rows*d; i++ {
			if w := e4bf(src[i]); got[i] != w {
				t.Fatalf("e4m3Rows rows %d: [%d] (%#02x) = %#04x, want %#04x", rows, i, src[i], got[i], w)
			}
		}
		if got[rows*d] != 0 {
			t.Fatalf("e4m3Rows wrote past n")
		}
		pairs := make([]uint32, rows*(d+16))
		e4m3Pairs(unsafe.Pointer(&pairs[0]), uintptr(4*(d+16)), unsafe.Pointer(&src[0]), uintptr(d), rows, d, &E4M3Tab, &testAMXConfig, &testPrefetch)
		for p := 0; p < rows; p++ {
			for c := 0; c < d; c++ {
				w := uint32(e4bf(src[(2*p+1)*d+c]))<<16 | uint32(e4bf(src[2*p*d+c]))
				if g := pairs[p*(d+16)+c]; g != w {
					t.Fatalf("e4m3Pairs pair %d column %d = %#08x, want %#08x", p, c, g, w)
				}
			}
			for c := d; c < d+16; c++ {
				if pairs[p*(d+16)+c] != 0 {
					t.Fatalf("e4m3Pairs wrote past n")
				}
			}
		}
		h := make([]uint16, 2*rows*d)
		var wmax uint16
		for i := range h {
			h[i] = uint16(rng.Intn(1 << 16))
			if a := h[i] & 0x7fff; a < 0x7f80 {
				wmax = max(wmax, a)
			}
		}
		mx := [32]uint16{}
		bf16PairsMax(unsafe.Pointer(&pairs[0]), uintptr(4*(d+16)), unsafe.Pointer(&h[0]), uintptr(2*d), rows, d, &mx, &testPrefetch)
		if g := slices.Max(mx[:]); g != wmax {
			t.Fatalf("bf16PairsMax rows %d: max %#04x, want %#04x", rows, g, wmax)
		}
		for p := 0; p < rows; p++ {
			for c := 0; c < d; c++ {
				w := uint32(h[(2*p+1)*d+c])<<16 | uint32(h[2*p*d+c])
				if g := pairs[p*(d+16)+c]; g != w {
					t.Fatalf("bf16PairsMax pair %d column %d = %#08x, want %#08x", p, c, g, w)
				}
			}
		}
		f := make([]float32, 2*rows*d)
		for i := range f {
			f[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.Intn(40)-20)))
		}
		f[0], f[1], f[2] = float32(math.Inf(1)), float32(math.Inf(-1)), 0x1.0101p0 // a tie to even
		bf := func(x float32) uint16 { return uint16(lowp.BF16(x)) }
		e4m3Rows(unsafe.Pointer(&got[0]), unsafe.Pointer(&src[0]), 0, &E4M3Tab, &testAMXConfig, &testPrefetch) // n = 0: nothing
		bf16Rows(unsafe.Pointer(&got[0]), &f[0], rows*d)
		for i := 0; i < rows*d; i++ {
			if w := bf(f[i]); got[i] != w {
				t.Fatalf("bf16Rows: [%d] (%g) = %#04x, want %#04x", i, f[i], got[i], w)
			}
		}
		bf16Pairs(unsafe.Pointer(&pairs[0]), uintptr(4*(d+16)), &f[0], uintptr(4*d), rows, d)
		for p := 0; p < rows; p++ {
			for c := 0; c < d; c++ {
				w := uint32(bf(f[(2*p+1)*d+c]))<<16 | uint32(bf(f[2*p*d+c]))
				if g := pairs[p*(d+16)+c]; g != w {
					t.Fatalf("bf16Pairs pair %d column %d = %#08x, want %#08x", p, c, g, w)
				}
			}
		}
	}
}

// TestLanesAMXRaw runs the pipelined-widening cases of
// TestLanesUpdatePipelined on the AMX lane path: key and value rows offered
// as bytes (bf16 keys read in place as AMX operands, e4m3fn keys and
// values converted straight to bf16 operands) must give what the staged
// float32 rows give, bit for bit: the operands are the same bf16 values and
// every product runs in the same order.
func TestLanesAMXRaw(t *testing.T) {
	useTier(t, "amxbf16")
	rng := rand.New(rand.NewSource(4))
	ch := lanesChunks[lanesAMX]
	for _, f := range []RawFormat{RawE4M3, RawBF16} {
		for _, d := range []int{64, 128, 256} {
			for _, n := range []int{1, 12, 15, 16, 17, 47, 63, 64, 65, 100, 127, 128} {
				for _, noRaw := range []map[int]bool{nil, {0: true}, {ch.k: true, -1: true}, {-1 - ch.v: true}} {
					for _, nan := range []bool{false, true} {
						if nan && noRaw != nil {
							continue
						}
						pipelinedCase(t, rng, "amxbf16", f, d, n, noRaw, nan, f == RawBF16 && rng.Intn(4) != 0, rng.Intn(5), 200)
					}
				}
			}
		}
	}
}

// testAMXConfig is a tile configuration for the conversion kernels' AMX
// keep-awake products in tests (16 rows of 64 bytes, as the lane path's).
var testAMXConfig = func() (c amxConfig) {
	c.set(amxRows)
	return c
}()

// testPrefetch is an idle prefetch cursor for the conversion kernels in
// tests: it stays on one line of testPrefetchLine.
var testPrefetch = func() lanesPrefetch {
	a := uintptr(unsafe.Pointer(&testPrefetchLine[0]))
	return lanesPrefetch{addr: a, last: a}
}()

var testPrefetchLine [64]byte

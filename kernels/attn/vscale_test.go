package attn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
)

// bf16Max is the largest finite bfloat16, 3.3895e38.
var bf16Max = lowp.BFloat16(0x7f7f).Float32()

// TestPrefillVNearBF16Max checks that V near the BF16 maximum does not give
// O = +Inf (an unnormalised float32 P.V sum would overflow): in every
// tier this CPU has, the prefill output matches the float64 reference and
// is finite, for V at the BF16 maximum (both signs) and for ordinary V
// mixed with huge blocks.
func TestPrefillVNearBF16Max(t *testing.T) {
	c := prefillCase{hkv: 2, qpk: 2, d: 32, blk: 16, topK: 3, seqQ: []int{40, 9}, seqK: []int{64, 40}, causal: true}
	gens := map[string]func(i int) float32{
		"max":   func(int) float32 { return bf16Max },
		"signs": func(i int) float32 { return bf16Max * float32(1-2*(i/3%2)) },
		"mixed": func(i int) float32 {
			if i/(16*32*2)%2 == 0 {
				return float32(i%7) - 3
			}
			return bf16Max / 2 * float32(i%5-2)
		},
	}
	for _, tn := range testTiers {
		t.Run(tn, func(t *testing.T) {
			useTier(t, tn)
			for name, gen := range gens {
				rng := rand.New(rand.NewPCG(3, 4))
				p, q2k := c.build(t, rng, 2, gen)
				out := newOutput(p.TotalQ*p.HQ, p.D)
				pool := NewPool(2)
				RunPrefill(p, NewWorkspace(2, p.D), pool, out)
				pool.Close()
				t.Run(name, func(t *testing.T) { refPrefill(t, p, q2k, out, 1.0/64) })
			}
		})
	}
}

// TestVScaleOrdinaryUnchanged checks that blocks with max |v| <= 2^96 are
// left alone (bit-identical results) and that the shift is the smallest
// that brings a block to 2^96.
func TestVScaleOrdinaryUnchanged(t *testing.T) {
	v := []float32{1, -0x1p96, 3, float32(math.Inf(1)), float32(math.NaN())}
	var s vScale
	bf16V := &Operand{Dtype: BF16} // unbounded, portable scan
	s.block(v, nil, bf16V)
	if s.e != 0 || v[1] != -0x1p96 || s.factor() != 1 {
		t.Fatalf("ordinary block scaled: e = %d, v = %v", s.e, v)
	}
	v = []float32{0x1.8p100, 2}
	s.block(v, nil, bf16V)
	if s.e != 5 || v[0] != 0x1.8p95 || v[1] != 0x1p-4 || s.factor() != 32 {
		t.Fatalf("e = %d, v = %v", s.e, v)
	}
	v = []float32{bf16Max}
	s.block(v, nil, bf16V)
	if s.e != 32 || v[0] > 0x1p96 {
		t.Fatalf("e = %d, v = %v", s.e, v)
	}
}

// TestDecodeVNearBF16Max is TestPrefillVNearBF16Max for paged decode, with
// and without split-KV (hundreds of keys per accumulation, so that the
// rescaling of O accumulated before a huge block is exercised too).
func TestDecodeVNearBF16Max(t *testing.T) {
	gens := map[string]func(i int) float32{
		"max":   func(int) float32 { return bf16Max },
		"late":  func(i int) float32 { return float32(i%9-4) * float32(math.Ldexp(1, 4*(i/(16*32)%32))) },
		"mixed": func(i int) float32 { return bf16Max / 2 * float32(i%5-2) },
	}
	for _, tn := range testTiers {
		t.Run(tn, func(t *testing.T) {
			useTier(t, tn)
			for _, fixed := range []int{0, 3} {
				for name, gen := range gens {
					c := decodeCase{batch: 2, seqlenQ: 2, hkv: 2, qpk: 4, d: 32, pageSize: 16, workers: 2, fixedSplit: fixed, used: []int32{300, 77}}
					rng := rand.New(rand.NewPCG(5, 6))
					p := c.build(t, rng, gen)
					out := newOutput(p.Batch*p.SeqlenQ*p.HQ, p.D)
					pool := NewPool(3)
					RunDecode(p, NewWorkspace(3, p.D), pool, out)
					pool.Close()
					t.Run(name, func(t *testing.T) { refDecode(t, p, out, 1.0/64) })
				}
			}
		})
	}
}

// TestMaxFiniteBitsTiers compares the AVX2 and AVX-512 scans (where this
// CPU has them) with the portable loop on random bit patterns that mix
// signs, zeros, subnormals, the finite maximum, infinities and NaNs, at
// lengths that leave portable tails of 0 to 15 elements.
func TestMaxFiniteBitsTiers(t *testing.T) {
	forVecLevels(t, func(t *testing.T, lv vec) {
		rng := rand.New(rand.NewPCG(5, 6))
		specials := []uint32{0, 1, 0x007fffff, 0x7f7fffff, 0x7f800000, 0x7fc00000, 0x7f800001, 0xffffffff, 0x80000000}
		for n := 1; n < 300; n += 7 {
			for trial := 0; trial < 20; trial++ {
				v := make([]float32, n)
				for i := range v {
					b := rng.Uint32()
					switch rng.IntN(4) {
					case 0:
						b = specials[rng.IntN(len(specials))] | rng.Uint32()&(1<<31)
					case 1:
						b &= 0x3fffffff // ordinary magnitudes
					}
					v[i] = math.Float32frombits(b)
				}
				want := maxFiniteBits(v, vecGo)
				for i, x := range v {
					b := math.Float32bits(x) &^ (1 << 31)
					if b < 0x7f800000 && b > want {
						t.Fatalf("portable scan: element %d has |bits| %#x above the result %#x", i, b, want)
					}
				}
				if got := maxFiniteBits(v, lv); got != want {
					t.Fatalf("n=%d: SIMD scan (level %d) %#x, portable %#x", n, lv, got, want)
				}
			}
		}
	})
}

// TestVBounded checks which V operands may skip the scan: E4M3 always,
// NVFP4 while 6*448*|global| <= 2^96, BF16 never.
func TestVBounded(t *testing.T) {
	cases := []struct {
		o    Operand
		want bool
	}{
		{Operand{Dtype: E4M3}, true},
		{Operand{Dtype: BF16}, false},
		{Operand{Dtype: NVFP4, Global: 1}, true},
		{Operand{Dtype: NVFP4, Global: -0x1p84}, true},
		{Operand{Dtype: NVFP4, Global: 0x1p86}, false},
		{Operand{Dtype: NVFP4, Global: float32(math.Inf(1))}, false},
		{Operand{Dtype: NVFP4, Global: float32(math.NaN())}, false},
	}
	for _, c := range cases {
		if got := vBounded(&c.o); got != c.want {
			t.Errorf("vBounded(%v, global %g) = %v, want %v", c.o.Dtype, c.o.Global, got, c.want)
		}
	}
}

// TestDecodeBF16Max compares the fused decode-and-scan (decodeBF16Max, the
// staged V guard's BF16 path) on every vec level this CPU has with the
// portable decode followed by the portable scan: the same float32 values
// bit for bit and the same largest finite magnitude, for random BF16
// patterns mixing zeros, subnormals, the finite maximum, infinities and
// NaNs of both signs, at lengths that leave portable tails of 0 to 15.
func TestDecodeBF16Max(t *testing.T) {
	forVecLevels(t, func(t *testing.T, lv vec) {
		rng := rand.New(rand.NewPCG(7, 8))
		specials := []uint16{0, 1, 0x007f, 0x0080, 0x7f7f, 0x7f80, 0x7fc0, 0x7f81, 0x3f80}
		for n := 1; n < 300; n += 5 {
			for trial := 0; trial < 20; trial++ {
				src := make([]lowp.BFloat16, n)
				for i := range src {
					b := uint16(rng.Uint32())
					switch rng.IntN(3) {
					case 0:
						b = specials[rng.IntN(len(specials))] | b&0x8000
					case 1:
						b &= 0xbfff // ordinary magnitudes
					}
					src[i] = lowp.BFloat16(b)
				}
				want := make([]float32, n)
				decodeBF16(want, src, vecGo)
				wantMax := maxFiniteBits(want, vecGo)
				got := make([]float32, n)
				gotMax := decodeBF16Max(got, src, lv)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n=%d: element %d = %#x, want %#x", n, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
					}
				}
				if gotMax != wantMax {
					t.Fatalf("n=%d: max finite bits %#x, want %#x", n, gotMax, wantMax)
				}
			}
		}
	})
}

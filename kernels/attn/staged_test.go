package attn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// toE4M3 converts a BF16 operand to E4M3 (round to nearest even).
func toE4M3(o Operand) Operand {
	e := make([]lowp.Float8E4M3FN, len(o.BF16))
	for i, x := range o.BF16 {
		e[i] = lowp.E4M3(x.Float32())
	}
	return Operand{Dtype: E4M3, D: o.D, E4M3: e}
}

// TestDecodeStagedMatchesWhole checks that decode with K/V staged a few
// rows at a time inside the lanes update (E4M3, and BF16 with the V guard
// scanning the BF16 source, also with values near the BF16 maximum that
// make it rescale) gives the bits of decode with whole blocks decoded first, over page
// sizes that split the staged chunks into several runs, one and several
// lane groups, ragged lengths, split and unsplit schedules and sparse
// block selections, P rounded to E4M3 or not, a score scale too large for
// the AVX2 staging to fold e4m3 keys (e4m3Fold); and, without the rounding
// and without selections, that both match the float64 reference.
func TestDecodeStagedMatchesWhole(t *testing.T) {
	for _, tn := range []string{"generic", "avx2", "avx512"} {
		t.Run(tn, func(t *testing.T) {
			useTier(t, tn)
			n := 0
			for _, ps := range []int{16, 64, 128} {
				for _, dt := range []string{"e4m3", "e4m3-bigscale", "bf16", "bf16-huge"} {
					for _, g := range [][3]int{{1, 16, 1}, {2, 8, 1}, {1, 16, 2}, {1, 4, 3}} {
						for _, split := range []int{0, 2} {
							n++
							c := decodeCase{batch: 3, seqlenQ: g[2], hkv: g[0], qpk: g[1], d: []int{64, 128}[n%2], pageSize: ps,
								workers: 2, fixedSplit: split, used: []int32{int32(5 * ps / 2), 3, int32(ps + 1)}}
							rng := rand.New(rand.NewPCG(uint64(n), 9))
							var gen func(i int) float32
							if dt == "bf16-huge" {
								// Ordinary values in the first pages, values
								// near the BF16 maximum after them: without the
								// guard their sums overflow, and it rescales the
								// O accumulated before them.
								gen = func(i int) float32 {
									if i >= 4*16*c.d {
										return bf16Max / float32(1+i%3)
									}
									return float32(math.Sin(float64(i)))
								}
							}
							p := c.build(t, rng, gen)
							if strings.HasPrefix(dt, "e4m3") {
								p.K, p.V = toE4M3(p.K), toE4M3(p.V)
							}
							if dt == "e4m3-bigscale" {
								// scale*log2(e) is finite, 256 times it is not:
								// the AVX2 staging must not fold K here.
								p.Scale = 0x1p120
							}
							if n%2 == 0 {
								p.PV = tile.RoundE4M3 // as FP8 decode: no reference check below
							}
							if n%3 == 0 {
								p.TopK, p.BlkKV = 2, 32
								totalQ := p.Batch * p.SeqlenQ
								p.Q2K = make([]int32, p.Hkv*totalQ*p.TopK)
								for i := range p.Q2K {
									p.Q2K[i] = int32(rng.IntN(4)) - 1 // -1 is padding
								}
							}
							run := func(noStage bool) *Output {
								out := newOutput(p.Batch*p.SeqlenQ*p.HQ, p.D)
								ws := NewWorkspace(2, p.D)
								ws.noStage = noStage
								pool := NewPool(2)
								RunDecode(p, ws, pool, out)
								pool.Close()
								return out
							}
							t.Run(fmt.Sprintf("%s/ps%d/g%v/split%d/n%d", dt, ps, g, split, n), func(t *testing.T) {
								staged, whole := run(false), run(true)
								for i := range whole.O {
									if staged.O[i] != whole.O[i] {
										t.Fatalf("O[%d] = %v staged, %v whole", i, staged.O[i].Float32(), whole.O[i].Float32())
									}
								}
								for i := range whole.LSE {
									if math.Float32bits(staged.LSE[i]) != math.Float32bits(whole.LSE[i]) {
										t.Fatalf("LSE[%d] = %v staged, %v whole", i, staged.LSE[i], whole.LSE[i])
									}
								}
								if p.Q2K == nil && p.PV == tile.RoundNone {
									refDecode(t, p, staged, 1.0/16)
								}
							})
						}
					}
				}
			}
		})
	}
}

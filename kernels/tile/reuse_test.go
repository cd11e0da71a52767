package tile

import (
	"math"
	"math/rand"
	"testing"
)

// TestAccReuse checks that an accumulator reused after Reset gives, bit
// for bit, what a new one gives when its output is zeroed before the first
// update, on every tier: Reset leaves the previous output in place and the
// first update must write it whole (the SIMD tiers' first P.V starts from
// zero instead of rescaling zeros) or zero the row groups it skips, and an
// accumulation that no update reached must read as zeros. The previous
// accumulation leaves Inf and NaN in O.
func TestAccReuse(t *testing.T) {
	for _, tn := range Tiers() {
		t.Run(tn, func(t *testing.T) {
			useTier(t, tn)
			for _, d := range []int{128, 40} {
				rng := rand.New(rand.NewSource(3))
				const maxM = 20
				blocks := make([]*Block, 3)
				for i := range blocks {
					k, v := make([]float32, BlockN*d), make([]float32, BlockN*d)
					for j := range k {
						k[j], v[j] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
					}
					if i == 0 {
						v[5], v[7] = float32(math.Inf(1)), float32(math.NaN())
					}
					blocks[i] = NewBlock(d)
					blocks[i].Load(BlockN, k, v)
				}
				q := make([]float32, maxM*d)
				for j := range q {
					q[j] = float32(rng.NormFloat64())
				}
				// valid per update: rows 6-11 (a whole row group) see no key
				// in the first update, rows 12-13 none at all.
				valids := make([][]int32, len(blocks))
				for u := range valids {
					valids[u] = make([]int32, maxM)
					for r := range maxM {
						valids[u][r] = int32(rng.Intn(BlockN + 1))
						if (u == 0 && r >= 6 && r < 12) || r == 12 || r == 13 {
							valids[u][r] = 0
						}
					}
				}
				// run accumulates; with settle it reads O before the first
				// update, which zeroes it as a zeroing Reset would, so that the
				// updates rescale zeros instead of writing O: the reference
				// for the first-update kernels.
				run := func(a *Acc, m, updates int, settle bool) ([]float32, []float32) {
					a.Reset(m, 0.125, RoundNone, 0)
					copy(a.QRows(0, m), q[:m*d])
					if settle {
						a.O(0)
					}
					for u := range updates {
						a.Update(blocks[len(blocks)-updates+u], valids[u][:m])
					}
					lse, inv := make([]float32, m), make([]float32, m)
					a.FinishLSE(lse, nil, inv)
					return append([]float32(nil), a.ORows(0, m)...), lse
				}
				used := NewAcc(maxM, d)
				run(used, maxM, 3, false) // leaves non-finite values in O (V holds Inf and NaN)
				for _, c := range []struct{ m, updates int }{{maxM, 2}, {maxM, 1}, {17, 0}, {maxM, 2}} {
					gotO, gotL := run(used, c.m, c.updates, false)
					wantO, wantL := run(NewAcc(maxM, d), c.m, c.updates, true)
					for i := range wantO {
						if math.Float32bits(gotO[i]) != math.Float32bits(wantO[i]) {
							t.Fatalf("d=%d m=%d updates=%d: O[%d] = %v after reuse, %v when new", d, c.m, c.updates, i, gotO[i], wantO[i])
						}
					}
					for i := range wantL {
						if math.Float32bits(gotL[i]) != math.Float32bits(wantL[i]) {
							t.Fatalf("d=%d m=%d updates=%d: lse[%d] = %v after reuse, %v when new", d, c.m, c.updates, i, gotL[i], wantL[i])
						}
					}
					if c.updates == 0 {
						for i, x := range gotO {
							if x != 0 || math.Signbit(float64(x)) {
								t.Fatalf("d=%d: no update, O[%d] = %v, want +0", d, i, x)
							}
						}
					}
				}
			}
		})
	}
}

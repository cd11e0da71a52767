package attn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparseattn/msa/kernels/plan"
)

// fusedCase builds a KV-major call for the fused-combine tests: a ragged
// causal batch (an empty sequence, one whose first queries precede every
// key: all-masked rows), GQA 4, D 64, 32-key blocks, topK 5 random
// distinct blocks per (head, query) with some entries -1 and every 9th
// query's list empty (rows with no slot), temperature LSE, partials of
// dtype pd.
func fusedCase(t testing.TB, pd PartialDtype) *Prefill {
	t.Helper()
	const hkv, qpk, d, blk, topK = 2, 4, 64, 32, 5
	hq := hkv * qpk
	rng := rand.New(rand.NewPCG(21, 22))
	seqQ, seqK := []int{130, 0, 77, 60}, []int{130, 0, 201, 40}
	cuQ, cuK := []int32{0}, []int32{0}
	for b := range seqQ {
		cuQ = append(cuQ, cuQ[b]+int32(seqQ[b]))
		cuK = append(cuK, cuK[b]+int32(seqK[b]))
	}
	totalQ, totalK := int(cuQ[len(seqQ)]), int(cuK[len(seqQ)])
	rows, err := plan.NewRows(cuK, blk)
	if err != nil {
		t.Fatal(err)
	}
	q2k := randomLists(rng, hkv, topK, cuQ, rows, func(q int) bool { return q%9 == 0 })
	csr, sched := planCall(t, q2k, hkv, qpk, topK, blk, cuQ, cuK, rows)
	sk := make([]int32, len(seqK))
	for b, n := range seqK {
		sk[b] = int32(n)
	}
	return &Prefill{
		Q:  Operand{Dtype: BF16, D: d, BF16: randBF16(rng, totalQ*hq*d)},
		K:  Operand{Dtype: BF16, D: d, BF16: randBF16(rng, totalK*hkv*d)},
		V:  Operand{Dtype: BF16, D: d, BF16: randBF16(rng, totalK*hkv*d)},
		KV: KVLayout{Hkv: hkv, CuK: cuK}, TotalQ: totalQ, HQ: hq, Hkv: hkv, D: d, CuQ: cuQ, SeqK: sk,
		BlkKV: blk, Causal: true, Scale: 0.125, InvT: 1 / 1.7, TopK: topK, CSR: csr, Sched: sched,
		Partial: pd, OutputScale: 1, Path: PathKV,
	}
}

// runCombineMode runs p on the KV-major path with the given combine, query
// window (0: automatic) and workers, with temperature LSEs.
func runCombineMode(p *Prefill, mode combineMode, win, workers int) *Output {
	pool := NewPool(workers)
	defer pool.Close()
	ws := NewWorkspace(workers, p.D)
	ws.combine, ws.fixedWin = mode, win
	out := newOutput(p.TotalQ*p.HQ, p.D)
	out.TLSE = make([]float32, p.TotalQ*p.HQ)
	RunPrefill(p, ws, pool, out)
	return out
}

// sameOutput reports whether a and b have the same bits.
func sameOutput(a, b *Output) bool {
	return slices.Equal(a.O, b.O) && slices.EqualFunc(a.LSE, b.LSE, sameBits) && slices.EqualFunc(a.TLSE, b.TLSE, sameBits)
}

// TestFusedCombineBits checks that the fused combine gives the separate
// combine's bits on every tier this CPU has, for BF16, float32 and e4m3
// partials, on 1, 2 and 3 workers and query windows from one query (far
// smaller than a tile of 32 queries, every block's queries cut into many
// windows) to more than the call: the batch has an empty sequence, rows
// whose keys all lie after them (causal, all masked) and rows that
// selected nothing. The output is not trivial: most rows see keys.
func TestFusedCombineBits(t *testing.T) {
	for _, tier := range testTiers {
		t.Run(tier, func(t *testing.T) {
			useTier(t, tier)
			for _, pd := range []PartialDtype{PartialBF16, PartialF32, PartialE4M3} {
				p := fusedCase(t, pd)
				want := runCombineMode(p, combineSeparate, 0, 2)
				finite := 0
				for _, l := range want.LSE {
					if !math.IsInf(float64(l), -1) {
						finite++
					}
				}
				if finite < len(want.LSE)/2 || finite == len(want.LSE) {
					t.Fatalf("%v: %d of %d rows see keys: want most but not all", pd, finite, len(want.LSE))
				}
				for _, win := range []int{0, 1, 2, 5, 16, 33, p.TotalQ + 3} {
					for _, workers := range []int{1, 2, 3} {
						if got := runCombineMode(p, combineFused, win, workers); !sameOutput(got, want) {
							t.Fatalf("%v partials, window %d, %d workers: the fused combine differs from the separate one", pd, win, workers)
						}
					}
				}
			}
		})
	}
}

// TestFusedCombineMutations checks that TestFusedCombineBits' comparison
// catches a broken fused combine: a window whose combine is skipped, and
// a window combined before its last task (the merge ordered before the
// work it merges), on one worker, where both are deterministic.
func TestFusedCombineMutations(t *testing.T) {
	p := fusedCase(t, PartialBF16)
	want := runCombineMode(p, combineFused, 5, 1)
	for _, m := range []int{mutSkipCombine, mutEarlyCombine} {
		t.Run(fmt.Sprint(m), func(t *testing.T) {
			defer func(prev int) { fusedMutation = prev }(fusedMutation)
			fusedMutation = m
			if got := runCombineMode(p, combineFused, 5, 1); sameOutput(got, want) {
				t.Fatalf("mutation %d: the output is unchanged", m)
			}
		})
	}
}

// TestFusedWindow checks the fused window: the ring's windows of partial
// rows and LSEs fit in half of the workers' L2 caches (one query when
// even one does not), at least one query and at most the call.
func TestFusedWindow(t *testing.T) {
	l2 := l2Bytes()
	if l2 < 64<<10 || l2 > 64<<20 {
		t.Fatalf("L2 of %d bytes: not a plausible per-core L2", l2)
	}
	for _, c := range []struct{ totalQ, hq, d, slots, workers int }{
		{8192, 16, 128, 16, 2}, {8192, 16, 128, 16, 1}, {100, 64, 256, 64, 1}, {3, 1, 64, 1, 4}, {0, 8, 64, 4, 2},
	} {
		p := &Prefill{TotalQ: c.totalQ, HQ: c.hq, D: c.d, Partial: PartialBF16}
		w := fusedWindow(p, c.slots, c.workers)
		bytes := fusedRing * w * c.slots * c.hq * (c.d*2 + 4)
		if w < 1 || w > max(c.totalQ, 1) || (w > 1 && 2*bytes > l2*c.workers) || (w < c.totalQ && 2*bytes+2*fusedRing*c.slots*c.hq*(c.d*2+4) <= l2*c.workers) {
			t.Errorf("%+v: window %d (%d ring bytes, L2 %d)", c, w, bytes, l2)
		}
	}
}

// TestFusedAllocs checks that a warm fused call allocates nothing and
// that a call whose blocks exceed the block cache runs the separate form.
func TestFusedAllocs(t *testing.T) {
	p := fusedCase(t, PartialBF16)
	pool := NewPool(2)
	defer pool.Close()
	ws := NewWorkspace(2, p.D)
	ws.combine, ws.fixedWin = combineFused, 7
	out := newOutput(p.TotalQ*p.HQ, p.D)
	RunPrefill(p, ws, pool, out)
	if a := warmAllocs(5, func() { RunPrefill(p, ws, pool, out) }); a != 0 {
		t.Fatalf("%v allocations per warm fused call", a)
	}
	if len(ws.kvBlocks) == 0 {
		t.Fatal("the fused call cached no block")
	}
	big := *p
	big.SeqK = slices.Clone(p.SeqK)
	big.SeqK[0] = int32(maxBlockCacheBytes/blockCacheBytes(p.D)/p.Hkv+1) * int32(p.BlkKV)
	if ws.cacheFits(&big) {
		t.Fatalf("a call of %d keys fits the block cache", big.SeqK[0])
	}
	if !ws.cacheFits(p) {
		t.Fatal("the small call does not fit the block cache")
	}
}

// TestFusedCombineMixed checks the fused combine on calls that auto splits
// between the paths (the model's threshold at the median tile, as in
// TestAutoMixed), where the KV-major part computes and combines only the
// rows of its own tiles: the same bits as the separate combine on 1 and 3
// workers and windows of 1 and 5 queries and the automatic one.
func TestFusedCombineMixed(t *testing.T) {
	cases := qmCases()[:8]
	mixed := 0
	for i, c := range cases {
		pr := c.build(t, uint64(300+i))
		if stagedCall(pr.p) {
			continue // the threshold below assumes no Staged factor
		}
		var wastes []float64
		for _, x := range tileStats(pr) {
			wastes = append(wastes, choose(&slowLanes, x[0], x[1], qmTileTokens(c.qpk), c.qpk, float64(c.blk), false).Waste)
		}
		slices.Sort(wastes)
		m := &pathCosts{QMKey: 1 / wastes[len(wastes)/2], KVKey: 1, Staged: 1}
		for _, tier := range testTiers[1:] {
			t.Run(fmt.Sprintf("%d/%s", i, tier), func(t *testing.T) {
				useTier(t, tier)
				if !weighs(pr.p) {
					t.Skip("no SIMD lane kernels: auto does not weigh")
				}
				defer func(prev *pathCosts) { costsOverride = prev }(costsOverride)
				costsOverride = m
				pr.p.Path = PathAuto
				kv0, q0 := PrefillRuns(PathKV), PrefillRuns(PathQuery)
				want := runCombineMode(pr.p, combineSeparate, 0, 2)
				if PrefillRuns(PathKV) == kv0+1 && PrefillRuns(PathQuery) == q0+1 {
					mixed++
				}
				for _, win := range []int{0, 1, 5} {
					for _, workers := range []int{1, 3} {
						if got := runCombineMode(pr.p, combineFused, win, workers); !sameOutput(got, want) {
							t.Fatalf("%v, window %d, %d workers: the fused combine differs from the separate one", c, win, workers)
						}
					}
				}
			})
		}
	}
	if haveAsm && mixed == 0 {
		t.Error("no call ran both paths")
	}
}

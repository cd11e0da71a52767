package attn

import (
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/tile"
)

// TestWorkerScratchPerPath: a worker holds the scratch of the kernels it
// ran only: decode and the query-major prefill at GQA 16 with one query
// token keep one lane group and no block kernel (where the tier has SIMD
// lanes), the KV-major prefill the block kernel.
func TestWorkerScratchPerPath(t *testing.T) {
	const d = 128
	lanes := tile.LanesSIMD(d)
	groups := func(ws *Workspace) (n int, block bool) {
		wk := ws.workers[0]
		if wk.lanes != nil {
			for _, g := range wk.lanes.g {
				if g != nil {
					n++
				}
			}
		}
		return n, wk.acc != nil
	}
	want := func(t *testing.T, ws *Workspace, wantGroups int, wantBlock bool) {
		t.Helper()
		n, block := groups(ws)
		if !lanes {
			// Without SIMD lanes decode and query tiles run the block kernel.
			wantGroups, wantBlock = 0, true
		}
		if n != wantGroups || block != wantBlock {
			t.Errorf("worker holds %d lane groups and block kernel %v, want %d and %v", n, block, wantGroups, wantBlock)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	t.Run("decode", func(t *testing.T) {
		dp := decodeCase{batch: 2, seqlenQ: 1, hkv: 1, qpk: 16, d: d, pageSize: 64, workers: 1, used: []int32{300, 70}}.build(t, rng, nil)
		ws, pool := NewWorkspace(1, d), NewPool(1)
		defer pool.Close()
		RunDecode(dp, ws, pool, newOutput(dp.Batch*dp.SeqlenQ*dp.HQ, d))
		want(t, ws, 1, false)
	})
	c := prefillCase{hkv: 1, qpk: 16, d: d, blk: 64, topK: 4, seqQ: []int{200, 90}, seqK: []int{200, 90}, causal: true}
	for _, path := range []PrefillPath{PathQuery, PathKV} {
		t.Run(path.String(), func(t *testing.T) {
			p, _ := c.build(t, rng, 1, nil)
			p.Path = path
			ws, pool := NewWorkspace(1, d), NewPool(1)
			defer pool.Close()
			RunPrefill(p, ws, pool, newOutput(p.TotalQ*p.HQ, d))
			if path == PathKV {
				want(t, ws, 0, true)
				return
			}
			want(t, ws, 1, false)
		})
	}
}

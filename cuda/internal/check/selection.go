package check

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/internal/workload"
	"github.com/sparseattn/msa/op/causalselect"
)

// Selection is the block selection pattern of a timed prefill.
type Selection string

// The timed prefills' selection patterns. Correlated and Random are the
// bench's own (package workload, the same q2k as the bench's cases of the
// same length); the mean union of blocks per query tile orders them:
// Local < Correlated < Random (TestSelectionUnion).
const (
	// Correlated is what a model's own selection gives:
	// workload.CorrelatedQ2K, op.BlockScoresFunc + op.TopKBlocksFunc
	// (block 0 and the diagonal block kept) on Q and K whose neighbouring
	// tokens are correlated (bench -select correlated).
	Correlated Selection = "correlated"
	// Random is the bench's default: workload.RandomQ2K, each query's
	// diagonal block and uniformly random visible ones.
	Random Selection = "random"
	// Local is a local window: every query selects its diagonal block and
	// the topK-1 before it, so all queries of a block select alike (the
	// best case for the query-major union).
	Local Selection = "local"
)

// Selections holds the correlated selections made so far, one per shape
// (its block scoring is most of a long case's generation), so that the
// timed cases of one length share it whatever their dtypes.
type Selections struct {
	// Workers is the goroutines that score the blocks (<= 0: GOMAXPROCS);
	// the selection does not depend on it.
	Workers int
	corr    map[causalselect.Shape][]int32
}

// correlated returns the correlated selection of shape w.
func (s *Selections) correlated(w causalselect.Shape) ([]int32, error) {
	if q2k, ok := s.corr[w]; ok {
		return q2k, nil
	}
	q2k, err := workload.CorrelatedQ2K(w, workload.Seed(w.T), s.Workers)
	if err != nil {
		return nil, err
	}
	if s.corr == nil {
		s.corr = map[causalselect.Shape][]int32{}
	}
	s.corr[w] = q2k
	return q2k, nil
}

// GenTiming generates timed prefill c (TimingPrefill: one causal sequence,
// dense K/V) with the inputs of seed and the selection pattern sel; the
// three patterns time the same Q, K and V (for the same seed), only q2k
// differs. Correlated selections are taken from and kept in sels.
func (c *Prefill) GenTiming(seed uint64, sel Selection, sels *Selections) error {
	switch {
	case len(c.CuQ) != 2 || !slices.Equal(c.CuQ, c.CuK) || c.CuQ[1] < 1:
		return fmt.Errorf("check: GenTiming %s: cu_seqlens q %v, k %v: want one sequence [0, T], T >= 1, as many keys as queries", c.Name, c.CuQ, c.CuK)
	case !c.Causal || c.Paged:
		return fmt.Errorf("check: GenTiming %s: causal %v, paged %v: want a causal prefill of dense K/V", c.Name, c.Causal, c.Paged)
	case sels == nil:
		return fmt.Errorf("check: GenTiming %s: nil Selections", c.Name)
	}
	if err := c.genInputs(rand.New(rand.NewPCG(seed, 7))); err != nil {
		return err
	}
	T := c.TotalQ
	w := causalselect.Shape{T: T, Hq: c.Hq, Hkv: c.Hkv, D: c.D, TopK: c.TopK, Blk: c.Blk}
	var q2k []int32
	var err error
	switch sel {
	case Correlated:
		q2k, err = sels.correlated(w)
	case Random:
		q2k, _, err = workload.RandomQ2K(T, c.Hkv, c.TopK, c.Blk, workload.Seed(T)+3)
	case Local:
		q2k = localQ2K(w)
	default:
		err = fmt.Errorf("check: GenTiming %s: selection %q: want %s, %s or %s", c.Name, sel, Correlated, Random, Local)
	}
	if err != nil {
		return err
	}
	copy(c.Q2K, q2k)
	return c.replan()
}

// localQ2K is the Local selection of shape w.
func localQ2K(w causalselect.Shape) []int32 {
	q2k := make([]int32, w.Hkv*w.T*w.TopK)
	for h := range w.Hkv {
		for q := range w.T {
			list := q2k[(h*w.T+q)*w.TopK : (h*w.T+q+1)*w.TopK]
			diag := q / w.Blk
			for j := range list {
				list[j] = -1
				if j <= diag {
					list[j] = int32(diag - j) // the diagonal block and the ones before it
				}
			}
		}
	}
	return q2k
}

// TileUnion is the mean number of distinct blocks the tokens of one
// query-major tile (cuda.QTileTokens tokens: 64 query-head rows) select,
// over the tiles and KV heads: the blocks the query-major path walks per
// tile (workload.MeanTileUnion).
func (c *Prefill) TileUnion() (float64, error) {
	return workload.MeanTileUnion(c.Q2K, c.CuQ, c.Hkv, c.TopK, cuda.QTileTokens(c.QHPK))
}

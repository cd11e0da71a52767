package causalselect_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	"github.com/sparseattn/msa/op/causalselect"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

func randBF16(r *rand.Rand, n int) []lowp.BFloat16 {
	x := make([]lowp.BFloat16, n)
	for i := range x {
		x[i] = lowp.BF16(float32(r.NormFloat64()))
	}
	return x
}

// Select gives what op.BlockScoresFunc and op.TopKBlocksFunc give on the
// same inputs, for GQA groups, a partial last block and topK above and
// below the visible blocks; a changed rule (no kept first block) differs.
func TestSelectIsOps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []causalselect.Shape{
		{T: 1000, Hq: 8, Hkv: 2, D: 64, TopK: 4, Blk: 64},
		{T: 300, Hq: 4, Hkv: 4, D: 32, TopK: 2, Blk: 128},
	} {
		q, k := randBF16(r, s.T*s.Hq*s.D), randBF16(r, s.T*s.Hkv*s.D)
		got, err := causalselect.Select(s, q, k, 2)
		if err != nil {
			t.Fatal(err)
		}
		cu := func() *tensor.Dense {
			return tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, int32(s.T)}))
		}
		qt := tensor.New(tensor.WithShape(s.T, s.Hq, s.D), tensor.WithBacking(q))
		kt := tensor.New(tensor.WithShape(s.T, s.Hkv, s.D), tensor.WithBacking(k))
		scores, err := op.BlockScoresFunc(qt, kt, cu(), cu(), op.BlockScoreConfig{BlkKV: s.Blk, Causal: true, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, keepFirst := range []bool{true, false} {
			sel, err := op.TopKBlocksFunc(scores, s.TopK, op.TopKConfig{KeepFirst: keepFirst, KeepLast: true})
			if err != nil {
				t.Fatal(err)
			}
			if same := slices.Equal(got, sel.Data().([]int32)); same != keepFirst {
				t.Errorf("%+v: Select equal to op's selection with KeepFirst %v: %v", s, keepFirst, same)
			}
		}
	}
}

// Every bad argument gets an error naming it.
func TestSelectRefuses(t *testing.T) {
	ok := causalselect.Shape{T: 256, Hq: 4, Hkv: 2, D: 16, TopK: 4, Blk: 64}
	q, k := make([]lowp.BFloat16, 256*4*16), make([]lowp.BFloat16, 256*2*16)
	if _, err := causalselect.Select(ok, q, k, 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mod  func(s *causalselect.Shape)
		q, k int
		want string
	}{
		{func(s *causalselect.Shape) { s.T = 0 }, 0, 0, "T = 0"},
		{func(s *causalselect.Shape) { s.Hkv = -1 }, 0, 0, "Hkv = -1"},
		{func(s *causalselect.Shape) { s.Blk = 0 }, 0, 0, "Blk = 0"},
		{func(s *causalselect.Shape) { s.Hq = 3 }, 0, 0, "Hq = 3: want a multiple of Hkv = 2"},
		{func(s *causalselect.Shape) { s.TopK = 65 }, 0, 0, "TopK = 65"},
		{func(s *causalselect.Shape) { s.T, s.Blk = 1<<20, 1 }, 0, 0, "want at most 268435456 elements"},
		{func(*causalselect.Shape) {}, -1, 0, "q has 16383 values"},
		{func(*causalselect.Shape) {}, 0, 1, "k 8193"},
	} {
		s := ok
		c.mod(&s)
		_, err := causalselect.Select(s, make([]lowp.BFloat16, len(q)+c.q), make([]lowp.BFloat16, len(k)+c.k), 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v, q %+d, k %+d: error %v, want one containing %q", s, c.q, c.k, err, c.want)
		}
	}
}

// The limits are op's, and the default scale is op's.
func TestLimitsAreOps(t *testing.T) {
	if causalselect.MaxTopK != validate.MaxTopK {
		t.Errorf("MaxTopK %d, op's %d", causalselect.MaxTopK, validate.MaxTopK)
	}
	for _, d := range []int{1, 64, 128, 192} {
		if a, b := float32(1/math.Sqrt(float64(d))), float32(validate.DefaultScale(d)); a != b {
			t.Errorf("D %d: scale %v, op's %v", d, a, b)
		}
	}
}

package workload

import (
	"math"
	"sync"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/causalselect"
)

// The correlated selection pattern: the blocks a model's own selection
// picks are correlated between neighbouring tokens (their queries are
// alike), unlike uniformly random choices. It is made the way a model
// would make it, by op's BlockScores and TopKBlocks (block 0 and the
// diagonal block kept) on Q and K whose neighbouring tokens are
// correlated.

// Rho is the correlation of each value with the same value of the
// previous token: an AR(1) process x_t = Rho x_{t-1} + sqrt(1-Rho^2) e_t
// with standard-normal e, so every value stays standard normal.
const Rho = 0.95

var (
	bf16NormalsOnce sync.Once
	bf16Normals     []float32
)

// roundedNormals returns Normals rounded to bf16 (the innovations of the
// AR(1) rows).
func roundedNormals() []float32 {
	bf16NormalsOnce.Do(func() {
		n := Normals()
		bf16Normals = make([]float32, len(n))
		for i, x := range n {
			bf16Normals[i] = lowp.BF16(x).Float32()
		}
	})
	return bf16Normals
}

// ar1 generates rows x width float32 values, each column an AR(1) process
// over the rows (tokens) with correlation Rho, and hands each row in turn
// to emit (the slice is reused for a later row). The values depend on
// seed only.
func ar1(rows, width int, seed uint64, emit func(t int, row []float32)) {
	if rows < 1 || width < 1 {
		return
	}
	norm := roundedNormals()
	mask := uint64(len(norm) - 1)
	r := NewSplitMix(seed*0x9e3779b97f4a7c15 + 11)
	e := float32(math.Sqrt(1 - Rho*Rho))
	prev, cur := make([]float32, width), make([]float32, width)
	for c := range cur {
		cur[c] = norm[r.Next()&mask]
	}
	emit(0, cur)
	for t := 1; t < rows; t++ {
		prev, cur = cur, prev
		for c := range cur {
			cur[c] = Rho*prev[c] + e*norm[r.Next()&mask]
		}
		emit(t, cur)
	}
}

// CorrelatedRows returns rows x width float32 values, row-major, each
// column an AR(1) process over the rows (tokens) with correlation Rho.
func CorrelatedRows(rows, width int, seed uint64) []float32 {
	x := make([]float32, max(rows, 0)*max(width, 0))
	ar1(rows, width, seed, func(t int, row []float32) { copy(x[t*width:], row) })
	return x
}

// CorrelatedBF16 returns CorrelatedRows(rows, width, seed) rounded to
// bf16, without holding the float32 rows.
func CorrelatedBF16(rows, width int, seed uint64) []lowp.BFloat16 {
	x := make([]lowp.BFloat16, max(rows, 0)*max(width, 0))
	ar1(rows, width, seed, func(t int, row []float32) {
		dst := x[t*width : (t+1)*width]
		for c, v := range row {
			dst[c] = lowp.BF16(v)
		}
	})
	return x
}

// Seed is the seed of the benchmark's inputs for a causal prefill of T
// tokens: Q is drawn from Seed(T), K from Seed(T)+1, V from Seed(T)+2.
func Seed(T int) uint64 { return uint64(T)*31 + 7 }

// CorrelatedQ2K is the correlated selection of shape s with inputs of
// seed: causalselect.Select (op's BlockScores and TopKBlocks, block 0 and
// the diagonal block kept) on Q = CorrelatedBF16(T, Hq*D, seed) and K =
// CorrelatedBF16(T, Hkv*D, seed+1), exactly what the benchmark's BF16
// correlated prefill case selects for the same seed (bench -select
// correlated, seed Seed(T)). workers goroutines score the blocks; the
// result does not depend on them.
func CorrelatedQ2K(s causalselect.Shape, seed uint64, workers int) ([]int32, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	return causalselect.Select(s, CorrelatedBF16(s.T, s.Hq*s.D, seed), CorrelatedBF16(s.T, s.Hkv*s.D, seed+1), workers)
}

package check

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/sparseattn/msa/cuda"
)

// The temperature-LSE overflow probe. With every score positive, a large
// softmax scale and a small temperature, the temperature LSE of a row that
// sees a key (its largest score times scale / T, plus the log of a sum of
// at least 1) lies far beyond float32: the float32 rounding of the exact
// value is +inf, and so is every partial's on the KV-major paths. A merge
// that reads a +inf partial as an undefined sum answers -inf, the "no key"
// value, for rows that do see keys; the tolerance-based comparison skips
// non-finite values, so this probe checks the signs: +inf temperature LSE
// and a finite LSE for every row that attends a key, -inf for both where
// none is attended.

// overflowScale and overflowTemp put a row's temperature LSE beyond
// float32: Q and K entries in [1/4, 1] give scores of at least D/16 >= 4
// (D >= 64), so it is at least 4 * 1e30 / 1e-30 = 4e60, while the LSE (at
// most D * 1e30 plus the log of the key count, 2.6e32 at D 256), the
// kernels' base-2 scale (1.44e30) and 1/T (1e30) stay finite, as the
// contract requires of them.
const (
	overflowScale = 1e30
	overflowTemp  = 1e-30
)

// TLSEOverflowMatrix is the temperature-LSE overflow probes: a dense and a
// paged problem, causal (queries that see no key) and not, BF16 and FP8,
// float32 and BF16 partials.
func TLSEOverflowMatrix() []*Prefill {
	base := func(qd, kd cuda.Dtype, d int, pd cuda.Dtype, causal bool, page, blk int) *Prefill {
		return &Prefill{QD: qd, KVD: kd, D: d, PD: pd, Causal: causal, Paged: page > 0, PageSize: page, Blk: blk,
			Hkv: 2, QHPK: 4, TopK: 4, Temp: overflowTemp, Scale: overflowScale,
			CuQ: []int32{0, 150, 157, 200}, CuK: []int32{0, 100, 230, 430}}
	}
	cases := []*Prefill{
		base(cuda.BF16, cuda.BF16, 128, cuda.F32, true, 0, 64),
		base(cuda.E4M3, cuda.E4M3, 64, cuda.BF16, false, 64, 128),
	}
	for _, c := range cases {
		v := "bf16"
		if c.QD == cuda.E4M3 {
			v = "fp8"
		}
		c.Name = fmt.Sprintf("prefill/%s/d%d/tlse-overflow/%s/gqa%d/%s/%s/blk%d", v, c.D, c.PD, c.QHPK, causalName(c.Causal), kvName(c), c.Blk)
	}
	return cases
}

// SetTLSEOverflow replaces Q and K (after Gen) by random values in
// [1/4, 1], so that every score is positive.
func (c *Prefill) SetTLSEOverflow(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 11))
	pos := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = 0.25 + 0.75*rng.Float32()
		}
		return x
	}
	var err error
	if c.Q, err = storeOf(c.QD, c.Q.Rows, c.D, pos(c.Q.Rows*c.D)); err != nil {
		return err
	}
	c.K, err = storeOf(c.KVD, c.K.Rows, c.D, pos(c.K.Rows*c.D))
	return err
}

// CheckTLSEOverflow compares the signs of got's LSE and temperature LSE
// with the rows the reference attends: Rows counts the (query row, head)
// pairs, WrongCount those whose values have the wrong kind.
func (c *Prefill) CheckTLSEOverflow(got Result) ProbeDiff {
	var pd ProbeDiff
	n := c.TotalQ * c.Hq
	if len(got.LSE) != n || len(got.TLSE) != n {
		pd.WrongCount, pd.First = 1, fmt.Sprintf("result of %d LSE and %d temperature LSE values, want %d each", len(got.LSE), len(got.TLSE), n)
		return pd
	}
	for row := 0; row < c.TotalQ; row++ {
		for h := 0; h < c.Hkv; h++ {
			seen := len(c.keys(h, row, nil)) > 0
			for g := 0; g < c.QHPK; g++ {
				i := row*c.Hq + h*c.QHPK + g
				pd.Rows++
				lse, tlse := float64(got.LSE[i]), float64(got.TLSE[i])
				ok := math.IsInf(lse, -1) && math.IsInf(tlse, -1)
				if seen {
					ok = !math.IsNaN(lse) && !math.IsInf(lse, 0) && math.IsInf(tlse, 1)
				}
				if !ok {
					pd.WrongCount++
					if pd.First == "" {
						pd.First = fmt.Sprintf("row %d head %d: LSE %g, temperature LSE %g; attends a key: %v", row, h*c.QHPK+g, lse, tlse, seen)
					}
				}
			}
		}
	}
	return pd
}

package main

import (
	"fmt"
	"math"
)

// refAttention is softmax attention of one query row over the given key and
// value rows in float64: O = sum_t softmax(scale * q.k_t) v_t.
func refAttention(q []float64, keys, vals [][]float64, scale float64) []float64 {
	o := make([]float64, len(q))
	if len(keys) == 0 {
		return o
	}
	s := make([]float64, len(keys))
	m := math.Inf(-1)
	for i, k := range keys {
		dot := 0.0
		for c := range q {
			dot += q[c] * k[c]
		}
		s[i] = scale * dot
		m = math.Max(m, s[i])
	}
	sum := 0.0
	for i := range s {
		s[i] = math.Exp(s[i] - m)
		sum += s[i]
	}
	for i, v := range vals {
		w := s[i] / sum
		for c := range o {
			o[c] += w * v[c]
		}
	}
	return o
}

// tolerance of an output element: |got - want| <= rtol*|want| + atol*maxV,
// maxV the largest |v| among the value rows the query attended. The terms
// mirror the op tests: BF16 output rounding (rtol 2^-8, the unit roundoff
// of round to nearest with BF16's 8-bit significand), float32 arithmetic over thousands of keys (1e-4), BF16
// partials (2^-8), FP8 rounding of P before P.V (1/14), bf16 rounding of P
// in the avx512bf16 tier (2^-8).
type tolerance struct{ rtol, atol float64 }

func makeTolerance(bf16Partials, pvFP8, bf16Tier bool) tolerance {
	t := tolerance{rtol: 1.0 / 256, atol: 1e-4}
	if bf16Partials {
		t.atol += 1.0 / 256
	}
	if pvFP8 {
		t.atol += 1.0 / 14
	}
	if bf16Tier {
		t.atol += 1.0 / 256
	}
	return t
}

// checker accumulates the worst error ratio of one case.
type checker struct {
	tol   tolerance
	worst float64 // max |got-want| / allowed; <= 1 passes
	bad   int
	first string
	rows  int
}

func (c *checker) row(what string, got []float32, want []float64, maxV float64) {
	c.rows++
	for i := range want {
		g := float64(got[i])
		allowed := c.tol.rtol*math.Abs(want[i]) + c.tol.atol*maxV
		diff := math.Abs(g - want[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			diff = math.Inf(1)
		}
		r := diff / allowed
		if allowed == 0 {
			r = 0
			if diff > 0 {
				r = math.Inf(1)
			}
		}
		if r > c.worst {
			c.worst = r
		}
		if r > 1 {
			if c.bad == 0 {
				c.first = fmt.Sprintf("%s[%d] = %g, want %g", what, i, g, want[i])
			}
			c.bad++
		}
	}
}

func maxAbs(rows [][]float64) float64 {
	m := 0.0
	for _, r := range rows {
		for _, x := range r {
			m = math.Max(m, math.Abs(x))
		}
	}
	return m
}

// verdict summarises a checker: "ok" or "FAIL", and a detail line.
func (c *checker) verdict() (string, string) {
	if c.bad > 0 {
		return "FAIL", fmt.Sprintf("%d elements out of tolerance over %d (query, head) rows (worst ratio %.3g); first: %s", c.bad, c.rows, c.worst, c.first)
	}
	return "ok", fmt.Sprintf("%d (query, head) rows, worst error %.3g of tolerance", c.rows, c.worst)
}

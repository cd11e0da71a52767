package validate

import (
	"fmt"

	"gorgonia.org/tensor"
)

// CuSeqlens mirrors _validate_cu_seqlens and additionally checks the values:
// non-negative, non-decreasing, last entry <= limit (when limit >= 0).
func CuSeqlens(c *Checker, t tensor.Tensor, arg string, limit int, limitDesc string) []int32 {
	d := c.Dense(t, arg)
	if !c.Dtype(d, arg, tensor.Int32) || !c.Rank(d, arg, "[B + 1]", 1) {
		return nil
	}
	c.Need(d.Shape()[0] >= 1, arg, "at least one element", ShapeStr(d))
	cu := Int32s(d)
	if c.Err != nil {
		return nil
	}
	if i := PrefixSumsBreak(cu); i >= 0 {
		c.Fail(fmt.Sprintf("%s[%d]", arg, i), "non-negative, non-decreasing prefix sums", fmt.Sprint(cu))
		return nil
	}
	if limit >= 0 && int(cu[len(cu)-1]) > limit {
		c.Fail(fmt.Sprintf("%s[%d]", arg, len(cu)-1), "<= "+limitDesc, cu[len(cu)-1])
		return nil
	}
	return cu
}

// PrefixSumsBreak returns the index of the first element of cu that is
// negative or below its predecessor, or -1 when cu holds non-negative,
// non-decreasing prefix sums: CuSeqlens's value rule, which callers that
// must not format a message (the CUDA path's warm re-checks) share.
func PrefixSumsBreak(cu []int32) int {
	for i, x := range cu {
		if x < 0 || (i > 0 && x < cu[i-1]) {
			return i
		}
	}
	return -1
}

// MaxSeq checks an optional max_seqlen argument against prefix sums.
func MaxSeq(c *Checker, arg string, m int, cu []int32) {
	if c.Err != nil || len(cu) == 0 {
		return
	}
	c.Need(m >= 0, arg, "0 (derive) or a positive maximum", m)
	if m <= 0 {
		return
	}
	for b := 0; b+1 < len(cu); b++ {
		if int(cu[b+1]-cu[b]) > m {
			c.Fail(arg, fmt.Sprintf(">= every sequence length (sequence %d has %d)", b, cu[b+1]-cu[b]), m)
			return
		}
	}
}

// MaxSeqK checks max_seqlen_k against the effective key lengths.
func MaxSeqK(c *Checker, arg string, m int, lens []int32) {
	if c.Err != nil {
		return
	}
	c.Need(m >= 0, arg, "0 (derive) or a positive maximum", m)
	if m <= 0 {
		return
	}
	for b, n := range lens {
		if int(n) > m {
			c.Fail(arg, fmt.Sprintf(">= every key length (sequence %d has %d)", b, n), m)
			return
		}
	}
}

package validate

import (
	"fmt"

	"gorgonia.org/tensor"
)

// CuSeqlens mirrors _validate_cu_seqlens and additionally checks the values
// (CuSeqlensValues): an int32 [B + 1] tensor, B + 1 >= 1, of non-negative,
// non-decreasing prefix sums whose last entry is <= limit (when limit >= 0;
// limitName names it in the error, e.g. "total_q").
func CuSeqlens(c *Checker, t tensor.Tensor, arg string, limit int, limitName string) []int32 {
	d := c.Dense(t, arg)
	if !c.Dtype(d, arg, tensor.Int32) || !c.Rank(d, arg, "[B + 1]", 1) {
		return nil
	}
	if d.Shape()[0] < 1 {
		c.Fail(arg, "at least one element", ShapeStr(d))
		return nil
	}
	cu := Int32s(d)
	if !CuSeqlensValues(c, cu, arg, limit, limitName) {
		return nil
	}
	return cu
}

// CuSeqlensValues is CuSeqlens's rule on the values cu of a cu_seqlens
// tensor already known to be int32 [B + 1] with B + 1 >= 1; it reports
// whether c is still free of errors. It formats no message unless a value
// breaks the rule, so that the CUDA path's warm runs call it as it is.
func CuSeqlensValues(c *Checker, cu []int32, arg string, limit int, limitName string) bool {
	if c.Err != nil {
		return false
	}
	if i := prefixSumsBreak(cu); i >= 0 {
		c.Fail(fmt.Sprintf("%s[%d]", arg, i), "non-negative, non-decreasing prefix sums", fmt.Sprint(cu))
		return false
	}
	if limit >= 0 && int(cu[len(cu)-1]) > limit {
		c.Fail(fmt.Sprintf("%s[%d]", arg, len(cu)-1), fmt.Sprintf("<= %s = %d", limitName, limit), cu[len(cu)-1])
		return false
	}
	return true
}

// prefixSumsBreak returns the index of the first element of cu that is
// negative or below its predecessor, or -1 when cu holds non-negative,
// non-decreasing prefix sums: CuSeqlensValues's first rule.
func prefixSumsBreak(cu []int32) int {
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
	if m < 0 {
		c.Fail(arg, "0 (derive) or a positive maximum", m)
	}
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
	if m < 0 {
		c.Fail(arg, "0 (derive) or a positive maximum", m)
	}
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

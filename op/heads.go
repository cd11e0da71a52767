package op

import (
	"fmt"
	"slices"

	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// checkHeads records an error unless q [total_q, Hq, D] has a head count
// Hq = q.shape[1] that is a multiple of hkv, k's head count, and, unless
// anyRatio, whose qhead_per_kv = Hq / Hkv is one of supportedQheadPerKV.
// kLayout describes k's layout in letters (called only on failure: the
// decode wrapper's Run must not allocate). Every message states the
// layouts in letters before the derived ratio. When q.shape[0] would have
// passed in place of q.shape[1] (q laid out [Hq, total_q, D], the usual
// mistake) the error names q and says so; otherwise it names arg, the
// argument the entry point blames for a head-count mismatch. It returns
// qhead_per_kv (0 after an error).
func checkHeads(c *validate.Checker, arg string, qd, kd *tensor.Dense, hkv int, anyRatio bool, kLayout func() string) int {
	if c.Err != nil {
		return 0
	}
	hq := qd.Shape()[1]
	fits := func(h int) bool {
		return hkv >= 1 && h >= 1 && h%hkv == 0 && (anyRatio || slices.Contains(supportedQheadPerKV, h/hkv))
	}
	if fits(hq) {
		return hq / hkv
	}
	got := "q " + validate.ShapeStr(qd) + ", k " + validate.ShapeStr(kd)
	if fits(qd.Shape()[0]) {
		arg = "q"
		got += fmt.Sprintf(" (q.shape[0] = %d would fit: is q laid out [Hq, total_q, D]?)", qd.Shape()[0])
	}
	if hkv < 1 || hq < 1 || hq%hkv != 0 {
		c.Fail(arg, fmt.Sprintf("q [total_q, Hq, D] and k in %s with Hq = q.shape[1] divisible by Hkv = %d", kLayout(), hkv), got)
		return 0
	}
	c.Err = &NotImplementedError{Func: c.Fn, What: fmt.Sprintf("q [total_q, Hq, D] and k in %s give qhead_per_kv = Hq/Hkv = %d/%d = %d; supported are 1, 2, 4, 8, 16; got %s",
		kLayout(), hq, hkv, hq/hkv, got)}
	return 0
}

// pagedWord is "paged HND " or "paged NHD " for paged K/V, "" for dense.
func pagedWord(paged bool, l PagedLayout) string {
	if !paged {
		return ""
	}
	return fmt.Sprintf("paged %v ", l)
}

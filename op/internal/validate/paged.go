package validate

import (
	"fmt"
	"runtime"
)

// MaxTopK is the most blocks one (query, KV head) may select (the
// reference takes topK in {4, 8, 16, 32}).
const MaxTopK = 64

// WorkerCount resolves the worker count (usable_SM_count).
func WorkerCount(n int) int {
	if n <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return n
}

// CheckPages checks that every page a sequence uses is in [0, numPages).
// Entries past a sequence's last used page are not read and not checked.
func CheckPages(c *Checker, pt []int32, cols, ps int, seqK []int32, numPages int) {
	if numPages < 0 || c.Err != nil { // numPages < 0: not known yet (decode Plan), checked at Run
		return
	}
	for b, n := range seqK {
		used := (int(n) + ps - 1) / ps
		for j := 0; j < used; j++ {
			if x := pt[b*cols+j]; x < 0 || int(x) >= numPages {
				c.Fail(fmt.Sprintf("page_table[%d, %d]", b, j), fmt.Sprintf("a page index in [0, num_pages = %d)", numPages), x)
				return
			}
		}
	}
}

// PageCapacity checks that a page table's key capacity
// max_num_pages_per_seq * page_size fits the int32 key lengths of the
// kernels (it is the key length of a paged sequence without seqused_k).
func PageCapacity(c *Checker, cols, ps int) bool {
	if c.Err == nil && MulCap(MaxInt32, cols, ps) < 0 {
		c.Fail("page_table", fmt.Sprintf("max_num_pages_per_seq * page_size <= %d (key lengths are int32)", MaxInt32),
			fmt.Sprintf("%d columns * page_size %d", cols, ps))
	}
	return c.Err == nil
}

package validate

import (
	"testing"

	"gorgonia.org/tensor"
)

func i32(shape []int, v ...int32) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	b := make([]int32, n)
	copy(b, v)
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(b))
}

// TestValidCallsAllocateNothing: the rules of sequence and paged metadata,
// outputs and scalars format nothing for valid values, so a valid call of
// each allocates nothing (the graph nodes' warm runs call them as they
// are).
func TestValidCallsAllocateNothing(t *testing.T) {
	cuQ, cuK := i32([]int{3}, 0, 6, 10), i32([]int{3}, 0, 200, 300)
	pt := i32([]int{2, 2}, 0, 1, 2, 3)
	out := tensor.New(tensor.WithShape(10, 4), tensor.WithBacking(make([]float32, 40)))
	var in tensor.Tensor = cuQ
	for _, tc := range []struct {
		name  string
		check func(c *Checker)
	}{
		{"CuSeqlens", func(c *Checker) {
			CuSeqlens(c, in, "cu_seqlens_q", 10, "total_q")
			CuSeqlens(c, cuK, "cu_seqlens_k", -1, "")
		}},
		{"CuSeqlensValues", func(c *Checker) { CuSeqlensValues(c, Int32s(cuK), "cu_seqlens_k", 300, "total_k") }},
		{"MaxSeq", func(c *Checker) { MaxSeq(c, "max_seqlen_q", 6, Int32s(cuQ)) }},
		{"MaxSeqK", func(c *Checker) { MaxSeqK(c, "max_seqlen_k", 300, []int32{200, 100}) }},
		{"PageCapacity and CheckPages", func(c *Checker) {
			PageCapacity(c, 2, 128)
			CheckPages(c, Int32s(pt), 2, 128, []int32{200, 100}, 4)
		}},
		{"OutputArg", func(c *Checker) { OutputArg(c, out, "lse", tensor.Float32, 10, 4) }},
		{"scalars", func(c *Checker) {
			ResolveScale(c, 0, 128)
			ResolveTemperature(c, 0.5)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Checker{Fn: "F"}
			tc.check(&c)
			if c.Err != nil {
				t.Fatal(c.Err)
			}
			if n := testing.AllocsPerRun(50, func() { tc.check(&c) }); n != 0 {
				t.Errorf("%v allocations per valid call, want 0", n)
			}
		})
	}
}

// TestRuleMessages pins the error of each rule of this package that
// formats its message only on failure.
func TestRuleMessages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(c *Checker)
		want  string
	}{
		{"cu_seqlens empty", func(c *Checker) { CuSeqlens(c, i32([]int{0}), "cu_seqlens_q", -1, "") },
			"F: cu_seqlens_q: expected at least one element, got [0]"},
		{"cu_seqlens decreasing", func(c *Checker) { CuSeqlens(c, i32([]int{3}, 0, 6, 5), "cu_seqlens_q", 10, "total_q") },
			"F: cu_seqlens_q[2]: expected non-negative, non-decreasing prefix sums, got [0 6 5]"},
		{"cu_seqlens negative", func(c *Checker) { CuSeqlensValues(c, []int32{-1, 6}, "cu_seqlens_k", -1, "") },
			"F: cu_seqlens_k[0]: expected non-negative, non-decreasing prefix sums, got [-1 6]"},
		{"cu_seqlens past the limit", func(c *Checker) { CuSeqlens(c, i32([]int{3}, 0, 6, 11), "cu_seqlens_q", 10, "total_q") },
			"F: cu_seqlens_q[2]: expected <= total_q = 10, got 11"},
		{"max_seqlen negative", func(c *Checker) { MaxSeq(c, "max_seqlen_q", -1, []int32{0, 6}) },
			"F: max_seqlen_q: expected 0 (derive) or a positive maximum, got -1"},
		{"max_seqlen short", func(c *Checker) { MaxSeq(c, "max_seqlen_q", 5, []int32{0, 6}) },
			"F: max_seqlen_q: expected >= every sequence length (sequence 0 has 6), got 5"},
		{"max_seqlen_k negative", func(c *Checker) { MaxSeqK(c, "max_seqlen_k", -300, []int32{200}) },
			"F: max_seqlen_k: expected 0 (derive) or a positive maximum, got -300"},
		{"page out of range", func(c *Checker) { CheckPages(c, []int32{0, 7}, 2, 128, []int32{200}, 4) },
			"F: page_table[0, 1]: expected a page index in [0, num_pages = 4), got 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Checker{Fn: "F"}
			tc.check(&c)
			if c.Err == nil || c.Err.Error() != tc.want {
				t.Errorf("error %v, want %q", c.Err, tc.want)
			}
		})
	}
}

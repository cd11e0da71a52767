package op

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// call is one sparse prefill invocation that a mutation may change.
type call struct {
	q, k, v, rp, qi tensor.Tensor
	topK            int
	args            SparseArgs
}

func validBase(t *testing.T, paged bool) (call, *sparseProblem) {
	s := sparseSpec{seed: 9, seqQ: []int{6, 4}, seqK: []int{200, 100}, hq: 4, hkv: 2, d: 128, topK: 4, blk: 128,
		paged: paged, qDt: "bf16", kvDt: "bf16", partial: BFloat16}
	pr := buildSparse(s)
	rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, 128)
	if err != nil {
		t.Fatal(err)
	}
	c := call{q: pr.q, k: pr.k, v: pr.v, rp: rp, qi: qi, topK: 4,
		args: SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK}}
	if paged {
		c.args.PageTable, c.args.SeqUsedK = pr.pageTable, pr.seqused
	}
	return c, pr
}

func bf16T(shape ...int) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]lowp.BFloat16, n)))
}

func fp8T(shape ...int) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]lowp.Float8E4M3FN, n)))
}

func i32T(shape []int, v ...int32) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	if v == nil {
		v = make([]int32, n)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

func modI32(t tensor.Tensor, i int, x int32) *tensor.Dense {
	d := t.(*tensor.Dense).Clone().(*tensor.Dense)
	validate.Backing[int32](d)[i] = x
	return d
}

// TestSparseValidation runs every rejection path of the reference's
// validation (and ours) and checks the error names the argument.
func TestSparseValidation(t *testing.T) {
	cases := []struct {
		name   string
		paged  bool
		mutate func(c *call)
		arg    string // substring the error must contain
	}{
		{"q rank", false, func(c *call) { c.q = bf16T(10, 4) }, "q:"},
		{"q dtype", false, func(c *call) { c.q = tensor.New(tensor.WithShape(10, 4, 128), tensor.Of(tensor.Float32)) }, "q:"},
		{"mixed dtypes", false, func(c *call) { c.k = fp8T(300, 2, 128) }, "k"},
		{"fp8 q with bf16 kv", false, func(c *call) { c.q = fp8T(10, 4, 128) }, "k"},
		{"head dim mismatch", false, func(c *call) { c.k, c.v = bf16T(300, 2, 64), bf16T(300, 2, 64) }, "k, v"},
		{"unsupported D", false, func(c *call) { c.q, c.k, c.v = bf16T(10, 4, 96), bf16T(300, 2, 96), bf16T(300, 2, 96) }, "head dimension"},
		{"k v shapes", false, func(c *call) { c.v = bf16T(299, 2, 128) }, "k, v"},
		{"dense k rank", false, func(c *call) { c.k, c.v = bf16T(3, 2, 128, 128), bf16T(3, 2, 128, 128) }, "k:"},
		{"Hq % Hkv", false, func(c *call) { c.q = bf16T(10, 3, 128) }, "divisible"},
		{"qhead_per_kv 3", false, func(c *call) {
			c.q, c.k, c.v = bf16T(10, 3, 128), bf16T(300, 1, 128), bf16T(300, 1, 128)
			c.rp, c.qi = i32T([]int{1, 4}), i32T([]int{1, 40})
		}, "qhead_per_kv"},
		{"topK 0", false, func(c *call) { c.topK = 0 }, "topK"},
		{"topK 65", false, func(c *call) { c.topK = 65 }, "topK"},
		{"row_ptr dtype", false, func(c *call) { c.rp = tensor.New(tensor.WithShape(2, 5), tensor.Of(tensor.Int64)) }, "k2q_row_ptr"},
		{"row_ptr rank", false, func(c *call) { c.rp = i32T([]int{10}) }, "k2q_row_ptr"},
		{"csr heads", false, func(c *call) { c.rp = i32T([]int{1, 5}) }, "Hkv"},
		{"q_indices short", false, func(c *call) { c.qi = i32T([]int{2, 39}) }, "k2q_q_indices"},
		{"row_ptr too few rows", false, func(c *call) { c.rp = i32T([]int{2, 2}) }, "total_rows"},
		{"row_ptr decreasing", false, func(c *call) { c.rp = modI32(c.rp, 2, 0) }, "k2q_row_ptr"},
		{"q index out of range", false, func(c *call) { c.qi = modI32(c.qi, 0, 50) }, "k2q"},
		{"cu_seqlens_q missing", false, func(c *call) { c.args.CuSeqlensQ = nil }, "cu_seqlens_q"},
		{"cu_seqlens_q dtype", false, func(c *call) { c.args.CuSeqlensQ = tensor.New(tensor.WithShape(3), tensor.Of(tensor.Int64)) }, "cu_seqlens_q"},
		{"cu_seqlens_q rank", false, func(c *call) { c.args.CuSeqlensQ = i32T([]int{3, 1}) }, "cu_seqlens_q"},
		{"cu_seqlens_q empty", false, func(c *call) { c.args.CuSeqlensQ = i32T([]int{0}) }, "cu_seqlens_q"},
		{"cu_seqlens_q decreasing", false, func(c *call) { c.args.CuSeqlensQ = i32T([]int{3}, 0, 6, 5) }, "cu_seqlens_q"},
		{"cu_seqlens_q past total_q", false, func(c *call) { c.args.CuSeqlensQ = i32T([]int{3}, 0, 6, 11) }, "cu_seqlens_q"},
		{"cu_seqlens_k batch", false, func(c *call) { c.args.CuSeqlensK = i32T([]int{2}, 0, 200) }, "cu_seqlens_k"},
		{"cu_seqlens_k past total_k", false, func(c *call) { c.args.CuSeqlensK = i32T([]int{3}, 0, 200, 301) }, "cu_seqlens_k"},
		{"seqused without page table", false, func(c *call) { c.args.SeqUsedK = i32T([]int{2}) }, "seqused_k"},
		{"softmax scale", false, func(c *call) { c.args.SoftmaxScale = math.NaN() }, "softmax_scale"},
		{"temperature inf", false, func(c *call) { c.args.Temperature = math.Inf(1) }, "lse_temperature_scale"},
		{"temperature negative", false, func(c *call) { c.args.Temperature = -1 }, "lse_temperature_scale"},
		{"partial dtype", false, func(c *call) { c.args.PartialDtype = tensor.Int32 }, "partial_dtype"},
		{"qk dtype", false, func(c *call) { c.args.QKDtype = tensor.Float32 }, "qk_dtype"},
		{"qk dtype mismatch", false, func(c *call) { c.args.QKDtype = Float8E4M3FN }, "qk_dtype"},
		{"pv dtype fp8 with bf16 v", false, func(c *call) { c.args.PVDtype = Float8E4M3FN }, "v"},
		{"blk_kv", false, func(c *call) { c.args.BlkKV = 256 }, "blk_kv"},
		{"max_seqlen_q", false, func(c *call) { c.args.MaxSeqlenQ = 3 }, "max_seqlen_q"},
		{"max_seqlen_k", false, func(c *call) { c.args.MaxSeqlenK = 150 }, "max_seqlen_k"},
		{"paged k rank", true, func(c *call) { c.k = bf16T(300, 2, 128) }, "k:"},
		{"page table dtype", true, func(c *call) { c.args.PageTable = tensor.New(tensor.WithShape(2, 2), tensor.Of(tensor.Int64)) }, "page_table"},
		{"page table rank", true, func(c *call) { c.args.PageTable = i32T([]int{4}) }, "page_table"},
		{"page table batch", true, func(c *call) { c.args.PageTable = i32T([]int{3, 2}) }, "page_table"},
		{"page table entry", true, func(c *call) { c.args.PageTable = modI32(c.args.PageTable, 0, 99) }, "page_table[0, 0]"},
		{"page table negative", true, func(c *call) { c.args.PageTable = modI32(c.args.PageTable, 0, -1) }, "page_table[0, 0]"},
		{"page size", true, func(c *call) { c.k, c.v = bf16T(6, 2, 64, 128), bf16T(6, 2, 64, 128) }, "page_size"},
		{"seqused shape", true, func(c *call) { c.args.SeqUsedK = i32T([]int{3}) }, "seqused_k"},
		{"seqused too long", true, func(c *call) { c.args.SeqUsedK = i32T([]int{2}, 9999, 1) }, "seqused_k[0]"},
		{"seqused negative", true, func(c *call) { c.args.SeqUsedK = i32T([]int{2}, -1, 1) }, "seqused_k[0]"},
		{"blk_kv differs from the CSR's", false, func(c *call) { c.args.BlkKV = 64 }, "k2q_row_ptr was built for a different blk_kv or cu_seqlens_k: it has 3 rows, blk_kv = 64 gives 6"},
		{"topK above the CSR's", false, func(c *call) { c.topK = 5 }, "topK/k2q_q_indices: expected topK equal to q2k_indices.shape[2]"},
		{"topK below the CSR's", false, func(c *call) { c.topK = 1 }, "the CSR was built with topK = 4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := validBase(t, tc.paged)
			if _, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, c.args); err != nil {
				t.Fatalf("base call fails: %v", err)
			}
			tc.mutate(&c)
			_, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, c.args)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.arg) {
				t.Fatalf("error %q does not name %q", err, tc.arg)
			}
			var ae *ArgError
			var ne *NotImplementedError
			if !errors.As(err, &ae) && !errors.As(err, &ne) {
				t.Fatalf("error %T is neither ArgError nor NotImplementedError", err)
			}
		})
	}
}

// TestBuildK2QCSRValidation checks the CSR build rejects out-of-range and
// duplicate ids with errors naming the input.
func TestBuildK2QCSRValidation(t *testing.T) {
	cuQ := i32T([]int{3}, 0, 2, 3)
	cuK := i32T([]int{3}, 0, 300, 400)
	good := i32T([]int{1, 3, 2}, 0, 2, 1, -1, 0, -1)
	if _, _, err := K2QCSRFunc(good, cuQ, cuK, 128); err != nil {
		t.Fatal(err)
	}
	for name, q2k := range map[string]*tensor.Dense{
		"out of range": i32T([]int{1, 3, 2}, 0, 3, 1, -1, 0, -1),
		"second seq":   i32T([]int{1, 3, 2}, 0, 2, 1, -1, 1, -1),
		"duplicate":    i32T([]int{1, 3, 2}, 1, 1, 1, -1, 0, -1),
		"below -1":     i32T([]int{1, 3, 2}, -2, 1, 1, -1, 0, -1),
	} {
		if _, _, err := K2QCSRFunc(q2k, cuQ, cuK, 128); err == nil || !strings.Contains(err.Error(), "q2k_indices") {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

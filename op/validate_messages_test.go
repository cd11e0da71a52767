package op

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// messageCase is one refused call and the exact error it must return.
type messageCase struct {
	name string
	call func(t *testing.T) error
	want string
}

// sparseRefusal is a SparseAttentionFunc call on validBase's valid
// request (paged or dense) changed by mutate.
func sparseRefusal(paged bool, mutate func(c *call)) func(t *testing.T) error {
	return func(t *testing.T) error {
		c, _ := validBase(t, paged)
		mutate(&c)
		_, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, c.args)
		return err
	}
}

// nodeRefusal is the CPU Do of the op that build makes on a new graph,
// run on the values vals returns.
func nodeRefusal(build func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value)) func(t *testing.T) error {
	return func(t *testing.T) error {
		op, vals := build(t, G.NewGraph())
		_, err := op.Do(vals...)
		return err
	}
}

// csrNodes are a K2QCSR node (row capacity 2 blocks of 128 per sequence),
// its FwdSchedule node and a PackK2QCSR node for one KV head, 10 query
// rows in 2 sequences and topK 4, with valid inputs.
func csrNodes(t *testing.T, g *G.ExprGraph) (csr, sched, pack G.Op, q2k, cuQ, cuK *tensor.Dense) {
	cuQ, cuK = i32T([]int{3}, 0, 6, 10), i32T([]int{3}, 0, 200, 300)
	q2k = i32T([]int{1, 10, 4})
	for i := range q2k.Data().([]int32) {
		q2k.Data().([]int32)[i] = -1
	}
	cq, ck := gnode(t, g, "cu_q", cuQ), gnode(t, g, "cu_k", cuK)
	cn, err := K2QCSR(gnode(t, g, "q2k", q2k), cq, ck, BlkKV(128), MaxSeqlenK(256))
	if err != nil {
		t.Fatal(err)
	}
	sn, err := FwdSchedule(cn, cq, ck, QheadPerKV(4), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	rp, qi := i32T([]int{1, 4}), i32T([]int{1, 40})
	pn, err := PackK2QCSR(gnode(t, g, "rp", rp), gnode(t, g, "qi", qi), TotalQ(10), TopK(4), BlkKV(128))
	if err != nil {
		t.Fatal(err)
	}
	return cn.Op(), sn.Op(), pn.Op(), q2k, cuQ, cuK
}

// cacheWrite is a WritePagedKV node on a BF16 cache of 4 pages of 16
// tokens (1 KV head, D 64) for one sequence, and valid inputs.
func cacheWrite(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
	cache, nw := bf16T(4, 1, 16, 64), bf16T(1, 1, 64)
	pt, su := i32T([]int{1, 4}, 0, 1, 2, 3), i32T([]int{1}, 20)
	n, err := WritePagedKV(gnode(t, g, "cache", cache), gnode(t, g, "new", nw), gnode(t, g, "pt", pt), gnode(t, g, "su", su))
	if err != nil {
		t.Fatal(err)
	}
	return n.Op(), []G.Value{cache, nw, pt, su}
}

// nvfp4Refusal is a SparseAttentionNVFP4KVFunc call on a valid NVFP4 K/V
// request whose K global scale is replaced by kGlobal.
func nvfp4Refusal(kGlobal *tensor.Dense) func(t *testing.T) error {
	return func(t *testing.T) error {
		pr := buildSparse(sparseSpec{seed: 9, seqQ: []int{6, 4}, seqK: []int{200, 100}, hq: 4, hkv: 2, d: 128, topK: 4, blk: 128,
			qDt: "bf16", kvDt: "nvfp4", partial: BFloat16, kGlobal: 0.5, vGlobal: 2})
		rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, 128)
		if err != nil {
			t.Fatal(err)
		}
		args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK}
		if _, err := SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, pr.kScale, pr.vScale, pr.kGlobal, pr.vGlobal, rp, qi, 4, args); err != nil {
			t.Fatalf("valid call refused: %v", err)
		}
		_, err = SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, pr.kScale, pr.vScale, kGlobal, pr.vGlobal, rp, qi, 4, args)
		return err
	}
}

// validationMessages are refusals of the rules whose checks format their
// message only on failure, each with its error byte for byte as the
// checks wrote it when they built every message before testing.
var validationMessages = []messageCase{
	{"cu_seqlens_q empty", sparseRefusal(false, func(c *call) { c.args.CuSeqlensQ = i32T([]int{0}) }), "SparseAttentionFunc: cu_seqlens_q: expected at least one element, got [0]"},
	{"cu_seqlens_q decreasing", sparseRefusal(false, func(c *call) { c.args.CuSeqlensQ = i32T([]int{3}, 0, 6, 5) }), "SparseAttentionFunc: cu_seqlens_q[2]: expected non-negative, non-decreasing prefix sums, got [0 6 5]"},
	{"cu_seqlens_q past total_q", sparseRefusal(false, func(c *call) { c.args.CuSeqlensQ = i32T([]int{3}, 0, 6, 11) }), "SparseAttentionFunc: cu_seqlens_q[2]: expected <= total_q = 10, got 11"},
	{"cu_seqlens_k past total_k", sparseRefusal(false, func(c *call) { c.args.CuSeqlensK = i32T([]int{3}, 0, 200, 301) }), "SparseAttentionFunc: cu_seqlens_k[2]: expected <= total_k = 300, got 301"},
	{"cu_seqlens_k batch", sparseRefusal(false, func(c *call) { c.args.CuSeqlensK = i32T([]int{2}, 0, 200) }), "SparseAttentionFunc: cu_seqlens_k: expected shape [B + 1] = [3] matching cu_seqlens_q, got 2"},
	{"max_seqlen_q negative", sparseRefusal(false, func(c *call) { c.args.MaxSeqlenQ = -1 }), "SparseAttentionFunc: max_seqlen_q: expected 0 (derive) or a positive maximum, got -1"},
	{"max_seqlen_k negative", sparseRefusal(false, func(c *call) { c.args.MaxSeqlenK = -300 }), "SparseAttentionFunc: max_seqlen_k: expected 0 (derive) or a positive maximum, got -300"},
	{"max_seqlen_k short", sparseRefusal(false, func(c *call) { c.args.MaxSeqlenK = 150 }), "SparseAttentionFunc: max_seqlen_k: expected >= every key length (sequence 0 has 200), got 150"},
	{"mixed dtypes", sparseRefusal(false, func(c *call) { c.k = fp8T(300, 2, 128) }), "SparseAttentionFunc: q, k, v: expected the same dtype, except q=bf16 with fp8_e4m3 K/V cache, got bfloat16, float8_e4m3fn, bfloat16"},
	{"head dim mismatch", sparseRefusal(false, func(c *call) { c.k, c.v = bf16T(300, 2, 64), bf16T(300, 2, 64) }), "SparseAttentionFunc: k, v: expected the head dimension of q (128), got k [300 2 64], v [300 2 64]"},
	{"unsupported D", sparseRefusal(false, func(c *call) { c.q, c.k, c.v = bf16T(10, 4, 96), bf16T(300, 2, 96), bf16T(300, 2, 96) }), "SparseAttentionFunc: q: expected [total_q, Hq, D] with head dimension D in [64 128 256], got D = 96 (shape [10 4 96])"},
	{"k v shapes", sparseRefusal(false, func(c *call) { c.v = bf16T(299, 2, 128) }), "SparseAttentionFunc: k, v: expected the same shape, got k [300 2 128], v [299 2 128]"},
	{"qk dtype", sparseRefusal(false, func(c *call) { c.args.QKDtype = tensor.Float32 }), "SparseAttentionFunc: qk_dtype: expected bfloat16 or float8_e4m3fn, got float32"},
	{"qk dtype mismatch", sparseRefusal(false, func(c *call) { c.args.QKDtype = Float8E4M3FN }), "SparseAttentionFunc: qk_dtype: expected the q storage dtype bfloat16 (Q fp8->bf16 staging is not supported), got float8_e4m3fn"},
	{"pv dtype fp8 with bf16 v", sparseRefusal(false, func(c *call) { c.args.PVDtype = Float8E4M3FN }), "SparseAttentionFunc: v: expected a V storage/pv_dtype combination equal, or fp8 V with bf16 pv_dtype, got bfloat16 with pv_dtype float8_e4m3fn"},
	{"cu_seqlens missing", sparseRefusal(false, func(c *call) { c.args.CuSeqlensQ = nil }), "SparseAttentionFunc: cu_seqlens_q/cu_seqlens_k: expected CSR varlen metadata: pass cu_seqlens_q and cu_seqlens_k, got nil"},
	{"blk_kv", sparseRefusal(false, func(c *call) { c.args.BlkKV = 256 }), "SparseAttentionFunc: blk_kv: expected 1 <= blk_kv <= 128, got 256"},
	{"topK 65", sparseRefusal(false, func(c *call) { c.topK = 65 }), "SparseAttentionFunc: topK: expected 1 <= topK <= 64, got 65"},
	{"csr heads", sparseRefusal(false, func(c *call) { c.rp = i32T([]int{1, 5}) }), "SparseAttentionFunc: k2q_row_ptr/k2q_q_indices: expected leading dimension Hkv = 2, got k2q_row_ptr [1 5], k2q_q_indices [2 40]"},
	{"row_ptr without columns", sparseRefusal(false, func(c *call) { c.rp = i32T([]int{2, 0}) }), "SparseAttentionFunc: k2q_row_ptr: expected at least one row pointer column, got [2 0]"},
	{"seqused without page table", sparseRefusal(false, func(c *call) { c.args.SeqUsedK = i32T([]int{2}) }), "SparseAttentionFunc: seqused_k: expected nil without page_table (seqused_k is only supported together with page_table), got a tensor"},
	{"paged k last dimension", sparseRefusal(true, func(c *call) { c.k, c.v = bf16T(6, 2, 128, 64), bf16T(6, 2, 128, 64) }), "SparseAttentionFunc: k, v: expected the head dimension of q (128), got k [6 2 128 64], v [6 2 128 64]"},
	{"page size", sparseRefusal(true, func(c *call) { c.k, c.v = bf16T(6, 2, 64, 128), bf16T(6, 2, 64, 128) }), "SparseAttentionFunc: k: expected the paged HND layout [num_pages, Hkv, page_size, D] with page_size = blk_kv = 128; for NHD [num_pages, page_size, Hkv, D] set the NHD layout (KVLayout), got [6 2 64 128]"},
	{"page table batch", sparseRefusal(true, func(c *call) { c.args.PageTable = i32T([]int{3, 2}) }), "SparseAttentionFunc: page_table: expected shape [B = 2, max_num_pages_per_seq], got [3 2]"},
	{"seqused shape", sparseRefusal(true, func(c *call) { c.args.SeqUsedK = i32T([]int{3}) }), "SparseAttentionFunc: seqused_k: expected shape [B] = [2], got [3]"},
	{"seqused too long", sparseRefusal(true, func(c *call) { c.args.SeqUsedK = i32T([]int{2}, 9999, 1) }), "SparseAttentionFunc: seqused_k[0]: expected 0 <= seqused_k <= max_num_pages_per_seq * page_size = 256, got 9999"},
	{"seqused negative", sparseRefusal(true, func(c *call) { c.args.SeqUsedK = i32T([]int{2}, 1, -1) }), "SparseAttentionFunc: seqused_k[1]: expected 0 <= seqused_k <= max_num_pages_per_seq * page_size = 256, got -1"},
	{"sequence beyond the page table", sparseRefusal(true, func(c *call) { c.args.CuSeqlensK = i32T([]int{3}, 0, 200, 9000) }), "SparseAttentionFunc: cu_seqlens_k (sequence 1): expected length <= max_num_pages_per_seq * page_size = 256, got 8800"},
	{"page table entry", sparseRefusal(true, func(c *call) { c.args.PageTable = modI32(c.args.PageTable, 1, 99) }), "SparseAttentionFunc: page_table[0, 1]: expected a page index in [0, num_pages = 6), got 99"},
	{"NVFP4 global scale not finite", nvfp4Refusal(tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{float32(math.Inf(-1))}))),
		"SparseAttentionNVFP4KVFunc: k_global_scale: expected a finite global scale, got -Inf"},
	{"NVFP4 global scale empty", nvfp4Refusal(tensor.New(tensor.WithShape(0), tensor.Of(tensor.Float32))),
		"SparseAttentionNVFP4KVFunc: k_global_scale: expected at least one element, got [0]"},
	{"K2QCSR cu_seqlens_q past total_q", nodeRefusal(func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
		csr, _, _, q2k, _, cuK := csrNodes(t, g)
		return csr, []G.Value{q2k, i32T([]int{3}, 0, 6, 12), cuK}
	}), "K2QCSR: cu_seqlens_q[2]: expected <= total_q = 10, got 12"},
	{"FwdSchedule cu_seqlens_k decreasing", nodeRefusal(func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
		csr, sched, _, q2k, cuQ, cuK := csrNodes(t, g)
		packed, err := csr.Do(q2k, cuQ, cuK)
		if err != nil {
			t.Fatal(err)
		}
		return sched, []G.Value{packed, cuQ, i32T([]int{3}, 0, 200, 100)}
	}), "FwdSchedule: cu_seqlens_k[2]: expected non-negative, non-decreasing prefix sums, got [0 200 100]"},
	{"PackK2QCSR q_indices size", nodeRefusal(func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
		_, _, pack, _, _, _ := csrNodes(t, g)
		return pack, []G.Value{i32T([]int{1, 4}), i32T([]int{1, 41})}
	}), "PackK2QCSR: k2q_q_indices: expected 40 elements, got 41"},
	{"WritePagedKV seqused_k shape", nodeRefusal(func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
		op, in := cacheWrite(t, g)
		in[3] = i32T([]int{2}, 20, 20)
		return op, in
	}), "WritePagedKV: seqused_k: expected shape [B] = [1], got [2]"},
	{"WritePagedKV new shape", nodeRefusal(func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
		op, in := cacheWrite(t, g)
		in[1] = bf16T(2, 1, 64)
		return op, in
	}), "WritePagedKV: new: expected shape [B * seqlen_q, Hkv, D] = [1, 1, 64], got [2 1 64]"},
	{"WritePagedKV position", nodeRefusal(func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
		op, in := cacheWrite(t, g)
		in[3] = i32T([]int{1}, 65)
		return op, in
	}), "WritePagedKV: seqused_k[0]: expected seqlen_q = 1 <= seqused_k <= max_num_pages_per_seq * page_size = 64, got 65"},
	{"BlockScoresFunc cu_seqlens batch", func(t *testing.T) error {
		_, err := BlockScoresFunc(bf16T(10, 4, 64), bf16T(300, 2, 64), i32T([]int{3}, 0, 6, 10), i32T([]int{2}, 0, 300), BlockScoreConfig{})
		return err
	}, "BlockScoresFunc: cu_seqlens_k: expected shape [B + 1] = [3] matching cu_seqlens_q, got 2"},
	{"BlockScoresFunc head dimension", func(t *testing.T) error {
		_, err := BlockScoresFunc(bf16T(10, 4, 64), bf16T(300, 2, 128), i32T([]int{3}, 0, 6, 10), i32T([]int{3}, 0, 200, 300), BlockScoreConfig{})
		return err
	}, "BlockScoresFunc: k: expected head dimension D = 64 (from q) >= 1, got [300 2 128]"},
	{"BlockScoresFunc blk_kv", func(t *testing.T) error {
		_, err := BlockScoresFunc(bf16T(10, 4, 64), bf16T(300, 2, 64), i32T([]int{3}, 0, 6, 10), i32T([]int{3}, 0, 200, 300), BlockScoreConfig{BlkKV: -2})
		return err
	}, "BlockScoresFunc: blk_kv: expected 1 <= blk_kv <= 2147483647, got -2"},
	{"BlockScoresFunc max_seqlen_k", func(t *testing.T) error {
		_, err := BlockScoresFunc(bf16T(10, 4, 64), bf16T(300, 2, 64), i32T([]int{3}, 0, 6, 10), i32T([]int{3}, 0, 200, 300), BlockScoreConfig{MaxSeqlenK: 150})
		return err
	}, "BlockScoresFunc: max_seqlen_k: expected >= the longest key sequence in cu_seqlens_k (200), got 150"},
	{"BlockScoresFunc softmax_scale", func(t *testing.T) error {
		_, err := BlockScoresFunc(bf16T(10, 4, 64), bf16T(300, 2, 64), i32T([]int{3}, 0, 6, 10), i32T([]int{3}, 0, 200, 300), BlockScoreConfig{SoftmaxScale: math.Inf(1)})
		return err
	}, "BlockScoresFunc: softmax_scale: expected a nonzero value whose float32 softmax_scale*log2(e) is finite and nonzero (|softmax_scale| in about [1e-45, 2.3e38]), got +Inf"},
	{"TopKBlocksFunc topK", func(t *testing.T) error {
		_, err := TopKBlocksFunc(tensor.New(tensor.WithShape(1, 10, 3), tensor.WithBacking(make([]float32, 30))), 0, TopKConfig{})
		return err
	}, "TopKBlocksFunc: topK: expected 1 <= topK <= 64, got 0"},
	{"TopKBlocksFunc heads", func(t *testing.T) error {
		_, err := TopKBlocksFunc(tensor.New(tensor.WithShape(0, 10, 3), tensor.Of(tensor.Float32)), 4, TopKConfig{})
		return err
	}, "TopKBlocksFunc: scores: expected Hkv >= 1, got [0 10 3]"},
}

// newCheckMessages are refusals of the dtype and size checks of the
// planning nodes' packed inputs (without them, a value of another dtype
// is read as int32 and a short one panics).
var newCheckMessages = []messageCase{
	{"FwdSchedule csr dtype", nodeRefusal(func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
		_, sched, _, _, cuQ, cuK := csrNodes(t, g)
		return sched, []G.Value{tensor.New(tensor.WithShape(1, 45), tensor.Of(tensor.Float32)), cuQ, cuK}
	}), "FwdSchedule: csr: expected dtype int32, got float32"},
	{"FwdSchedule csr size", nodeRefusal(func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
		_, sched, _, _, cuQ, cuK := csrNodes(t, g)
		return sched, []G.Value{i32T([]int{1, 44}), cuQ, cuK}
	}), "FwdSchedule: csr: expected an int32 CSR value of 45 elements, got 44"},
	{"PackK2QCSR row_ptr dtype", nodeRefusal(func(t *testing.T, g *G.ExprGraph) (G.Op, []G.Value) {
		_, _, pack, _, _, _ := csrNodes(t, g)
		return pack, []G.Value{tensor.New(tensor.WithShape(1, 4), tensor.Of(tensor.Int64)), i32T([]int{1, 40})}
	}), "PackK2QCSR: k2q_row_ptr: expected dtype int32, got int64"},
}

// TestValidationMessages pins the exact error of each refusal in
// validationMessages: the checks that now format their message only on
// failure return the messages they returned when they formatted them
// before testing.
func TestValidationMessages(t *testing.T) {
	for _, tc := range append(validationMessages, newCheckMessages...) {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(t)
			if err == nil {
				t.Fatal("accepted")
			}
			if err.Error() != tc.want {
				t.Errorf("error\n%q\nwant\n%q", err.Error(), tc.want)
			}
		})
	}
}

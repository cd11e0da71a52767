package decode

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/validate"
)

// Size limits of paged decode. Decode serves a few new tokens per request;
// these caps keep the memory that Plan, DecodeAttentionFunc and the
// DecodeSchedule node allocate from scalar arguments bounded (see
// docs/limitations.md). SparseAttentionFunc serves long query sequences.
const (
	// maxDecodeQueryRows caps B * seqlen_q * Hq, the (query, head) rows
	// of one decode call (a q of at most 2 GiB at D = 256).
	maxDecodeQueryRows = 1 << 22
	// maxDecodeItems caps the work items a decode schedule may hold
	// (20 bytes each: 320 MiB).
	maxDecodeItems = 1 << 24
	// decodeAutoMinChunk is the smallest KV chunk (pages) of the automatic
	// split rule.
	decodeAutoMinChunk = 16
)

// CheckRows rejects a decode request with more than
// maxDecodeQueryRows (query, head) rows, before anything sized by them is
// allocated.
func CheckRows(c *validate.Checker, batch, seqlenQ, hq int) {
	if c.Err == nil && validate.MulCap(maxDecodeQueryRows, batch, seqlenQ, hq) < 0 {
		c.Fail("seqlen_q", fmt.Sprintf("batch * seqlen_q * num_qo_heads <= %d (decode is for a few queries per request)", maxDecodeQueryRows),
			fmt.Sprintf("%d * %d * %d", batch, seqlenQ, hq))
	}
}

// itemBound is an upper bound of the work items (and of the fixed
// capacity) of a decode schedule under p: B * q_tiles * Hkv * the most
// chunks a request can have (ceil(pages / smallest chunk)). -1 when it
// exceeds maxDecodeItems.
func itemBound(p plan.DecodeParams) int {
	qpk := max(1, p.HQ/max(p.Hkv, 1))
	qTile := max(1, 128/qpk)
	chunks := 1
	switch {
	case p.DisableSplit:
	case p.FixedSplitPages > 0:
		chunks = validate.CeilDiv(p.MaxPagesPerSeq, p.FixedSplitPages)
	default:
		chunks = validate.CeilDiv(p.MaxPagesPerSeq, decodeAutoMinChunk)
	}
	return validate.MulCap(maxDecodeItems, p.Batch, validate.CeilDiv(p.SeqlenQ, qTile), p.Hkv, max(chunks, 1))
}

// CheckSize rejects decode parameters whose schedule could exceed
// maxDecodeItems work items.
func CheckSize(c *validate.Checker, p plan.DecodeParams) {
	if c.Err == nil && itemBound(p) < 0 {
		c.Fail("page_table/fixed_split_size", fmt.Sprintf("a schedule of at most %d work items (B * q_tiles * Hkv * ceil(max_num_pages_per_seq / smallest chunk)); raise fixed_split_size or page_size", maxDecodeItems),
			fmt.Sprintf("B = %d, seqlen_q = %d, Hkv = %d, max_num_pages_per_seq = %d, fixed_split_size = %d", p.Batch, p.SeqlenQ, p.Hkv, p.MaxPagesPerSeq, p.FixedSplitPages))
	}
}

// DefaultMaxWorkspaceBytes is op.DefaultMaxWorkspaceBytes (4 GiB): the
// bytes a decode workspace may take unless the caller sets a limit.
const DefaultMaxWorkspaceBytes int64 = 4 << 30

// WorkspaceLimit resolves a MaxWorkspaceBytes value: 0 is the default, a
// negative value an error naming the argument.
func WorkspaceLimit(c *validate.Checker, n int64) int64 {
	if n < 0 { // formatted only on failure: a decode node runs this per run
		c.Fail("max_workspace_bytes", fmt.Sprintf("0 (the default, %d) or a positive byte count", DefaultMaxWorkspaceBytes), n)
	}
	if n == 0 {
		return DefaultMaxWorkspaceBytes
	}
	return n
}

// workspaceBytes returns the bytes of a decode workspace with the
// given schedule capacity and partial rows (see op.DefaultMaxWorkspaceBytes),
// or -1 when the count exceeds the int range.
func workspaceBytes(p plan.DecodeParams, d, capacity, partialRows int) int {
	const huge = 1<<62 - 1
	partials := validate.MulCap(huge, 4, partialRows, p.HQ, d+1)
	sched := validate.MulCap(huge, 20, capacity)
	if partials < 0 || sched < 0 {
		return -1
	}
	return partials + sched + 16*p.Batch + 4
}

// CheckWorkspace computes the sizes of the decode schedule for
// seqused_k (the worst case of the shapes when p.FixedCapacity) without
// allocating and rejects a workspace of more than limit bytes. The error
// names the bytes, the arguments they come from and the knobs that lower
// them or raise the limit.
func CheckWorkspace(c *validate.Checker, p plan.DecodeParams, seqused []int32, d int, limit int64) {
	if c.Err != nil {
		return
	}
	var capacity, rows int
	var err error
	if p.FixedCapacity {
		capacity, rows, err = plan.FixedDecodeSizes(p)
	} else {
		capacity, rows, _, err = plan.DecodeSizes(seqused, p)
	}
	if err != nil {
		c.Err = validate.WrapArg(c.Fn, "schedule", err)
		return
	}
	n := workspaceBytes(p, d, capacity, rows)
	if n >= 0 && int64(n) <= limit {
		return
	}
	bytes := fmt.Sprintf("%d bytes", n)
	if n < 0 {
		bytes = "more than 2^62 bytes"
	}
	mode := "this step's seqused_k"
	if p.FixedCapacity {
		mode = "the longest sequence the page table allows (enable_cuda_graph or a graph node)"
	}
	c.Fail("page_table/fixed_split_size",
		fmt.Sprintf("a decode workspace of at most MaxWorkspaceBytes = %d bytes (4 · partial_rows · num_qo_heads · (head_dim + 1) float32 partials + 20 · capacity + 16 · B + 4 schedule); "+
			"raise fixed_split_size, set disable_split_kv, narrow page_table, or raise MaxWorkspaceBytes", limit),
		fmt.Sprintf("%s: partial_rows = %d, capacity = %d for %s (B = %d, seqlen_q = %d, max_num_pages_per_seq = %d, page_size = %d, fixed_split_size = %d, disable_split_kv = %v), num_qo_heads = %d, num_kv_heads = %d, head_dim = %d",
			bytes, rows, capacity, mode, p.Batch, p.SeqlenQ, p.MaxPagesPerSeq, p.PageSize, p.FixedSplitPages, p.DisableSplit, p.HQ, p.Hkv, d))
}

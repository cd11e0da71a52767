package op

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/plan"
)

// Size limits of paged decode. Decode serves a few new tokens per request;
// these caps keep the memory that Plan, SparseDecodeAttenFunc and the
// DecodeSchedule node allocate from scalar arguments bounded (see
// docs/limitations.md). SparseAttenFunc serves long query sequences.
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

// checkDecodeRows rejects a decode request with more than
// maxDecodeQueryRows (query, head) rows, before anything sized by them is
// allocated.
func checkDecodeRows(c *checker, batch, seqlenQ, hq int) {
	if c.err == nil && mulCap(maxDecodeQueryRows, batch, seqlenQ, hq) < 0 {
		c.fail("seqlen_q", fmt.Sprintf("batch * seqlen_q * num_qo_heads <= %d (decode is for a few queries per request)", maxDecodeQueryRows),
			fmt.Sprintf("%d * %d * %d", batch, seqlenQ, hq))
	}
}

// decodeItemBound is an upper bound of the work items (and of the fixed
// capacity) of a decode schedule under p: B * q_tiles * Hkv * the most
// chunks a request can have (ceil(pages / smallest chunk)). -1 when it
// exceeds maxDecodeItems.
func decodeItemBound(p plan.DecodeParams) int {
	qpk := max(1, p.HQ/max(p.Hkv, 1))
	qTile := max(1, 128/qpk)
	chunks := 1
	switch {
	case p.DisableSplit:
	case p.FixedSplitPages > 0:
		chunks = ceilDiv(p.MaxPagesPerSeq, p.FixedSplitPages)
	default:
		chunks = ceilDiv(p.MaxPagesPerSeq, decodeAutoMinChunk)
	}
	return mulCap(maxDecodeItems, p.Batch, ceilDiv(p.SeqlenQ, qTile), p.Hkv, max(chunks, 1))
}

// checkDecodeSize rejects decode parameters whose schedule could exceed
// maxDecodeItems work items.
func checkDecodeSize(c *checker, p plan.DecodeParams) {
	if c.err == nil && decodeItemBound(p) < 0 {
		c.fail("page_table/fixed_split_size", fmt.Sprintf("a schedule of at most %d work items (B * q_tiles * Hkv * ceil(max_num_pages_per_seq / smallest chunk)); raise fixed_split_size or page_size", maxDecodeItems),
			fmt.Sprintf("B = %d, seqlen_q = %d, Hkv = %d, max_num_pages_per_seq = %d, fixed_split_size = %d", p.Batch, p.SeqlenQ, p.Hkv, p.MaxPagesPerSeq, p.FixedSplitPages))
	}
}

package decode

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// Meta is validated decode metadata (everything but Q/K/V).
type Meta struct {
	Batch, SeqlenQ, Hkv, HQ, D int  // B, queries per request, heads, head dim
	PageSize, Cols, NumPages   int  // tokens per page, page-table columns, k's pages (-1: unknown at Plan)
	Blk                        int  // tokens per sparse block (blk_kv)
	NHD                        bool // token-major pages [num_pages, page_size, Hkv, D]
	PT, SeqUsed, Q2K           []int32
	TopK                       int     // entries per q2k list; 0 for dense decode (Q2K nil)
	Scale                      float64 // the resolved softmax scale
	Params                     plan.DecodeParams
}

// PageTableArgs checks that pageTable and seqUsedK are int32 tensors of
// ranks 2 ([B, max_num_pages_per_seq]) and 1 ([B]), both required.
func PageTableArgs(c *validate.Checker, pageTable, seqUsedK tensor.Tensor) (pt, su *tensor.Dense) {
	pt = c.Dense(pageTable, "page_table")
	c.Dtype(pt, "page_table", tensor.Int32)
	c.Rank(pt, "page_table", "[B, max_num_pages_per_seq]", 2)
	su = c.Dense(seqUsedK, "seqused_k")
	c.Dtype(su, "seqused_k", tensor.Int32)
	c.Rank(su, "seqused_k", "[B]", 1)
	return pt, su
}

// CheckQ2K rejects sparse-decode block ids outside the request's
// blocks and duplicates within one list.
func CheckQ2K(c *validate.Checker, m *Meta) {
	totalQ := m.Batch * m.SeqlenQ
	for h := 0; h < m.Hkv && c.Err == nil; h++ {
		for gq := 0; gq < totalQ && c.Err == nil; gq++ {
			b := gq / m.SeqlenQ
			nb := validate.CeilDiv(int(m.SeqUsed[b]), m.Blk)
			list := m.Q2K[(h*totalQ+gq)*m.TopK : (h*totalQ+gq+1)*m.TopK]
			for k, j := range list {
				if j < -1 || int(j) >= nb {
					c.Fail(fmt.Sprintf("q2k_indices[%d, %d, %d]", h, gq, k),
						fmt.Sprintf("-1 or a block id in [0, %d) for request %d (ceil(seqused_k = %d / blk_kv = %d) blocks)", nb, b, m.SeqUsed[b], m.Blk), j)
					return
				}
				for _, x := range list[:k] {
					if j >= 0 && x == j {
						c.Fail(fmt.Sprintf("q2k_indices[%d, %d, %d]", h, gq, k), "no duplicate block ids in one list", j)
						return
					}
				}
			}
		}
	}
}

// Input is the metadata of a decode call: op's DecodeArgs (the fields
// mean what they mean there) with the layout as NHD (the layout itself is
// checked by op).
type Input struct {
	PageTable, SeqUsedK        tensor.Tensor
	NHD                        bool
	SeqlenQ, MaxSeqlenK, BlkKV int
	NonCausal                  bool
	SoftmaxScale               float64
	Workers, FixedSplitSize    int
	DisableSplitKV             bool
	MaxWorkspaceBytes          int64
}

// Validate mirrors _validate_sparse_decode_inputs for the metadata, with
// op's extensions (any page size, any qhead_per_kv in {1,2,4,8,16}, index
// range checks). fixedCap is enable_cuda_graph (Plan only); totalQ < 0 and
// numPages < 0 skip the checks that need q and k (Plan).
func Validate(c *validate.Checker, args *Input, fixedCap bool, q2k tensor.Tensor, totalQ, hq, hkv, d, pageSize, numPages int) *Meta {
	return ValidateInto(c, new(Meta), args, fixedCap, q2k, totalQ, hq, hkv, d, pageSize, numPages)
}

// ValidateInto is Validate writing the metadata into m (a caller's storage
// kept across runs, so that a run allocates nothing); it returns m, or nil
// where Validate does.
func ValidateInto(c *validate.Checker, m *Meta, args *Input, fixedCap bool, q2k tensor.Tensor, totalQ, hq, hkv, d, pageSize, numPages int) *Meta {
	*m = Meta{HQ: hq, Hkv: hkv, D: d, PageSize: pageSize, NumPages: numPages, NHD: args.NHD}
	if args.NonCausal {
		c.Fail("causal", "true (decode attention currently supports only causal=True)", false)
		return nil
	}
	pt, su := PageTableArgs(c, args.PageTable, args.SeqUsedK)
	if c.Err != nil {
		return nil
	}
	m.Batch, m.Cols = pt.Shape()[0], pt.Shape()[1]
	// Messages are formatted only on failure (if !ok { c.Fail }): a decode
	// node validates on every run, which then allocates nothing.
	if m.Cols < 1 {
		c.Fail("page_table", "at least one column", validate.ShapeStr(pt))
	}
	validate.PageCapacity(c, m.Cols, pageSize)
	if su.Shape()[0] != m.Batch {
		c.Fail("seqused_k", fmt.Sprintf("shape [B] = [%d]", m.Batch), validate.ShapeStr(su))
	}
	if args.SeqlenQ <= 0 {
		c.Fail("seqlen_q", "a positive value", args.SeqlenQ)
	}
	if args.MaxSeqlenK < 0 {
		c.Fail("max_seqlen_k", "0 (derived from seqused_k) or a positive value", args.MaxSeqlenK)
	}
	if c.Err != nil {
		return nil
	}
	CheckRows(c, m.Batch, args.SeqlenQ, hq)
	if c.Err != nil {
		return nil
	}
	m.SeqlenQ = args.SeqlenQ
	if totalQ >= 0 && totalQ != m.Batch*m.SeqlenQ {
		c.Fail("q", fmt.Sprintf("[B * seqlen_q, Hq, D] with B * seqlen_q = %d * %d = %d", m.Batch, m.SeqlenQ, m.Batch*m.SeqlenQ), fmt.Sprintf("q.shape[0] = %d", totalQ))
	}
	m.PT, m.SeqUsed = validate.Int32s(pt), validate.Int32s(su)
	for b, x := range m.SeqUsed {
		if x < 0 || int(x) > m.Cols*pageSize {
			c.Fail(fmt.Sprintf("seqused_k[%d]", b), fmt.Sprintf("0 <= seqused_k <= max_num_pages_per_seq * page_size = %d", m.Cols*pageSize), x)
			return nil
		}
		if args.MaxSeqlenK > 0 && int(x) > args.MaxSeqlenK {
			c.Fail(fmt.Sprintf("seqused_k[%d]", b), fmt.Sprintf("<= max_seqlen_k = %d", args.MaxSeqlenK), x)
			return nil
		}
	}
	if c.Err != nil {
		return nil
	}
	validate.CheckPages(c, m.PT, m.Cols, pageSize, m.SeqUsed, numPages)
	m.Blk = args.BlkKV
	if m.Blk == 0 {
		m.Blk = pageSize
	}
	if m.Blk < 1 || m.Blk > validate.MaxInt32 {
		c.Fail("blk_kv", fmt.Sprintf("1 <= blk_kv <= %d", validate.MaxInt32), m.Blk)
	}
	if args.FixedSplitSize < 0 || args.FixedSplitSize > validate.MaxInt32 {
		c.Fail("fixed_split_size", fmt.Sprintf("0 (automatic) <= fixed_split_size <= %d", validate.MaxInt32), args.FixedSplitSize)
	}
	m.Params = plan.DecodeParams{
		Batch: m.Batch, SeqlenQ: m.SeqlenQ, HQ: hq, Hkv: hkv, PageSize: pageSize,
		Workers: validate.WorkerCount(args.Workers), FixedSplitPages: args.FixedSplitSize, DisableSplit: args.DisableSplitKV,
		MaxPagesPerSeq: m.Cols, FixedCapacity: fixedCap,
	}
	CheckSize(c, m.Params)
	CheckWorkspace(c, m.Params, m.SeqUsed, d, WorkspaceLimit(c, args.MaxWorkspaceBytes))
	if validate.Present(q2k) && c.Err == nil {
		qd := c.Dense(q2k, "q2k_indices")
		c.Dtype(qd, "q2k_indices", tensor.Int32)
		c.Rank(qd, "q2k_indices", "[Hkv, total_q, topK]", 3)
		if c.Err != nil {
			return nil
		}
		s := qd.Shape()
		if s[0] != hkv || s[1] != m.Batch*m.SeqlenQ || s[2] < 1 || s[2] > validate.MaxTopK {
			c.Fail("q2k_indices", fmt.Sprintf("shape [Hkv = %d, total_q = %d, 1 <= topK <= %d]", hkv, m.Batch*m.SeqlenQ, validate.MaxTopK), validate.ShapeStr(qd))
			return nil
		}
		m.Q2K, m.TopK = validate.Int32s(qd), s[2]
		CheckQ2K(c, m)
	}
	m.Scale = validate.ResolveScale(c, args.SoftmaxScale, d)
	return m
}

package grad

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/plan"
)

// Problem describes one block-sparse attention call: shapes, the sequence
// layout, the sparsity pattern (as the k2q CSR the forward uses) and the
// masking. All tensors passed with it are flat row-major float32 slices:
//
//	q, o, dO, dQ:   [TotalQ][HQ][D]
//	lse, dLSE:      [TotalQ][HQ]
//	k, v, dK, dV:   dense [TotalK][Hkv][D]; paged [NumPages][Hkv][PageSize][D]
type Problem struct {
	// TotalQ is the number of query rows, HQ and Hkv the numbers of query and
	// key-value heads (HQ a multiple of Hkv), D the head dimension.
	TotalQ, HQ, Hkv, D int
	// CuQ ([B+1]) are the query prefix sums. CuK ([B+1]) are the key prefix
	// sums: with dense K/V they address the key rows; with paged K/V they
	// carry the effective key lengths the CSR rows were counted with.
	CuQ, CuK []int32
	// TotalK is the number of token rows of dense K/V (ignored when paged).
	TotalK int
	// Paged selects paged K/V: PageTable is [B][PTCols] page ids, pages hold
	// PageSize tokens, the pool has NumPages pages. SeqUsedK ([B]) is
	// optional; when nil seqlen_k_b = PTCols*PageSize.
	Paged     bool
	PageTable []int32 // [B][PTCols] page ids, row-major
	PTCols    int     // page ids per PageTable row
	PageSize  int     // tokens per page
	NumPages  int     // pages in the K/V pool
	SeqUsedK  []int32 // [B] effective key lengths; nil: PTCols*PageSize each
	// BlkKV is the number of keys per block; TopK bounds the blocks of one
	// (query, KV head).
	BlkKV, TopK int
	// Causal enables the bottom-right aligned causal mask.
	Causal bool
	// Scale is softmax_scale (the caller resolves the 1/sqrt(D) default).
	Scale float64
	// CSR is the k2q CSR over CuQ/CuK/BlkKV (plan.BuildK2QCSR).
	CSR *plan.CSR
}

// derived holds what a validated Problem implies.
type derived struct {
	rows   plan.Rows
	csrChk plan.CSRScratch // ValidateCSRInto's scratch, reused by every Prepare
	seqK   []int32         // [B] seqlen_k_b
	qBatch []int32         // [TotalQ] sequence of each query row, -1 outside
	kv     attn.KVLayout
	qpk    int
	// Paged: the largest page id the call reads and its page-table index
	// (maxAt = -1 when it reads none), checked against NumPages per call.
	maxPage, maxAt int
}

// errorf formats an error of this package.
func errorf(format string, a ...any) error { return fmt.Errorf("grad: "+format, a...) }

// derive validates p's metadata and fills dv with its derived data,
// reusing dv's buffers. The values a prepared problem's calls may change
// (Scale, NumPages) are checked by checkRun.
func (p *Problem) derive(dv *derived) error {
	switch {
	case p.TotalQ < 0:
		return errorf("total_q = %d: must be >= 0", p.TotalQ)
	case p.Hkv < 1:
		return errorf("head_kv = %d: must be >= 1", p.Hkv)
	case p.HQ < p.Hkv || p.HQ%p.Hkv != 0:
		return errorf("head_q = %d: must be a positive multiple of head_kv = %d", p.HQ, p.Hkv)
	case p.D < 1:
		return errorf("head_dim = %d: must be >= 1", p.D)
	case p.BlkKV < 1:
		return errorf("blk_kv = %d: must be >= 1", p.BlkKV)
	case p.TopK < 1:
		return errorf("topK = %d: must be >= 1", p.TopK)
	case p.CSR == nil:
		return errorf("k2q CSR is nil")
	case p.CSR.Hkv != p.Hkv:
		return errorf("k2q CSR has %d KV heads: expected head_kv = %d", p.CSR.Hkv, p.Hkv)
	}
	if int64(p.TotalQ)*int64(p.HQ)*int64(p.D) > math.MaxInt32*8 {
		return errorf("q has total_q*head_q*head_dim = %d*%d*%d elements: too large", p.TotalQ, p.HQ, p.D)
	}
	if err := dv.rows.Reset(p.CuK, p.BlkKV); err != nil {
		return errorf("%v", err)
	}
	rows := &dv.rows
	if len(p.CuQ) != len(p.CuK) {
		return errorf("cu_seqlens_q has %d elements: expected [B + 1] = %d like cu_seqlens_k", len(p.CuQ), len(p.CuK))
	}
	if err := plan.ValidateCSRInto(&dv.csrChk, p.CSR, p.TotalQ, p.TopK, p.CuQ, rows); err != nil {
		return errorf("%v", err)
	}
	nb := rows.NumSeq
	dv.qpk = p.HQ / p.Hkv
	dv.seqK, dv.qBatch = growI32(dv.seqK, nb), growI32(dv.qBatch, p.TotalQ)
	for i := range dv.qBatch {
		dv.qBatch[i] = -1
	}
	for b := 0; b < nb; b++ {
		for q := p.CuQ[b]; q < p.CuQ[b+1]; q++ {
			dv.qBatch[q] = int32(b)
		}
	}
	return p.deriveKV(dv)
}

// deriveKV checks the K/V addressing (dense offsets or page table) and sets
// seqK, kv and kvRows.
func (p *Problem) deriveKV(dv *derived) error {
	nb := dv.rows.NumSeq
	if !p.Paged {
		if p.SeqUsedK != nil {
			return errorf("seqused_k is only accepted together with a page table")
		}
		if p.TotalK < 0 || int64(p.CuK[nb]) > int64(p.TotalK) {
			return errorf("cu_seqlens_k[%d] = %d: must be <= total_k = %d", nb, p.CuK[nb], p.TotalK)
		}
		copy(dv.seqK, dv.rows.SeqlenK)
		dv.kv = attn.KVLayout{Hkv: p.Hkv, CuK: p.CuK}
		return nil
	}
	switch {
	case p.PageSize < 1:
		return errorf("page_size = %d: must be >= 1", p.PageSize)
	case p.PTCols < 0:
		return errorf("page_table.shape[1] = %d: must be >= 0", p.PTCols)
	case int64(len(p.PageTable)) != int64(nb)*int64(p.PTCols):
		return errorf("page_table has %d elements: expected [B, max_pages] = [%d, %d]", len(p.PageTable), nb, p.PTCols)
	case int64(p.PTCols)*int64(p.PageSize) > math.MaxInt32:
		return errorf("page_table.shape[1]*page_size = %d*%d: too large", p.PTCols, p.PageSize)
	}
	full := int32(p.PTCols * p.PageSize)
	if p.SeqUsedK != nil && len(p.SeqUsedK) != nb {
		return errorf("seqused_k has %d elements: expected [B] = %d", len(p.SeqUsedK), nb)
	}
	dv.maxPage, dv.maxAt = -1, -1
	for b := 0; b < nb; b++ {
		s := full
		if p.SeqUsedK != nil {
			s = p.SeqUsedK[b]
			if s < 0 || s > full {
				return errorf("seqused_k[%d] = %d: must be in [0, page_table.shape[1]*page_size = %d]", b, s, full)
			}
		}
		dv.seqK[b] = s
		used := (int(s) + p.PageSize - 1) / p.PageSize
		for c := 0; c < used; c++ {
			i := b*p.PTCols + c
			if x := p.PageTable[i]; x < 0 {
				return errorf("page_table[%d, %d] = %d: must be a page index >= 0", b, c, x)
			} else if int(x) > dv.maxPage {
				dv.maxPage, dv.maxAt = int(x), i
			}
		}
	}
	dv.kv = attn.KVLayout{Hkv: p.Hkv, Paged: true, PageTable: p.PageTable, PTCols: p.PTCols, PageSize: p.PageSize}
	return nil
}

// checkRun checks the values a prepared problem's calls may change: the
// softmax scale and, when paged, that the pool holds every page the page
// table names (O(1): derive recorded the largest).
func (p *Problem) checkRun(dv *derived) error {
	if math.IsNaN(p.Scale) || math.IsInf(p.Scale, 0) {
		return errorf("softmax_scale = %v: must be finite", p.Scale)
	}
	if !p.Paged {
		return nil
	}
	if p.NumPages < 0 {
		return errorf("num_pages = %d: must be >= 0", p.NumPages)
	}
	if dv.maxPage >= p.NumPages {
		return errorf("page_table[%d, %d] = %d: must be a page index in [0, num_pages = %d)", dv.maxAt/p.PTCols, dv.maxAt%p.PTCols, dv.maxPage, p.NumPages)
	}
	return nil
}

// kvRows returns the rows of [.., D] in K/V: TotalK*Hkv (dense) or
// NumPages*Hkv*PageSize (paged).
func (p *Problem) kvRows() int {
	if p.Paged {
		return p.NumPages * p.Hkv * p.PageSize
	}
	return p.TotalK * p.Hkv
}

// Tensor kinds of a call: how a tensor's expected length is computed.
const (
	kindQ   = iota // [TotalQ][HQ][D]
	kindKV         // K/V shaped (dense or paged)
	kindRow        // [TotalQ][HQ]
)

// tensorArg is one tensor argument of a call, for the length checks.
type tensorArg struct {
	name     string
	x        []float32
	kind     int
	optional bool // nil is accepted
}

// checkTensors checks the length of every tensor argument of a call.
func (p *Problem) checkTensors(args ...tensorArg) error {
	for _, a := range args {
		if a.optional && a.x == nil {
			continue
		}
		if want := p.tensorLen(a.kind); len(a.x) != want {
			return errorf("%s has %d elements: expected %s = %d", a.name, len(a.x), p.tensorShape(a.kind), want)
		}
	}
	return nil
}

// tensorLen returns the number of elements of a tensor of the given kind.
func (p *Problem) tensorLen(kind int) int {
	switch kind {
	case kindQ:
		return p.TotalQ * p.HQ * p.D
	case kindKV:
		return p.kvRows() * p.D
	}
	return p.TotalQ * p.HQ
}

// tensorShape names the shape of a tensor of the given kind, for errors
// (formatted only then: the checks of a call allocate nothing).
func (p *Problem) tensorShape(kind int) string {
	switch {
	case kind == kindQ:
		return fmt.Sprintf("[total_q, Hq, D] = [%d, %d, %d]", p.TotalQ, p.HQ, p.D)
	case kind == kindKV && p.Paged:
		return fmt.Sprintf("[num_pages, Hkv, page_size, D] = [%d, %d, %d, %d]", p.NumPages, p.Hkv, p.PageSize, p.D)
	case kind == kindKV:
		return fmt.Sprintf("[total_k, Hkv, D] = [%d, %d, %d]", p.TotalK, p.Hkv, p.D)
	}
	return fmt.Sprintf("[total_q, Hq] = [%d, %d]", p.TotalQ, p.HQ)
}

package grad

import "github.com/sparseattn/msa/kernels/plan"

// Prepared is a Problem validated once, with what its metadata implies
// derived once (the CSR row numbering, the sequence of every query row, the
// q-major block list of every (query, KV head), the K/V addressing), for
// calls that run it many times: ForwardPrepared, BackwardPrepared and
// TemperatureLSEPrepared then do no per-call set-up and allocate nothing
// once their workspace is warm (has run the same problem before). It is the plan half of a plan/run split;
// Forward, Backward and TemperatureLSE prepare their Problem on every call.
//
// Prepare copies the metadata it reads (cu_seqlens, page table, seqused_k,
// CSR) into buffers of its own, so a call runs the problem as it was when
// prepared: changing the caller's slices afterwards neither reaches the
// prepared problem nor makes its calls read out of bounds. Metadata that
// changes needs Prepare again, which reuses the buffers whose capacity
// fits. Only the softmax scale and the page pool size may change between
// calls without it (SetRun), as they vary per call without changing what
// is derived; both are checked at every call in O(1).
//
// The zero Prepared is ready for Prepare; calls on a Prepared whose last
// Prepare failed (or that was never prepared) return an error. It is not
// safe for concurrent use with Prepare or SetRun.
type Prepared struct {
	p  Problem // the prepared problem; its slices are the copies below
	dv derived
	ok bool // the last Prepare succeeded

	cuQ, cuK, pt, seqUsed, rowPtr, qIdx []int32 // copies of the metadata
	csr                                 plan.CSR
	// q-major view of the CSR: for KV head h and global query row q, the CSR
	// rows (KV blocks) q selected are qRow[qPtr[h*(TotalQ+1)+q] :
	// qPtr[h*(TotalQ+1)+q+1]], ascending (ascending block order).
	qPtr, qRow []int32
}

// Prepare validates p's metadata and derives what its calls need, into
// pp's buffers. On error pp holds no problem until the next successful
// Prepare. The scale and (paged) num_pages are p's until SetRun changes
// them; they are checked at each call.
func (pp *Prepared) Prepare(p *Problem) error {
	pp.ok = false
	if p == nil {
		return errorf("problem is nil")
	}
	pp.p = *p
	pp.p.CuQ, pp.p.CuK = keep(&pp.cuQ, p.CuQ), keep(&pp.cuK, p.CuK)
	pp.p.PageTable, pp.p.SeqUsedK = keep(&pp.pt, p.PageTable), keep(&pp.seqUsed, p.SeqUsedK)
	if c := p.CSR; c != nil {
		pp.csr = plan.CSR{Hkv: c.Hkv, TotalRows: c.TotalRows, Stride: c.Stride,
			RowPtr: keep(&pp.rowPtr, c.RowPtr), QIdx: keep(&pp.qIdx, c.QIdx)}
		pp.p.CSR = &pp.csr
	}
	if err := pp.p.derive(&pp.dv); err != nil {
		return err
	}
	pp.buildQueryLists()
	pp.ok = true
	return nil
}

// SetRun sets the softmax scale and the number of pages of the K/V pools
// (paged problems; ignored when dense) of pp's next calls, which check
// them.
func (pp *Prepared) SetRun(scale float64, numPages int) {
	pp.p.Scale, pp.p.NumPages = scale, numPages
}

// run returns the prepared problem and its derived data after checking
// that pp is prepared and its run values are valid.
func (pp *Prepared) run() (*Problem, *derived, error) {
	if pp == nil || !pp.ok {
		return nil, nil, errorf("problem is not prepared (Prepare was not called or failed)")
	}
	if err := pp.p.checkRun(&pp.dv); err != nil {
		return nil, nil, err
	}
	return &pp.p, &pp.dv, nil
}

// keep copies src into *buf (reused when its capacity fits) and returns
// the copy; nil for a nil src, so that optional metadata stays absent.
func keep(buf *[]int32, src []int32) []int32 {
	if src == nil {
		return nil
	}
	*buf = append((*buf)[:0], src...)
	return *buf
}

// buildQueryLists fills qPtr/qRow, the q-major transpose of the CSR.
func (pp *Prepared) buildQueryLists() {
	p, dv := &pp.p, &pp.dv
	c := p.CSR
	tr := c.TotalRows
	nq := p.TotalQ
	pp.qPtr = growI32(pp.qPtr, p.Hkv*(nq+1))
	clear(pp.qPtr)
	nnz := 0
	for h := 0; h < p.Hkv; h++ {
		nnz += int(c.RowPtr[h*(tr+1)+tr])
	}
	pp.qRow = growI32(pp.qRow, nnz)
	base := 0
	for h := 0; h < p.Hkv; h++ {
		rp := c.RowPtr[h*(tr+1) : (h+1)*(tr+1)]
		qi := c.QIdx[h*c.Stride : (h+1)*c.Stride]
		qp := pp.qPtr[h*(nq+1) : (h+1)*(nq+1)]
		for r := 0; r < tr; r++ {
			b := dv.rows.Batch[r]
			for _, q := range qi[rp[r]:rp[r+1]] {
				qp[p.CuQ[b]+q+1]++
			}
		}
		qp[0] = int32(base)
		for q := 0; q < nq; q++ {
			qp[q+1] += qp[q]
		}
		// Scatter with qp[q] as the cursor of q, then shift back.
		for r := 0; r < tr; r++ {
			b := dv.rows.Batch[r]
			for _, q := range qi[rp[r]:rp[r+1]] {
				g := p.CuQ[b] + q
				pp.qRow[qp[g]] = int32(r)
				qp[g]++
			}
		}
		copy(qp[1:], qp[:nq])
		qp[0] = int32(base)
		base = int(qp[nq])
	}
}

// queryBlocks returns the CSR rows selected by global query row q for KV
// head h, ascending.
func (pp *Prepared) queryBlocks(h, q int) []int32 {
	i := h*(pp.p.TotalQ+1) + q
	return pp.qRow[pp.qPtr[i]:pp.qPtr[i+1]]
}

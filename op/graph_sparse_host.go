package op

import (
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// sparseHost is a sparse prefill node's host side on the CUDA path
// (graph_cuda.go, build tag cuda), kept in the node across runs so that a
// warm run allocates nothing. It holds the host copies of the metadata
// inputs (by input index) and the call the full validation (op.call, the
// CPU path's rules and errors) prepared in the last run of these input
// shapes and dtypes (key). A later run of the same key repeats only the
// checks that read the metadata values (recheck), into storage kept here;
// a run that fails one of them, or of another key, takes the full
// validation again, so every refusal is the CPU path's error. Guarded by
// the node's attnState mutex.
type sparseHost struct {
	in    []hostValue // host copies of the metadata inputs, by input index
	key   sparseKey
	valid bool // sc is the full validation's call for key
	sc    sparseCall

	rows  plan.Rows
	sched plan.FwdSchedule
	csr   csrStore
	seqK  []int32
	csrS  plan.FwdScheduleScratch
}

// maxSparseInputs bounds the inputs of a sparse prefill node: q, k, v,
// csr, schedule, cu_seqlens_q/k, page_table, seqused_k, the NVFP4 block
// and global scales.
const maxSparseInputs = 13

// sparseKey is what the full validation's static checks read: the dtype
// and shape (rank <= 4) of every input, and whether the temperature LSE
// is returned.
type sparseKey struct {
	n     int
	dt    [maxSparseInputs]tensor.Dtype
	shape [maxSparseInputs][4]int
	rank  [maxSparseInputs]int
	needT bool
}

// sparseKeyOf returns the key of ts (ok false when they do not fit one:
// the run then takes the full validation).
func sparseKeyOf(ts []*tensor.Dense, needT bool) (k sparseKey, ok bool) {
	if len(ts) > maxSparseInputs {
		return k, false
	}
	k.n, k.needT = len(ts), needT
	for i, t := range ts {
		if t == nil || t.Dims() > 4 {
			return k, false
		}
		k.dt[i], k.rank[i] = t.Dtype(), t.Dims()
		copy(k.shape[i][:], t.Shape())
	}
	return k, true
}

// recheck repeats, for the inputs ts of a run whose key is h.key, the
// checks of the full validation that read metadata values, in its order
// and with its functions, on storage kept in h (none of them formats a
// message unless a check fails): the cu_seqlens prefix sums
// (validate.CuSeqlensValues), the paged key lengths (pagedLengths) and page
// indices (validate.CheckPages), the CSR's row numbering and contents
// (csrRows, csrView), the schedule (validateSchedule) and the NVFP4 global
// scales (globalScale). The checks of shapes and dtypes passed for this
// key. It updates h.sc to this run's metadata and reports whether every
// check passed (false: the caller runs the full validation, which returns
// the error).
func (op *sparseAttnOp) recheck(h *sparseHost, ts []*tensor.Dense, sl attnSlots) bool {
	const fn = "SparseAttention"
	sc, l := &h.sc, op.sched.csr
	p := &sc.p
	kd := ts[1]
	c := validate.Checker{Fn: fn}
	cuQ, cuK := validate.Int32s(ts[5]), validate.Int32s(ts[6])
	totalKeys := -1
	if !p.KV.Paged {
		totalKeys = kd.Shape()[0]
	}
	if !validate.CuSeqlensValues(&c, cuQ, "cu_seqlens_q", p.TotalQ, "total_q") ||
		!validate.CuSeqlensValues(&c, cuK, "cu_seqlens_k", totalKeys, "total_k") {
		return false
	}
	h.seqK = growInt32(h.seqK, len(cuQ)-1)
	seqK := h.seqK
	var pt []int32
	if !p.KV.Paged {
		keyLengths(seqK, cuK)
	} else {
		pt = validate.Int32s(ts[sl.pageTable])
		var used []int32
		if sl.seqused >= 0 {
			used = validate.Int32s(ts[sl.seqused])
		}
		if !pagedLengths(&c, used, cuK, seqK, p.KV.PTCols*p.KV.PageSize) {
			return false
		}
		if validate.CheckPages(&c, pt, p.KV.PTCols, p.KV.PageSize, seqK, kd.Shape()[0]); c.Err != nil {
			return false
		}
	}
	if csrRows(fn, &h.rows, l.RowCap, cuK, p.BlkKV) != nil {
		return false
	}
	csr, err := csrView(fn, &h.csr, h.csr.pair(l, validate.Int32s(ts[3])), &h.rows, p.TotalQ, p.TopK, cuQ)
	if err != nil {
		return false
	}
	op.sched.unpackInto(&h.sched, validate.Int32s(ts[4]))
	if validateSchedule(fn, &h.csrS, &h.sched, &csr, &h.rows, cuQ, sc.fp) != nil {
		return false
	}
	// As nvfp4Operands: the K global scale and the output (V global)
	// scale, 1 when absent.
	if sl.kGlobal >= 0 {
		p.K.Global = globalScale(&c, ts[sl.kGlobal], "k_global_scale")
	}
	if sl.vGlobal >= 0 {
		p.OutputScale = globalScale(&c, ts[sl.vGlobal], "v_global_scale")
	}
	if c.Err != nil {
		return false
	}
	sc.csr, sc.sched, sc.rows = csr, &h.sched, &h.rows
	p.CuQ, p.SeqK, p.KV.CuK, p.KV.PageTable, p.CSR, p.Sched = cuQ, seqK, cuK, pt, &sc.csr, &h.sched
	return true
}

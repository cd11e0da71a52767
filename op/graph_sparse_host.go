package op

import (
	"math"

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
// checks of the full validation that read metadata values, in the same
// order and with the same rules: the cu_seqlens prefix sums, the paged
// key lengths (seqused_k, capacity, page indices), the CSR row numbering
// and contents, the schedule, the NVFP4 global scales. It updates h.sc to this run's metadata and
// reports whether every check passed (false: the caller runs the full
// validation, which returns the error).
func (op *sparseAttnOp) recheck(h *sparseHost, ts []*tensor.Dense, sl attnSlots) bool {
	const fn = "SparseAttention"
	sc, l := &h.sc, op.sched.csr
	p := &sc.p
	kd := ts[1]
	cuQ, cuK := validate.Int32s(ts[5]), validate.Int32s(ts[6])
	totalKeys := -1
	if !p.KV.Paged {
		totalKeys = kd.Shape()[0]
	}
	if !prefixSums(cuQ, p.TotalQ) || !prefixSums(cuK, totalKeys) {
		return false
	}
	h.seqK = growInt32(h.seqK, len(cuQ)-1)
	seqK := h.seqK
	var pt []int32
	if !p.KV.Paged {
		for b := range seqK {
			seqK[b] = cuK[b+1] - cuK[b]
		}
	} else {
		pt = validate.Int32s(ts[sl.pageTable])
		capacity := p.KV.PTCols * p.KV.PageSize
		for b := range seqK {
			seqK[b] = int32(capacity)
		}
		if sl.seqused >= 0 {
			for b, x := range validate.Int32s(ts[sl.seqused]) {
				if x < 0 || int(x) > capacity {
					return false
				}
				seqK[b] = x
			}
		}
		for b := range seqK {
			if int(cuK[b+1]-cuK[b]) > capacity {
				return false
			}
		}
		c := validate.Checker{Fn: fn}
		if validate.CheckPages(&c, pt, p.KV.PTCols, p.KV.PageSize, seqK, kd.Shape()[0]); c.Err != nil {
			return false
		}
	}
	// csrRows and csrView.
	if total, err := plan.CountRows(cuK, p.BlkKV); err != nil || l.RowCap < total {
		return false
	}
	if h.rows.Reset(cuK, p.BlkKV) != nil {
		return false
	}
	rp, qi := h.csr.split(l, validate.Int32s(ts[3]))
	rpc, ok := h.csr.compact(rp, l.Hkv, l.RowCap, h.rows.Total)
	if !ok {
		return false
	}
	csr := plan.CSR{Hkv: l.Hkv, TotalRows: h.rows.Total, Stride: l.Stride, RowPtr: rpc, QIdx: qi}
	op.sched.unpackInto(&h.sched, validate.Int32s(ts[4]))
	// ValidateFwdScheduleInto validates the CSR first, as csrView does.
	if plan.ValidateFwdScheduleInto(&h.csrS, &h.sched, &csr, &h.rows, cuQ, sc.fp) != nil {
		return false
	}
	if !finiteGlobal(ts, sl.kGlobal) || !finiteGlobal(ts, sl.vGlobal) {
		return false
	}
	sc.csr, sc.sched, sc.rows = csr, &h.sched, &h.rows
	p.CuQ, p.SeqK, p.KV.CuK, p.KV.PageTable, p.CSR, p.Sched = cuQ, seqK, cuK, pt, &sc.csr, &h.sched
	return true
}

// finiteGlobal is nvfp4Operands's rule for the optional global scale at
// slot i of ts (i < 0: none): a float32 tensor whose first element is
// finite.
func finiteGlobal(ts []*tensor.Dense, i int) bool {
	if i < 0 {
		return true
	}
	g := validate.Backing[float32](ts[i])
	return ts[i].Dtype() == tensor.Float32 && len(g) >= 1 && !math.IsNaN(float64(g[0])) && !math.IsInf(float64(g[0]), 0)
}

package op

import (
	"sync"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// The host work of the nodes that run on the host on the CUDA path
// (graph_cuda.go's hostCUDADo: DecodeSchedule, CastToBF16, CastFromBF16,
// K2QCSR, PackK2QCSR, FwdSchedule; and WritePagedKV's checks, whose write
// is graph_cuda_writekv.go's). Such a node keeps a hostStage: the host
// copies of its inputs and the host storage of its value, reused by every
// run of the same shapes, so that a warm run allocates nothing. Its
// hostRun checks what the node's CPU Do checks, without formatting a
// message; an input that fails a check makes the CUDA path run the CPU Do
// on fresh copies, which returns the CPU path's error.

// hostRunner is a node whose CUDA path runs its host work on a hostStage.
type hostRunner interface {
	stage() *hostStage
	// hostRun computes the node's value from the host copies in, into
	// storage the node keeps; ok is false when an input fails a check.
	hostRun(in []*tensor.Dense) (out *tensor.Dense, ok bool)
}

// maxHostInputs bounds the inputs of a hostRunner (FwdSchedule has 3).
const maxHostInputs = 3

// hostStage is a hostRunner's host storage: the copies of its inputs, its
// value, and whatever else the node's host work keeps (in the node).
type hostStage struct {
	mu  sync.Mutex // one run at a time
	in  []hostValue
	ts  [maxHostInputs]*tensor.Dense // this run's host inputs (here: a local array would escape through the interface call)
	out hostValue
}

// csrStore is the storage of a packed CSR value viewed as a plan.CSR:
// row pointers and query indices per KV head, and the row pointers
// compacted to the rows the sequences have.
type csrStore struct {
	rp, qi []int32
	rpc    []int32
}

// split is csrLayout.split into the store (a view of packed for one KV
// head).
func (s *csrStore) split(l csrLayout, packed []int32) (rp, qi []int32) {
	if l.Hkv == 1 {
		return packed[:l.RowCap+1], packed[l.RowCap+1 : l.RowCap+1+l.Stride]
	}
	s.rp, s.qi = growInt32(s.rp, l.Hkv*(l.RowCap+1)), growInt32(s.qi, l.Hkv*l.Stride)
	l.splitInto(s.rp, s.qi, packed)
	return s.rp, s.qi
}

// compact is compactRowPtr into the store: the row pointers of total rows
// per head, false when a spare row is not empty padding.
func (s *csrStore) compact(rp []int32, hkv, capRows, total int) ([]int32, bool) {
	if capRows == total {
		return rp, true
	}
	s.rpc = growInt32(s.rpc, hkv*(total+1))
	for h := 0; h < hkv; h++ {
		src := rp[h*(capRows+1) : (h+1)*(capRows+1)]
		for r := total + 1; r <= capRows; r++ {
			if src[r] != src[total] {
				return nil, false
			}
		}
		copy(s.rpc[h*(total+1):], src[:total+1])
	}
	return s.rpc, true
}

// growInt32 returns n elements of buf's storage, grown as needed.
func growInt32(buf []int32, n int) []int32 {
	if cap(buf) < n {
		return make([]int32, n)
	}
	return buf[:n]
}

// prefixSums reports whether cu holds non-negative, non-decreasing prefix
// sums ending at most at limit (limit < 0: no bound), validate.CuSeqlens's
// value rules.
func prefixSums(cu []int32, limit int) bool {
	return len(cu) > 0 && validate.PrefixSumsBreak(cu) < 0 && (limit < 0 || int(cu[len(cu)-1]) <= limit)
}

// cuSeqlensOK is validate.CuSeqlens's rules without their messages: an
// int32 [B + 1] tensor of prefix sums ending at most at limit.
func cuSeqlensOK(t *tensor.Dense, limit int) bool {
	return t.Dtype() == tensor.Int32 && t.Dims() == 1 && prefixSums(validate.Int32s(t), limit)
}

// ---- casts ----

func (op *castOp) stage() *hostStage { return &op.host }

func (op *castOp) hostRun(in []*tensor.Dense) (*tensor.Dense, bool) {
	x := in[0]
	if x.Dtype() != op.from || !x.Shape().Eq(op.shape) {
		return nil, false
	}
	out := op.host.out.view(op.to, op.shape)
	if op.to == BFloat16 {
		lowp.EncodeBF16Workers(validate.Backing[lowp.BFloat16](out), validate.Backing[float32](x), 0)
	} else {
		lowp.DecodeBF16Workers(validate.Backing[float32](out), validate.Backing[lowp.BFloat16](x), 0)
	}
	return out, true
}

// ---- DecodeSchedule ----

// decodeSchedHost is the decode schedule node's host storage on the CUDA
// path: the schedule its runs build into.
type decodeSchedHost struct {
	hostStage
	sched plan.DecodeSchedule
}

func (op *decodeSchedOp) stage() *hostStage { return &op.host.hostStage }

func (op *decodeSchedOp) hostRun(in []*tensor.Dense) (*tensor.Dense, bool) {
	su := in[1]
	if su.Dtype() != tensor.Int32 {
		return nil, false
	}
	used := validate.Int32s(su)
	s, err := plan.BuildDecodeSchedule(&op.host.sched, used, op.l.p)
	if err != nil {
		return nil, false
	}
	out := op.host.out.view(tensor.Int32, tensor.Shape{op.l.len()})
	v := validate.Int32s(out)
	op.l.packInto(v, s)
	op.remember(v, used)
	return out, true
}

// ---- WritePagedKV ----

// writeKVHost is the cache write node's host storage on the CUDA path
// (graph_cuda_writekv.go): the host copies of the new rows, the page table
// and seqused_k, and the cache row of each new row. The cache itself stays
// on the device.
type writeKVHost struct {
	mu         sync.Mutex
	nw, pt, su hostValue
	dst        []int
}

// rows checks the host inputs of a cache write of a cache of dtype dt and
// shape cs as the node's Do does and returns the cache row of head 0 of
// each new row (storage the node keeps), ok false when a check fails.
func (op *writePagedKVOp) rows(dt tensor.Dtype, cs tensor.Shape, nw, pt, su *tensor.Dense) (dst []int, ok bool) {
	if dt != op.dt || nw.Dtype() != op.dt || pt.Dtype() != tensor.Int32 || su.Dtype() != tensor.Int32 || pt.Dims() != 2 || su.Dims() != 1 {
		return nil, false
	}
	want := op.cacheShape
	numPages, d := want[0], want[3]
	hkv, ps := op.layout.dims(want)
	batch, cols := pt.Shape()[0], pt.Shape()[1]
	if !cs.Eq(want) || su.Shape()[0] != batch || !nw.Shape().Eq(tensor.Shape{batch * op.seqlenQ, hkv, d}) {
		return nil, false
	}
	n := batch * op.seqlenQ
	if cap(op.host.dst) < n {
		op.host.dst = make([]int, n)
	}
	dst = op.host.dst[:n]
	return dst, writeRows(dst, validate.Int32s(pt), validate.Int32s(su), op.seqlenQ, cols, ps, hkv, numPages, op.layout)
}

// writeRows sets dst[b*seqlenQ+i], the cache row of head 0 of new row i of
// sequence b, from the page table ptv ([B, cols]) and seqused_k (used),
// false when a position or a page is out of range (WritePagedKV's checks).
func writeRows(dst []int, ptv, used []int32, seqlenQ, cols, ps, hkv, numPages int, l PagedLayout) bool {
	for b := range used {
		for i := 0; i < seqlenQ; i++ {
			pos := int(used[b]) - seqlenQ + i
			if pos < 0 || pos >= cols*ps {
				return false
			}
			page := int(ptv[b*cols+pos/ps])
			if page < 0 || page >= numPages {
				return false
			}
			dst[b*seqlenQ+i] = kvRow(l, page, pos%ps, hkv, ps)
		}
	}
	return true
}

// ---- K2QCSR ----

// csrHost is the CSR build node's host storage on the CUDA path.
type csrHost struct {
	hostStage
	csr     plan.CSR
	scratch plan.CSRBuildScratch
}

func (op *csrOp) stage() *hostStage { return &op.host.hostStage }

func (op *csrOp) hostRun(in []*tensor.Dense) (*tensor.Dense, bool) {
	l := op.l
	q2k, cq, ck := in[0], in[1], in[2]
	if q2k.Dtype() != tensor.Int32 || !cuSeqlensOK(cq, l.TotalQ) || !cuSeqlensOK(ck, -1) {
		return nil, false
	}
	cuQ, cuK := validate.Int32s(cq), validate.Int32s(ck)
	if total, err := plan.CountRows(cuK, l.BlkKV); err != nil || total > l.RowCap {
		return nil, false
	}
	csr, err := plan.BuildK2QCSRInto(&op.host.scratch, &op.host.csr, validate.Int32s(q2k), l.Hkv, l.TotalQ, l.TopK, cuQ, cuK, l.BlkKV)
	if err != nil {
		return nil, false
	}
	out := op.host.out.view(tensor.Int32, tensor.Shape{l.Hkv, l.width()})
	l.pack(validate.Int32s(out), csr)
	return out, true
}

// ---- PackK2QCSR ----

func (op *packCSROp) stage() *hostStage { return &op.host }

func (op *packCSROp) hostRun(in []*tensor.Dense) (*tensor.Dense, bool) {
	l := op.l
	rp, qi := in[0], in[1]
	if rp.Dtype() != tensor.Int32 || qi.Dtype() != tensor.Int32 || rp.DataSize() != l.Hkv*(l.RowCap+1) || qi.DataSize() != l.Hkv*l.Stride {
		return nil, false
	}
	out := op.host.out.view(tensor.Int32, tensor.Shape{l.Hkv, l.width()})
	l.packParts(validate.Int32s(out), validate.Int32s(rp), validate.Int32s(qi))
	return out, true
}

// ---- FwdSchedule ----

// schedHost is the forward schedule node's host storage on the CUDA path.
type schedHost struct {
	hostStage
	rows    plan.Rows
	csr     csrStore
	sched   plan.FwdSchedule
	scratch plan.FwdScheduleScratch
}

func (op *schedOp) stage() *hostStage { return &op.host.hostStage }

func (op *schedOp) hostRun(in []*tensor.Dense) (*tensor.Dense, bool) {
	l, h := op.s.csr, &op.host
	packed, cq, ck := in[0], in[1], in[2]
	if packed.Dtype() != tensor.Int32 || packed.DataSize() < l.Hkv*l.width() || !cuSeqlensOK(cq, l.TotalQ) || !cuSeqlensOK(ck, -1) {
		return nil, false
	}
	cuQ, cuK := validate.Int32s(cq), validate.Int32s(ck)
	if total, err := plan.CountRows(cuK, l.BlkKV); err != nil || total > l.RowCap {
		return nil, false
	}
	if h.rows.Reset(cuK, l.BlkKV) != nil {
		return nil, false
	}
	rp, qi := h.csr.split(l, validate.Int32s(packed))
	rpc, ok := h.csr.compact(rp, l.Hkv, l.RowCap, h.rows.Total)
	if !ok {
		return nil, false
	}
	csr := plan.CSR{Hkv: l.Hkv, TotalRows: h.rows.Total, Stride: l.Stride, RowPtr: rpc, QIdx: qi}
	built, err := plan.BuildFwdScheduleInto(&h.scratch, &h.sched, &csr, &h.rows, cuQ, op.s.params())
	if err != nil {
		return nil, false
	}
	out := h.out.view(tensor.Int32, tensor.Shape{op.s.len()})
	op.s.pack(validate.Int32s(out), built)
	return out, true
}

package op

import (
	"sync"

	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/selection"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// The host work of the nodes that run on the host on the CUDA path
// (graph_cuda.go's hostCUDADo: DecodeSchedule, CastToBF16, CastFromBF16,
// K2QCSR, PackK2QCSR, FwdSchedule, BlockScores, TopKBlocks; and
// WritePagedKV's checks, whose write is graph_cuda_writekv.go's). Such a
// node keeps a hostStage: the host copies of its inputs and the host
// storage of its value, reused by every run of the same shapes, so that a
// warm run allocates nothing. Its hostRun is the node's CPU Do (the same
// checks, formatting a message only on failure, and the same errors) on
// that storage.

// hostRunner is a node whose CUDA path runs its host work on a hostStage.
type hostRunner interface {
	stage() *hostStage
	// hostRun computes the node's value from the host copies in, into
	// storage the node keeps, or returns the CPU Do's error.
	hostRun(in []*tensor.Dense) (*tensor.Dense, error)
}

// maxHostInputs bounds the inputs of a hostRunner (BlockScores has 4).
const maxHostInputs = 4

// hostStage is a hostRunner's host storage: the copies of its inputs, its
// value, and whatever else the node's host work keeps (in the node).
type hostStage struct {
	mu  sync.Mutex // one run at a time
	in  []hostValue
	ts  [maxHostInputs]*tensor.Dense // this run's host inputs (here: a local array would escape through the interface call)
	out hostValue
}

// csrStore is the storage of a packed CSR value viewed as a plan.CSR
// (csrView): row pointers and query indices per KV head, the row pointers
// compacted to the rows the sequences have, and the CSR check's scratch.
// The zero value is ready to use; a node keeps one across runs.
type csrStore struct {
	rp, qi []int32
	rpc    []int32
	check  plan.CSRScratch
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

// pair is split as the csrPair of layout l.
func (s *csrStore) pair(l csrLayout, packed []int32) csrPair {
	rp, qi := s.split(l, packed)
	return csrPair{rp: rp, qi: qi, hkv: l.Hkv, capRows: l.RowCap, stride: l.Stride}
}

// growInt32 returns n elements of buf's storage, grown as needed.
func growInt32(buf []int32, n int) []int32 {
	if cap(buf) < n {
		return make([]int32, n)
	}
	return buf[:n]
}

func (op *castOp) stage() *hostStage { return &op.host }

func (op *castOp) hostRun(in []*tensor.Dense) (*tensor.Dense, error) {
	x, err := op.check(in[0])
	if err != nil {
		return nil, err
	}
	out := op.host.out.view(op.to, op.shape)
	op.convert(out, x)
	return out, nil
}

// decodeSchedHost is the decode schedule node's host storage: the
// schedule its runs build into.
type decodeSchedHost struct {
	hostStage
	sched plan.DecodeSchedule
}

func (op *decodeSchedOp) stage() *hostStage { return &op.host.hostStage }

func (op *decodeSchedOp) hostRun(in []*tensor.Dense) (*tensor.Dense, error) {
	return op.build(&op.host, in[1])
}

// writeKVHost is the cache write node's host storage on the CUDA path
// (graph_cuda_writekv.go): the host copies of the new rows, the page table
// and seqused_k, and the cache row of each new row. The cache itself stays
// on the device.
type writeKVHost struct {
	mu         sync.Mutex
	nw, pt, su hostValue
	dst        []int
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

// csrHost is the storage of the CSR build node's runs.
type csrHost struct {
	hostStage
	csr     plan.CSR
	scratch plan.CSRBuildScratch
}

func (op *csrOp) stage() *hostStage { return &op.host.hostStage }

func (op *csrOp) hostRun(in []*tensor.Dense) (*tensor.Dense, error) {
	return op.build(&op.host, in[0], in[1], in[2])
}

func (op *packCSROp) stage() *hostStage { return &op.host }

func (op *packCSROp) hostRun(in []*tensor.Dense) (*tensor.Dense, error) {
	return op.build(&op.host, in[0], in[1])
}

// schedHost is the storage of the forward schedule node's runs.
type schedHost struct {
	hostStage
	rows    plan.Rows
	csr     csrStore
	sched   plan.FwdSchedule
	scratch plan.FwdScheduleScratch
}

func (op *schedOp) stage() *hostStage { return &op.host.hostStage }

func (op *schedOp) hostRun(in []*tensor.Dense) (*tensor.Dense, error) {
	return op.build(&op.host, in[0], in[1], in[2])
}

// blockScoresHost is the storage of the block scoring node's runs on the
// CUDA path: the validated request and the scorer's memory.
type blockScoresHost struct {
	hostStage
	s       selection.Scorer
	scratch selection.Scratch
}

func (op *blockScoresOp) hostRun(in []*tensor.Dense) (*tensor.Dense, error) {
	h := &op.host
	if err := op.check(&h.s, in[0], in[1], in[2], in[3]); err != nil {
		return nil, err
	}
	out := h.out.view(tensor.Float32, tensor.Shape{op.hkv, op.totalQ, op.maxBlocks})
	h.s.RunInto(validate.Backing[float32](out), &h.scratch)
	h.s = selection.Scorer{} // the node keeps no reference to this run's inputs
	return out, nil
}

func (op *blockScoresOp) stage() *hostStage { return &op.host.hostStage }

func (op *topKOp) stage() *hostStage { return &op.host }

func (op *topKOp) hostRun(in []*tensor.Dense) (*tensor.Dense, error) {
	return op.run(&op.host, in[0])
}

package op

import (
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/decode"
	"gorgonia.org/tensor"
)

// decodeHost is a decode node's host side on the CUDA path (graph_cuda.go,
// build tag cuda), kept in the node across runs so that a warm run
// allocates nothing: the host copies of its metadata inputs (page_table,
// seqused_k, schedule, q2k_indices), which validation reads while the
// kernels read the device values, and the validated metadata and schedule
// (their slices alias the copies). Guarded by the node's attnState mutex.
type decodeHost struct {
	pt, su, sv, q2k hostInt32
	meta            decode.Meta
	sched           plan.DecodeSchedule
}

// hostInt32 is the host copy of one int32 input: storage grown to the
// largest size seen and a tensor header over it, both reused while the
// input's shape stays the same.
type hostInt32 struct {
	buf ownedBuf[int32]
	t   *tensor.Dense
}

// view returns a tensor of shape s over the storage, whose contents the
// caller overwrites: the previous run's header when its shape is s.
func (h *hostInt32) view(s tensor.Shape) *tensor.Dense {
	if h.t == nil || !h.t.Shape().Eq(s) {
		h.t = h.buf.dense(s.Clone()...)
	}
	return h.t
}

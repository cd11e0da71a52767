package op

import (
	"reflect"

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
	pt, su, sv, q2k hostValue
	meta            decode.Meta
	sched           plan.DecodeSchedule
}

// hostValue is the host copy of one input: a tensor of the input's dtype
// and shape, reused while they stay the same (a warm run allocates
// nothing).
type hostValue struct{ t *tensor.Dense }

// view returns a tensor of dtype dt and shape s whose contents the caller
// overwrites: the previous run's when its dtype and shape are dt and s.
func (h *hostValue) view(dt tensor.Dtype, s tensor.Shape) *tensor.Dense {
	if h.t == nil || h.t.Dtype() != dt || !h.t.Shape().Eq(s) {
		n := s.TotalSize()
		h.t = tensor.New(tensor.WithShape(s.Clone()...), tensor.WithBacking(reflect.MakeSlice(reflect.SliceOf(dt.Type), n, n).Interface()))
	}
	return h.t
}

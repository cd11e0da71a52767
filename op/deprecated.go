package op

import (
	"github.com/sparseattn/msa/kernels/comm"
	"gorgonia.org/tensor"
)

// The names below are the eager functions' earlier names, which followed the
// reference's Python interface rather than the package's rule (an eager
// function is its graph constructor's name + Func). Each forwards to the
// function that replaced it; errors name the new function.

// SparseAttenFunc is the earlier name of SparseAttentionFunc.
//
// Deprecated: use SparseAttentionFunc.
func SparseAttenFunc(q, k, v, k2qRowPtr, k2qQIndices tensor.Tensor, topK int, args SparseArgs) (*Result, error) {
	return SparseAttentionFunc(q, k, v, k2qRowPtr, k2qQIndices, topK, args)
}

// SparseAttenNVFP4KVFunc is the earlier name of SparseAttentionNVFP4KVFunc.
//
// Deprecated: use SparseAttentionNVFP4KVFunc.
func SparseAttenNVFP4KVFunc(q, k, v, kScale, vScale, kGlobal, vGlobal, k2qRowPtr, k2qQIndices tensor.Tensor, topK int, args SparseArgs) (*Result, error) {
	return SparseAttentionNVFP4KVFunc(q, k, v, kScale, vScale, kGlobal, vGlobal, k2qRowPtr, k2qQIndices, topK, args)
}

// SparseAttenBackwardFunc is the earlier name of SparseAttentionBackwardFunc.
//
// Deprecated: use SparseAttentionBackwardFunc.
func SparseAttenBackwardFunc(q, k, v, out, lse, dOut, dLSE, k2qRowPtr, k2qQIndices tensor.Tensor, topK int, args SparseArgs) (*Gradients, error) {
	return SparseAttentionBackwardFunc(q, k, v, out, lse, dOut, dLSE, k2qRowPtr, k2qQIndices, topK, args)
}

// BuildK2QCSR is the earlier name of K2QCSRFunc.
//
// Deprecated: use K2QCSRFunc.
func BuildK2QCSR(q2kIndices, cuSeqlensQ, cuSeqlensK tensor.Tensor, blkKV int) (rowPtr, qIndices *tensor.Dense, err error) {
	return K2QCSRFunc(q2kIndices, cuSeqlensQ, cuSeqlensK, blkKV)
}

// PrepareSparseFwdSchedule is the earlier name of FwdScheduleFunc.
//
// Deprecated: use FwdScheduleFunc.
func PrepareSparseFwdSchedule(k2qRowPtr, k2qQIndices tensor.Tensor, args ScheduleArgs) (*Schedule, error) {
	return FwdScheduleFunc(k2qRowPtr, k2qQIndices, args)
}

// SparseDecodeAttenFunc is the earlier name of DecodeAttentionFunc.
//
// Deprecated: use DecodeAttentionFunc.
func SparseDecodeAttenFunc(q, k, v, q2kIndices tensor.Tensor, args DecodeArgs) (*Result, error) {
	return DecodeAttentionFunc(q, k, v, q2kIndices, args)
}

// CPSparsePrefill is the earlier name of ContextParallelPrefillFunc.
//
// Deprecated: use ContextParallelPrefillFunc.
func CPSparsePrefill(c comm.Comm, q, k, v, q2k tensor.Tensor, args CPPrefillArgs) (*Result, *CPPrefillStats, error) {
	return ContextParallelPrefillFunc(c, q, k, v, q2k, args)
}

// AppendPagedKV is the earlier name of WritePagedKVFunc.
//
// Deprecated: use WritePagedKVFunc.
func AppendPagedKV(cache, newKV, pageTable, cuSeqlensNew, seqUsedK tensor.Tensor, layout PagedLayout) error {
	return WritePagedKVFunc(cache, newKV, pageTable, cuSeqlensNew, seqUsedK, layout)
}

package op

import (
	"gorgonia.org/tensor"
)

// SparseArgs holds the keyword arguments of SparseAttentionFunc and
// SparseAttentionNVFP4KVFunc (the reference's names in snake case are given in
// each comment). Zero values select the reference's defaults.
type SparseArgs struct {
	// CuSeqlensQ, CuSeqlensK: int32 [B+1] prefix sums (cu_seqlens_q/k).
	// In paged mode CuSeqlensK carries the effective lengths used for the
	// CSR row numbering.
	CuSeqlensQ, CuSeqlensK tensor.Tensor
	// MaxSeqlenQ, MaxSeqlenK (max_seqlen_q/k): 0 derives them from the
	// sequence lengths; a positive value smaller than an actual length is
	// an error.
	MaxSeqlenQ, MaxSeqlenK int
	// BlkKV (blk_kv): keys per sparse block; 0 means 128. At most 128.
	BlkKV int
	// Causal applies bottom-right aligned causal masking.
	Causal bool
	// SoftmaxScale (softmax_scale): 0 means DefaultSoftmaxScale(D) =
	// 1/sqrt(D).
	SoftmaxScale float64
	// Temperature (lse_temperature_scale, T): 0 means 1. The graph
	// option of the same name sets it on a SparseAttention node.
	Temperature float64
	// ReturnTemperatureLSE (return_temperature_lse) also returns
	// logsumexp(s/T) in Result.TemperatureLSE. The natural-log LSE is
	// always returned: return_softmax_lse has no Go counterpart.
	ReturnTemperatureLSE bool
	// PartialDtype (partial_dtype): float32, BFloat16 (default), Float16 or
	// Float8E4M3FN.
	PartialDtype tensor.Dtype
	// PageTable (page_table): int32 [B, max_num_pages_per_seq] selects
	// paged K/V, [num_pages, Hkv, page_size, D] (HND) or, with KVLayout
	// NHD, [num_pages, page_size, Hkv, D].
	PageTable tensor.Tensor
	// KVLayout (FlashInfer's kv_layout) is the paged K/V layout: HND (the
	// zero value, the reference's) or NHD. NHD requires PageTable.
	KVLayout PagedLayout
	// SeqUsedK (seqused_k): int32 [B] effective key lengths; paged only.
	SeqUsedK tensor.Tensor
	// Schedule is a prebuilt forward schedule (validated before use).
	Schedule *Schedule
	// Workers (usable_SM_count) caps the goroutines and sizes the schedule's
	// chunks; <= 0 uses runtime.GOMAXPROCS(0).
	Workers int
	// QKDtype, PVDtype (qk_dtype, pv_dtype): MMA operand dtypes, BFloat16
	// or Float8E4M3FN; the zero value selects the reference's default.
	// Not accepted by the NVFP4 entry point.
	QKDtype, PVDtype tensor.Dtype
	// Out and OutLSE (FlashInfer's out= and lse=), when set, receive the
	// output and the natural-log LSE instead of tensors allocated by the
	// call, and are then Result.Out and Result.LSE: Out a contiguous
	// BFloat16 [total_q, Hq, D] tensor, OutLSE a contiguous float32
	// [total_q, Hq], neither a view nor sharing storage with an input or
	// with each other. A caller that reuses them across calls spares an
	// allocation per call and, as large fresh allocations are faulted in
	// page by page, its cost: at 32K tokens and 16 heads the output is 128
	// MiB. The float32 path (float32 q, k, v) and the backward do not take
	// them.
	Out, OutLSE *tensor.Dense
}

// Result holds the outputs of an attention call. Out and LSE are always
// set; TemperatureLSE is nil unless requested (ReturnTemperatureLSE).
type Result struct {
	// Out is [total_q, Hq, D] BFloat16.
	Out *tensor.Dense
	// LSE is the natural-log log-sum-exp [total_q, Hq] float32.
	LSE *tensor.Dense
	// TemperatureLSE is logsumexp(s/T) [total_q, Hq] float32.
	TemperatureLSE *tensor.Dense
}

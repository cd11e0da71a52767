// Package op provides block-sparse attention and paged decode attention as
// Gorgonia Ops, graph constructors in Gorgonia's style, and an eager,
// operator-level API that mirrors MiniMax's SM100 sparse-attention interface
// (sparse_atten_func, sparse_atten_nvfp4_kv_func, sparse_decode_atten_func,
// SparseDecodePagedAttentionWrapper).
//
// A graph builds the k2q CSR from q2k_indices (K2QCSR), then the forward
// schedule (FwdSchedule), then the attention node (SparseAttention); LSE and
// TemperatureLSE read the attention node's side results without computing
// anything twice. Every input is validated with the reference's checks plus
// index range checks; bad input returns an error naming the argument, never
// a panic.
//
// The package is thin: planning lives in kernels/plan, execution in
// kernels/attn and kernels/tile, numerics in kernels/lowp.
package op

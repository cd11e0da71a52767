// Package decode is the implementation of op's paged decode behind
// DecodeAttentionFunc, DecodeWrapper, the DecodeAttention and
// DecodeSchedule nodes and CPDecodeWrapper: the validation of the decode
// metadata (page table, seqused_k, sparse block lists, split and size
// limits, the workspace bound) into a Meta, the plan snapshot and the
// stale-plan check of the wrapper, and the float32 path that runs decode
// on package grad's float32 forward (NHD pages copied into HND order). The
// public argument types, the q/k/v checks and the low-precision execution
// stay in op. It depends on op/internal/validate, op/internal/blocks and
// the kernels (plan, attn, grad); it must not depend on package op, on
// Gorgonia's graph or on the CUDA path.
package decode

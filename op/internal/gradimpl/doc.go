// Package gradimpl runs a validated float32 sparse attention call on
// package grad's kernels: the forward (O, the LSE the backward needs, the
// temperature LSE), the backward (dQ, dK, dV from dO and dLSE) and the
// pool and workspace they share. It is what the float32 path of
// SparseAttentionFunc, SparseAttentionBackwardFunc and the gradients of
// the SparseAttention node execute; op validates the call (building a
// Call) and wraps the results in its types, and the graph side of the
// gradients (SymDiff, DoDiff, the LSE gradient) stays with op's nodes. It
// depends on op/internal/validate and the kernels (attn, grad); it must
// not depend on package op, on the other op/internal packages or on
// Gorgonia.
package gradimpl

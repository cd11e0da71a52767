// Package blocks builds the block lists of attention that attends to every
// key (dense prefill, dense decode on the float32 path, the chunked prefill
// of PagedPrefillWrapper): q2k_indices that select, for each query, every
// block it can see. It depends on op/internal/validate only; it must not
// depend on package op, on the kernels or on Gorgonia.
package blocks

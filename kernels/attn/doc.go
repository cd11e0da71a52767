// Package attn executes the attention algorithms on the CPU: sparse prefill
// partials driven by the forward schedule's work items, the combine of
// per-slot partials, and paged decode with split-KV.
//
// The package takes plain slices (storage bits of BF16 / FP8 / NVFP4 tensors
// and int32 metadata) that the op package has already validated; it never
// allocates in the steady state when given a reused Workspace. Every work
// item runs on a goroutine of a fixed pool and writes a disjoint part of the
// output, so results are bit-identical for any worker count.
//
// The block-level arithmetic lives in package tile; this package owns
// addressing (dense and paged K/V), masking limits, dtype decoding and the
// epilogues (partial stores, combine).
package attn

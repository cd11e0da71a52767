// Package grad holds the float32 CPU kernels for training through
// block-sparse attention: a float32 forward that also returns the
// natural-log LSE, and the backward that turns dO (and optionally dLSE)
// into dQ, dK and dV.
//
// A Problem describes one call with the shapes and the planning data of the
// forward (the k2q CSR of package plan, cu_seqlens, an optional page table).
// A Workspace runs calls on an attn.Pool and keeps its buffers between
// calls.
//
// # Definitions
//
// For query row q (batch-local i in sequence b) and query head hq, with KV
// head h = hq / (HQ/Hkv), the visible keys are the tokens of the blocks q
// selected for h (the CSR rows that list q), minus tokens t >= seqlen_k_b
// and, with causal masking, t > i + seqlen_k_b - seqlen_q_b (bottom-right
// alignment), exactly as in the forward of package attn:
//
//	s_t = Scale * (q . k_t)
//	LSE = ln sum_t exp(s_t)            (-inf when nothing is visible)
//	P_t = exp(s_t - LSE),  O = sum_t P_t v_t    (O = 0 when nothing is visible)
//
// Given dO and dLSE (the gradients of a scalar loss with respect to O and
// LSE), the backward computes, with Delta = sum_c dO_c O_c,
//
//	dP_t = dO . v_t,   dS_t = P_t (dP_t - Delta + dLSE)
//	dQ  = Scale sum_t dS_t k_t
//	dK_t += Scale dS_t q,   dV_t += P_t dO     (summed over every (q, hq))
//
// which is the exact gradient of the loss with respect to Q, K and V
// (d LSE / d s_t = P_t). Rows that see no key (LSE = -inf) receive and pass
// no gradient; so do rows whose given LSE is not finite.
//
// # Execution
//
// The backward runs in two passes over the CSR, both free of atomics:
//
//   - dK/dV: one work item per (CSR row, KV head), i.e. per KV block; it
//     recomputes P and dS for every query (and query head of the group)
//     that selected the block, in tiles of up to 64 rows, and accumulates
//     the block's dK and dV in worker-local buffers. Dense K/V: the item
//     writes its block's rows of dK/dV (blocks are disjoint). Paged K/V:
//     the item writes its block into a staging buffer, then a second step
//     reduces the staging rows into the page pool, one page at a time, in
//     ascending (sequence, page-table column) order, so pages shared
//     between sequences accumulate deterministically.
//   - dQ: one work item per chunk of queries; each (query, KV head) visits
//     its selected blocks in ascending block order.
//
// Every output element is written by one work item in a fixed order, so
// results are bit-identical across runs and for any number of workers.
// The forward is query-major like the dQ pass and shares its score code
// (online softmax over the query's blocks in ascending order).
//
// The float32 building blocks (matmul.go, and the exponentials of
// scores.go) are plain Go loops with AVX2+FMA versions (vec_amd64.s)
// selected through kernels/tile's active tier.
package grad

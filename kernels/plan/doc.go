// Package plan is the host-side planning shared by the CPU and CUDA paths of
// the block-sparse and paged decode attention operators (docs/contract.md
// §2, §3, §7, §8 and §9). It is pure Go (stdlib only) and never panics on bad input:
// every rejection is an error that starts with "plan: " and names the
// argument (with the reference's names: q2k_indices, cu_seqlens_q,
// k2q_row_ptr, schedule.split_counts, seqused_k, ...), the expected and the
// received value.
//
// All arrays are flat row-major []int32 laid out exactly like the
// reference's tensors.
//
//   - Rows / NewRows: the block-major CSR row numbering (contract §2).
//   - CSR / BuildK2QCSR / ValidateCSR / ValidateCSRInto: the k2q CSR, the
//     inverse of q2k_indices, and the checks for a caller-supplied CSR
//     (ValidateCSRInto with a reusable CSRScratch, allocating nothing).
//   - FwdSchedule / BuildFwdSchedule / ValidateFwdSchedule: the forward work
//     items (contract §3) with deterministic slots: the slot of a (query, head)'s
//     block is its rank among that query's selected blocks in ascending block
//     order.
//   - DecodeSchedule / BuildDecodeSchedule / ValidateDecodeSchedule: the
//     FlashInfer-style split-KV decode schedule (contract §7), with a fixed
//     capacity (CUDA-graph-like) mode, a batch-invariant fixed-split mode and
//     stale-plan detection.
//   - PathCosts / TileVerdict: the per-tile choice between the query-major
//     and KV-major prefill paths (pathchoice.go), one model that the CPU
//     and GPU paths weigh with their own constants and row groups.
//
// Builders take an optional dst whose buffers are reused when their capacity
// fits (graph ops reuse them between runs). Validators check everything an
// executor indexes with, so a schedule that validates can be run without
// further bounds reasoning.
//
// It must not depend on any package of this module, so that the CPU path
// (kernels/attn) and the GPU launch layer (cuda) share its structures and
// its validation as they are.
package plan

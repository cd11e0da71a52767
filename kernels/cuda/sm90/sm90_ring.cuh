// sm90_ring.cuh - the mbarrier ring arithmetic of the sm_90a producer /
// consumer kernels: which completion of a slot's barrier a stage waits for,
// and the per-warp release of a slot. A ring of n slots hands stage k to
// slot k % n; the slot's full barrier completes once per use, so stage k
// waits for its (k / n)-th completion (parity (k / n) & 1), and the
// producer may refill the slot for stage k >= n once the empty barrier has
// completed for stage k - n (its (k / n - 1)-th completion).
// sm90_qfwd.cu, sm90_fwd2.cu and sm90_decode.cu use it (a single buffer, such
// as a Q buffer, is a ring of one slot).
#ifndef MSA_SM90_RING_CUH
#define MSA_SM90_RING_CUH

#include "sm90/sm90_common.cuh"

namespace msa {
namespace sm90 {

// Parity of the full barrier's completion that lands stage k in a ring of n.
__device__ __forceinline__ uint32_t ring_full_parity(int k, int n) { return (uint32_t)(k / n) & 1u; }
// Parity of the empty barrier's completion that frees the slot for stage k >= n.
__device__ __forceinline__ uint32_t ring_empty_parity(int k, int n) { return (uint32_t)(k / n - 1) & 1u; }
// The same for an unsigned stage counter (sm90_decode.cu), whose division
// by a constant ring size needs no sign fix-up.
__device__ __forceinline__ uint32_t ring_full_parity(uint32_t k, uint32_t n) { return (k / n) & 1u; }
__device__ __forceinline__ uint32_t ring_empty_parity(uint32_t k, uint32_t n) { return (k / n - 1) & 1u; }

// One warp's arrive on an empty barrier whose count is the number of
// consumer warps: every lane's reads of the slot are done (__syncwarp),
// lane 0 arrives.
__device__ __forceinline__ void ring_warp_release(uint32_t bar) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(bar);
}

}  // namespace sm90
}  // namespace msa

#endif  // MSA_SM90_RING_CUH

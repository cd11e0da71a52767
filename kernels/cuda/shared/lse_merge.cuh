// lse_merge.cuh - the statistics of a merge of partials by their LSEs, one
// warp per output row: m = the largest of the n partials' LSEs (0 when all
// are -inf, so that exp(lse - m) is 0 and not NaN for an empty row) and
// S = sum over the partials of exp(lse - m), both warp-uniform. A merged
// row is sum_s exp(lse_s - m) / S * O_s with LSE m + log(S). Every merge
// kernel (the portable combine, the fused merges of sm90_fwd2 and
// sm90_decode_pipe) takes its statistics from here, so the float32
// arithmetic the GPU check's error model assumes for the combine (lane l
// sums the partials l, l + 32, ... in order, then a 32-lane xor tree) is
// the same in all of them.
#ifndef MSA_LSE_MERGE_CUH
#define MSA_LSE_MERGE_CUH

#include "shared/msa_common.cuh"

namespace msa {

// lse_at(s) loads the LSE of partial s (0 <= s < n); each lane loads its
// partials twice (once per pass), as a partial's LSE is read from global
// memory and n is unbounded.
template <class LseAt>
__device__ __forceinline__ void warp_lse_stats(const LseAt& lse_at, int n, int lane, float& m, float& S) {
    float mx = -INFINITY;
    for (int s = lane; s < n; s += 32) mx = fmaxf(mx, lse_at(s));
    mx = warp_max(mx);
    if (mx == -INFINITY) mx = 0.f;
    float sum = 0.f;
    for (int s = lane; s < n; s += 32) sum += expf(lse_at(s) - mx);
    m = mx;
    S = warp_sum(sum);
}

// The merged temperature LSE of n partials with statistics m, S (from
// warp_lse_stats): -inf when no partial saw a key (n = 0, or S not
// positive), +inf when some partial's is +inf, else m + log S. A partial's
// temperature LSE is +inf only when its value (scores over a small
// temperature) lies beyond float32, and the merge, at least as large,
// rounds to +inf too; S is then NaN (exp(inf - inf)), which must not read
// as "no key". The CPU path's merge (kernels/attn mergeTLSE) has the same
// rule.
__device__ __forceinline__ float merged_tlse(int n, float m, float S) {
    if (n == 0) return -INFINITY;
    if (m == INFINITY) return INFINITY;
    return S > 0.f ? m + logf(S) : -INFINITY;
}

}  // namespace msa

#endif  // MSA_LSE_MERGE_CUH

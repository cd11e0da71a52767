// combine.cu - merge of per-slot (sparse prefill, mode 0) or per-split
// (decode, mode 1) partials into the BF16 output and natural-log LSE
// (SPEC 5). One warp per (query row, query head); lane owns D/32 contiguous
// columns. Empty rows (n = 0, S = 0 or NaN) give O = 0, LSE = -inf.
#include "msa_common.cuh"

namespace msa {

struct CombineRows {
    const MsaCombineParams& p;
    int q, hq;
    __device__ __forceinline__ long long row(int s) const {
        if (p.mode == 0) return ((long long)s * p.total_q + q) * p.num_heads_q + hq;
        const int b = q / p.seqlen_q, i = q % p.seqlen_q;
        return ((long long)reinterpret_cast<const int*>(p.o_indptr)[b] + (long long)s * p.q_stride + i) * p.num_heads_q + hq;
    }
};

// m = max LSE (0 when all are -inf), S = sum exp(LSE - m); warp-uniform results.
__device__ __forceinline__ void lse_stats(const float* lse, const CombineRows& rows, int n, float& m, float& S) {
    const int lane = threadIdx.x & 31;
    float mx = -INFINITY;
    for (int s = lane; s < n; s += 32) mx = fmaxf(mx, lse[rows.row(s)]);
    mx = warp_max(mx);
    if (mx == -INFINITY) mx = 0.f;
    float sum = 0.f;
    for (int s = lane; s < n; s += 32) sum += expf(lse[rows.row(s)] - mx);
    m = mx;
    S = warp_sum(sum);
}

template <int D>
__device__ __forceinline__ void combine_impl(const MsaCombineParams& p) {
    constexpr int E = D / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long gid = (long long)blockIdx.x * kWarps + warp;
    if (gid >= (long long)p.total_q * p.num_heads_q) return;
    const int q = (int)(gid / p.num_heads_q), hq = (int)(gid % p.num_heads_q);
    const CombineRows rows{p, q, hq};
    const int* counts = reinterpret_cast<const int*>(p.split_counts);
    int n = p.mode == 0 ? counts[(long long)q * p.num_heads_kv + hq / p.qhead_per_kv] : counts[q / p.seqlen_q];
    n = max(0, min(n, p.num_slots));
    const float* lse_p = reinterpret_cast<const float*>(p.lse_partial);
    __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(p.out) + gid * D + lane * E;

    float m = 0.f, S = 0.f;
    if (n > 0) lse_stats(lse_p, rows, n, m, S);
    if (n == 0 || !(S > 0.f)) {
#pragma unroll
        for (int e = 0; e < E; ++e) out[e] = __float2bfloat16_rn(0.f);
        if (lane == 0) reinterpret_cast<float*>(p.lse)[gid] = -INFINITY;
    } else {
        float o[E];
#pragma unroll
        for (int e = 0; e < E; ++e) o[e] = 0.f;
        const float invS = 1.f / S;
#pragma unroll 1
        for (int s = 0; s < n; ++s) {
            const long long r = rows.row(s);
            const float w = expf(lse_p[r] - m) * invS;
            if (w == 0.f) continue;  // empty slot: never touch its (possibly unset) O
#pragma unroll
            for (int e = 0; e < E; ++e) o[e] = fmaf(w, load_val(reinterpret_cast<const void*>(p.o_partial), r * D + lane * E + e, p.partial_dtype), o[e]);
        }
        const float osc = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
#pragma unroll
        for (int e = 0; e < E; ++e) out[e] = __float2bfloat16_rn(o[e] * osc);
        if (lane == 0) reinterpret_cast<float*>(p.lse)[gid] = m + logf(S);
    }
    if (p.tlse_partial && p.tlse) {
        float mt = 0.f, St = 0.f;
        if (n > 0) lse_stats(reinterpret_cast<const float*>(p.tlse_partial), rows, n, mt, St);
        if (lane == 0)
            reinterpret_cast<float*>(p.tlse)[gid] = (n == 0 || !(St > 0.f)) ? -INFINITY : mt + logf(St);
    }
}

}  // namespace msa

extern "C" __global__ void __launch_bounds__(msa::kThreads, 1) msa_combine_d128(const MsaCombineParams* __restrict__ p) {
    msa::combine_impl<128>(*p);
}
extern "C" __global__ void __launch_bounds__(msa::kThreads, 1) msa_combine_d64(const MsaCombineParams* __restrict__ p) {
    msa::combine_impl<64>(*p);
}
extern "C" __global__ void __launch_bounds__(msa::kThreads, 1) msa_combine_d256(const MsaCombineParams* __restrict__ p) {
    msa::combine_impl<256>(*p);
}

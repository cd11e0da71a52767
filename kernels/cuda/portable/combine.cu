// combine.cu - merge of per-slot (sparse prefill, mode 0) or per-split
// (decode, mode 1) partials into the BF16 output and natural-log LSE
// (docs/contract.md, section 5). One warp per (query row, query head). Memory-bound, so every
// partial row is read and every output row written in 16-byte vectors: lane l
// owns the E = 8 contiguous columns [8l, 8l+8) (E = 16 for e4m3 partials: one
// 16-byte load), i.e. one 16-byte load of a bf16 / f16 row (two of an f32
// row) and one 16-byte store of the bf16 output (two for e4m3); lanes
// l >= D/E idle in the O loop. Each lane accumulates its columns over the
// slots in slot order with one fma per slot, as the scalar form did, so the
// results are bitwise those of the one-column-per-step loop. Empty rows
// (n = 0, S = 0 or NaN) give O = 0, LSE = -inf. A partial or output pointer
// that is not 16-byte aligned takes a scalar path with the same arithmetic.
#include "shared/lse_merge.cuh"
#include "shared/tc_frag.cuh"  // msa_common.cuh + the E4M3 conversions without F64 emulation on sm_80

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

// m = max LSE (0 when all are -inf), S = sum exp(LSE - m) over the row's
// partials; warp-uniform results.
__device__ __forceinline__ void lse_stats(const float* lse, const CombineRows& rows, int n, float& m, float& S) {
    warp_lse_stats([&](int s) { return lse[rows.row(s)]; }, n, threadIdx.x & 31, m, S);
}

// E consecutive partial values of dtype DT at element offset idx, as floats
// (16-byte aligned vector loads through the read-only path: the partials are
// written by an earlier kernel and only read here).
template <int DT, int E>
__device__ __forceinline__ void load_vec(float (&f)[E], const void* src, long long idx) {
    if (DT == MSA_DT_F32) {
        const float4* v = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(src) + idx);
#pragma unroll
        for (int i = 0; i < E / 4; ++i) {
            const float4 x = __ldg(v + i);
            f[4 * i] = x.x; f[4 * i + 1] = x.y; f[4 * i + 2] = x.z; f[4 * i + 3] = x.w;
        }
    } else if (DT == MSA_DT_BF16 || DT == MSA_DT_F16) {
        const uint4* v = reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(src) + idx);
#pragma unroll
        for (int i = 0; i < E / 8; ++i) {
            const uint4 x = __ldg(v + i);
            const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                float2 t;
                if (DT == MSA_DT_BF16) t = unpack_bf16x2(w[k]);
                else t = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
                f[8 * i + 2 * k] = t.x; f[8 * i + 2 * k + 1] = t.y;
            }
        }
    } else {  // E4M3
        const uint4 x = __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const uint8_t*>(src) + idx));
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
            for (int b = 0; b < 4; ++b) f[4 * k + b] = tc::e4m3_to_f32_tc((w[k] >> (8 * b)) & 0xFFu);
    }
}

template <int D, int DT, bool kVec>
__device__ __forceinline__ void combine_t(const MsaCombineParams& p, long long gid, const CombineRows& rows, int n, float m,
                                          float S) {
    constexpr int E = kVec ? (DT == MSA_DT_E4M3 ? 16 : 8) : D / 32;  // columns per lane
    constexpr int L = D / E;                                         // lanes that own columns
    const int lane = threadIdx.x & 31;
    const bool owner = lane < L;
    const float* lse_p = reinterpret_cast<const float*>(p.lse_partial);
    __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(p.out) + gid * D + lane * E;
    float o[E];
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] = 0.f;
    const bool empty = n == 0 || !(S > 0.f);
    if (!empty && owner) {
        const float invS = 1.f / S;
#pragma unroll 1
        for (int s = 0; s < n; ++s) {
            const long long r = rows.row(s);
            const float w = expf(lse_p[r] - m) * invS;
            if (w == 0.f) continue;  // empty slot: never touch its (possibly unset) O
            float v[E];
            if (kVec) {
                load_vec<DT, E>(v, reinterpret_cast<const void*>(p.o_partial), r * D + lane * E);
            } else {
#pragma unroll
                for (int e = 0; e < E; ++e)
                    v[e] = DT == MSA_DT_E4M3 ? tc::e4m3_to_f32_tc(reinterpret_cast<const uint8_t*>(p.o_partial)[r * D + lane * E + e])
                                             : load_val(reinterpret_cast<const void*>(p.o_partial), r * D + lane * E + e, DT);
            }
#pragma unroll
            for (int e = 0; e < E; ++e) o[e] = fmaf(w, v[e], o[e]);
        }
        const float osc = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
#pragma unroll
        for (int e = 0; e < E; ++e) o[e] *= osc;
    }
    if (owner) {
        if (kVec) {
#pragma unroll
            for (int i = 0; i < E / 8; ++i)
                __stwb(reinterpret_cast<uint4*>(out) + i, make_uint4(pack_bf16x2(o[8 * i], o[8 * i + 1]), pack_bf16x2(o[8 * i + 2], o[8 * i + 3]),
                                                              pack_bf16x2(o[8 * i + 4], o[8 * i + 5]), pack_bf16x2(o[8 * i + 6], o[8 * i + 7])));
        } else {
#pragma unroll
            for (int e = 0; e < E; ++e) out[e] = __float2bfloat16_rn(o[e]);
        }
    }
    if (lane == 0) reinterpret_cast<float*>(p.lse)[gid] = empty ? -INFINITY : m + logf(S);
}

template <int D>
__device__ __forceinline__ void combine_impl(const MsaCombineParams& p) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long gid = (long long)blockIdx.x * kWarps + warp;
    if (gid >= (long long)p.total_q * p.num_heads_q) return;
    const int q = (int)(gid / p.num_heads_q), hq = (int)(gid % p.num_heads_q);
    const CombineRows rows{p, q, hq};
    const int* counts = reinterpret_cast<const int*>(p.split_counts);
    int n = p.mode == 0 ? counts[(long long)q * p.num_heads_kv + hq / p.qhead_per_kv] : counts[q / p.seqlen_q];
    n = max(0, min(n, p.num_slots));
    const float* lse_p = reinterpret_cast<const float*>(p.lse_partial);

    float m = 0.f, S = 0.f;
    if (n > 0) lse_stats(lse_p, rows, n, m, S);
    const bool vec = ((p.o_partial | p.out) & 15u) == 0;  // warp-uniform
    switch (p.partial_dtype) {
    case MSA_DT_F32:
        if (vec) combine_t<D, MSA_DT_F32, true>(p, gid, rows, n, m, S);
        else combine_t<D, MSA_DT_F32, false>(p, gid, rows, n, m, S);
        break;
    case MSA_DT_BF16:
        if (vec) combine_t<D, MSA_DT_BF16, true>(p, gid, rows, n, m, S);
        else combine_t<D, MSA_DT_BF16, false>(p, gid, rows, n, m, S);
        break;
    case MSA_DT_F16:
        if (vec) combine_t<D, MSA_DT_F16, true>(p, gid, rows, n, m, S);
        else combine_t<D, MSA_DT_F16, false>(p, gid, rows, n, m, S);
        break;
    default:
        if (vec) combine_t<D, MSA_DT_E4M3, true>(p, gid, rows, n, m, S);
        else combine_t<D, MSA_DT_E4M3, false>(p, gid, rows, n, m, S);
        break;
    }
    if (p.tlse_partial && p.tlse) {
        float mt = 0.f, St = 0.f;
        if (n > 0) lse_stats(reinterpret_cast<const float*>(p.tlse_partial), rows, n, mt, St);
        if (lane == 0) reinterpret_cast<float*>(p.tlse)[gid] = merged_tlse(n, mt, St);
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

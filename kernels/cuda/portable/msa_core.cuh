// msa_core.cuh - the portable mainloop: one softmax block (<= kBlockN keys)
// folded into the running state of a row tile (kRows query-head rows), in
// base 2 exactly like kernels/tile (Acc.Update / Acc.Finish).
#ifndef MSA_CORE_CUH
#define MSA_CORE_CUH

#include "portable/msa_backend.cuh"

namespace msa {

template <int D>
struct alignas(16) Smem {
    static constexpr int R = Geo<D>::kRows;
    __nv_bfloat16 q[R * D];
    __nv_bfloat16 kv[Geo<D>::kSubN * Geo<D>::kvStride];
    float s[R * kBlockN];  // scores, then rounded P
    long long q_off[R];    // element offset of the Q row, -1 = padding row
    long long out_row[R];  // kernel-defined output row (partial or final)
    int lim[R];            // keys with sequence-local index < lim are visible
    int aux[R];            // kernel-defined (sparse decode: the row's causal limit)
};
static_assert(sizeof(Smem<256>) <= 42 * 1024 && sizeof(Smem<128>) <= 42 * 1024, "static shared memory budget");

// Running state of the warp's kWarpRows rows (values are warp-uniform except acc).
template <int D>
struct RowState {
    static constexpr int WR = Geo<D>::kWarpRows;
    float m[WR], l[WR], tl[WR];
    float acc[WR][D / 32];
    __device__ __forceinline__ void reset() {
#pragma unroll
        for (int r = 0; r < WR; ++r) {
            m[r] = -INFINITY; l[r] = 0.f; tl[r] = 0.f;
#pragma unroll
            for (int e = 0; e < D / 32; ++e) acc[r][e] = 0.f;
        }
    }
};

// Fold keys [t0, t0+nkeys) (sequence-local, nkeys <= kBlockN) into st.
// The Q tile, q_off and lim must be in shared memory (and synchronised).
template <int D, class Backend>
__device__ __forceinline__ void block_update(Smem<D>& sm, RowState<D>& st, const KVSource& src, int t0, int nkeys,
                                             float scale_log2, float invT, int pv_round) {
    constexpr int WR = Geo<D>::kWarpRows, SubN = Geo<D>::kSubN, KF = Geo<D>::kKeyFrags;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* sS = sm.s + warp * WR * kBlockN;
    const __nv_bfloat16* sQ = sm.q + warp * WR * D;

    // S = scale * Q K^T, masked to the visible prefix.
#pragma unroll 1
    for (int kb = 0; kb < kBlockN; kb += SubN) {
        if (kb >= nkeys) {
#pragma unroll
            for (int r = 0; r < WR; ++r)
#pragma unroll
                for (int c = 0; c < KF; ++c) sS[r * kBlockN + kb + lane + 32 * c] = -INFINITY;
            continue;
        }
        __syncthreads();
        load_kv_subtile<D>(sm.kv, src, 0, t0 + kb, min(SubN, nkeys - kb));
        __syncthreads();
        float s[WR][KF];
        Backend::template qk<D>(sQ, sm.kv, s);
#pragma unroll
        for (int r = 0; r < WR; ++r) {
            const int lim = min(max(sm.lim[warp * WR + r] - t0, 0), nkeys);
#pragma unroll
            for (int c = 0; c < KF; ++c) {
                const int key = kb + lane + 32 * c;
                sS[r * kBlockN + key] = key < lim ? s[r][c] * scale_log2 : -INFINITY;
            }
        }
    }

    // Online softmax update (each lane reads back only the keys it wrote).
#pragma unroll
    for (int r = 0; r < WR; ++r) {
        float x[4];
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            x[c] = sS[r * kBlockN + lane + 32 * c];
            mx = fmaxf(mx, x[c]);
        }
        mx = warp_max(mx);
        if (mx == -INFINITY) {  // no visible key in this block: row untouched
#pragma unroll
            for (int c = 0; c < 4; ++c) sS[r * kBlockN + lane + 32 * c] = 0.f;
            continue;
        }
        const float mnew = fmaxf(st.m[r], mx);
        float sum = 0.f, tsum = 0.f;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const bool vis = x[c] != -INFINITY;
            const float p = vis ? exp2f(x[c] - mnew) : 0.f;
            sum += p;
            if (invT > 0.f && vis) tsum += exp2f((x[c] - mnew) * invT);
            sS[r * kBlockN + lane + 32 * c] = round_p(p, pv_round);
        }
        sum = warp_sum(sum);
        const float alpha = exp2f(st.m[r] - mnew);
        if (invT > 0.f) {
            tsum = warp_sum(tsum);
            st.tl[r] = st.tl[r] * exp2f((st.m[r] - mnew) * invT) + tsum;
        }
        st.l[r] = st.l[r] * alpha + sum;
#pragma unroll
        for (int e = 0; e < D / 32; ++e) st.acc[r][e] *= alpha;
        st.m[r] = mnew;
    }

    // O += P V
#pragma unroll 1
    for (int kb = 0; kb < nkeys; kb += SubN) {
        __syncthreads();
        load_kv_subtile<D>(sm.kv, src, 1, t0 + kb, min(SubN, nkeys - kb));
        __syncthreads();
        Backend::template pv<D>(sS, kb, sm.kv, st.acc);
    }
}

// Final normalisation of row r: returns 1/l (0 for an empty row) and the
// natural-log LSE (and temperature LSE) as in tile.Acc.Finish.
template <int D>
__device__ __forceinline__ float finish_row(const RowState<D>& st, int r, float invT, float& lse, float& tlse) {
    constexpr float kLn2 = 0.693147180559945309f;
    if (!(st.l[r] > 0.f) || st.m[r] == -INFINITY) {
        lse = -INFINITY; tlse = -INFINITY;
        return 0.f;
    }
    lse = (st.m[r] + log2f(st.l[r])) * kLn2;
    tlse = invT > 0.f ? (st.m[r] * invT + log2f(st.tl[r])) * kLn2 : lse;
    return 1.f / st.l[r];
}

}  // namespace msa

#endif  // MSA_CORE_CUH

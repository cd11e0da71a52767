// fused_combine.cuh - the split-KV combine of a paged decode fused into
// the decode kernel (sm90/sm90_decode_pipe.cu, sm100/sm100_decode.cu): the
// CTA that writes the last partial of a group merges it, so no combine
// launch waits for the whole grid to drain.
//
// The n splits of a (request, q tile, KV head) group form blocks of
// pipe_block(n) ~ sqrt(n) splits, so that no single CTA reads all the
// partials of a request cut into many splits (batch 1 at 128K: ~130
// splits). Every thread fences its partial stores, thread 0 adds 1 to its
// block's counter (msa_params.h, MsaDecodePipeParams); the CTA that
// completes a block resets that counter to 0 and merges the block's
// partials in place into the block's first split, then counts the block at
// the group's counter; the CTA that completes the group resets it and
// merges the blocks into the output. One block (n <= 16): the block's last
// CTA writes the output directly. Merges read with L2 (coherent) loads, one
// warp per row, in combine.cu's mode-1 arithmetic, so the bits are those of
// msa_combine's.
#ifndef MSA_FUSED_COMBINE_CUH
#define MSA_FUSED_COMBINE_CUH

#include "shared/lse_merge.cuh"
#include "shared/tc_frag.cuh"

namespace msa {
namespace fused {


// Split blocks of the two-level fused combine: the n splits of a group are
// cut into blocks of pipe_block(n) consecutive splits (all n for n <= 16,
// else ceil(sqrt(n))), so there are ceil(n / pipe_block(n)) <= ceil(sqrt(n))
// blocks (cuda.PipeBlock computes the same).
__device__ __forceinline__ int pipe_block(int n) {
    if (n <= 16) return n;
    int g = (int)sqrtf((float)n);
    while (g * g < n) ++g;
    while (g > 1 && (g - 1) * (g - 1) >= n) --g;
    return g;
}

// Merge, for one (query, head) row of the group, the partials of cnt splits
// s0, s0 + sstep, ... (combine.cu's mode-1 arithmetic: weights exp(lse - m)
// / S, one fma per split in split order) by one warp with L2 loads (other
// CTAs of this grid wrote them). kFinal: into the BF16 output (times
// oscale) and LSE; else in place into split s0's partial row (a block's
// merged partial). Lane l owns columns [4l, 4l + 4). Every partial of a
// decode item is written (O = 0, LSE = -inf when empty), so no split is
// skipped and the O loads of a row are independent of each other.
template <int D, bool kFinal>
__device__ __forceinline__ void merge_row(const MsaDecodeParams& p, const DecRows& R, int b, int idx, int s0, int sstep, int cnt,
                                          float oscale, int lane) {
    const int i = R.i0 + idx / R.qhpk, hq = R.h * R.qhpk + idx % R.qhpk;
    const long long prow0 = ((long long)reinterpret_cast<const int*>(p.o_indptr)[b] + i) * R.Hq + hq;
    const long long pstep = (long long)sstep * p.q_stride * R.Hq;  // partial rows from one merged split to the next
    const long long first = prow0 + (long long)s0 * p.q_stride * R.Hq;
    float* lse_p = reinterpret_cast<float*>(p.lse_partial);
    float* o_p = reinterpret_cast<float*>(p.o_partial);
    float mx, sum;
    warp_lse_stats([&](int k) { return __ldcg(lse_p + first + k * pstep); }, cnt, lane, mx, sum);
    const bool empty = cnt == 0 || !(sum > 0.f);
    constexpr int NV = (D / 4 + 31) / 32;  // float4 columns per lane: lane + 32v, v < NV
    float4 o[NV];
#pragma unroll
    for (int v = 0; v < NV; ++v) o[v] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (!empty && lane < D / 4) {
        const float invS = 1.f / sum;
#pragma unroll 8
        for (int k = 0; k < cnt; ++k) {
            const long long r = first + k * pstep;
            const float w = expf(__ldcg(lse_p + r) - mx) * invS;
#pragma unroll
            for (int v = 0; v < NV; ++v) {
                const float4 x = __ldcg(reinterpret_cast<const float4*>(o_p + r * D) + lane + 32 * v);
                o[v].x = fmaf(w, x.x, o[v].x);
                o[v].y = fmaf(w, x.y, o[v].y);
                o[v].z = fmaf(w, x.z, o[v].z);
                o[v].w = fmaf(w, x.w, o[v].w);
            }
        }
    }
    const float lse = empty ? -INFINITY : mx + logf(sum);
    __syncwarp();  // every lane's reads of split s0's row are done before it is overwritten
    if (kFinal) {
        const long long gid = (R.qbase + i) * R.Hq + hq;
        if (lane < D / 4)
#pragma unroll
            for (int v = 0; v < NV; ++v)
                *reinterpret_cast<uint2*>(reinterpret_cast<__nv_bfloat16*>(p.out) + gid * D + 4 * (lane + 32 * v)) =
                    make_uint2(pack_bf16x2(o[v].x * oscale, o[v].y * oscale), pack_bf16x2(o[v].z * oscale, o[v].w * oscale));
        if (lane == 0) reinterpret_cast<float*>(p.lse)[gid] = lse;
    } else {
        if (lane < D / 4)
#pragma unroll
            for (int v = 0; v < NV; ++v) *(reinterpret_cast<float4*>(o_p + first * D) + lane + 32 * v) = o[v];
        if (lane == 0) lse_p[first] = lse;
    }
}

// Count one arrival at counter c of expected n (thread 0) and tell the CTA
// whether it was the last; the last resets the counter for the next launch.
// Callers fence their partial stores and synchronise before.
__device__ __forceinline__ bool arrive_last(int* c, int n, int* flag) {
    if (threadIdx.x == 0) {
        const int before = atomicAdd(c, 1);
        *flag = before == n - 1;
        if (*flag) atomicExch(c, 0);  // every arrival is in: ready for the next launch
    }
    __syncthreads();
    const bool last = *flag;
    if (last) __threadfence();  // the others' partials, published before their arrivals
    return last;
}

// fused_combine runs after a decode CTA of kThreads threads wrote its
// partials (every thread's stores issued): it counts the CTA's split and,
// in the CTA that completes a block or the group, merges it (see above).
// flag is a shared-memory int the CTA no longer uses; oscale the output
// scale of the final merge. A launch without counters (pp.counters == 0)
// or without split KV merges nothing: msa_combine runs after it.
template <int D, int kThreads>
__device__ __forceinline__ void fused_combine(const MsaDecodePipeParams& pp, const DecodeItem& item, const DecRows& R, int* flag,
                                              float oscale) {
    const MsaDecodeParams& p = pp.d;
    if (!p.split_kv || !pp.counters) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, b = item.b;
    __threadfence();  // this thread's partial stores are visible device-wide before the count
    __syncthreads();
    const int n = max(reinterpret_cast<const int*>(pp.split_counts)[b], 0);
    const int G = max(pipe_block(n), 1), nblk = (n + G - 1) / G, s0 = item.kt / G * G;
    const int nqt = (p.seqlen_q + p.q_tile - 1) / p.q_tile;
    int* cnt = reinterpret_cast<int*>(pp.counters) + (((long long)b * nqt + item.qt) * p.num_heads_kv + item.h) * pp.counter_stride;
    if (!arrive_last(cnt + 1 + item.kt / G, min(G, n - s0), flag)) return;
    if (nblk == 1) {
#pragma unroll 1
        for (int idx = warp; idx < R.nrows; idx += kThreads / 32) merge_row<D, true>(p, R, b, idx, 0, 1, n, oscale, lane);
        return;
    }
#pragma unroll 1
    for (int idx = warp; idx < R.nrows; idx += kThreads / 32) merge_row<D, false>(p, R, b, idx, s0, 1, min(G, n - s0), oscale, lane);
    __threadfence();
    __syncthreads();  // also: every thread has read the flag before arrive_last rewrites it
    if (!arrive_last(cnt, nblk, flag)) return;
#pragma unroll 1
    for (int idx = warp; idx < R.nrows; idx += kThreads / 32) merge_row<D, true>(p, R, b, idx, 0, G, nblk, oscale, lane);
}

}  // namespace fused
}  // namespace msa

#endif  // MSA_FUSED_COMBINE_CUH

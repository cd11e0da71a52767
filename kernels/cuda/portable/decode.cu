// decode.cu - paged decode with split-KV (contract §7). Grid (work_count): work
// item w = (request, q tile, kv tile, kv head, valid) from plan.DecodeSchedule. Query row b*seqlen_q + i sits at position
// seqused_k[b] - seqlen_q + i (causal, bottom-right). With split_kv the CTA
// writes float partials at row o_indptr[b] + kv_tile*q_stride + i (merged by
// msa_combine in mode 1), otherwise the final BF16 output and LSE.
//
// Sparse decode (q2k != 0, same kernel, runtime switch): for each row tile
// the CTA visits, in ascending order, the union of the blocks of blk_kv
// tokens that the tile's rows selected (q2k[h][b*seqlen_q + i][0..top_k)),
// restricted to the item's KV chunk [kv_begin, kv_end) and to blocks that
// start before the row's causal limit; each row attends only the blocks it
// selected itself (per-row selection mask: lim = 0 for the others). This is
// kernels/attn decodeTile's rule. Warp 0 finds the next block: lane r scans
// row r's list for the smallest selected id above the previous block, a warp
// min gives the block, and lane r's row is selected iff its own minimum is it.
#include <climits>
#include "portable/msa_core.cuh"

namespace msa {

template <int D, class Backend>
__device__ __forceinline__ void decode_impl(const MsaDecodeParams& p) {
    constexpr int kRows = Geo<D>::kRows, kWarpRows = Geo<D>::kWarpRows;
    __shared__ Smem<D> sm;
    __shared__ int next_blk;  // sparse decode: the block the CTA visits next (INT_MAX = done)
    const int w = blockIdx.x;
    DecodeItem item;
    if (!decode_item(p, w, item)) return;
    const int h = item.h, b = item.b;
    const int kv_begin = item.kv_begin, kv_end = item.kv_end;
    const DecRows R = dec_rows(p, item, D);  // the item's query-head rows (shared/msa_common.cuh)
    const int nrows = R.nrows;

    KVSource src;
    src.k = reinterpret_cast<const void*>(p.k);
    src.v = reinterpret_cast<const void*>(p.v);
    src.k_scale = reinterpret_cast<const uint8_t*>(p.k_scale);
    src.v_scale = reinterpret_cast<const uint8_t*>(p.v_scale);
    src.page_row = reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride;
    src.dense_base = 0;
    src.h = h; src.Hkv = p.num_heads_kv; src.page_size = p.page_size; src.dtype = p.kv_dtype;

    float scale = p.softmax_scale_log2;
    if (p.kv_dtype == MSA_DT_NVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
    const float oscale = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

#pragma unroll 1
    for (int rt = 0; rt < nrows; rt += kRows) {
        __syncthreads();
        if (threadIdx.x < kRows) {
            long long qo, orow;
            int lim, i;
            R.row(rt + threadIdx.x, qo, orow, lim, i);
            sm.q_off[threadIdx.x] = qo;
            sm.out_row[threadIdx.x] = orow;
            sm.lim[threadIdx.x] = lim;
            sm.aux[threadIdx.x] = lim;  // causal limit, kept while sparse decode rewrites lim per block
        }
        __syncthreads();
        load_q_tile<D>(sm.q, reinterpret_cast<const void*>(p.q), p.q_dtype, sm.q_off);
        RowState<D> st;
        st.reset();
        if (!p.q2k) {
#pragma unroll 1
            for (int t0 = kv_begin; t0 < kv_end; t0 += kBlockN)
                block_update<D, Backend>(sm, st, src, t0, min(kBlockN, kv_end - t0), scale, 0.f, p.pv_round);
        } else {
            const long long blk = p.blk_kv;
            int prev = -1;  // last block visited (CTA-uniform)
#pragma unroll 1
            for (;;) {
                __syncthreads();  // every thread has read next_blk; lim is no longer read
                if (warp == 0) {
                    int own = INT_MAX;  // smallest selected block > prev of this lane's row
                    const int idx = rt + lane;
                    if (lane < kRows && idx < nrows) {
                        const int i = R.i0 + idx / p.qhead_per_kv;
                        const int* sel = reinterpret_cast<const int*>(p.q2k) +
                                         ((long long)h * p.batch * p.seqlen_q + (long long)b * p.seqlen_q + i) * p.top_k;
                        const int lim = sm.aux[lane];
#pragma unroll 1
                        for (int k = 0; k < p.top_k; ++k) {
                            const int j = sel[k];
                            if (j > prev && j < own && j * blk < kv_end && (j + 1) * blk > kv_begin && j * blk < lim) own = j;
                        }
                    }
                    const int jmin = __reduce_min_sync(0xffffffffu, own);
                    if (lane < kRows) sm.lim[lane] = (jmin != INT_MAX && own == jmin) ? sm.aux[lane] : 0;
                    if (lane == 0) next_blk = jmin;
                }
                __syncthreads();
                const int j = next_blk;
                if (j == INT_MAX) break;
                const int lo = (int)max((long long)kv_begin, j * blk);
                const int hi = (int)min((long long)kv_end, (j + 1) * blk);
#pragma unroll 1
                for (int t0 = lo; t0 < hi; t0 += kBlockN)
                    block_update<D, Backend>(sm, st, src, t0, min(kBlockN, hi - t0), scale, 0.f, p.pv_round);
                prev = j;
            }
        }

#pragma unroll
        for (int r = 0; r < kWarpRows; ++r) {
            const long long orow = sm.out_row[warp * kWarpRows + r];
            if (orow < 0) continue;
            float lse, tlse;
            const float inv = finish_row<D>(st, r, 0.f, lse, tlse);
            if (p.split_kv) {
                float* o = reinterpret_cast<float*>(p.o_partial);
#pragma unroll
                for (int e = 0; e < D / 32; ++e) o[orow * D + acc_col(lane, e)] = st.acc[r][e] * inv;
                if (lane == 0) reinterpret_cast<float*>(p.lse_partial)[orow] = lse;
            } else {
                __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(p.out);
#pragma unroll
                for (int e = 0; e < D / 32; ++e)
                    o[orow * D + acc_col(lane, e)] = __float2bfloat16_rn(st.acc[r][e] * inv * oscale);
                if (lane == 0) reinterpret_cast<float*>(p.lse)[orow] = lse;
            }
        }
    }
}

}  // namespace msa

extern "C" __global__ void __launch_bounds__(msa::kThreads, 1) msa_decode_d128(const MsaDecodeParams* __restrict__ p) {
    msa::decode_impl<128, msa::ArchBackend>(*p);
}
extern "C" __global__ void __launch_bounds__(msa::kThreads, 1) msa_decode_d64(const MsaDecodeParams* __restrict__ p) {
    msa::decode_impl<64, msa::ArchBackend>(*p);
}
extern "C" __global__ void __launch_bounds__(msa::kThreads, 1) msa_decode_d256(const MsaDecodeParams* __restrict__ p) {
    msa::decode_impl<256, msa::ArchBackend>(*p);
}

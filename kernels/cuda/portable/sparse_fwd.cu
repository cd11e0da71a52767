// sparse_fwd.cu - block-sparse prefill partials (contract §3, 4, 6): one CTA per
// forward-schedule work item (head_kv, row, q_begin, q_count, batch, kv_block).
// Every query-head row of the item attends the same KV block; the CTA walks
// the item's rows in tiles of Geo<D>::kRows (32, or 16 for D = 256) and
// writes O_partial[slot, q, hq, :] and LSE_partial[slot, q, hq] (slot from
// qsplit_indices: q_idx | slot << 24).
#include "portable/msa_core.cuh"

namespace msa {

template <int D, class Backend>
__device__ __forceinline__ void sparse_fwd_impl(const MsaFwdParams& p) {
    constexpr int kRows = Geo<D>::kRows, kWarpRows = Geo<D>::kWarpRows;
    __shared__ Smem<D> sm;
    const int w = blockIdx.x;
    FwdItem item;
    if (!fwd_item(p, w, item)) return;
    const int h = item.h, row = item.row, q_begin = item.q_begin, q_count = item.q_count, b = item.b;
    const int q0 = item.q0, seqlen_q = item.seqlen_q, seqlen_k = item.seqlen_k, t0 = item.t0;
    const int* cu_k = reinterpret_cast<const int*>(p.cu_seqlens_k);
    const int nkeys = min(p.blk_kv, seqlen_k - t0);
    const int* entries = reinterpret_cast<const int*>(p.qsplit) + (long long)h * p.qsplit_stride +
                         reinterpret_cast<const int*>(p.row_ptr)[(long long)h * (p.total_rows + 1) + row] + q_begin;

    KVSource src;
    src.k = reinterpret_cast<const void*>(p.k);
    src.v = reinterpret_cast<const void*>(p.v);
    src.k_scale = reinterpret_cast<const uint8_t*>(p.k_scale);
    src.v_scale = reinterpret_cast<const uint8_t*>(p.v_scale);
    src.page_row = p.page_table ? reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride : nullptr;
    src.dense_base = p.page_table ? 0 : cu_k[b];
    src.h = h; src.Hkv = p.num_heads_kv; src.page_size = p.page_size; src.dtype = p.kv_dtype;

    float scale = p.softmax_scale_log2;
    if (p.kv_dtype == MSA_DT_NVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
    const int nrows = q_count * p.qhead_per_kv;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* lse_part = reinterpret_cast<float*>(p.lse_partial);
    float* tlse_part = reinterpret_cast<float*>(p.tlse_partial);

    if (nkeys <= 0) return;  // defensive: the schedule never emits empty blocks
#pragma unroll 1
    for (int rt = 0; rt < nrows; rt += kRows) {
        __syncthreads();  // previous tile's readers of sm are done
        if (threadIdx.x < kRows) {
            const int idx = rt + threadIdx.x;
            long long qo = -1, orow = -1;
            int lim = 0;
            if (idx < nrows) {
                const unsigned e = (unsigned)entries[idx / p.qhead_per_kv];
                const int ql = (int)(e & 0xFFFFFFu), slot = (int)(e >> 24);
                const int hq = h * p.qhead_per_kv + idx % p.qhead_per_kv;
                const long long qrow = q0 + ql;
                qo = (qrow * p.num_heads_q + hq) * D;
                orow = ((long long)slot * p.total_q + qrow) * p.num_heads_q + hq;
                lim = seqlen_k;
                if (p.causal) lim = min(lim, ql + seqlen_k - seqlen_q + 1);
            }
            sm.q_off[threadIdx.x] = qo;
            sm.out_row[threadIdx.x] = orow;
            sm.lim[threadIdx.x] = lim;
        }
        __syncthreads();
        load_q_tile<D>(sm.q, reinterpret_cast<const void*>(p.q), p.q_dtype, sm.q_off);
        // (block_update starts with a __syncthreads before touching sm.q)
        RowState<D> st;
        st.reset();
        block_update<D, Backend>(sm, st, src, t0, nkeys, scale, p.inv_temperature, p.pv_round);

        // epilogue: normalise within the block, store in the partial dtype
#pragma unroll
        for (int r = 0; r < kWarpRows; ++r) {
            const long long orow = sm.out_row[warp * kWarpRows + r];
            if (orow < 0) continue;
            float lse, tlse;
            const float inv = finish_row<D>(st, r, p.inv_temperature, lse, tlse);
#pragma unroll
            for (int e = 0; e < D / 32; ++e)
                store_val(reinterpret_cast<void*>(p.o_partial), orow * D + acc_col(lane, e), st.acc[r][e] * inv,
                          p.partial_dtype);
            if (lane == 0) {
                lse_part[orow] = lse;
                if (tlse_part) tlse_part[orow] = tlse;
            }
        }
    }
}

}  // namespace msa

extern "C" __global__ void __launch_bounds__(msa::kThreads, 1) msa_sparse_fwd_d128(const MsaFwdParams* __restrict__ p) {
    msa::sparse_fwd_impl<128, msa::ArchBackend>(*p);
}
extern "C" __global__ void __launch_bounds__(msa::kThreads, 1) msa_sparse_fwd_d64(const MsaFwdParams* __restrict__ p) {
    msa::sparse_fwd_impl<64, msa::ArchBackend>(*p);
}
extern "C" __global__ void __launch_bounds__(msa::kThreads, 1) msa_sparse_fwd_d256(const MsaFwdParams* __restrict__ p) {
    msa::sparse_fwd_impl<256, msa::ArchBackend>(*p);
}

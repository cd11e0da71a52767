// sm100_fwd.cu - block-sparse prefill partials on SM100 (tcgen05 + TMA):
// msa_sm100_fwd_{bf16,fp8,bf16fp8,nvfp4}_d{64,128,256}.
//
// Same work items, masks, softmax and outputs as sparse_fwd.cu: one CTA per
// forward-schedule item (head_kv, row, q_begin, q_count, batch, kv_block);
// every query-head row of the item attends the item's KV block of <= 128
// keys; O_partial[slot, q, hq, :] and LSE_partial[slot, q, hq] (and the
// temperature LSE) are written at the slot from qsplit (q_idx | slot << 24).
//
// Pipeline of one CTA (128 threads, 4 warps; thread t owns row t of a row
// tile = TMEM lane t; thread 0 also issues TMA and MMA):
//   prologue  TMEM alloc (warp 0), mbarrier init; thread 0 issues the TMA
//             boxes of the K and V tile (converted variants: raw K only)
//   per row tile of 128 query-head rows:
//     gather  every thread cp.asyncs its own Q row into the swizzled K-major
//             Q tile (padding rows zero-filled); with two Q/P tiles
//             (FwdLayout::q_bufs) the next tile's gather is issued into the
//             other one as soon as this tile's S has completed, overlapping
//             its softmax, P.V and epilogue
//     convert (bf16fp8 / nvfp4, first tile) raw K -> bf16 K, then the raw V
//             TMA into the same staging tile -> bf16 V
//     S       thread 0: D/16 (bf16) or D/32 (e4m3) tcgen05.mma S = Q K^T
//             into TMEM columns [0, 128), commit to the MMA barrier
//     softmax tcgen05.ld of the row (two passes of 4 x 32 columns): mask to
//             the row's visible prefix, block max, exp2, sum (unrounded P),
//             temperature sum; P rounded and stored K-major over the Q tile
//     O       thread 0: 8 (bf16) or 4 (e4m3) tcgen05.mma O = P V into TMEM
//             columns [128, 128 + D), V as the MN-major B operand
//     epilogue tcgen05.ld of O, times 1/l, partial-dtype stores; LSE
#include "sm100_common.cuh"

namespace msa {
namespace sm100 {

#if defined(MSA_SM100_ENABLED)

template <int V, int D>
__device__ __forceinline__ void fwd_body(const MsaFwdParams& p, const MsaTensorMaps& maps) {
    using L = FwdLayout<V, D>;
    constexpr bool kConv = kv_converted(V);
    constexpr int kStorageBytes = V == kBF16 ? 2 : 1;  // element size of the K/V tensor maps
    extern __shared__ uint8_t dsmem[];

    const int w = blockIdx.x;
    FwdItem item;
    if (!fwd_item(p, w, item)) return;
    const int h = item.h, row = item.row, q_begin = item.q_begin, q_count = item.q_count, b = item.b;
    const int q0 = item.q0, seqlen_q = item.seqlen_q, seqlen_k = item.seqlen_k, t0 = item.t0;
    const int* cu_k = reinterpret_cast<const int*>(p.cu_seqlens_k);
    const int nkeys = min(min(p.blk_kv, kBlockKeys), seqlen_k - t0);
    if (nkeys <= 0 || q_count <= 0) return;  // CTA-uniform, before any TMA or TMEM use
    const int* entries = reinterpret_cast<const int*>(p.qsplit) + (long long)h * p.qsplit_stride +
                         reinterpret_cast<const int*>(p.row_ptr)[(long long)h * (p.total_rows + 1) + row] + q_begin;

    const int tid = threadIdx.x, warp = tid >> 5;
    uint8_t* sm = align_1024(dsmem);
    const uint32_t sQP = smem_u32(sm + L::qp_off), sK = smem_u32(sm + L::k_off), sV = smem_u32(sm + L::v_off);
    const uint32_t sRaw = smem_u32(sm + L::raw_off);
    const uint32_t bar = smem_u32(sm + L::bar_off);
    const uint32_t bar_k = bar + 8 * L::bar_k, bar_v = bar + 8 * L::bar_v, bar_mma = bar + 8 * L::bar_mma;
    uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(sm + L::tmem_slot_off);

    if (warp == 0) tmem_alloc<L::tmem_cols>(smem_u32(tmem_slot));
    if (tid == 32) {
        mbar_init(bar_k, 1);
        mbar_init(bar_v, 1);
        mbar_init(bar_mma, 1);
        mbar_fence_init();
    }
    tc_fence_before();
    __syncthreads();
    tc_fence_after();
    const uint32_t tmem = *tmem_slot;

    KVGeom g;
    g.page_row = p.page_table ? reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride : nullptr;
    g.dense_base = p.page_table ? 0 : cu_k[b];
    g.h = h; g.Hkv = p.num_heads_kv; g.page_size = p.page_size;
    if (tid == 0) {
        tma_prefetch_map(&maps.k);
        tma_prefetch_map(&maps.v);
        issue_kv_tile<L::raw_row, kStorageBytes>(kConv ? sRaw : sK, &maps.k, bar_k, g, t0, nkeys);
        if constexpr (!kConv) issue_kv_tile<L::raw_row, kStorageBytes>(sV, &maps.v, bar_v, g, t0, nkeys);
    }

    float scale = p.softmax_scale_log2;
    if (V == kNVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
    const float invT = p.inv_temperature;
    const int nrows = q_count * p.qhead_per_kv;
    const uint8_t* qbase = reinterpret_cast<const uint8_t*>(p.q);
    const int qes = p.q_dtype == MSA_DT_BF16 ? 2 : 1;
    const uint32_t lane_base = (uint32_t)(warp * 32) << 16;
    // Q/P tiles: with two (L::q_bufs), row tile i uses buffer i % 2 and the
    // cp.async gather of tile i+1 is issued once tile i's S = Q K^T has
    // completed, so it overlaps tile i's softmax, P.V and epilogue. E4M3 Q
    // with NVFP4 K/V is widened while it is gathered (synchronously) and is
    // gathered at the top of its tile.
    constexpr int kQBufs = L::q_bufs;
    const uint32_t sQP1 = smem_u32(sm + L::qp1_off);
    const bool widenQ = V == kNVFP4 && p.q_dtype == MSA_DT_E4M3;
    auto q_src = [&](int r0) -> const uint8_t* {  // this thread's Q row of the row tile at r0
        const int i = r0 + tid;
        if (i >= nrows) return nullptr;
        const int ql = (int)((unsigned)entries[i / p.qhead_per_kv] & 0xFFFFFFu);
        const int hq = h * p.qhead_per_kv + i % p.qhead_per_kv;
        return qbase + (((long long)q0 + ql) * p.num_heads_q + hq) * D * qes;
    };
    if (!widenQ) gather_row_async<L::q_row_bytes, kTileM>(sQP, tid, q_src(0), qbase);  // row tile 0

#pragma unroll 1
    for (int rt = 0, tile = 0; rt < nrows; rt += kTileM, ++tile) {
        const uint32_t sQPt = (kQBufs == 2 && (tile & 1)) ? sQP1 : sQP;  // this row tile's Q/P tile
        // ---- this thread's row: Q source, output row, visible-key limit ----
        const int idx = rt + tid;
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
        const uint8_t* qsrc = qo >= 0 ? qbase + qo * qes : nullptr;
        if (widenQ) {
            gather_row_e4m3_to_bf16<D, kTileM>(sQPt, tid, qsrc);
        } else {
            if (kQBufs == 1 && tile > 0) gather_row_async<L::q_row_bytes, kTileM>(sQPt, tid, qsrc, qbase);
            cp_async_wait_all();  // this tile's gather (issued in the previous tile with two buffers)
        }
        fence_proxy_async();

        if (kConv && tile == 0) {  // K and V to bf16 once per item, thread t converts key t
            const bool valid = tid < nkeys;
            const long long srow = (V == kNVFP4 && valid) ? g.scale_row(t0 + tid) : 0;
            mbar_wait(bar_k, kv_parity(0));
            convert_kv_row<V, D>(sK, sRaw, tid, valid, reinterpret_cast<const uint8_t*>(p.k_scale), srow);
            __syncthreads();  // the staging tile is free again
            if (tid == 0) issue_kv_tile<L::raw_row, kStorageBytes>(sRaw, &maps.v, bar_v, g, t0, nkeys);
            mbar_wait(bar_v, kv_parity(0));
            convert_kv_row<V, D>(sV, sRaw, tid, valid, reinterpret_cast<const uint8_t*>(p.v_scale), srow);
            fence_proxy_async();
        }
        tc_fence_before();
        __syncthreads();

        // ---- S = Q K^T ----
        if (tid == 0) {
            tc_fence_after();
            if (!kConv && tile == 0) mbar_wait(bar_k, kv_parity(0));
#pragma unroll
            for (int k = 0; k < L::qk_steps; ++k)
                umma<L::f8>(tmem + L::tmem_s_col,
                            umma_smem_desc(sQPt + kmajor_step_offset(k, L::q_row_bytes, kTileM), kmajor_lbo(),
                                           kmajor_sbo(L::q_row_bytes), span_of(L::q_row_bytes)),
                            umma_smem_desc(sK + kmajor_step_offset(k, L::kv_row, kBlockKeys), kmajor_lbo(),
                                           kmajor_sbo(L::kv_row), span_of(L::kv_row)),
                            L::idesc_qk, k > 0 ? 1u : 0u);
            umma_commit(bar_mma);
        }
        mbar_wait(bar_mma, mma_parity(2 * tile));
        __syncwarp();
        tc_fence_after();
        // The next row tile's Q into the other buffer (its last readers, the
        // previous tile's MMAs, have completed).
        if (kQBufs == 2 && !widenQ && rt + kTileM < nrows)
            gather_row_async<L::q_row_bytes, kTileM>(tile & 1 ? sQP : sQP1, tid, q_src(rt + kTileM), qbase);

        // ---- softmax of row tid over the block (base 2, msa_core.cuh block_update) ----
        const int vis = min(max(lim - t0, 0), nkeys);  // keys [0, vis) of the block are visible
        const uint32_t srow_t = tmem + lane_base + L::tmem_s_col;
        float mx = -INFINITY;
#pragma unroll
        for (int c0 = 0; c0 < kBlockKeys; c0 += 32) {
            float v[32];
            tmem_ld32(srow_t + c0, v);
#pragma unroll
            for (int j = 0; j < 32; ++j)
                if (c0 + j < vis) mx = fmaxf(mx, v[j] * scale);
        }
        const bool empty = mx == -INFINITY;  // no visible key: P = 0, LSE = -inf
        float sum = 0.f, tsum = 0.f;
#pragma unroll
        for (int c0 = 0; c0 < kBlockKeys; c0 += 32) {
            float v[32];
            tmem_ld32(srow_t + c0, v);
#pragma unroll
            for (int j = 0; j < 32; ++j) {
                const bool on = !empty && c0 + j < vis;
                const float x = v[j] * scale;
                const float pj = on ? exp2f(x - mx) : 0.f;
                sum += pj;
                if (invT > 0.f && on) tsum += exp2f((x - mx) * invT);
                v[j] = pj;
            }
            if constexpr (L::f8) {  // 16 keys per 16-byte chunk
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    uint32_t o[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        o[i] = pack_p_e4m3x4(v[16 * c + 4 * i], v[16 * c + 4 * i + 1], v[16 * c + 4 * i + 2],
                                             v[16 * c + 4 * i + 3]);
                    st_shared_v4(sQPt + tile_offset(tid, c0 / 16 + c, L::p_row_bytes, kTileM),
                                 make_uint4(o[0], o[1], o[2], o[3]));
                }
            } else {  // 8 keys per chunk
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    uint32_t o[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i) o[i] = pack_p_bf16(v[8 * c + 2 * i], v[8 * c + 2 * i + 1], p.pv_round);
                    st_shared_v4(sQPt + tile_offset(tid, c0 / 8 + c, L::p_row_bytes, kTileM),
                                 make_uint4(o[0], o[1], o[2], o[3]));
                }
            }
        }
        if (!kConv && tile == 0) {  // V landed; clear the rows past the block's keys
            mbar_wait(bar_v, kv_parity(0));
            if (tid >= nkeys) zero_row<L::kv_row, kBlockKeys>(sV, tid);
        }
        fence_proxy_async();
        tc_fence_before();
        __syncthreads();

        // ---- O = P V ----
        if (tid == 0) {
            tc_fence_after();
#pragma unroll
            for (int k = 0; k < L::pv_steps; ++k)
                umma<L::f8>(tmem + L::tmem_o_col,
                            umma_smem_desc(sQPt + kmajor_step_offset(k, L::p_row_bytes, kTileM), kmajor_lbo(),
                                           kmajor_sbo(L::p_row_bytes), span_of(L::p_row_bytes)),
                            umma_smem_desc(sV + mnmajor_step_offset(k, L::keys_per_pv_step, L::kv_row),
                                           mnmajor_lbo(L::kv_row, kBlockKeys), mnmajor_sbo(L::kv_row),
                                           span_of(L::kv_row)),
                            L::idesc_pv, k > 0 ? 1u : 0u);
            umma_commit(bar_mma);
        }
        mbar_wait(bar_mma, mma_parity(2 * tile + 1));
        __syncwarp();
        tc_fence_after();

        // ---- epilogue (msa_core.cuh finish_row) ----
        constexpr float kLn2 = 0.693147180559945309f;
        float lse = -INFINITY, tlse = -INFINITY, inv = 0.f;
        if (!empty && sum > 0.f) {
            lse = (mx + log2f(sum)) * kLn2;
            tlse = invT > 0.f ? (mx * invT + log2f(tsum)) * kLn2 : lse;
            inv = 1.f / sum;
        }
#pragma unroll
        for (int c0 = 0; c0 < D; c0 += 32) {
            float v[32];
            tmem_ld32(tmem + lane_base + L::tmem_o_col + c0, v);
#pragma unroll
            for (int j = 0; j < 32; ++j) v[j] = inv == 0.f ? 0.f : v[j] * inv;
            if (orow >= 0) store32(reinterpret_cast<void*>(p.o_partial), orow * D + c0, v, p.partial_dtype);
        }
        if (orow >= 0) {
            reinterpret_cast<float*>(p.lse_partial)[orow] = lse;
            if (p.tlse_partial) reinterpret_cast<float*>(p.tlse_partial)[orow] = tlse;
        }
        tc_fence_before();
        __syncthreads();  // TMEM S / O and the Q/P tile are free for the next row tile
    }
    if (warp == 0) {
        tc_fence_after();
        tmem_dealloc<L::tmem_cols>(tmem);
    }
}

#endif  // MSA_SM100_ENABLED

template <int V, int D>
__device__ __forceinline__ void fwd_entry(const MsaFwdParams& p, const MsaTensorMaps& maps) {
#if defined(MSA_SM100_ENABLED)
    fwd_body<V, D>(p, maps);
#else
    asm volatile("trap;");  // an SM100-family kernel launched on another architecture
#endif
}

}  // namespace sm100
}  // namespace msa

#define MSA_SM100_FWD_KERNEL(NAME, VAR, D)                                                                      \
    extern "C" __global__ void __launch_bounds__(msa::sm100::kThreads, 1)                                       \
        msa_sm100_fwd_##NAME##_d##D(const __grid_constant__ MsaFwdParams p, const __grid_constant__ MsaTensorMaps maps) { \
        msa::sm100::fwd_entry<msa::sm100::VAR, D>(p, maps);                                                     \
    }
MSA_SM100_FWD_KERNEL(bf16, kBF16, 64)
MSA_SM100_FWD_KERNEL(bf16, kBF16, 128)
MSA_SM100_FWD_KERNEL(bf16, kBF16, 256)
MSA_SM100_FWD_KERNEL(fp8, kFP8, 64)
MSA_SM100_FWD_KERNEL(fp8, kFP8, 128)
MSA_SM100_FWD_KERNEL(fp8, kFP8, 256)
MSA_SM100_FWD_KERNEL(bf16fp8, kBF16FP8, 64)
MSA_SM100_FWD_KERNEL(bf16fp8, kBF16FP8, 128)
MSA_SM100_FWD_KERNEL(bf16fp8, kBF16FP8, 256)
MSA_SM100_FWD_KERNEL(nvfp4, kNVFP4, 64)
MSA_SM100_FWD_KERNEL(nvfp4, kNVFP4, 128)
MSA_SM100_FWD_KERNEL(nvfp4, kNVFP4, 256)
#undef MSA_SM100_FWD_KERNEL

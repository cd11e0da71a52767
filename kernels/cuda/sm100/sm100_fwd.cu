// sm100_fwd.cu - block-sparse prefill partials on SM100 (tcgen05 + TMA):
// msa_sm100_fwd_{bf16,fp8,bf16fp8,nvfp4}_d{64,128,256}.
//
// Same work items, masks, softmax and outputs as sparse_fwd.cu: one CTA per
// forward-schedule item (head_kv, row, q_begin, q_count, batch, kv_block);
// every query-head row of the item attends the item's KV block of <= 128
// keys; O_partial[slot, q, hq, :] and LSE_partial[slot, q, hq] (and the
// temperature LSE) are written at the partial slot from qsplit
// (q_idx | slot << 24).
//
// Warp-specialised pipeline (FwdLayout: `slots` = 2 where two Q/P tiles and
// two S/O pairs fit, else 1). Row tile i (128 query-head rows) belongs to
// pipeline slot s = i % slots, its n-th use n = i / slots.
//   MMA warp (warp 4*slots): allocates (and frees) TMEM; lane 0 is the one
//     thread of the CTA that issues tcgen05.mma and tcgen05.commit, as in
//     every SM100 attention anchor (CUTLASS example 77, FlashAttention-4,
//     FlashMLA): it issues the K and V TMA tiles (converted variants: raw
//     K only), then polls two in-order chains: S(i) = Q K^T into slot s's
//     S columns once Q ready(s) completes use n (committed to S done(s)),
//     and O(j) = P V into slot s's O columns once P ready(s) completes
//     (committed to O done(s)). With two slots one slot's product runs on
//     the tensor cores while the other slot's warpgroup is in its softmax
//     or epilogue. S(1) relies on K (and, converted, on V) through the
//     thread's earlier test of Q ready(0) / K ready, O(j > 0) on the V tile
//     through its earlier test of V ready (warpgroup 1 publishes its first
//     Q before warpgroup 0 has converted K and V).
//     Every wait is bounded (sm100_ptx.cuh mbar_wait, WaitClock): a wrong
//     phase protocol traps with a site code instead of hanging.
//   softmax warpgroup s (warps 4s..4s+3, thread t = row t = TMEM lane t):
//     gather  every thread cp.asyncs its own Q row of the slot's next row
//             tile into the slot's swizzled K-major Q tile (padding rows
//             zero-filled), then arrives on Q ready(s). The gather of tile
//             i + slots is issued as soon as O(i) has read P(i) from the same
//             tile, so it overlaps tile i's epilogue.
//     convert (bf16fp8 / nvfp4, warpgroup 0 before its first Q ready) raw K
//             -> bf16 K, then the raw V TMA into the same staging tile ->
//             bf16 V
//     softmax wait S done(s); tcgen05.ld of the row (two passes of 4 x 32
//             columns): mask to the row's visible prefix, block max, exp2,
//             sum (unrounded P), temperature sum; P rounded and stored
//             K-major over the slot's Q tile; arrive on P ready(s)
//     epilogue wait O done(s); tcgen05.ld of O, times 1/l, partial-dtype
//             stores; LSE
#include "sm100/sm100_common.cuh"

namespace msa {
namespace sm100 {

#if defined(MSA_SM100_ENABLED)

template <int V, int D>
__device__ __forceinline__ void fwd_body(const MsaFwdParams& p, const MsaTensorMaps& maps) {
    using L = FwdLayout<V, D>;
    constexpr bool kConv = kv_converted(V);
    constexpr int kStorageBytes = V == kBF16 ? 2 : 1;  // element size of the K/V tensor maps
    constexpr int kSlots = L::slots;
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

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    uint8_t* sm = align_1024(dsmem);
    const uint32_t sK = smem_u32(sm + L::k_off), sV = smem_u32(sm + L::v_off), sRaw = smem_u32(sm + L::raw_off);
    const uint32_t bar = smem_u32(sm + L::bar_off);
    const uint32_t bar_k = bar + 8 * L::bar_k, bar_v = bar + 8 * L::bar_v;
    auto q_ready = [&](int s) { return bar + 8 * (L::bar_q + s); };
    auto s_done = [&](int s) { return bar + 8 * (L::bar_s + s); };
    auto p_ready = [&](int s) { return bar + 8 * (L::bar_p + s); };
    auto o_done = [&](int s) { return bar + 8 * (L::bar_o + s); };
    auto qp_tile = [&](int s) { return smem_u32(sm + L::qp_tile_off(s)); };
    uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(sm + L::tmem_slot_off);

    if (warp == L::mma_warp) tmem_alloc<L::tmem_cols>(smem_u32(tmem_slot));
    if (tid == 0) {
        mbar_init(bar_k, 1);
        mbar_init(bar_v, 1);
        for (int s = 0; s < kSlots; ++s) {
            mbar_init(q_ready(s), kTileM);
            mbar_init(s_done(s), 1);
            mbar_init(p_ready(s), kTileM);
            mbar_init(o_done(s), 1);
        }
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
    const int nrows = q_count * p.qhead_per_kv;
    const int ntiles = (nrows + kTileM - 1) / kTileM;

    if (warp == L::mma_warp) {
        // ---- the MMA warp, lane 0: the K/V TMA, then every S(i) = Q K^T and
        // O(j) = P V of the CTA, and every tcgen05.commit ----
        if (lane == 0) {
            tma_prefetch_map(&maps.k);
            tma_prefetch_map(&maps.v);
            issue_kv_tile<L::raw_row, kStorageBytes>(kConv ? sRaw : sK, &maps.k, bar_k, g, t0, nkeys);
            if constexpr (!kConv) issue_kv_tile<L::raw_row, kStorageBytes>(sV, &maps.v, bar_v, g, t0, nkeys);
            // Two in-order chains polled by one thread: S(ns) once Q ready
            // of its slot has completed (and, tile 0 of the TMA variants,
            // K has landed), O(no) once P ready of its slot has completed.
            // Polling instead of a fixed order keeps the chains independent:
            // one slot's O never waits behind the other slot's S (which
            // waits for that slot's epilogue and next gather). S(ns) is
            // always ahead of O(ns) (P ready needs S done). A tested phase
            // is never ambiguous: Q ready(s)'s next phase needs the epilogue
            // of tile ns, which needs S(ns); P ready(s)'s next phase needs
            // S(no + kSlots), which needs the epilogue of tile no, which
            // needs O(no). tcgen05.commit tracks every earlier MMA of this
            // thread, so S done may also wait for an O in flight: a later
            // arrival, never a missing one.
            bool k_seen = kConv;  // the converted K/V is covered by Q ready(0)
            bool v_seen = kConv;
            int ns = 0, no = 0;
            WaitClock clock;
#pragma unroll 1
            while (no < ntiles) {
                bool progressed = false;
                if (ns < ntiles) {
                    const int s = ns % kSlots;
                    if (!k_seen) k_seen = mbar_test(bar_k, kv_parity(0));
                    if (k_seen && mbar_test(q_ready(s), slot_parity(ns / kSlots))) {
                        const uint32_t sQ = qp_tile(s);
                        tc_fence_after();
#pragma unroll
                        for (int k = 0; k < L::qk_steps; ++k)
                            umma<L::f8>(tmem + L::tmem_s_col(s),
                                        umma_smem_desc(sQ + kmajor_step_offset(k, L::q_row_bytes, kTileM), kmajor_lbo(),
                                                       kmajor_sbo(L::q_row_bytes), span_of(L::q_row_bytes)),
                                        umma_smem_desc(sK + kmajor_step_offset(k, L::kv_row, kBlockKeys), kmajor_lbo(),
                                                       kmajor_sbo(L::kv_row), span_of(L::kv_row)),
                                        L::idesc_qk, k > 0 ? 1u : 0u);
                        umma_commit(s_done(s));
                        ++ns;
                        progressed = true;
                    }
                }
                if (no < ns) {
                    const int s = no % kSlots;
                    // V: warpgroup 0 waited for it before P ready(0); this
                    // thread observes the completed phase too.
                    if (!v_seen) v_seen = mbar_test(bar_v, kv_parity(0));
                    if (v_seen && mbar_test(p_ready(s), slot_parity(no / kSlots))) {
                        const uint32_t sP = qp_tile(s);
                        tc_fence_after();
#pragma unroll
                        for (int k = 0; k < L::pv_steps; ++k)
                            umma<L::f8>(tmem + L::tmem_o_col(s),
                                        umma_smem_desc(sP + kmajor_step_offset(k, L::p_row_bytes, kTileM), kmajor_lbo(),
                                                       kmajor_sbo(L::p_row_bytes), span_of(L::p_row_bytes)),
                                        umma_smem_desc(sV + mnmajor_step_offset(k, L::keys_per_pv_step, L::kv_row),
                                                       mnmajor_lbo(L::kv_row, kBlockKeys), mnmajor_sbo(L::kv_row),
                                                       span_of(L::kv_row)),
                                        L::idesc_pv, k > 0 ? 1u : 0u);
                        umma_commit(o_done(s));
                        ++no;
                        progressed = true;
                    }
                }
                if (progressed) clock = WaitClock();
                else clock.tick(wait_code(kWaitFwd, L::num_bars, 0));  // site num_bars: the issuer's poll
            }
        }
        __syncwarp();
    } else {
        // ---- softmax warpgroup `slot`: row tiles slot, slot + kSlots, ... ----
        const int slot = tid >> 7, rtid = tid & (kTileM - 1);
        const uint32_t sQP = qp_tile(slot);
        const uint32_t lane_base = fwd_lane_base(warp);  // rows 32 (warp % 4) .. +31 = this warp's TMEM lanes
        const uint32_t tS = tmem + lane_base + L::tmem_s_col(slot), tO = tmem + lane_base + L::tmem_o_col(slot);
        float scale = p.softmax_scale_log2;
        if (V == kNVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
        const float invT = p.inv_temperature;
        const uint8_t* qbase = reinterpret_cast<const uint8_t*>(p.q);
        const int qes = p.q_dtype == MSA_DT_BF16 ? 2 : 1;
        // E4M3 Q with NVFP4 K/V is widened to bf16 while it is gathered (synchronously).
        const bool widenQ = V == kNVFP4 && p.q_dtype == MSA_DT_E4M3;
        auto gather = [&](int i) {  // this thread's Q row of row tile i into the slot's tile
            const int idx = i * kTileM + rtid;
            const uint8_t* src = nullptr;
            if (idx < nrows) {
                const int ql = (int)((unsigned)entries[idx / p.qhead_per_kv] & 0xFFFFFFu);
                const int hq = h * p.qhead_per_kv + idx % p.qhead_per_kv;
                src = qbase + (((long long)q0 + ql) * p.num_heads_q + hq) * D * qes;
            }
            if (widenQ) gather_row_e4m3_to_bf16<D, kTileM>(sQP, rtid, src);
            else gather_row_async<L::q_row_bytes, kTileM>(sQP, rtid, src, qbase);
        };
        auto publish_q = [&]() {  // this thread's Q row has landed: visible to the MMA (async proxy)
            if (!widenQ) cp_async_wait_all();
            fence_proxy_async();
            mbar_arrive(q_ready(slot));
        };
        if (slot < ntiles) {
            gather(slot);
            if (kConv && slot == 0) {  // K and V to bf16 once per item, thread t converts key t
                const bool valid = rtid < nkeys;
                const long long srow = (V == kNVFP4 && valid) ? g.scale_row(t0 + rtid) : 0;
                mbar_wait(bar_k, kv_parity(0), kWaitFwd, L::bar_k);
                convert_kv_row<V, D>(sK, sRaw, rtid, valid, reinterpret_cast<const uint8_t*>(p.k_scale), srow);
                named_bar_sync(1, kTileM);  // the staging tile is free again
                if (rtid == 0) issue_kv_tile<L::raw_row, kStorageBytes>(sRaw, &maps.v, bar_v, g, t0, nkeys);
                mbar_wait(bar_v, kv_parity(0), kWaitFwd, L::bar_v);
                convert_kv_row<V, D>(sV, sRaw, rtid, valid, reinterpret_cast<const uint8_t*>(p.v_scale), srow);
            }
            publish_q();
        }
#pragma unroll 1
        for (int i = slot, n = 0; i < ntiles; i += kSlots, ++n) {
            // ---- this thread's row: output row, visible-key limit ----
            const int idx = i * kTileM + rtid;
            long long orow = -1;
            int lim = 0;
            if (idx < nrows) {
                const unsigned e = (unsigned)entries[idx / p.qhead_per_kv];
                const int ql = (int)(e & 0xFFFFFFu), pslot = (int)(e >> 24);
                const int hq = h * p.qhead_per_kv + idx % p.qhead_per_kv;
                orow = ((long long)pslot * p.total_q + q0 + ql) * p.num_heads_q + hq;
                lim = seqlen_k;
                if (p.causal) lim = min(lim, ql + seqlen_k - seqlen_q + 1);
            }
            mbar_wait(s_done(slot), slot_parity(n), kWaitFwd, L::bar_s + slot);
            __syncwarp();
            tc_fence_after();

            // ---- softmax of the row over the block (base 2, msa_core.cuh block_update) ----
            const int vis = min(max(lim - t0, 0), nkeys);  // keys [0, vis) of the block are visible
            const float mx = tmem_row_max(tS, vis, scale);
            const bool empty = mx == -INFINITY;  // no visible key: P = 0, LSE = -inf
            float sum = 0.f, tsum = 0.f;
            // P over the Q tile: S(i) has completed, so its Q reads are done.
            tmem_row_p<L::f8>(tS, vis, empty, scale, mx, invT, sQP, rtid, p.pv_round, sum, tsum);
            if (!kConv && i == 0) {  // V landed; clear the rows past the block's keys
                mbar_wait(bar_v, kv_parity(0), kWaitFwd, L::bar_v);
                if (rtid >= nkeys) zero_row<L::kv_row, kBlockKeys>(sV, rtid);
            }
            fence_proxy_async();
            tc_fence_before();
            mbar_arrive(p_ready(slot));  // P stored and S read: O(i) may run, S(i + kSlots) may overwrite S

            mbar_wait(o_done(slot), slot_parity(n), kWaitFwd, L::bar_o + slot);
            __syncwarp();
            tc_fence_after();
            const bool more = i + kSlots < ntiles;
            if (more) gather(i + kSlots);  // O(i) has read P(i): the tile takes the slot's next Q

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
                tmem_ld32(tO + c0, v);
#pragma unroll
                for (int j = 0; j < 32; ++j) v[j] = inv == 0.f ? 0.f : v[j] * inv;
                if (orow >= 0) store32(reinterpret_cast<void*>(p.o_partial), orow * D + c0, v, p.partial_dtype);
            }
            if (orow >= 0) {
                reinterpret_cast<float*>(p.lse_partial)[orow] = lse;
                if (p.tlse_partial) reinterpret_cast<float*>(p.tlse_partial)[orow] = tlse;
            }
            if (more) {
                tc_fence_before();  // O read: O(i + kSlots) may overwrite it
                publish_q();
            }
        }
    }
    tmem_release_cta<L::tmem_cols>(warp == L::mma_warp, tmem);  // every product was waited
}

#endif  // MSA_SM100_ENABLED

}  // namespace sm100
}  // namespace msa

#define MSA_SM100_FWD_KERNEL(NAME, VAR, D)                                                                      \
    extern "C" __global__ void __launch_bounds__(msa::sm100::FwdLayout<msa::sm100::VAR, D>::threads, 1)     \
        msa_sm100_fwd_##NAME##_d##D(const __grid_constant__ MsaFwdParams p, const __grid_constant__ MsaTensorMaps maps) { \
        MSA_SM100_BODY(msa::sm100::fwd_body<msa::sm100::VAR, D>(p, maps));                                      \
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

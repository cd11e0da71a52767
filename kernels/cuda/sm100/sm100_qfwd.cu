// sm100_qfwd.cu - query-major block-sparse prefill on SM100 (tcgen05 + TMA):
// msa_sm100_qfwd_{bf16,fp8,nvfp4}_d{64,128,256}, msa_sm100_qfwd_bf16fp8_d{64,128}.
//
// Same plan, parameter block and results as sm80/sm80_qfwd.cu (cuda.QPlan
// with 128-row tiles on SM100, MsaQFwdParams): one CTA per query tile x KV
// head walks the union of the blocks the tile's tokens selected, in
// ascending order, each row masked to the blocks its token selected and to
// its causal limit, keeps the online softmax across blocks and writes the
// final BF16 O (times output_scale), LSE and temperature LSE once: no
// partials, no combine. Layout, roles and barriers: QFwdLayout in
// sm100_layout.cuh.
//
// Per block j of the walk (counters run over all 128-row passes of the tile):
//   load warp   K_j, V_j by TMA into ring slot j % stages once the products
//               that read the slot's previous K / V have committed K empty /
//               V empty (bf16, fp8); or the raw K_j, V_j into the raw tiles
//               once the converter has released them (raw K / V empty).
//   converter   (bf16fp8, nvfp4) once raw K_j has landed and ring slot
//               j % stages is empty, thread t widens key t to BF16 into the
//               slot (NVFP4 with its block scale; keys past the block
//               zeroed) and arrives on K full and raw K empty; then V.
//   MMA issuer  S_{j+1} = Q K_{j+1}^T into S buffer (j+1) & 1, once O
//               done(j-1) has shown that O += P_{j-1} V_{j-1} read the P
//               held there (commit: S full; K empty when a later block
//               refills the slot), then, once O corrected(j) (which
//               follows P ready(j)): O (+)= P_j V_j with P_j from tensor
//               memory (commit: V empty when the slot is refilled; O
//               done). S_{j+1} runs on the tensor cores while the softmax
//               of block j runs.
//   softmax     wait S full(j); the row's block max (first pass over S), P
//               (second pass: exp2, unrounded sum, P rounded and stored by
//               tcgen05.st over S_j in its own TMEM lane: BF16 pairs or
//               E4M3 quads from the buffer's first column, each chunk's P
//               below the columns still to be read); zero the V rows past
//               the block's keys (P = 0 there must not meet stale shared
//               memory; the converter zeroes them in the converted
//               variants); store the row's record (alpha of the block, m,
//               l, temperature l) in the buffer's last 4 columns; arrive on
//               P ready of buffer j & 1. It never waits for a product of O,
//               so the softmax of block j+1 runs while O += P_j V_j and the
//               correction of block j do.
//   correction  wait P ready(j); read the record; wait O done(j-1) and
//               rescale O in tensor memory by alpha when any row of the
//               warp changed its max; arrive on O corrected(j), which the
//               issuer waits before O += P_j V_j.
// A tile holds at most 128 rows when qhead_per_kv <= 128 (the planner's
// limit), so it is one pass; the passes exist for the plan format's
// one-token tiles of more heads. After the walk of a pass the softmax
// warpgroup gathers the next pass's Q (the pass's last S has completed);
// the correction warpgroup waits O done of the last block and stores O /
// l, the LSE and the temperature LSE from the last record, then arrives on
// O corrected for the next pass's first block (whose O product overwrites
// O). A tile whose walk is empty (no selected block starts before the
// sequence's end) writes O = 0 and LSE = -inf without touching the tensor
// cores.
//
// The wait on O done(j-1) before S_{j+1} (at a pass's first block, on the
// previous block's O done, the last one issued) is what keeps S_{j+1} from
// overwriting P_{j-1} and its record: the PTX ISA orders tcgen05.mma pairs
// of one thread only for the same accumulator and shape (O += P V and
// S = Q K^T are not), so the issue order alone would not; O done(j-1)
// also follows O corrected(j-1), so the record was read.
// Why each phase wait is unambiguous (the parity of use n is n & 1, and no
// barrier can complete use n + 1 before its waiters have seen use n):
// S full(b) and P ready(b) of block j+2 need S_{j+2}, issued after O
// done(j), which needs the issuer's wait on O corrected(j), arrived after
// the correction's wait on P ready(j) (its only waiter), and P ready(j) is
// arrived after the softmax's wait on S full(j); O done(j+1)
// needs O corrected(j+1), arrived after the correction's wait on O done(j)
// (its epilogue's, at a pass's end), and O += P_{j+1} V_{j+1}, issued
// after the issuer's own wait on O done(j) or O done(j-1); O corrected(j+1)
// comes after the correction's wait on O done(j), which needs the issuer's
// wait on O corrected(j); K / V empty of a slot are waited by the load warp
// (converted: the converter) in use order, and a slot's next full phase
// needs its empty phase; raw K / V full of block j+1 needs raw empty of
// block j, which the converter arrives after its wait on raw full of block
// j; Q ready of the next pass is arrived after the softmax's wait on the
// pass's last S, issued after the issuer's wait on Q ready.
// cuda/emu_sm100_qfwd_test.go runs the roles' barrier programs under every
// scheduling order it explores and checks every read against the writes
// it needs.
#include "shared/tc_frag.cuh"
#include "sm100/sm100_common.cuh"

namespace msa {
namespace sm100 {

#if defined(MSA_SM100_ENABLED)

// Blocks of the tile's list that start before the sequence's end (the plan
// lists no others; ids ascend, so any such block ends the list and is
// skipped, as sm80_qfwd.cu's stream skips it).
__device__ __forceinline__ int qwalk_len(const int* blocks, int lo, int hi, int blk, int seqlen_k) {
    int n = hi - lo;
    while (n > 0 && (long long)blocks[lo + n - 1] * blk >= seqlen_k) --n;
    return n;
}

template <int V, int D>
__device__ __forceinline__ void qfwd_body(const MsaQFwdParams& p, const MsaTensorMaps& maps) {
    using L = QFwdLayout<V, D>;
    constexpr int kStorageBytes = V == kBF16 ? 2 : 1;  // element size of the K/V tensor maps
    extern __shared__ uint8_t dsmem[];
    const int tile = blockIdx.x;
    if (tile >= p.num_tiles) return;  // CTA-uniform, before any TMEM use
    int b;
    const tc::QRows R = tc::q_tile_rows(p, tile, D, b);
    const int* blocks = reinterpret_cast<const int*>(p.blocks);
    const unsigned long long* masks = reinterpret_cast<const unsigned long long*>(p.masks);
    const int lo = reinterpret_cast<const int*>(p.tile_ptr)[tile];
    const int nblk = qwalk_len(blocks, lo, reinterpret_cast<const int*>(p.tile_ptr)[tile + 1], p.blk_kv, R.seqlen_k);
    const int npass = (R.nrows + kTileM - 1) / kTileM;
    // Blocks over all passes. The issuer commits K / V empty only for a
    // slot that block n + stages refills, so every arrival has a waiter and
    // none can land after the CTA has exited.
    const int nwalk = npass * nblk;
    const int bkeys = min(p.blk_kv, kBlockKeys);
    auto keys_of = [&](int i, int& t0) {  // first key and key count of block i of the walk
        t0 = blocks[lo + i] * p.blk_kv;
        return min(bkeys, R.seqlen_k - t0);
    };
    // The load warp's and the converter's walk: f(n, s, u, t0, nk) for block
    // i of each pass, n counting blocks over all passes, ring slot s = n %
    // stages in its use u = n / stages, keys [t0, t0 + nk).
    auto each_block = [&](auto&& f) {
#pragma unroll 1
        for (int n = 0, pass = 0; pass < npass; ++pass) {
#pragma unroll 1
            for (int i = 0; i < nblk; ++i, ++n) {
                int t0;
                const int nk = keys_of(i, t0);
                f(n, n % L::stages, n / L::stages, t0, nk);
            }
        }
    };

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    uint8_t* sm = align_1024(dsmem);
    const uint32_t sQ = smem_u32(sm + L::q_off);
    auto sK = [&](int s) { return smem_u32(sm + L::k_off + s * L::kv_bytes); };
    auto sV = [&](int s) { return smem_u32(sm + L::v_off + s * L::kv_bytes); };
    const uint32_t sRawK = smem_u32(sm + L::rk_off), sRawV = smem_u32(sm + L::rv_off);
    const uint32_t bar = smem_u32(sm + L::bar_off);
    auto B = [&](int i) { return bar + 8 * i; };
    uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(sm + L::tmem_slot_off);

    if (warp == L::mma_warp) tmem_alloc<L::tmem_cols>(smem_u32(tmem_slot));
    if (tid == 0) {
        constexpr int kFull = L::conv ? 128 : 1;  // the converter's threads, or the TMA issuer
        for (int s = 0; s < L::stages; ++s) {
            mbar_init(B(L::bar_k + s), kFull);
            mbar_init(B(L::bar_v + s), kFull);
            mbar_init(B(L::bar_ke + s), 1);
            mbar_init(B(L::bar_ve + s), 1);
        }
        if constexpr (L::conv) {
            mbar_init(B(L::bar_rk), 1);
            mbar_init(B(L::bar_rv), 1);
            mbar_init(B(L::bar_rke), 128);
            mbar_init(B(L::bar_rve), 128);
        }
        mbar_init(B(L::bar_q), L::softmax_threads);
        mbar_init(B(L::bar_s), 1);
        mbar_init(B(L::bar_s + 1), 1);
        mbar_init(B(L::bar_p), L::softmax_threads);
        mbar_init(B(L::bar_p + 1), L::softmax_threads);
        mbar_init(B(L::bar_o), 1);
        mbar_init(B(L::bar_c), 128);
        mbar_fence_init();
    }
    tc_fence_before();
    __syncthreads();
    tc_fence_after();
    const uint32_t tmem = *tmem_slot;

    KVGeom g;
    g.page_row = p.page_table ? reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride : nullptr;
    g.dense_base = p.page_table ? 0 : reinterpret_cast<const int*>(p.cu_seqlens_k)[b];
    g.h = R.h; g.Hkv = p.num_heads_kv; g.page_size = p.page_size;

    if (warp == L::load_warp) {
        // ---- load warp, lane 0: K_j and V_j of every block of every pass ----
        if (lane == 0 && nblk > 0) {
            tma_prefetch_map(&maps.k);
            tma_prefetch_map(&maps.v);
            each_block([&](int n, int s, int u, int t0, int nk) {
                if constexpr (L::conv) {  // the raw tiles, once the converter has read the previous block's
                    if (n > 0) mbar_wait(B(L::bar_rke), slot_parity(n - 1), kWaitQFwd, L::bar_rke);
                    issue_kv_tile<L::raw_row, kStorageBytes>(sRawK, &maps.k, B(L::bar_rk), g, t0, nk);
                    if (n > 0) mbar_wait(B(L::bar_rve), slot_parity(n - 1), kWaitQFwd, L::bar_rve);
                    issue_kv_tile<L::raw_row, kStorageBytes>(sRawV, &maps.v, B(L::bar_rv), g, t0, nk);
                } else {
                    if (u > 0) mbar_wait(B(L::bar_ke + s), slot_parity(u - 1), kWaitQFwd, L::bar_ke + s);
                    issue_kv_tile<L::raw_row, kStorageBytes>(sK(s), &maps.k, B(L::bar_k + s), g, t0, nk);
                    if (u > 0) mbar_wait(B(L::bar_ve + s), slot_parity(u - 1), kWaitQFwd, L::bar_ve + s);
                    issue_kv_tile<L::raw_row, kStorageBytes>(sV(s), &maps.v, B(L::bar_v + s), g, t0, nk);
                }
            });
        }
        __syncwarp();
    } else if (L::conv && warp >= L::conv_warp0 && warp < L::corr_warp0) {
        // ---- converter warpgroup: thread t widens key t of each raw tile ----
        const int t = tid - 32 * L::conv_warp0;
        const uint8_t* kscale = reinterpret_cast<const uint8_t*>(p.k_scale);
        const uint8_t* vscale = reinterpret_cast<const uint8_t*>(p.v_scale);
        each_block([&](int n, int s, int u, int t0, int nk) {
            const bool valid = t < nk;
            const long long srow = (V == kNVFP4 && valid) ? g.scale_row(t0 + t) : 0;
            mbar_wait(B(L::bar_rk), slot_parity(n), kWaitQFwd, L::bar_rk);
            if (u > 0) mbar_wait(B(L::bar_ke + s), slot_parity(u - 1), kWaitQFwd, L::bar_ke + s);
            convert_kv_row<V, D>(sK(s), sRawK, t, valid, kscale, srow);
            fence_proxy_async();  // the widened rows: visible to the MMA; the raw tile: free for the next TMA
            mbar_arrive(B(L::bar_k + s));
            mbar_arrive(B(L::bar_rke));
            mbar_wait(B(L::bar_rv), slot_parity(n), kWaitQFwd, L::bar_rv);
            if (u > 0) mbar_wait(B(L::bar_ve + s), slot_parity(u - 1), kWaitQFwd, L::bar_ve + s);
            convert_kv_row<V, D>(sV(s), sRawV, t, valid, vscale, srow);
            fence_proxy_async();
            mbar_arrive(B(L::bar_v + s));
            mbar_arrive(B(L::bar_rve));
        });
    } else if (warp == L::mma_warp) {
        // ---- MMA warp, lane 0: every tcgen05.mma and tcgen05.commit ----
        if (lane == 0 && nblk > 0) {
            // S_n = Q K_n^T into S buffer n & 1, which holds P_{n-2}: first
            // wait O done(u), u the last O product issued (n - 2 inside a
            // pass, n - 1 at a pass's start; -1: none), which covers it. A
            // later O done phase cannot have completed: its product is
            // issued after this wait.
            auto issue_s = [&](int n, int u) {
                const int s = n % L::stages;
                if (n >= 2) mbar_wait(B(L::bar_o), slot_parity(u), kWaitQFwd, L::bar_o);
                mbar_wait(B(L::bar_k + s), slot_parity(n / L::stages), kWaitQFwd, L::bar_k + s);
                tc_fence_after();
#pragma unroll
                for (int k = 0; k < L::qk_steps; ++k)
                    umma<L::f8>(tmem + L::tmem_s_col(n & 1),
                                umma_smem_desc(sQ + kmajor_step_offset(k, L::q_row_bytes, kTileM), kmajor_lbo(),
                                               kmajor_sbo(L::q_row_bytes), span_of(L::q_row_bytes)),
                                umma_smem_desc(sK(s) + kmajor_step_offset(k, L::kv_row, kBlockKeys), kmajor_lbo(),
                                               kmajor_sbo(L::kv_row), span_of(L::kv_row)),
                                L::idesc_qk, k > 0 ? 1u : 0u);
                umma_commit(B(L::bar_s + (n & 1)));
                if (n + L::stages < nwalk) umma_commit(B(L::bar_ke + s));  // only a slot that is refilled
            };
#pragma unroll 1
            for (int n = 0, pass = 0; pass < npass; ++pass) {
                mbar_wait(B(L::bar_q), slot_parity(pass), kWaitQFwd, L::bar_q);
                tc_fence_after();
                issue_s(n, n - 1);
#pragma unroll 1
                for (int i = 0; i < nblk; ++i, ++n) {
                    if (i + 1 < nblk) issue_s(n + 1, n - 1);
                    const int s = n % L::stages;
                    const int sb = n & 1;
                    // O corrected(n) follows the correction's wait on P ready(n): P_n is stored.
                    mbar_wait(B(L::bar_c), slot_parity(n), kWaitQFwd, L::bar_c);
                    mbar_wait(B(L::bar_v + s), slot_parity(n / L::stages), kWaitQFwd, L::bar_v + s);
                    tc_fence_after();
                    const uint32_t pt = tmem + L::tmem_p_col(sb);  // P_n over S_n, lane 0
#pragma unroll
                    for (int k = 0; k < L::pv_steps; ++k)
                        umma_ts<L::f8>(tmem + L::tmem_o_col, pt + k * L::p_cols_per_pv_step,
                                       umma_smem_desc(sV(s) + mnmajor_step_offset(k, L::keys_per_pv_step, L::kv_row),
                                                      mnmajor_lbo(L::kv_row, kBlockKeys), mnmajor_sbo(L::kv_row),
                                                      span_of(L::kv_row)),
                                       L::idesc_pv, (i > 0 || k > 0) ? 1u : 0u);
                    if (n + L::stages < nwalk) umma_commit(B(L::bar_ve + s));
                    umma_commit(B(L::bar_o));
                }
            }
        }
        __syncwarp();
    } else if (warp >= L::corr_warp0) {
        // ---- correction warpgroup: lane l of warp w owns row 32 (w % 4) + l (its TMEM lane) ----
        const int r = 32 * (warp & 3) + lane;
        const uint32_t lane_base = tmem_lane_base(warp);
        const uint32_t tO = tmem + lane_base + L::tmem_o_col;
        const float invT = p.inv_temperature;
        const float oscale = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
#pragma unroll 1
        for (int n = 0, pass = 0; pass < npass; ++pass) {
            float m = -INFINITY, l = 0.f, tl = 0.f;
#pragma unroll 1
            for (int i = 0; i < nblk; ++i, ++n) {
                const int sb = n & 1;
                mbar_wait(B(L::bar_p + sb), slot_parity(n >> 1), kWaitQFwd, L::bar_p + sb);
                __syncwarp();
                tc_fence_after();
                float rec[4];  // alpha of block n, then m, l and tl after it
                tmem_ld4(tmem + lane_base + L::tmem_s_col(sb) + L::tmem_rec_col, rec);
                m = rec[1];
                l = rec[2];
                tl = rec[3];
                if (i > 0) {  // O_{n-1} has completed: rescale O by alpha before O += P_n V_n
                    mbar_wait(B(L::bar_o), slot_parity(n - 1), kWaitQFwd, L::bar_o);
                    __syncwarp();
                    tc_fence_after();
                    const float alpha = rec[0];
                    if (__any_sync(0xffffffffu, alpha != 1.f)) {  // tcgen05.ld / st are warp-collective
#pragma unroll 1
                        for (int c0 = 0; c0 < D; c0 += 32) {
                            float v[32];
                            tmem_ld32(tO + c0, v);
#pragma unroll
                            for (int j = 0; j < 32; ++j) v[j] *= alpha;
                            tmem_st32(tO + c0, v);
                        }
                    }
                }
                tc_fence_before();         // the record read and O rescaled, before the arrival
                mbar_arrive(B(L::bar_c));  // O += P_n V_n may run
            }
            if (nblk > 0) {
                mbar_wait(B(L::bar_o), slot_parity(n - 1), kWaitQFwd, L::bar_o);
                __syncwarp();
                tc_fence_after();
            }
            // ---- epilogue (tc_frag.cuh finish): O / l times output_scale, LSE, temperature LSE ----
            long long qoff, orow;
            int lim, tok;
            R.row(pass * kTileM + r, qoff, orow, lim, tok);
            tc::Soft st;
            st.m[0] = m; st.l[0] = l; st.tl[0] = tl;
            float lse, tlse;
            const float f = tc::finish(st, 0, invT, lse, tlse) * oscale;
#pragma unroll 1
            for (int c0 = 0; c0 < D; c0 += 32) {
                float v[32];
                if (nblk > 0) tmem_ld32(tO + c0, v);
#pragma unroll
                for (int j = 0; j < 32; ++j) v[j] = f == 0.f ? 0.f : v[j] * f;
                if (orow >= 0) store32(reinterpret_cast<void*>(p.out), orow * D + c0, v, MSA_DT_BF16);
            }
            if (orow >= 0) {
                reinterpret_cast<float*>(p.lse)[orow] = lse;
                if (p.tlse) reinterpret_cast<float*>(p.tlse)[orow] = tlse;
            }
            tc_fence_before();  // O read: the next pass's first O product (after O corrected) may overwrite it
        }
    } else {
        // ---- softmax warpgroup: thread r owns row r of each pass (TMEM lane r) ----
        const int r = tid;
        const uint32_t lane_base = tmem_lane_base(warp);
        float scale = p.softmax_scale_log2;
        if (V == kNVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
        const float invT = p.inv_temperature;
        const uint8_t* qbase = reinterpret_cast<const uint8_t*>(p.q);
        const int qes = p.q_dtype == MSA_DT_BF16 ? 2 : 1;
        // E4M3 Q with NVFP4 K/V is widened to bf16 while it is gathered (synchronously).
        const bool widenQ = V == kNVFP4 && p.q_dtype == MSA_DT_E4M3;
        auto gather = [&](int pass) {  // this thread's Q row of the pass (zero-filled padding)
            long long qoff, orow;
            int lim, tok;
            R.row(pass * kTileM + r, qoff, orow, lim, tok);
            const uint8_t* src = qoff >= 0 ? qbase + qoff * qes : nullptr;
            if (widenQ) gather_row_e4m3_to_bf16<D, kTileM>(sQ, r, src);
            else gather_row_async<L::q_row_bytes, kTileM>(sQ, r, src, qbase);
        };
        auto publish = [&]() {  // visible to the MMA (async proxy); counts toward Q ready
            if (!widenQ) cp_async_wait_all();
            fence_proxy_async();
            mbar_arrive(B(L::bar_q));
        };
        if (nblk > 0) {
            gather(0);
            publish();
        }
#pragma unroll 1
        for (int n = 0, pass = 0; pass < npass; ++pass) {
            long long qoff, orow;
            int lim, tok;
            R.row(pass * kTileM + r, qoff, orow, lim, tok);
            float m = -INFINITY, l = 0.f, tl = 0.f;
#pragma unroll 1
            for (int i = 0; i < nblk; ++i, ++n) {
                int t0;
                const int nk = keys_of(i, t0);
                const bool sel = orow >= 0 && ((masks[lo + i] >> tok) & 1ull);
                const int vis = sel ? min(max(lim - t0, 0), nk) : 0;  // keys [0, vis) of the block are visible
                const int sb = n & 1;  // S buffer of block n
                const uint32_t tS = tmem + lane_base + L::tmem_s_col(sb);
                mbar_wait(B(L::bar_s + sb), slot_parity(n >> 1), kWaitQFwd, L::bar_s + sb);
                __syncwarp();
                tc_fence_after();
                const float mx = tmem_row_max(tS, vis, scale);
                const bool empty = mx == -INFINITY;  // no visible key: the row's state is untouched
                const float mnew = empty ? m : fmaxf(m, mx);
                float sum = 0.f, tsum = 0.f;
                tmem_row_p<L::f8, true>(tS, vis, empty, scale, mnew, invT, tmem + lane_base + L::tmem_p_col(sb), r, p.pv_round, sum,
                                        tsum);
                if (!L::conv && nk < kBlockKeys && r >= nk) {  // V rows past the block's keys: zero, after the TMA landed
                    const int s = n % L::stages;
                    mbar_wait(B(L::bar_v + s), slot_parity(n / L::stages), kWaitQFwd, L::bar_v + s);
                    zero_row<L::kv_row, kBlockKeys>(sV(s), r);
                }
                if (invT > 0.f && !empty) tl = tl * exp2f((m - mnew) * invT) + tsum;
                const float alpha = empty ? 1.f : exp2f(m - mnew);
                l = l * alpha + sum;
                m = mnew;
                const float rec[4] = {alpha, m, l, tl};
                tmem_st4(tS + L::tmem_rec_col, rec);  // S there was read by tmem_row_p's last chunk
                tmem_wait_st();
                fence_proxy_async();  // the zeroed V rows: visible to the MMA
                tc_fence_before();    // P and the record stored (waited), before the arrivals
                mbar_arrive(B(L::bar_p + sb));  // P and the record: O may be corrected, then O += P_n V_n run
            }
            if (nblk > 0 && pass + 1 < npass) {
                gather(pass + 1);  // the pass's last S has completed: Q is free
                publish();
            }
        }
    }
    tmem_release_cta<L::tmem_cols>(warp == L::mma_warp, tmem);  // every product was waited
}

#endif  // MSA_SM100_ENABLED

}  // namespace sm100
}  // namespace msa

#define MSA_SM100_QFWD_KERNEL(NAME, VAR, D)                                                                     \
    extern "C" __global__ void __launch_bounds__(msa::sm100::QFwdLayout<msa::sm100::VAR, D>::threads, 1)    \
        msa_sm100_qfwd_##NAME##_d##D(const __grid_constant__ MsaQFwdParams p, const __grid_constant__ MsaTensorMaps maps) { \
        MSA_SM100_BODY(msa::sm100::qfwd_body<msa::sm100::VAR, D>(p, maps));                                     \
    }
MSA_SM100_QFWD_KERNEL(bf16, kBF16, 64)
MSA_SM100_QFWD_KERNEL(bf16, kBF16, 128)
MSA_SM100_QFWD_KERNEL(bf16, kBF16, 256)
MSA_SM100_QFWD_KERNEL(fp8, kFP8, 64)
MSA_SM100_QFWD_KERNEL(fp8, kFP8, 128)
MSA_SM100_QFWD_KERNEL(fp8, kFP8, 256)
MSA_SM100_QFWD_KERNEL(bf16fp8, kBF16FP8, 64)
MSA_SM100_QFWD_KERNEL(bf16fp8, kBF16FP8, 128)
MSA_SM100_QFWD_KERNEL(nvfp4, kNVFP4, 64)
MSA_SM100_QFWD_KERNEL(nvfp4, kNVFP4, 128)
MSA_SM100_QFWD_KERNEL(nvfp4, kNVFP4, 256)
#undef MSA_SM100_QFWD_KERNEL

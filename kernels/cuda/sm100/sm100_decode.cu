// sm100_decode.cu - paged decode with split-KV on SM100 (tcgen05 + TMA):
// msa_sm100_decode_{bf16,fp8,bf16fp8,nvfp4}_d{64,128,256}.
//
// Same work items, masks, softmax and outputs as decode.cu: work item w =
// (request b, q tile qt, kv tile kt, kv head h, valid) of plan.DecodeSchedule;
// query row b*seqlen_q + i sits at position seqused_k[b] - seqlen_q + i
// (causal, bottom-right); with split_kv the CTA writes float partials at row
// o_indptr[b] + kt*q_stride + i, otherwise the final BF16 output (times
// output_scale) and LSE. The parameter block is MsaDecodePipeParams: with
// its counters (MSA_CUDA_DECODE=new) the CTAs merge the partials
// themselves (shared/fused_combine.cuh, the two-level combine of the sm_90a
// pipelined decode: the last CTA of a split block merges the block, the
// last block merger the group, in msa_combine's mode-1 arithmetic), so no
// combine launch waits for the grid to drain; without them msa_combine
// (mode 1) merges them after the launch. Dense decode visits
// the keys of the item's KV chunk in blocks of 128; sparse decode (q2k != 0)
// visits, in ascending order, the union of the blocks of blk_kv tokens the
// row tile's rows selected, each row attending only its own selection
// (decode.cu's rule, kernels/attn decodeTile; the walk is SparseWalk of
// shared/tc_frag.cuh, run by warp 0, over the rows of dec_rows).
//
// Swapped products (small query tiles still fill the MMA): with the 128 keys
// of a block on M and the row tile's kDecRows query-head rows on N,
//   S^T = K Q^T   (K: TMA tile, K-major A; Q: gathered, K-major B)
//   O^T += V^T P^T (V: TMA tile as landed, MN-major A; P^T: MN-major B)
// Thread t owns TMEM lane t: key t of S^T, element t (+128j) of D in O^T.
// The per-row softmax reductions (over keys = lanes) are a transposing
// butterfly inside each warp (a lane ends with rows 2l, 2l+1) and a 4-warp
// exchange in shared memory; the running max / sum live in shared memory,
// one row per thread of warps 0-1. O^T is rescaled in tensor memory
// (tcgen05.ld / st) only when some row's max grew.
//
// Pipeline of one visit (one K/V block of <= 128 keys); with two K/V stages
// (DecLayout::stages) the next visit's loads are issued at its start (see
// walk_issue below), with one stage at the start of the visit itself:
//   thread 0: TMA K and V (4-D paged map, boxes of min(128, page_size)
//   keys), S^T MMA once K landed; all: softmax, P^T store, V rows past the
//   block's keys zeroed, O^T rescale; thread 0: O^T MMA. The V load overlaps
//   S^T and the softmax. Thread 0 is the CTA's only tcgen05.mma /
//   tcgen05.commit issuer. Every mbarrier wait is bounded (sm100_ptx.cuh
//   mbar_wait): a timeout traps with the code kWaitDecode << 16 | site << 8
//   | parity, site = the barrier index (K 0, V 1, MMA 2; stage 1's K 3, V 4).
// Launcher preconditions (else the portable msa_decode_d*): paged_ok(page
// size, blk_kv, box span) of sm100_layout.cuh; fp8: E4M3 Q, K and V and
// pv_round = E4M3 (P is an E4M3 operand); bf16: BF16 Q, K and V; bf16fp8:
// BF16 Q with E4M3 K and V, widened to BF16 in shared memory (thread t
// converts key t of the raw tile TMA landed; the V load then follows the K
// conversion instead of overlapping S^T); nvfp4: BF16 or E4M3 Q (E4M3
// widened to BF16 while it is gathered) with NVFP4 K and V dequantised to
// BF16 the same way (E2M1 times the row's E4M3 block scale, exact in bf16);
// the K global scale multiplies the score scale, the V global scale is the
// output_scale the host passes (applied here without split-KV, by the
// combine with it), as in decode.cu.
#include <climits>
#include "shared/fused_combine.cuh"
#include "sm100/sm100_common.cuh"

namespace msa {
namespace sm100 {

#if defined(MSA_SM100_ENABLED)

// Reduce 64 per-lane values across the warp; lane l ends with rows 2l and
// 2l+1 in v[0], v[1]. Each step exchanges the half a lane does not keep.
template <bool kMax>
__device__ __forceinline__ void butterfly64(float (&v)[64], int lane) {
#pragma unroll
    for (int step = 0; step < 5; ++step) {
        const int m = 16 >> step, half = 32 >> step;
        const bool upper = (lane & m) != 0;
#pragma unroll
        for (int i = 0; i < half; ++i) {
            const float keep = upper ? v[i + half] : v[i];
            const float send = upper ? v[i] : v[i + half];
            const float got = __shfl_xor_sync(0xffffffffu, send, m);
            v[i] = kMax ? fmaxf(keep, got) : keep + got;
        }
    }
}

template <int V, int D>
__device__ __forceinline__ void dec_body(const MsaDecodePipeParams& pp, const MsaTensorMaps& maps) {
    const MsaDecodeParams& p = pp.d;
    using L = DecLayout<V, D>;
    constexpr int R = kDecRows;
    constexpr bool kConv = kv_converted(V);
    constexpr int kStorageBytes = V == kBF16 ? 2 : 1;  // element size of the K/V tensor maps
    extern __shared__ uint8_t dsmem[];

    const int w = blockIdx.x;
    DecodeItem item;
    if (!decode_item(p, w, item)) return;
    const int h = item.h, b = item.b;
    const int kv_begin = item.kv_begin, kv_end = item.kv_end;
    const DecRows DR = dec_rows(p, item, D);  // the item's query-head rows (shared/msa_common.cuh)
    const int nrows = DR.nrows;
    const float oscale = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
    if (nrows <= 0) {  // CTA-uniform, before any TMA or TMEM use; the item still counts toward its group
        fused::fused_combine<D, kThreads>(pp, item, DR, reinterpret_cast<int*>(align_1024(dsmem) + L::red_off), oscale);
        return;
    }

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    uint8_t* sm = align_1024(dsmem);
    const uint32_t sQ = smem_u32(sm + L::q_off), sK = smem_u32(sm + L::k_off), sV = smem_u32(sm + L::v_off);
    const uint32_t sP = smem_u32(sm + L::p_off), sRaw = smem_u32(sm + L::raw_off);
    float* s_red = reinterpret_cast<float*>(sm + L::red_off);  // [4][R]
    float* s_m = s_red + 4 * R;
    float* s_l = s_m + R;
    float* s_mcur = s_l + R;
    float* s_alpha = s_mcur + R;
    float* s_inv = s_alpha + R;
    int* s_vis = reinterpret_cast<int*>(s_inv + R);
    int* s_lim = s_vis + R;
    int* s_sel = s_lim + R;
    int* s_min = s_sel + R;  // [2]: the walk's next block (s_min[0])
    long long* s_orow = reinterpret_cast<long long*>(sm + L::orow_off);
    const uint32_t bar = smem_u32(sm + L::bar_off);
    const uint32_t bar_k = bar + 8 * L::bar_k, bar_v = bar + 8 * L::bar_v, bar_mma = bar + 8 * L::bar_mma;
    constexpr int S = L::stages;  // K/V stages (sm100_layout.cuh DecLayout)
    // Stage 1 (S = 2): K, V tiles (converted variants: the raw tiles, and
    // stage 0's raw V), their two mbarriers and visible-key counts.
    const uint32_t sK1 = smem_u32(sm + L::k1_off), sV1 = smem_u32(sm + L::v1_off);
    const uint32_t sRV0 = smem_u32(sm + L::rv0_off), sRK1 = smem_u32(sm + L::rk1_off), sRV1 = smem_u32(sm + L::rv1_off);
    const uint32_t bar_k1 = smem_u32(sm + L::bar1_off), bar_v1 = bar_k1 + 8;
    int* s_vis1 = reinterpret_cast<int*>(sm + L::vis1_off);
    uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(sm + L::tmem_slot_off);

    if (warp == 0) tmem_alloc<L::tmem_cols>(smem_u32(tmem_slot));
    if (tid == 32) {
        mbar_init(bar_k, 1);
        mbar_init(bar_v, 1);
        mbar_init(bar_mma, 1);
        if (S == 2) {
            mbar_init(bar_k1, 1);
            mbar_init(bar_v1, 1);
        }
        mbar_fence_init();
    }
    tc_fence_before();
    __syncthreads();
    tc_fence_after();
    const uint32_t tmem = *tmem_slot;
    // tcgen05.ld / st: warp w may access only TMEM lanes 32 (w % 4) .. +31
    // (dec_lane_base; kThreads = 128, so w % 4 = w and thread t owns lane t).
    const uint32_t lane_base = dec_lane_base(warp);

    KVGeom g;
    g.page_row = reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride;
    g.dense_base = 0;
    g.h = h; g.Hkv = p.num_heads_kv; g.page_size = p.page_size;
    if (tid == 0) {
        tma_prefetch_map(&maps.k);
        tma_prefetch_map(&maps.v);
    }

    float scale = p.softmax_scale_log2;
    if (V == kNVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
    const uint8_t* qbase = reinterpret_cast<const uint8_t*>(p.q);
    const bool sparse = p.q2k != 0;
    // The sparse walk of shared/tc_frag.cuh, run by warp 0 (lane l holds
    // rows l and l + 32 of the row tile: its 64 rows are the tile's R).
    static_assert(R == tc::kTileRows && R == 64, "SparseWalk covers the decode row tile");
    const tc::SparseWalk walk{sparse ? reinterpret_cast<const int*>(p.q2k) +
                                           ((long long)h * p.batch * p.seqlen_q + (long long)b * p.seqlen_q) * p.top_k
                                     : nullptr,
                              (long long)p.blk_kv, p.top_k, kv_begin, kv_end};
    int nvis = 0;  // visits completed by this CTA so far (visit n uses stage n % S, phase n / S)

#pragma unroll 1
    for (int rt = 0; rt < nrows; rt += R) {
        // ---- row setup and Q gather: thread r < R owns row r of the tile ----
        if (tid < R) {
            long long qo, orow;
            int lim, i;
            DR.row(rt + tid, qo, orow, lim, i);
            s_orow[tid] = orow;
            s_lim[tid] = lim;
            s_m[tid] = -INFINITY;
            s_l[tid] = 0.f;
            if (V == kNVFP4 && p.q_dtype == MSA_DT_E4M3) {
                gather_row_e4m3_to_bf16<D, R>(sQ, tid, qo >= 0 ? qbase + qo : nullptr);
            } else {
                gather_row_async<L::row_bytes, R>(sQ, tid, qo >= 0 ? qbase + qo * L::es : nullptr, qbase);
                cp_async_wait_all();
            }
        }
        fence_proxy_async();
        __syncthreads();

        // The visits of this row tile come from a CTA-uniform walk (dense:
        // the KV chunk in blocks of 128 keys; sparse: the union of the
        // selected blocks, ascending). With two K/V stages the walk runs one
        // visit ahead: visit n+1's K and V (converted variants: their raw
        // tiles) are issued into the other stage at the start of visit n
        // (that stage's last reader, visit n-1, has completed), so its loads
        // overlap visit n.
        int cur = kv_begin, hi = sparse ? kv_begin : kv_end;  // keys [cur, hi) of the current block remain
        int prev = -1, visits = 0, issued = 0;
        int t0s[2] = {0, 0}, nks[2] = {0, 0};  // per stage: first key and key count of its visit
        bool more = true;
        // walk_issue: the next visit of the walk (false when the stream
        // ends); its visible-key counts go to the stage's vis array and
        // thread 0 issues its K (and, unconverted, V) tile into the stage.
        auto walk_issue = [&]() -> bool {
            if (sparse && cur >= hi) {  // next selected block above prev (CTA-uniform)
                if (warp == 0) {
                    unsigned long long mask;  // bit r: row rt + r selected the block
                    const int j = walk.next(DR, rt, prev, mask);
                    s_sel[lane] = (int)((mask >> lane) & 1ull);
                    s_sel[lane + 32] = (int)((mask >> (lane + 32)) & 1ull);
                    if (lane == 0) s_min[0] = j;
                }
                // s_min and s_sel are written again only by the next call,
                // after this one's closing barrier, or, when the walk ends
                // here, by the next row tile's, after the epilogue's barriers.
                __syncthreads();
                const int jmin = s_min[0];
                if (jmin == INT_MAX) return false;
                cur = (int)max((long long)kv_begin, jmin * walk.blk);
                hi = (int)min((long long)kv_end, (jmin + 1) * walk.blk);
                prev = jmin;
            }
            if (cur >= hi) return false;
            const int st = (nvis - visits + issued) % S;  // stage of this visit (its CTA-wide visit index mod S)
            const int t0 = cur, nk = min(kBlockKeys, hi - cur);
            cur += kBlockKeys;
            if (st == 0) {
                t0s[0] = t0;
                nks[0] = nk;
            } else {
                t0s[1] = t0;
                nks[1] = nk;
            }
            if (tid < R) (st ? s_vis1 : s_vis)[tid] = (sparse && !s_sel[tid]) ? 0 : min(max(s_lim[tid] - t0, 0), nk);
            if (tid == 0) {
                const uint32_t bk = st ? bar_k1 : bar_k, bv = st ? bar_v1 : bar_v;
                if constexpr (!kConv) {
                    issue_kv_tile<L::raw_row, kStorageBytes>(st ? sK1 : sK, &maps.k, bk, g, t0, nk);
                    issue_kv_tile<L::raw_row, kStorageBytes>(st ? sV1 : sV, &maps.v, bv, g, t0, nk);
                } else if constexpr (S == 2) {  // raw K and V of the stage (converted at the visit)
                    issue_kv_tile<L::raw_row, kStorageBytes>(st ? sRK1 : sRaw, &maps.k, bk, g, t0, nk);
                    issue_kv_tile<L::raw_row, kStorageBytes>(st ? sRV1 : sRV0, &maps.v, bv, g, t0, nk);
                } else {  // one staging tile: the raw V follows the K conversion
                    issue_kv_tile<L::raw_row, kStorageBytes>(sRaw, &maps.k, bk, g, t0, nk);
                }
            }
            ++issued;
            __syncthreads();
            return true;
        };
#pragma unroll 1
        for (int i = 0; i + 1 < S && more; ++i) more = walk_issue();  // prologue: visits 0 .. S-2
#pragma unroll 1
        for (;;) {
            if (more) more = walk_issue();  // visit visits + S - 1 (S = 1: this visit)
            // walk_issue ends with a barrier only when it issues a visit; the
            // previous visit's readers of s_red (the s_l update) must finish
            // before this visit's reductions overwrite it (CTA-uniform).
            if (!more) __syncthreads();
            if (visits == issued) break;
            const int st = nvis % S;
            const uint32_t par = kv_parity(nvis / S);  // phase of this stage's barriers
            const int t0 = st ? t0s[1] : t0s[0], nk = st ? nks[1] : nks[0];
            const int* vis = st ? s_vis1 : s_vis;
            // The MMA operands: the stage's tiles, or (converted) the one
            // BF16 K / V pair the raw tiles are converted into.
            const uint32_t sKs = (!kConv && st) ? sK1 : sK, sVs = (!kConv && st) ? sV1 : sV;
            const uint32_t rawK = (S == 2 && st) ? sRK1 : sRaw, rawV = S == 2 ? (st ? sRV1 : sRV0) : sRaw;
            const uint32_t bk = st ? bar_k1 : bar_k, bv = st ? bar_v1 : bar_v;
            const uint32_t site_k = st ? L::num_bars : L::bar_k, site_v = st ? L::num_bars + 1 : L::bar_v;
            // NVFP4: the block-scale row of key tid (sm100_common.cuh KVGeom)
            const long long srow = (V == kNVFP4 && tid < nk) ? g.scale_row(t0 + tid) : 0;
            if constexpr (kConv) {  // raw E4M3 / NVFP4 K -> BF16 K (rows past the block's keys: zero)
                mbar_wait(bk, par, kWaitDecode, site_k);
                convert_kv_row<V, D>(sKs, rawK, tid, tid < nk, reinterpret_cast<const uint8_t*>(p.k_scale), srow);
                fence_proxy_async();
                __syncthreads();  // K is visible to the MMA; one stage: the staging tile is free for V
                if (S == 1 && tid == 0) issue_kv_tile<L::raw_row, kStorageBytes>(sRaw, &maps.v, bv, g, t0, nk);
            }

            // ---- S^T = K Q^T ----
            if (tid == 0) {
                if constexpr (!kConv) mbar_wait(bk, par, kWaitDecode, site_k);
                tc_fence_after();
#pragma unroll
                for (int k = 0; k < L::qk_steps; ++k)
                    umma<L::f8>(tmem + L::tmem_s_col,
                                umma_smem_desc(sKs + kmajor_step_offset(k, L::row_bytes, kBlockKeys), kmajor_lbo(),
                                               kmajor_sbo(L::row_bytes), span_of(L::row_bytes)),
                                umma_smem_desc(sQ + kmajor_step_offset(k, L::row_bytes, R), kmajor_lbo(),
                                               kmajor_sbo(L::row_bytes), span_of(L::row_bytes)),
                                L::idesc_qk, k > 0 ? 1u : 0u);
                umma_commit(bar_mma);
            }
            mbar_wait(bar_mma, mma_parity(2 * nvis), kWaitDecode, L::bar_mma);
            __syncwarp();
            tc_fence_after();
            // ---- masked, scaled scores of key tid for the R rows ----
            float s[64];
            tmem_ld32(tmem + lane_base + L::tmem_s_col, *reinterpret_cast<float(*)[32]>(&s[0]));
            tmem_ld32(tmem + lane_base + L::tmem_s_col + 32, *reinterpret_cast<float(*)[32]>(&s[32]));
#pragma unroll
            for (int r = 0; r < R; ++r) s[r] = tid < vis[r] ? s[r] * scale : -INFINITY;
            {
                float t[64];
#pragma unroll
                for (int r = 0; r < R; ++r) t[r] = s[r];
                butterfly64<true>(t, lane);
                s_red[warp * R + 2 * lane] = t[0];
                s_red[warp * R + 2 * lane + 1] = t[1];
            }
            __syncthreads();
            int grew = 0;
            if (tid < R) {  // block max; running max, alpha (msa_core.cuh block_update)
                const float bm = fmaxf(fmaxf(s_red[tid], s_red[R + tid]), fmaxf(s_red[2 * R + tid], s_red[3 * R + tid]));
                const float mold = s_m[tid];
                float mnew = mold, alpha = 1.f;
                if (bm != -INFINITY) {
                    mnew = fmaxf(mold, bm);
                    alpha = exp2f(mold - mnew);
                }
                s_mcur[tid] = mnew;
                s_alpha[tid] = alpha;
                s_m[tid] = mnew;
                grew = alpha != 1.f;
            }
            const bool rescale = __syncthreads_or(grew) && visits > 0;

            // ---- P (unrounded sums, rounded operand), stored as row tid of P^T ----
#pragma unroll
            for (int r = 0; r < R; ++r) s[r] = s[r] == -INFINITY ? 0.f : exp2f(s[r] - s_mcur[r]);
            if constexpr (L::f8) {
#pragma unroll
                for (int c = 0; c < R / 16; ++c) {
                    uint32_t o[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        o[i] = pack_p_e4m3x4(s[16 * c + 4 * i], s[16 * c + 4 * i + 1], s[16 * c + 4 * i + 2],
                                             s[16 * c + 4 * i + 3]);
                    st_shared_v4(sP + tile_offset(tid, c, L::p_row_bytes, kBlockKeys), make_uint4(o[0], o[1], o[2], o[3]));
                }
            } else {
#pragma unroll
                for (int c = 0; c < R / 8; ++c) {
                    uint32_t o[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i) o[i] = pack_p_bf16(s[8 * c + 2 * i], s[8 * c + 2 * i + 1], p.pv_round);
                    st_shared_v4(sP + tile_offset(tid, c, L::p_row_bytes, kBlockKeys), make_uint4(o[0], o[1], o[2], o[3]));
                }
            }
            butterfly64<false>(s, lane);
            s_red[warp * R + 2 * lane] = s[0];
            s_red[warp * R + 2 * lane + 1] = s[1];

            // ---- V landed: rows past the block's keys to zero (P = 0 never meets stale data) ----
            mbar_wait(bv, par, kWaitDecode, site_v);
            if constexpr (kConv)
                convert_kv_row<V, D>(sVs, rawV, tid, tid < nk, reinterpret_cast<const uint8_t*>(p.v_scale), srow);
            else if (tid >= nk)
                zero_row<L::row_bytes, kBlockKeys>(sVs, tid);

            // ---- O^T *= alpha (per column = row), only when some row's max grew ----
            if (rescale) {
#pragma unroll 1
                for (int j = 0; j < L::o_mmas; ++j) {
                    if (!dec_lane_holds_d(D, j, warp)) continue;  // warp-uniform: phantom lanes (D = 64) stay untouched
#pragma unroll
                    for (int c0 = 0; c0 < R; c0 += 32) {
                        float o[32];
                        const uint32_t ta = tmem + lane_base + L::tmem_o_col + j * R + c0;
                        tmem_ld32(ta, o);
#pragma unroll
                        for (int i = 0; i < 32; ++i) o[i] *= s_alpha[c0 + i];
                        tmem_st32(ta, o);
                    }
                }
            }
            fence_proxy_async();
            tc_fence_before();
            __syncthreads();
            if (tid < R) s_l[tid] = s_l[tid] * s_alpha[tid] + (s_red[tid] + s_red[R + tid]) + (s_red[2 * R + tid] + s_red[3 * R + tid]);

            // ---- O^T (+)= V^T P^T ----
            if (tid == 0) {
                tc_fence_after();
#pragma unroll
                for (int k = 0; k < L::pv_steps; ++k) {
                    const uint64_t bdesc = umma_smem_desc(sP + mnmajor_step_offset(k, L::keys_per_pv_step, L::p_row_bytes),
                                                          mnmajor_lbo(L::p_row_bytes, kBlockKeys),
                                                          mnmajor_sbo(L::p_row_bytes), span_of(L::p_row_bytes));
#pragma unroll
                    for (int j = 0; j < L::o_mmas; ++j)
                        umma<L::f8>(tmem + L::tmem_o_col + j * R,
                                    umma_smem_desc(sVs + j * L::o_atoms * kBlockKeys * L::box_span +
                                                       mnmajor_step_offset(k, L::keys_per_pv_step, L::row_bytes),
                                                   mnmajor_lbo(L::row_bytes, kBlockKeys), mnmajor_sbo(L::row_bytes),
                                                   span_of(L::row_bytes)),
                                    bdesc, L::idesc_pv, (visits > 0 || k > 0) ? 1u : 0u);
                }
                umma_commit(bar_mma);
            }
            mbar_wait(bar_mma, mma_parity(2 * nvis + 1), kWaitDecode, L::bar_mma);
            __syncwarp();
            tc_fence_after();
            ++nvis;
            ++visits;
        }

        // ---- epilogue (msa_core.cuh finish_row) ----
        if (tid < R) {
            constexpr float kLn2 = 0.693147180559945309f;
            const float m = s_m[tid], l = s_l[tid];
            float lse = -INFINITY, inv = 0.f;
            if (l > 0.f && m != -INFINITY) {
                lse = (m + log2f(l)) * kLn2;
                inv = 1.f / l;
            }
            s_inv[tid] = inv;
            const long long orow = s_orow[tid];
            if (orow >= 0) reinterpret_cast<float*>(p.split_kv ? p.lse_partial : p.lse)[orow] = lse;
        }
        __syncthreads();
#pragma unroll 1
        for (int j = 0; j < L::o_mmas; ++j) {
            const int d = 128 * j + tid;
            if (!dec_lane_holds_d(D, j, warp)) continue;  // warp-uniform: lanes past D (D = 64) hold no output
#pragma unroll
            for (int c0 = 0; c0 < R; c0 += 32) {
                float o[32];
                if (visits > 0) tmem_ld32(tmem + lane_base + L::tmem_o_col + j * R + c0, o);
#pragma unroll
                for (int i = 0; i < 32; ++i) {
                    const long long orow = s_orow[c0 + i];
                    if (orow < 0) continue;
                    const float inv = s_inv[c0 + i];
                    const float x = (visits == 0 || inv == 0.f) ? 0.f : o[i] * inv;
                    if (p.split_kv)
                        reinterpret_cast<float*>(p.o_partial)[orow * D + d] = x;
                    else
                        reinterpret_cast<__nv_bfloat16*>(p.out)[orow * D + d] = __float2bfloat16_rn(x * oscale);
                }
            }
        }
        tc_fence_before();
        __syncthreads();  // TMEM, the Q tile and the row state are free for the next row tile
    }
    if (warp == 0) {
        tc_fence_after();
        tmem_dealloc<L::tmem_cols>(tmem);
    }
    // ---- split KV with counters: the combine fused (shared/fused_combine.cuh) ----
    fused::fused_combine<D, kThreads>(pp, item, DR, reinterpret_cast<int*>(s_red), oscale);  // s_red is free
}

#endif  // MSA_SM100_ENABLED

}  // namespace sm100
}  // namespace msa

#define MSA_SM100_DEC_KERNEL(NAME, VAR, D)                                                                            \
    extern "C" __global__ void __launch_bounds__(msa::sm100::kThreads, 1) msa_sm100_decode_##NAME##_d##D(             \
        const __grid_constant__ MsaDecodePipeParams p, const __grid_constant__ MsaTensorMaps maps) {                  \
        MSA_SM100_BODY(msa::sm100::dec_body<msa::sm100::VAR, D>(p, maps));                                            \
    }
MSA_SM100_DEC_KERNEL(bf16, kBF16, 64)
MSA_SM100_DEC_KERNEL(bf16, kBF16, 128)
MSA_SM100_DEC_KERNEL(bf16, kBF16, 256)
MSA_SM100_DEC_KERNEL(fp8, kFP8, 64)
MSA_SM100_DEC_KERNEL(fp8, kFP8, 128)
MSA_SM100_DEC_KERNEL(fp8, kFP8, 256)
MSA_SM100_DEC_KERNEL(bf16fp8, kBF16FP8, 64)
MSA_SM100_DEC_KERNEL(bf16fp8, kBF16FP8, 128)
MSA_SM100_DEC_KERNEL(bf16fp8, kBF16FP8, 256)
MSA_SM100_DEC_KERNEL(nvfp4, kNVFP4, 64)
MSA_SM100_DEC_KERNEL(nvfp4, kNVFP4, 128)
MSA_SM100_DEC_KERNEL(nvfp4, kNVFP4, 256)
#undef MSA_SM100_DEC_KERNEL

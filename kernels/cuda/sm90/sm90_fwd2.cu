// sm90_fwd2.cu - KV-major block-sparse prefill on sm_90a with the combine
// fused: the forward schedule of sm90_fwd.cu (work item = one K/V block and
// the query rows that selected it, partial O / LSE per (row, slot)), run by
// persistent CTAs with a producer warp, and each (query, head) row merged
// by the CTA that writes its last slot (MsaFwd2Params, msa_params.h), so no
// combine launch follows. It ships beside msa_sm90_fwd_* behind
// MSA_CUDA_PREFILL=kv2 (cuda.PrefillKV2) until a GPU has timed both.
//
// CTA: two consumer warpgroups and one producer warp (288 threads, one CTA
// per SM: 65536 / 288 leaves every thread up to 224 registers, so no
// setmaxnreg is needed). The producer takes work items from the tile
// scheduler (an atomic counter over the window's items, in schedule order,
// so the CTAs that run at the same time write partials of neighbouring
// rows), lands each item's K and V block in a two-stage ring (TMA boxes
// through the tensor maps where the block is dense or page-aligned, 16-byte
// loads into the same layout otherwise; one full barrier per stage with
// the transaction bytes, one empty barrier counting the 8 consumer warps)
// and publishes the item id in the stage's slot: item k uses stage k % 2,
// so item k + 1's K/V loads while item k computes. It then gathers the
// item's Q row tiles (64 query-head rows each, scattered queries: cp.async
// 16-byte copies whose completion arrives on the buffer's full barrier, so
// the whole tile is in flight at once) into the Q buffer of the consumer
// warpgroup that takes the tile (tile u of the CTA's sequence goes to
// warpgroup u % 2; a Q buffer per warpgroup with a full barrier counting the
// 32 producer lanes and an empty barrier counting its 4 warps). A
// past-the-end item id (-1) in a stage tells the consumers to stop.
// (Q is not loaded by TMA: an item's rows are scattered queries, one box
// per query; O partials are not stored by TMA either, their rows being
// scattered slots. Not yet here: FlashAttention-3's overlap of one tile's
// Q.K^T with the previous tile's softmax inside a warpgroup, which needs a
// second score tile in registers beyond the 224 available.)
//
// Consumer warpgroup, per tile: S = Q K^T (wgmma, shared x shared), Q
// buffer released at once (the producer gathers the next tile while this
// one runs the masked online softmax and P V with P in registers), then the
// epilogue: each warp stages its 16 normalised partial rows in its own
// slice of shared memory (16-byte chunks XOR-swizzled by row, so the
// fragment writes of 8 rows hit 8 different bank groups) and writes them
// out a whole row per warp instruction (16-byte stores), LSE and
// temperature LSE beside. The two warpgroups overlap each other: one's
// softmax and stores run while the other's wgmma execute.
//
// Fused combine: after its stores each warp fences them, then lane r < 16
// counts row r at counters[row] (atomicAdd). The lane that brings the count
// to the row's slot count resets the counter and the warp merges that row:
// every slot's partial read from L2 (__ldcg; the windows are sized by the
// launcher so that a window's partials fit in L2), combine.cu's mode-0
// arithmetic (weights exp(lse - m) / S in slot order, one fma per slot,
// empty slots skipped), BF16 output times output_scale in 16-byte stores,
// LSE, temperature LSE. After the last item every thread sweeps the
// window's rows with no slot (O = 0, LSE = -inf), as the combine does.
// cuda/prefill_kv2_emu_test.go emulates the scheduler, both rings, the
// counters (any order of the CTAs' arrivals) and the arithmetic against
// the float64 reference.
//
// Variants: BF16 Q/K/V and FP8 (E4M3 Q/K/V: Q.K^T on the e4m3 wgmma from
// the landed K, V widened to bf16 in shared memory by the consumers once
// per item, exact, as is the E4M3-rounded P, so P.V runs on the bf16
// wgmma) at D = 64 and 128, with F32 or BF16 partials (the dtype and D are
// template parameters; the partial dtype is chosen once per CTA, outside
// the loop). BF16 Q + E4M3 K/V, NVFP4 K/V, D = 256 and F16 / E4M3
// partials run on msa_sm90_fwd_* + msa_combine_* (the launcher records why
// in Kernels.Fallbacks): their widened operands and wider rows do not fit
// the two-stage ring, two Q buffers and two staging buffers in 227 KB
// without a different layout.
#include "shared/lse_merge.cuh"
#include "sm90/sm90_ring.cuh"

namespace msa {
namespace sm90 {

template <int D, int VAR>
struct Fwd2Cfg {
    using G = Geo90<D, VAR>;
    static_assert((VAR == kVarBF16 || VAR == kVarFP8) && (D == 64 || D == 128), "sm90_fwd2: BF16 or FP8 at D 64 / 128 only");
    static constexpr int kWG = 2;      // consumer warpgroups
    static constexpr int kStages = 2;  // K/V ring
    static constexpr int kCons = 128 * kWG;
    static constexpr int kThreads = kCons + 32;
    // one stage: K operand, V operand (bf16), then the landing buffer of a
    // converted operand (FP8: the E4M3 V rows, widened into the V operand)
    static constexpr int kStageBytes = G::kStageBytes;
    static constexpr int kOffKRaw = G::kKBytes + G::kVBytes;
    static constexpr int kOffVRaw = kOffKRaw + (G::kKDirect ? 0 : G::kRawBytes);
    static constexpr int kORow = 4 * D;                          // staged partial row (F32; BF16 uses half)
    static constexpr int kOffQ = kStages * kStageBytes;
    static constexpr int kOffO = kOffQ + kWG * G::kQBytes;
    static constexpr int kOffBar = kOffO + kWG * kTileRows * kORow;
    // barriers: kvfull[kStages], kvempty[kStages], qfull[kWG], qempty[kWG]; then the stages' item ids
    static constexpr int kOffItem = kOffBar + 8 * (2 * kStages + 2 * kWG);
    static constexpr int kSmem = kOffItem + 4 * kStages + 1024;  // + slack to align the base to 1024
    static_assert(kStageBytes % 1024 == 0 && G::kQBytes % 1024 == 0, "operand tiles start 1024-byte aligned");
    static_assert(kSmem <= 232448 - 1024, "sm_90 dynamic shared memory next to the 1 KB the CTA reserves");
};

// Barrier addresses of one CTA.
struct Fwd2Bars {
    uint32_t bars;
    __device__ __forceinline__ uint32_t kvfull(int s) const { return bars + 8 * s; }
    __device__ __forceinline__ uint32_t kvempty(int s) const { return bars + 8 * (2 + s); }
    __device__ __forceinline__ uint32_t qfull(int g) const { return bars + 8 * (4 + g); }
    __device__ __forceinline__ uint32_t qempty(int g) const { return bars + 8 * (6 + g); }
};

// The item's K/V source and TMA boxes (dense or paged).
__device__ __forceinline__ void fwd2_source(const MsaFwdParams& p, int b, int h, KVSource& src, BlockLoc& L) {
    const int* page_row = p.page_table ? reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride : nullptr;
    const int dense_row0 = p.page_table ? 0 : reinterpret_cast<const int*>(p.cu_seqlens_k)[b];
    src = kv_source(p.k, p.v, p.k_scale, p.v_scale, page_row, dense_row0, h, p.num_heads_kv, p.page_size, p.kv_dtype);
    L = BlockLoc{page_row != nullptr, page_row, p.page_size, h, dense_row0};
}

// Gather Q rows [rt, rt + 64) of an item into the K-major swizzled Q
// buffer with cp.async (16-byte chunks, zero fill for padding rows) and
// let qfull (count 32) complete when they land: each lane arrives through
// cp.async.mbarrier.arrive.noinc once its own copies are done, so the
// producer issues the whole tile without waiting and goes on. Lanes first
// fetch the query offsets of rows lane and lane + 32, then each
// instruction covers 32 / cpr whole rows (lane % cpr is the chunk).
template <int D, int VAR>
__device__ __forceinline__ void fwd2_gather_q(uint8_t* sQ, const uint8_t* q, const FwdRows& R, int rt, int lane, uint32_t qfull) {
    using G = Geo90<D, VAR>;  // Q rows are stored in the Q.K^T operand type (BF16, or E4M3 for fp8)
    constexpr int cpr = G::kQkRow / 16, rpi = 32 / cpr, span = G::kQkSpan;
    long long qo[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        long long orow;
        int lim, qi;
        R.row(rt + lane + 32 * i, qo[i], orow, lim, qi);
    }
    const int c = lane % cpr;
#pragma unroll 8
    for (int r0 = 0; r0 < kTileRows; r0 += rpi) {
        const int r = r0 + lane / cpr;
        const long long off = __shfl_sync(0xffffffffu, r0 < 32 ? qo[0] : qo[1], r & 31);  // rpi divides 32: one half per step
        cp_async16(smem_u32(sQ + swz<span, kTileRows>(r, 16 * c)), q + (off >= 0 ? off * G::kQkEs + 16 * c : 0), off >= 0);
    }
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(qfull) : "memory");
}

// Producer warp: items from the scheduler into the K/V ring, their Q tiles
// into the consumers' Q buffers; then the scheduler's reset.
template <int D, int VAR>
__device__ __forceinline__ void fwd2_producer(const MsaFwd2Params& P, const MsaTensorMaps& maps, uint8_t* base, const Fwd2Bars& B) {
    using C = Fwd2Cfg<D, VAR>;
    const MsaFwdParams& p = P.f;
    const int lane = threadIdx.x & 31;
    int* sched = reinterpret_cast<int*>(P.sched);
    int* item = reinterpret_cast<int*>(base + C::kOffItem);
    const int count = min(*reinterpret_cast<const int*>(p.work_count), p.capacity);
    static_assert(C::kWG == 2, "the producer keeps one Q-tile count per consumer warpgroup");
    int qn0 = 0, qn1 = 0;  // Q tiles gathered for warpgroup 0 / 1 (registers, not a local array)
    int u = 0;
#pragma unroll 1
    for (int k = 0;; ++k) {
        const int st = k % C::kStages;
        if (k >= C::kStages) mbar_wait(B.kvempty(st), ring_empty_parity(k, C::kStages));
        int w = 0;
        if (lane == 0) w = atomicAdd(sched, 1);
        w = __shfl_sync(0xffffffffu, w, 0);
        if (w >= count) {
            if (lane == 0) {
                item[st] = -1;
                mbar_arrive(B.kvfull(st));
            }
            break;
        }
        int b, t0, nkeys, h;
        const FwdRows R{fwd_rows_at(p, D, w, b, t0, nkeys, h)};
        if (lane == 0) item[st] = w;  // published by lane 0's arrive on kvfull below
        uint8_t* sK = base + st * C::kStageBytes;
        if (nkeys <= 0) {  // defensive: the schedule never emits empty blocks; no tiles either
            if (lane == 0) mbar_arrive(B.kvfull(st));
            continue;
        }
        KVSource src;
        BlockLoc L;
        fwd2_source(p, b, h, src, L);
        using G = Geo90<D, VAR>;
        produce_block<D, VAR>(maps, G::kKDirect ? sK : sK + C::kOffKRaw, G::kVDirect ? sK + G::kKBytes : sK + C::kOffVRaw, B.kvfull(st), L,
                              src, t0, nkeys);
#pragma unroll 1
        for (int rt = 0; rt < R.nrows; rt += kTileRows, ++u) {
            const int g = u % C::kWG;
            const int qn = g == 0 ? qn0 : qn1;
            if (qn > 0) mbar_wait(B.qempty(g), ring_empty_parity(qn, 1));
            fwd2_gather_q<D, VAR>(base + C::kOffQ + g * Geo90<D, VAR>::kQBytes, reinterpret_cast<const uint8_t*>(p.q), R, rt, lane,
                                  B.qfull(g));
            if (g == 0) ++qn0;
            else ++qn1;
        }
    }
    // Every fetch of this CTA is done: the last CTA to get here resets the
    // scheduler for the next launch (no CTA fetches after its count).
    if (lane == 0 && atomicAdd(sched + 1, 1) == (int)gridDim.x - 1) {
        atomicExch(sched, 0);
        atomicExch(sched + 1, 0);
    }
}

// Byte offset of 16-byte chunk c (byte b within it) of staged row r: chunks
// XOR-swizzled by r & 7 so the 8 rows a warp's fragment store covers land
// in 8 different 16-byte bank groups.
__device__ __forceinline__ int stage_off(int r, int row_bytes, int c, int b) { return r * row_bytes + (((c ^ (r & 7)) << 4) | b); }

// The merge statistics of row g over its n slots (slot s's partial row is
// g + s * sstride), read from L2: other CTAs of this grid wrote them.
__device__ __forceinline__ void fwd2_stats(const float* lse_p, long long g, long long sstride, int n, int lane, float& m, float& S) {
    warp_lse_stats([&](int s) { return __ldcg(lse_p + g + s * sstride); }, n, lane, m, S);
}

// Merge row g (global (query, query head) row; n slots) of the window into
// out / lse / tlse, by one warp: combine.cu's mode-0 arithmetic with the
// partials read from L2 (other CTAs of this grid wrote them).
template <int D, int PD>
__device__ __forceinline__ void fwd2_merge_row(const MsaFwd2Params& P, long long g, int n, int lane) {
    const MsaFwdParams& p = P.f;
    constexpr int E = 8, L = D / E;  // lane l < L owns columns [8l, 8l + 8)
    const long long sstride = (long long)p.total_q * p.num_heads_q;  // partial rows from one slot to the next
    const float* lse_p = reinterpret_cast<const float*>(p.lse_partial);
    float m, S;
    fwd2_stats(lse_p, g, sstride, n, lane, m, S);
    float o[E];
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] = 0.f;
    const bool empty = n == 0 || !(S > 0.f);
    if (!empty && lane < L) {
        const float invS = 1.f / S;
#pragma unroll 1
        for (int s = 0; s < n; ++s) {
            const long long r = g + s * sstride;
            const float w = expf(__ldcg(lse_p + r) - m) * invS;
            if (w == 0.f) continue;  // empty slot: never touch its O
            float v[E];
            if (PD == MSA_DT_F32) {
                const float4* src = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(p.o_partial) + r * D + lane * E);
                const float4 a = __ldcg(src), c = __ldcg(src + 1);
                v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = c.x; v[5] = c.y; v[6] = c.z; v[7] = c.w;
            } else {
                const uint4 x = __ldcg(reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(p.o_partial) + r * D + lane * E));
                const uint32_t wv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const float2 t = unpack_bf16x2(wv[q]);
                    v[2 * q] = t.x;
                    v[2 * q + 1] = t.y;
                }
            }
#pragma unroll
            for (int e = 0; e < E; ++e) o[e] = fmaf(w, v[e], o[e]);
        }
        const float osc = P.output_scale ? *reinterpret_cast<const float*>(P.output_scale) : 1.f;
#pragma unroll
        for (int e = 0; e < E; ++e) o[e] *= osc;
    }
    if (lane < L)
        *reinterpret_cast<uint4*>(reinterpret_cast<__nv_bfloat16*>(P.out) + g * D + lane * E) =
            make_uint4(pack_bf16x2(o[0], o[1]), pack_bf16x2(o[2], o[3]), pack_bf16x2(o[4], o[5]), pack_bf16x2(o[6], o[7]));
    if (lane == 0) reinterpret_cast<float*>(P.lse)[g] = empty ? -INFINITY : m + logf(S);
    if (p.tlse_partial && P.tlse) {
        float mt, St;
        fwd2_stats(reinterpret_cast<const float*>(p.tlse_partial), g, sstride, n, lane, mt, St);
        if (lane == 0) reinterpret_cast<float*>(P.tlse)[g] = merged_tlse(n, mt, St);
    }
}

// Epilogue of one tile in one warp (its 16 rows): stage, store, count, merge.
template <int D, int PD>
__device__ __forceinline__ void fwd2_epilogue(const MsaFwd2Params& P, const FwdRows& R, int rt, const Soft& st,
                                              const float (&o)[D / 2], const long long (&orow)[2], uint8_t* sO, int warp, int lane) {
    const MsaFwdParams& p = P.f;
    constexpr int es = PD == MSA_DT_F32 ? 4 : 2, RB = es * D, cpr = RB / 16;
    const float invT = p.inv_temperature;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int r = (lane >> 2) + 8 * i;
        float lse, tlse;
        const float inv = finish(st, i, invT, lse, tlse);
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            const float a = o[4 * j + 2 * i] * inv, b = o[4 * j + 2 * i + 1] * inv;
            const int byte = es * (8 * j + 2 * (lane & 3));  // columns 8j + 2t, +1
            uint8_t* dst = sO + stage_off(r, RB, byte >> 4, byte & 15);
            if (PD == MSA_DT_F32) *reinterpret_cast<float2*>(dst) = make_float2(a, b);
            else *reinterpret_cast<uint32_t*>(dst) = pack_bf16x2(a, b);
        }
        if (orow[i] >= 0 && (lane & 3) == 0) {
            reinterpret_cast<float*>(p.lse_partial)[orow[i]] = lse;
            if (p.tlse_partial) reinterpret_cast<float*>(p.tlse_partial)[orow[i]] = tlse;
        }
    }
    __syncwarp();
    // Lane r < 16 holds row r's partial row and global row (-1: padding).
    long long qoff, prow;
    int lim, qi;
    R.row(rt + 16 * warp + (lane & 15), qoff, prow, lim, qi);
    static_assert((16 * cpr) % 32 == 0, "every lane runs every shuffle of the store loop");
#pragma unroll 4
    for (int c = lane; c < 16 * cpr; c += 32) {
        const int r = c / cpr, q = c % cpr;
        const long long pr = __shfl_sync(0xffffffffu, prow, r);
        if (pr >= 0)
            *reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(p.o_partial) + pr * RB + 16 * q) =
                *reinterpret_cast<const uint4*>(sO + stage_off(r, RB, q, 0));
    }
    __threadfence();  // this lane's partial stores are visible device-wide before the count
    __syncwarp();
    bool last = false;
    int n = 0;
    const long long g = qoff >= 0 ? qoff / D : -1;  // (query, query head) row
    if (lane < 16 && g >= 0) {
        const long long qrow = g / p.num_heads_q;
        n = reinterpret_cast<const int*>(P.split_counts)[qrow * p.num_heads_kv + R.h];
        n = max(0, min(n, p.num_slots));
        int* cnt = reinterpret_cast<int*>(P.counters) + g;
        const int before = atomicAdd(cnt, 1);
        last = before == n - 1;
        if (last) atomicExch(cnt, 0);  // every slot of the row is in: ready for the next launch
    }
    unsigned todo = __ballot_sync(0xffffffffu, last);
    if (todo) __threadfence();  // the other CTAs' partials, published before their counts
#pragma unroll 1
    while (todo) {
        const int r = __ffs(todo) - 1;
        todo &= todo - 1;
        fwd2_merge_row<D, PD>(P, __shfl_sync(0xffffffffu, g, r), __shfl_sync(0xffffffffu, n, r), lane);
    }
    __syncwarp();  // the staging slice is read before the next tile rewrites it
}

// Consumer warpgroup g (thread wt of it): the items the producer publishes,
// the tiles u with u % 2 == g of each.
template <int D, int VAR, int PD>
__device__ __forceinline__ void fwd2_consumer(const MsaFwd2Params& P, uint8_t* base, const Fwd2Bars& B, int g, int wt) {
    using C = Fwd2Cfg<D, VAR>;
    using G = Geo90<D, VAR>;
    const MsaFwdParams& p = P.f;
    const int warp = wt >> 5, lane = wt & 31;
    const volatile int* item = reinterpret_cast<const volatile int*>(base + C::kOffItem);
    const uint32_t aQ = smem_u32(base + C::kOffQ + g * G::kQBytes);
    uint8_t* sO = base + C::kOffO + g * kTileRows * C::kORow + warp * 16 * C::kORow;
    const float scale = p.softmax_scale_log2, invT = p.inv_temperature;
    int qn = 0, u = 0;
#pragma unroll 1
    for (int k = 0;; ++k) {
        const int st = k % C::kStages;
        mbar_wait(B.kvfull(st), ring_full_parity(k, C::kStages));
        const int w = item[st];
        if (w < 0) break;
        int b, t0, nkeys, h;
        const FwdRows R{fwd_rows_at(p, D, w, b, t0, nkeys, h)};
        uint8_t* sK = base + st * C::kStageBytes;
        uint8_t* sV = sK + G::kKBytes;
        if (nkeys > 0 && (!G::kVDirect || nkeys < kBlk)) {
            // FP8: widen the landed E4M3 V into the bf16 V operand (rows past
            // the block's end zero); BF16: zero V rows past the block's end
            // (P is 0 there, and 0 * NaN is NaN). All 256 consumer threads,
            // then every warpgroup sees the operand.
            KVSource src;
            BlockLoc L;
            fwd2_source(p, b, h, src, L);
            prepare_block<D, VAR>(sK, sV, sK + C::kOffKRaw, sK + C::kOffVRaw, src, t0, nkeys, threadIdx.x, C::kCons);
            named_bar(1, C::kCons);
        }
        const int nrows = nkeys > 0 ? R.nrows : 0;
#pragma unroll 1
        for (int rt = 0; rt < nrows; rt += kTileRows, ++u) {
            if (u % C::kWG != g) continue;
            mbar_wait(B.qfull(g), ring_full_parity(qn, 1));
            fence_async_smem();  // the producer's cp.async (generic proxy) writes before this warp's wgmma reads
            ++qn;
            float s[64];
            qk<D, VAR>(aQ, smem_u32(sK), s);
            ring_warp_release(B.qempty(g));  // this warp's Q.K^T has read the Q buffer
            long long orow[2];
            int lim[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                long long qoff;
                int l, qi;
                R.row(rt + 16 * warp + (lane >> 2) + 8 * i, qoff, orow[i], l, qi);
                lim[i] = block_lim(l, t0, nkeys, true);
            }
            Soft sm;
            sm.reset();
            uint32_t pa[32];
            float alpha[2];
            softmax_block(s, lim, scale, invT, p.pv_round, sm, pa, alpha);
            float o[D / 2];
#pragma unroll
            for (int e = 0; e < D / 2; ++e) o[e] = 0.f;
            pv<D>(pa, smem_u32(sV), o, false);
            fwd2_epilogue<D, PD>(P, R, rt, sm, o, orow, sO, warp, lane);
        }
        ring_warp_release(B.kvempty(st));  // this warp's wgmma reads of the stage are complete
    }
    // Rows of the window with no slot: O = 0, LSE = -inf (the combine's empty rows).
    const long long rows = (long long)p.total_q * p.num_heads_q, g0 = (long long)P.q0 * p.num_heads_q;
#pragma unroll 1
    for (long long i = (long long)blockIdx.x * C::kCons + threadIdx.x; i < rows; i += (long long)gridDim.x * C::kCons) {
        const long long gr = g0 + i, qrow = gr / p.num_heads_q;
        const int hk = (int)(gr % p.num_heads_q) / p.qhead_per_kv;
        if (reinterpret_cast<const int*>(P.split_counts)[qrow * p.num_heads_kv + hk] > 0) continue;
        uint4* out = reinterpret_cast<uint4*>(reinterpret_cast<__nv_bfloat16*>(P.out) + gr * D);
#pragma unroll
        for (int c = 0; c < D / 8; ++c) out[c] = make_uint4(0, 0, 0, 0);
        reinterpret_cast<float*>(P.lse)[gr] = -INFINITY;
        if (p.tlse_partial && P.tlse) reinterpret_cast<float*>(P.tlse)[gr] = -INFINITY;
    }
}

template <int D, int VAR>
__device__ __forceinline__ void fwd2_impl(const MsaFwd2Params& P, const MsaTensorMaps& maps) {
    using C = Fwd2Cfg<D, VAR>;
    extern __shared__ __align__(16) uint8_t smem_dyn[];
    uint8_t* base = smem_dyn + ((1024 - (smem_u32(smem_dyn) & 1023)) & 1023);
    const Fwd2Bars B{smem_u32(base + C::kOffBar)};
    if (threadIdx.x == 0) {
        for (int s = 0; s < C::kStages; ++s) {
            mbar_init(B.kvfull(s), 1);
            mbar_init(B.kvempty(s), C::kCons / 32);
        }
        for (int g = 0; g < C::kWG; ++g) {
            mbar_init(B.qfull(g), 32);  // one cp.async arrive per producer lane
            mbar_init(B.qempty(g), 4);
        }
        mbar_init_fence();
    }
    __syncthreads();
    // The role, warp-uniform for the compiler (the wgmma are not on a divergent path).
    const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0);
    if (wg == C::kWG) {
        fwd2_producer<D, VAR>(P, maps, base, B);
        return;
    }
    if (P.f.partial_dtype == MSA_DT_F32) fwd2_consumer<D, VAR, MSA_DT_F32>(P, base, B, wg, threadIdx.x & 127);
    else fwd2_consumer<D, VAR, MSA_DT_BF16>(P, base, B, wg, threadIdx.x & 127);
}

}  // namespace sm90
}  // namespace msa

#define MSA_SM90_FWD2(NAME, D, VAR)                                                                                    \
    extern "C" __global__ void __launch_bounds__(msa::sm90::Fwd2Cfg<D, VAR>::kThreads, 1)                               \
        msa_sm90_fwd2_##NAME##_d##D(const __grid_constant__ MsaFwd2Params p, const __grid_constant__ MsaTensorMaps maps) { \
        MSA_SM90_BODY(msa::sm90::fwd2_impl<D, VAR>(p, maps));                                                              \
    }

MSA_SM90_FWD2(bf16, 64, msa::tc::kVarBF16)
MSA_SM90_FWD2(bf16, 128, msa::tc::kVarBF16)
MSA_SM90_FWD2(fp8, 64, msa::tc::kVarFP8)
MSA_SM90_FWD2(fp8, 128, msa::tc::kVarFP8)

// Launch geometry (threads, dynamic shared memory), the same numbers as the
// Fwd2Launch table of fatbin/names_fwd2.go (its test reads these lines).
#define MSA_FWD2_PIN(VAR, D, THREADS, SMEM)                                                                                  \
    static_assert(msa::sm90::Fwd2Cfg<D, msa::tc::kVar_##VAR>::kThreads == (THREADS) &&                                      \
                      msa::sm90::Fwd2Cfg<D, msa::tc::kVar_##VAR>::kSmem == (SMEM),                                         \
                  "geometry of msa_sm90_fwd2_" #VAR "_d" #D " (names_fwd2.go)");
MSA_FWD2_PIN(bf16, 64, 288, 115784)
MSA_FWD2_PIN(bf16, 128, 288, 230472)
MSA_FWD2_PIN(fp8, 64, 288, 107592)
MSA_FWD2_PIN(fp8, 128, 288, 214088)
#undef MSA_FWD2_PIN

// sm90_qfwd.cu - query-major block-sparse prefill on sm_90a (Hopper): the
// same plan and parameter block as sm80/sm80_qfwd.cu (cuda.QPlan,
// MsaQFwdParams: one CTA per query tile of 64 rows x KV head, walking the
// union of the blocks the tile's tokens selected, in ascending order, each
// row masked to the blocks its token selected and to its causal limit), on
// TMA + mbarrier rings and wgmma. O, LSE and temperature LSE are written
// once: no partials, no combine.
//
// CTA: two pipelines (one at D = 256), each a 64-row plan tile with its own
// consumer warpgroup, producer warp, K/V rings, operand buffers, Q buffer
// and barriers: CTA c runs tiles 2c and 2c + 1. Threads: consumer warpgroups first (pipeline g
// is warpgroup g), then a producer warpgroup whose warp g feeds pipeline g
// (its other warps exit). The producer warpgroup is whole so that
// setmaxnreg can move registers: 384 threads compile at 168 registers, the
// producer warpgroup drops to 56 and the consumers rise to 224 (per SM
// sub-partition: one producer and two consumer warps, 56 + 2 x 224 = 3 x
// 168); fp8pv 88 and 208 (its producer transposes V).
//
// Producer warp, per 64-row pass of its tile: the Q rows (16-byte loads of
// the pass's rows, scattered when Hkv > 1, stored in the K-major swizzled
// layout, completing q_full), then for every block of the tile's walk K into
// the K ring and V into the V ring (TMA boxes through the tensor maps; a
// paged block the boxes cannot cover exactly is copied with 16-byte loads
// into the same layout), each slot with a full barrier (count 1,
// transaction bytes) and an empty barrier (count 4: one arrive per consumer
// warp when its wgmma, or its conversion, has finished reading the slot).
//
// Consumer warpgroup, block j of the walk (intra-warpgroup overlap as in
// FlashAttention-3, D = 64 and 128): issue S_j = Q K_j^T, issue
// O += P_{j-1} V_{j-1}, wait for S_j only and release K_j, run the masked
// online softmax of S_j while the P.V wgmma still runs, wait for it and
// release V_{j-1}, rescale O, pack P_j into the register A fragment. P never
// leaves the registers. D = 256 runs S_j, softmax, P_j V_j in sequence (the
// 128-column O, S and P of two blocks would not fit 255 registers). After
// the walk, O is normalised, staged as BF16 through the Q buffer (or, for
// E4M3 Q, the V operand buffer; neither is read any more) and stored with
// 16-byte stores; then the Q buffer is released (q_empty).
//
// Why two pipelines instead of two warpgroups sharing one tile in
// ping-pong: a plan tile is 64 rows (one wgmma M) and two tiles of the plan
// have different unions of blocks, so two warpgroups on one K/V ring would
// each walk both unions; a 128-row tile would double the rows masked out of
// each block for uncorrelated selections. Two independent pipelines per CTA
// give the warp schedulers one warpgroup's softmax to run while the other's
// wgmma execute, without making either walk longer.
//
// Rings per pipeline (K slots / V slots): the first of 3 / 2, 3 / 1, 2 / 1,
// 1 / 1 that fits (QFwdCfg; V needs fewer slots than K: V_j is read one
// step after K_j); fp8pv (K / transposed V / V landing) 3 / 2 / 2, 3 / 2 /
// 1, 2 / 2 / 1, 2 / 1 / 1, 1 / 1 / 1. The stage counter k runs over all passes of the tile;
// slot k % n, phase (k / n) & 1 (cuda/qprefill_sm90_emu_test.go emulates
// this protocol in all fifteen configurations, every wait against its
// arrive, for walks of any length including none).
//
// Variants (the dtype a template parameter, no runtime switch in the loop):
// bf16 (BF16 Q/K/V: TMA lands K and V as the wgmma operands); fp8 (E4M3
// Q/K/V: Q.K^T on the e4m3 wgmma straight from the landed K; V widened to
// BF16 in shared memory by the consumers, exact, as is the E4M3-rounded P,
// so P.V runs on the bf16 wgmma); fp8pv (the same inputs, both products on
// the e4m3 wgmma, as FlashAttention-3 does: the producer warp lands V in a
// landing ring and transposes each block, one step behind its TMA and
// flushed at the end of each pass, into the V ring in the K-major layout
// the e4m3 B operand needs; the consumers convert P to E4M3 straight into
// the register A operand, with the key order of the transposed V chosen so
// that no byte crosses a thread: sm90_fp8_vt.cuh; O accumulates over the
// whole walk in the wgmma's accumulator; the A/B alternative to fp8 behind
// MSA_CUDA_FP8PV until a GPU has timed both); bf16fp8 (BF16 Q, E4M3 K/V widened to
// BF16); nvfp4 (packed E2M1 K/V with E4M3 block scales widened to BF16, K's
// global scale on the scores, V's in output_scale; BF16 or E4M3 Q). A
// widened operand has its own buffer: the consumers convert the landed
// slot into it and release the slot at once.
#include "sm90/sm90_common.cuh"
#include "sm90/sm90_fp8_vt.cuh"
#include "sm90/sm90_ring.cuh"

namespace msa {
namespace sm90 {

// Bytes of one pipeline with ks K slots, vs V slots and (P.V on the e4m3
// wgmma, PV8) ls V landing slots of variant VAR.
template <int D, int VAR, bool PV8>
constexpr int qfwd_pipe_bytes(int ks, int vs, int ls) {
    using G = Geo90<D, VAR>;
    const int kland = G::kKDirect ? G::kKBytes : G::kRawBytes;
    const int vland = !PV8 && G::kVDirect ? G::kVBytes : G::kRawBytes;  // PV8: the transposed V (E4M3, as many bytes)
    const int ops = (G::kKDirect ? 0 : G::kKBytes) + (PV8 ? ls * G::kRawBytes : G::kVDirect ? 0 : G::kVBytes);
    const int bars = 2 * ks + 2 * vs + 2 + (PV8 ? ls : 0);
    return (ks * kland + vs * vland + ops + G::kQBytes + 8 * bars + 1023) / 1024 * 1024;
}

// Ring slots of one pipeline: K, V (as the consumers read it) and V
// landing (PV8 only).
struct QSlots {
    int ks, vs, ls;
};
// The first ring configuration whose pipeline fits budget bytes: K slots
// first (V_j is read one step after K_j, so V needs fewer slots), then,
// for PV8, transposed V slots before landing slots (a second transposed
// slot lets the producer transpose V_j while the consumers' P.V of
// V_{j-1} runs; a second landing slot only lets the TMA of V_j start
// before the transposition of V_{j-1}).
template <int D, int VAR, bool PV8>
constexpr QSlots qfwd_slots(int budget) {
    constexpr QSlots widen[] = {{3, 2, 0}, {3, 1, 0}, {2, 1, 0}, {1, 1, 0}};
    constexpr QSlots pv8[] = {{3, 2, 2}, {3, 2, 1}, {2, 2, 1}, {2, 1, 1}, {1, 1, 1}};
    const QSlots* c = PV8 ? pv8 : widen;
    const int n = PV8 ? 5 : 4;
    for (int i = 0; i < n - 1; ++i)
        if (qfwd_pipe_bytes<D, VAR, PV8>(c[i].ks, c[i].vs, c[i].ls) <= budget) return c[i];
    return c[n - 1];
}

// PV8: P.V on the e4m3 wgmma (fp8 only: sm90_fp8_vt.cuh; the producer
// transposes each landed V block into the V ring); otherwise the bf16
// wgmma with P as bf16 (fp8: V widened to BF16 by the consumers).
template <int D, int VAR, bool PV8 = false>
struct QFwdCfg {
    using G = Geo90<D, VAR>;
    static_assert(!PV8 || VAR == kVarFP8, "P.V on the e4m3 wgmma needs E4M3 P and V (the fp8 variant)");
    static constexpr int kPipes = D == 256 ? 1 : 2;  // 64-row tiles (consumer warpgroups) per CTA
    static constexpr bool kOverlap = D != 256;       // Q.K^T of block j overlaps the softmax / P.V of j - 1
    // The pipelines fit the dynamic shared memory next to the 1 KB the CTA
    // reserves (static + dynamic <= 227 KB).
    static constexpr int kBudget = (232448 - 1024) / kPipes;
    static constexpr QSlots kSlots = qfwd_slots<D, VAR, PV8>(kBudget);
    static constexpr int kKS = kSlots.ks, kVS = kSlots.vs, kLS = kSlots.ls;
    static constexpr int kCons = 128 * kPipes;
    static constexpr int kThreads = kCons + (kPipes == 2 ? 128 : 32);
    // setmaxnreg (two pipelines): the 384 x 168 registers the CTA starts
    // with, redistributed. PV8 moves 16 per consumer thread (its P
    // fragment is 16 registers, not 32) to the producer, whose
    // transposition keeps 16 loaded words and 4 built ones live next to
    // the walk's state (at 56 or 72 ptxas spills there; 88 spills nothing).
    static constexpr int kProdRegs = PV8 ? 88 : 56, kConsRegs = PV8 ? 208 : 224;
    static_assert(kPipes == 1 || 128 * kProdRegs + kCons * kConsRegs <= 384 * 168, "register file");
    // pipeline-relative offsets: K ring (the operand where TMA lands it as
    // such, else raw rows), V ring (as K; PV8: the transposed V), converted
    // K operand, converted V operand (PV8: the V landing ring), Q, barriers
    static constexpr int kKLand = G::kKDirect ? G::kKBytes : G::kRawBytes;
    static constexpr int kVLand = !PV8 && G::kVDirect ? G::kVBytes : G::kRawBytes;
    static constexpr int kOffK = 0;
    static constexpr int kOffV = kOffK + kKS * kKLand;
    static constexpr int kOffKOp = kOffV + kVS * kVLand;
    static constexpr int kOffVOp = kOffKOp + (G::kKDirect ? 0 : G::kKBytes);
    static constexpr int kOffQ = kOffVOp + (PV8 ? kLS * G::kRawBytes : G::kVDirect ? 0 : G::kVBytes);
    static constexpr int kOffBar = kOffQ + G::kQBytes;
    static constexpr int kBars = 2 * kKS + 2 * kVS + 2 + kLS;
    // O is staged as BF16 rows (2D bytes) in the Q buffer, or where Q is
    // E4M3 (half the bytes) in the converted V operand, or for PV8 in the
    // first transposed V slot (128 keys x D bytes = 64 rows x 2D): none is
    // read or written by anyone else until the Q buffer is released.
    static constexpr int kOffStage = PV8 ? kOffV : G::kQkFp8 ? kOffVOp : kOffQ;
    static constexpr int kPipeBytes = qfwd_pipe_bytes<D, VAR, PV8>(kKS, kVS, kLS);  // next pipeline 1024-aligned
    static constexpr int kSmem = kPipes * kPipeBytes;
    static_assert(kPipeBytes <= kBudget, "sm_90 dynamic shared memory");
    static_assert(kOffBar + 8 * kBars <= kPipeBytes, "pipeline layout");
    static_assert(!G::kQkFp8 || !G::kVDirect, "E4M3 Q stages O in the converted V operand");
    static_assert(!PV8 || kTileRows * 2 * D <= kVLand, "PV8 stages O in a transposed V slot");
};

// The walk of one tile: its entries [lo, hi) of the plan's block list;
// entries whose block starts at or past the sequence's end are skipped
// (the plan never lists them), by producer and consumer alike, so both
// count the same stages.
struct QWalk {
    const int* blocks;
    const unsigned long long* masks;
    int lo, hi, blk, seqlen_k;
    __device__ __forceinline__ bool at(int i, int& t0, int& nkeys, unsigned long long& m) const {
        const long long s = (long long)blocks[i] * blk;
        if (s < 0 || s >= seqlen_k) return false;
        t0 = (int)s;
        nkeys = (int)min((long long)blk, seqlen_k - s);
        m = masks[i];
        return true;
    }
};

// The walk of tile t.
__device__ __forceinline__ QWalk q_walk(const MsaQFwdParams& p, int t, const QRows& R) {
    const int* tp = reinterpret_cast<const int*>(p.tile_ptr);
    return QWalk{reinterpret_cast<const int*>(p.blocks), reinterpret_cast<const unsigned long long*>(p.masks), tp[t], tp[t + 1],
                 p.blk_kv, R.seqlen_k};
}

// Barrier addresses and ring positions of stage k.
struct QRings {
    uint32_t bars;  // kfull[KS], kempty[KS], vfull[VS], vempty[VS], qfull, qempty, lfull[LS]
    int ks, vs, ls;
    __device__ __forceinline__ uint32_t kfull(int k) const { return bars + 8 * (k % ks); }
    __device__ __forceinline__ uint32_t kempty(int k) const { return bars + 8 * (ks + k % ks); }
    __device__ __forceinline__ uint32_t vfull(int k) const { return bars + 8 * (2 * ks + k % vs); }
    __device__ __forceinline__ uint32_t vempty(int k) const { return bars + 8 * (2 * ks + vs + k % vs); }
    __device__ __forceinline__ uint32_t qfull() const { return bars + 8 * (2 * ks + 2 * vs); }
    __device__ __forceinline__ uint32_t qempty() const { return bars + 8 * (2 * ks + 2 * vs + 1); }
    // PV8: V landing slot of stage k complete (TMA bytes, or the fallback
    // copy); the producer itself transposes and so frees it.
    __device__ __forceinline__ uint32_t lfull(int k) const { return bars + 8 * (2 * ks + 2 * vs + 2 + k % ls); }
};

// PV8 producer: transpose the landed V of stage k (nkeys keys) into its
// slot of the V ring, once the landing is complete and the consumers have
// released the slot's previous stage; then complete vfull (count 1).
template <int D, int VAR, bool PV8>
__device__ __forceinline__ void qfwd_transpose_v(uint8_t* base, const QRings& B, int k, int nkeys) {
    using C = QFwdCfg<D, VAR, PV8>;
    const int lane = threadIdx.x & 31;
    mbar_wait(B.lfull(k), ring_full_parity(k, C::kLS));
    if (k >= C::kVS) mbar_wait(B.vempty(k), ring_empty_parity(k, C::kVS));
    vt_transpose<D>(base + C::kOffV + (k % C::kVS) * C::kVLand, base + C::kOffVOp + (k % C::kLS) * Geo90<D, VAR>::kRawBytes, nkeys,
                    lane);
    fence_async_smem();  // the operand to wgmma; the landing slot's reads before its next TMA write
    __syncwarp();
    if (lane == 0) mbar_arrive(B.vfull(k));
}

template <int D, int VAR, bool PV8>
__device__ __forceinline__ void qfwd_producer(const MsaQFwdParams& p, const MsaTensorMaps& maps, uint8_t* base, const QRings& B,
                                              const QRows& R, const QWalk& W, const BlockLoc& L, const KVSource& src) {
    using C = QFwdCfg<D, VAR, PV8>;
    const int lane = threadIdx.x & 31;
    int k = 0;
#pragma unroll 1
    for (int rt = 0, pass = 0; rt < R.nrows; rt += kTileRows, ++pass) {
        if (pass > 0) mbar_wait(B.qempty(), ring_empty_parity(pass, 1));
        load_q_tile<D, VAR>(base + C::kOffQ, reinterpret_cast<const void*>(p.q), p.q_dtype, R, rt, lane, 32);
        fence_async_smem();
        __syncwarp();
        if (lane == 0) mbar_arrive(B.qfull());
        // PV8: the stage whose landed V is still to be transposed (one
        // step behind its TMA, so the copy overlaps the next issue), and
        // its key count; -1 for none. Flushed before the pass ends: the
        // consumers need it before they release the Q buffer.
        int pend = -1, pn = 0;
#pragma unroll 1
        for (int i = W.lo; i < W.hi; ++i) {
            int t0, nkeys;
            unsigned long long m;
            if (!W.at(i, t0, nkeys, m)) continue;
            if (k >= C::kKS) mbar_wait(B.kempty(k), ring_empty_parity(k, C::kKS));
            produce_operand<D, VAR>(&maps.k, src.k, base + C::kOffK + (k % C::kKS) * C::kKLand, B.kfull(k), L, src, t0, nkeys);
            if constexpr (PV8) {
                // landing slot k % LS last held stage k - LS, transposed at
                // step k - LS + 1: before this TMA when LS = 1
                if (C::kLS == 1 && pend >= 0) qfwd_transpose_v<D, VAR, PV8>(base, B, pend, pn);
                produce_operand<D, VAR>(&maps.v, src.v, base + C::kOffVOp + (k % C::kLS) * Geo90<D, VAR>::kRawBytes, B.lfull(k), L, src,
                                        t0, nkeys);
                if (C::kLS > 1 && pend >= 0) qfwd_transpose_v<D, VAR, PV8>(base, B, pend, pn);
                pend = k;
                pn = nkeys;
            } else {
                if (k >= C::kVS) mbar_wait(B.vempty(k), ring_empty_parity(k, C::kVS));
                produce_operand<D, VAR>(&maps.v, src.v, base + C::kOffV + (k % C::kVS) * C::kVLand, B.vfull(k), L, src, t0, nkeys);
            }
            ++k;
        }
        if constexpr (PV8)
            if (pend >= 0) qfwd_transpose_v<D, VAR, PV8>(base, B, pend, pn);
    }
}

// Key limits of the thread's two rows for a block (t0, nkeys, token mask m).
__device__ __forceinline__ void row_lims(int (&bl)[2], const int (&lim)[2], const int (&tok)[2], int t0, int nkeys,
                                         unsigned long long m) {
#pragma unroll
    for (int i = 0; i < 2; ++i) bl[i] = block_lim(lim[i], t0, nkeys, ((m >> tok[i]) & 1ull) != 0);
}

// A block's operands as the consumer warpgroup of one pipeline sees them.
template <int D, int VAR, bool PV8>
struct QOperands {
    using C = QFwdCfg<D, VAR, PV8>;
    using G = Geo90<D, VAR>;
    uint8_t* base;
    const QRings& B;
    const KVSource& src;
    int wt, bar;  // thread index in the warpgroup, its named barrier

    // Widen a landed slot into the operand buffer op (after every warp's
    // previous wgmma read of op), release the slot at once.
    __device__ __forceinline__ uint32_t widen(uint8_t* op, const uint8_t* land, const uint8_t* scales, int t0, int nkeys,
                                              uint32_t empty) const {
        named_bar(bar, 128);
        convert_block<D, VAR>(op, land, scales, src, t0, nkeys, wt, 128);
        fence_async_smem();
        ring_warp_release(empty);
        named_bar(bar, 128);
        return smem_u32(op);
    }
    // K of stage k ready for Q.K^T: landed; for a converted variant widened
    // into the K operand. Returns the operand's shared address.
    __device__ __forceinline__ uint32_t k_ready(int k, int t0, int nkeys) const {
        uint8_t* land = base + C::kOffK + (k % C::kKS) * C::kKLand;
        mbar_wait(B.kfull(k), ring_full_parity(k, C::kKS));
        if (G::kKDirect) return smem_u32(land);
        return widen(base + C::kOffKOp, land, src.k_scale, t0, nkeys, B.kempty(k));
    }
    // Q.K^T of stage k complete in this warp: release a directly used slot.
    __device__ __forceinline__ void k_done(int k) const {
        if (G::kKDirect) ring_warp_release(B.kempty(k));
    }
    // V of stage k ready for P.V: landed and rows past the block's end zero
    // (P is 0 there, and 0 * NaN is NaN); for a converted variant widened
    // into the V operand (rows past the end become zero); PV8: transposed
    // by the producer (keys past the end zero).
    __device__ __forceinline__ uint32_t v_ready(int k, int t0, int nkeys) const {
        uint8_t* land = base + C::kOffV + (k % C::kVS) * C::kVLand;
        mbar_wait(B.vfull(k), ring_full_parity(k, C::kVS));
        if (PV8) return smem_u32(land);
        if (!G::kVDirect) return widen(base + C::kOffVOp, land, src.v_scale, t0, nkeys, B.vempty(k));
        if (nkeys < kBlk) {
            zero_tail<D>(land, nkeys, wt, 128);
            fence_async_smem();
            named_bar(bar, 128);
        }
        return smem_u32(land);
    }
    __device__ __forceinline__ void v_done(int k) const {
        if (PV8 || G::kVDirect) ring_warp_release(B.vempty(k));
    }
};

// The rescale of O by the rows' alpha (fragment rows i = 0, 1).
template <int N>
__device__ __forceinline__ void rescale(float (&o)[N], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < N / 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e >> 1];
}

// Normalise O, stage it as BF16 rows (128-byte swizzle) in sO, store it
// with 16-byte stores and write LSE / temperature LSE.
template <int D>
__device__ __forceinline__ void store_tile(const MsaQFwdParams& p, const QRows& R, int rt, uint8_t* sO, const Soft& st,
                                           const float (&o)[D / 2], const long long (&orow)[2], float oscale, int wt, int bar) {
    const int warp = wt >> 5, lane = wt & 31;
    named_bar(bar, 128);  // every warp's wgmma reads of sO (Q or V operand) are complete
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float lse, tlse;
        const float f = finish(st, i, p.inv_temperature, lse, tlse) * oscale;
        const int r = 16 * warp + (lane >> 2) + 8 * i;
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
            *reinterpret_cast<uint32_t*>(sO + swz<128, kTileRows>(r, 2 * (8 * j + 2 * (lane & 3)))) =
                pack_bf16x2(o[4 * j + 2 * i] * f, o[4 * j + 2 * i + 1] * f);
        if (orow[i] >= 0 && (lane & 3) == 0) {
            reinterpret_cast<float*>(p.lse)[orow[i]] = lse;
            if (p.tlse) reinterpret_cast<float*>(p.tlse)[orow[i]] = tlse;
        }
    }
    named_bar(bar, 128);
    constexpr int cpr = 2 * D / 16;
#pragma unroll 1
    for (int c = wt; c < kTileRows * cpr; c += 128) {
        const int r = c / cpr, u = c % cpr;
        long long qoff, orw;
        int l, tk;
        R.row(rt + r, qoff, orw, l, tk);
        if (orw >= 0)
            *reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(p.out) + orw * (2 * D) + 16 * u) =
                *reinterpret_cast<const uint4*>(sO + swz<128, kTileRows>(r, 16 * u));
    }
}

// Consumer warpgroup of one pipeline.
template <int D, int VAR, bool PV8>
__device__ __forceinline__ void qfwd_consumer(const MsaQFwdParams& p, const QOperands<D, VAR, PV8>& X, const QRows& R, const QWalk& W) {
    using C = QFwdCfg<D, VAR, PV8>;
    using PV = PvPath<PV8>;
    const int warp = X.wt >> 5, lane = X.wt & 31;
    float scale = p.softmax_scale_log2;
    if (VAR == kVarNVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
    const float invT = p.inv_temperature;
    const int pv_round = PV::round_mode(p.pv_round);
    const float oscale = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
    const uint32_t aQ = smem_u32(X.base + C::kOffQ);
    int k = 0;
#pragma unroll 1
    for (int rt = 0, pass = 0; rt < R.nrows; rt += kTileRows, ++pass) {
        long long orow[2];
        int lim[2], tok[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            long long qoff;
            R.row(rt + 16 * warp + (lane >> 2) + 8 * i, qoff, orow[i], lim[i], tok[i]);
        }
        Soft st;
        st.reset();
        float o[D / 2];
#pragma unroll
        for (int e = 0; e < D / 2; ++e) o[e] = 0.f;
        float s[64];
        uint32_t pa[PV::kRegs];
        mbar_wait(X.B.qfull(), ring_full_parity(pass, 1));
        // pk: the stage whose P is in pa (overlap: its P.V is still to run),
        // (pt0, pn) its keys; -1 before the first.
        int pk = -1, pt0 = 0, pn = 0;
#pragma unroll 1
        for (int i = W.lo; i < W.hi; ++i) {
            int t0, nkeys;
            unsigned long long m;
            if (!W.at(i, t0, nkeys, m)) continue;
            int bl[2];
            row_lims(bl, lim, tok, t0, nkeys, m);
            float alpha[2];
            qk_issue<D, VAR>(aQ, X.k_ready(k, t0, nkeys), s);
            if (C::kOverlap && pk >= 0) {
                PV::template issue<D>(pa, X.v_ready(pk, pt0, pn), o, true);
                cute::warpgroup_wait<1>();  // S_k complete; P.V of stage pk may still run
                fence_regs(s);
                X.k_done(k);
                softmax_fold(s, bl, scale, invT, pv_round, st, alpha);
                cute::warpgroup_wait<0>();
                fence_regs(o);
                fence_regs(pa);
                X.v_done(pk);
                rescale(o, alpha);
                PV::pack(s, pa);
            } else {
                cute::warpgroup_wait<0>();
                fence_regs(s);
                X.k_done(k);
                softmax_fold(s, bl, scale, invT, pv_round, st, alpha);
                rescale(o, alpha);
                PV::pack(s, pa);
                if (!C::kOverlap) {
                    PV::template issue<D>(pa, X.v_ready(k, t0, nkeys), o, true);
                    cute::warpgroup_wait<0>();
                    fence_regs(o);
                    fence_regs(pa);
                    X.v_done(k);
                }
            }
            pk = k;
            pt0 = t0;
            pn = nkeys;
            ++k;
        }
        if (C::kOverlap && pk >= 0) {
            PV::template issue<D>(pa, X.v_ready(pk, pt0, pn), o, true);
            cute::warpgroup_wait<0>();
            fence_regs(o);
            fence_regs(pa);
            X.v_done(pk);
        }
        store_tile<D>(p, R, rt, X.base + C::kOffStage, st, o, orow, oscale, X.wt, X.bar);
        ring_warp_release(X.B.qempty());  // this warp's reads of the Q buffer are done
    }
}

// The K/V source of tile t's sequence b (dense or paged) and its TMA boxes.
__device__ __forceinline__ void qfwd_source(const MsaQFwdParams& p, int b, int h, KVSource& src, BlockLoc& L) {
    const int* page_row = p.page_table ? reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride : nullptr;
    const int dense_row0 = p.page_table ? 0 : reinterpret_cast<const int*>(p.cu_seqlens_k)[b];
    src = kv_source(p.k, p.v, p.k_scale, p.v_scale, page_row, dense_row0, h, p.num_heads_kv, p.page_size, p.kv_dtype);
    L = BlockLoc{page_row != nullptr, page_row, p.page_size, h, dense_row0};
}

template <int D, int VAR, bool PV8>
__device__ __forceinline__ void qfwd_impl(const MsaQFwdParams& p, const MsaTensorMaps& maps) {
    using C = QFwdCfg<D, VAR, PV8>;
    extern __shared__ __align__(1024) uint8_t smem_q[];
    // Role of the warp, made warp-uniform for the compiler (shuffle from
    // lane 0) so that the wgmma of a consumer are not on a divergent path.
    const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0);
    const bool producer = wg == C::kPipes;
    // Pipeline: the consumer warpgroup's index, or the producer warp's.
    const int pipe = producer ? __shfl_sync(0xffffffffu, (int)((threadIdx.x - C::kCons) >> 5), 0) : wg;
    uint8_t* base = smem_q + pipe * C::kPipeBytes;  // 1024-byte aligned (the 128-byte swizzle atoms)
    const QRings B{smem_u32(base + C::kOffBar), C::kKS, C::kVS, C::kLS};
    if (!producer && (threadIdx.x & 127) == 0) {
        for (int i = 0; i < C::kKS; ++i) {
            mbar_init(B.kfull(i), 1);
            mbar_init(B.kempty(i), 4);
        }
        for (int i = 0; i < C::kVS; ++i) {
            mbar_init(B.vfull(i), 1);
            mbar_init(B.vempty(i), 4);
        }
        mbar_init(B.qfull(), 1);
        mbar_init(B.qempty(), 4);
        for (int i = 0; i < C::kLS; ++i) mbar_init(B.lfull(i), 1);
        mbar_init_fence();
    }
    __syncthreads();
    // Each role's code lies wholly after its setmaxnreg (ptxas ignores a
    // decrease that code needing more registers can follow).
    if (producer) {
        if (C::kPipes > 1) setmaxnreg_dec<C::kProdRegs>();
        const int t = C::kPipes * blockIdx.x + pipe;
        if (pipe >= C::kPipes || t >= p.num_tiles) return;  // the producer warpgroup's idle warps; no tile
        int b;
        const QRows R = q_tile_rows(p, t, D, b);
        KVSource src;
        BlockLoc L;
        qfwd_source(p, b, R.h, src, L);
        qfwd_producer<D, VAR, PV8>(p, maps, base, B, R, q_walk(p, t, R), L, src);
        return;
    }
    if (C::kPipes > 1) setmaxnreg_inc<C::kConsRegs>();
    const int t = C::kPipes * blockIdx.x + pipe;
    if (t >= p.num_tiles) return;
    int b;
    const QRows R = q_tile_rows(p, t, D, b);
    KVSource src;
    BlockLoc L;
    qfwd_source(p, b, R.h, src, L);
    const QOperands<D, VAR, PV8> X{base, B, src, (int)(threadIdx.x & 127), 1 + pipe};
    qfwd_consumer<D, VAR, PV8>(p, X, R, q_walk(p, t, R));
}

// Kernel-name variants: the dtype variant and the P.V mode (fp8pv: the
// fp8 variant with P.V on the e4m3 wgmma, the A/B alternative to fp8's
// widened V until a GPU has timed both).
template <int NAMEVAR> struct QName;
enum { kQ_bf16, kQ_fp8, kQ_bf16fp8, kQ_nvfp4, kQ_fp8pv };
template <> struct QName<kQ_bf16> { static constexpr int var = kVarBF16; static constexpr bool pv8 = false; };
template <> struct QName<kQ_fp8> { static constexpr int var = kVarFP8; static constexpr bool pv8 = false; };
template <> struct QName<kQ_bf16fp8> { static constexpr int var = kVarBF16FP8; static constexpr bool pv8 = false; };
template <> struct QName<kQ_nvfp4> { static constexpr int var = kVarNVFP4; static constexpr bool pv8 = false; };
template <> struct QName<kQ_fp8pv> { static constexpr int var = kVarFP8; static constexpr bool pv8 = true; };
template <int D, int NAMEVAR>
using QFwdCfgOf = QFwdCfg<D, QName<NAMEVAR>::var, QName<NAMEVAR>::pv8>;

}  // namespace sm90
}  // namespace msa

#define MSA_SM90_QFWD(NAME, D)                                                                                              \
    extern "C" __global__ void __launch_bounds__(msa::sm90::QFwdCfgOf<D, msa::sm90::kQ_##NAME>::kThreads, 1)               \
        msa_sm90_qfwd_##NAME##_d##D(const __grid_constant__ MsaQFwdParams p, const __grid_constant__ MsaTensorMaps maps) { \
        MSA_SM90_BODY(msa::sm90::qfwd_impl<D, msa::sm90::QName<msa::sm90::kQ_##NAME>::var, msa::sm90::QName<msa::sm90::kQ_##NAME>::pv8>(p, maps)); \
    }

MSA_SM90_QFWD(bf16, 64)
MSA_SM90_QFWD(bf16, 128)
MSA_SM90_QFWD(bf16, 256)
MSA_SM90_QFWD(fp8, 64)
MSA_SM90_QFWD(fp8, 128)
MSA_SM90_QFWD(fp8, 256)
MSA_SM90_QFWD(bf16fp8, 64)
MSA_SM90_QFWD(bf16fp8, 128)
MSA_SM90_QFWD(bf16fp8, 256)
MSA_SM90_QFWD(nvfp4, 64)
MSA_SM90_QFWD(nvfp4, 128)
MSA_SM90_QFWD(nvfp4, 256)
MSA_SM90_QFWD(fp8pv, 64)
MSA_SM90_QFWD(fp8pv, 128)
MSA_SM90_QFWD(fp8pv, 256)

// Launch geometry (threads, dynamic shared memory), the same numbers as the
// HopperAmpereLaunch table of names_hopper_ampere.go (its test reads these lines).
#define MSA_HA_PIN(ARCH, ALGO, VAR, D, THREADS, SMEM)                                                       \
    static_assert(msa::sm90::QFwdCfgOf<D, msa::sm90::kQ_##VAR>::kThreads == (THREADS) && msa::sm90::QFwdCfgOf<D, msa::sm90::kQ_##VAR>::kSmem == (SMEM), \
                  "geometry of msa_" #ARCH "_" #ALGO "_" #VAR "_d" #D " (names_hopper_ampere.go)");
MSA_HA_PIN(sm90, qfwd, bf16, 64, 384, 182272)
MSA_HA_PIN(sm90, qfwd, bf16, 128, 384, 231424)
MSA_HA_PIN(sm90, qfwd, bf16, 256, 160, 230400)
MSA_HA_PIN(sm90, qfwd, fp8, 64, 384, 124928)
MSA_HA_PIN(sm90, qfwd, fp8, 128, 384, 215040)
MSA_HA_PIN(sm90, qfwd, fp8, 256, 160, 214016)
MSA_HA_PIN(sm90, qfwd, bf16fp8, 64, 384, 165888)
MSA_HA_PIN(sm90, qfwd, bf16fp8, 128, 384, 231424)
MSA_HA_PIN(sm90, qfwd, bf16fp8, 256, 160, 230400)
MSA_HA_PIN(sm90, qfwd, nvfp4, 64, 384, 124928)
MSA_HA_PIN(sm90, qfwd, nvfp4, 128, 384, 231424)
MSA_HA_PIN(sm90, qfwd, nvfp4, 256, 160, 230400)
MSA_HA_PIN(sm90, qfwd, fp8pv, 64, 384, 124928)
MSA_HA_PIN(sm90, qfwd, fp8pv, 128, 384, 215040)
MSA_HA_PIN(sm90, qfwd, fp8pv, 256, 160, 214016)
#undef MSA_HA_PIN

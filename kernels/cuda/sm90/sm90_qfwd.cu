// sm90_qfwd.cu - query-major block-sparse prefill on sm_90a (Hopper): the
// same plan and parameter block as sm80/sm80_qfwd.cu (cuda.QPlan,
// MsaQFwdParams: one CTA per query tile of 64 rows x KV head, walking the
// union of the blocks the tile's tokens selected, in ascending order, each
// row masked to the blocks its token selected and to its causal limit), on
// TMA + mbarrier rings and wgmma. O, LSE and temperature LSE are written
// once: no partials, no combine.
//
// CTA: two pipelines (one at D = 256), each a 64-row plan tile with its own
// consumer warpgroup, producer warp, K/V rings, Q buffer and barriers: CTA c
// runs tiles 2c and 2c + 1. Threads: consumer warpgroups first (pipeline g
// is warpgroup g), then a producer warpgroup whose warp g feeds pipeline g
// (its other warps exit). The producer warpgroup is whole so that
// setmaxnreg can move registers: 384 threads compile at 168 registers, the
// producer warpgroup drops to 56 and the consumers rise to 224 (per SM
// sub-partition: one producer and two consumer warps, 56 + 2 x 224 <= 512).
//
// Producer warp, per 64-row pass of its tile: the Q rows (16-byte loads of
// the pass's rows, scattered when Hkv > 1, stored in the K-major swizzled
// layout, completing q_full), then for every block of the tile's walk K into
// the K ring and V into the V ring (TMA boxes through the tensor maps; a
// paged block the boxes cannot cover exactly is copied with 16-byte loads
// into the same layout), each slot with a full barrier (count 1,
// transaction bytes) and an empty barrier (count 4: one arrive per consumer
// warp when its wgmma has finished reading the slot).
//
// Consumer warpgroup, block j of the walk (intra-warpgroup overlap as in
// FlashAttention-3, D = 64 and 128): issue S_j = Q K_j^T, issue
// O += P_{j-1} V_{j-1}, wait for S_j only and release K_j, run the masked
// online softmax of S_j while the P.V wgmma still runs, wait for it and
// release V_{j-1}, rescale O, pack P_j into the register A fragment. P never
// leaves the registers. D = 256 runs S_j, softmax, P_j V_j in sequence (the
// 128-column O, S and P of two blocks would not fit 255 registers). After
// the walk, O is normalised, staged through the Q buffer (no longer read)
// and stored with 16-byte stores; then the Q buffer is released (q_empty).
//
// Why two pipelines instead of two warpgroups sharing one tile in
// ping-pong: a plan tile is 64 rows (one wgmma M) and two tiles of the plan
// have different unions of blocks, so two warpgroups on one K/V ring would
// each walk both unions; a 128-row tile would double the rows masked out of
// each block for uncorrelated selections. Two independent pipelines per CTA
// give the warp schedulers one warpgroup's softmax to run while the other's
// wgmma execute, without making either walk longer.
//
// Rings per pipeline (K slots / V slots): D 64: 3 / 2; D 128: 2 / 1; D 256:
// 2 / 1. V needs fewer slots than K: V_j is read one step after K_j. The
// stage counter k runs over all passes of the tile; slot k % n, phase
// (k / n) & 1 (cuda/qprefill_sm90_emu_test.go emulates this protocol, every
// wait against its arrive, for walks of any length including none).
//
// Variant: bf16 (BF16 Q/K/V, P rounded per pv_round). The other dtype
// combinations run the sm80 query-major kernel on Hopper (cuda.QFwdName).
#include "sm90/sm90_common.cuh"

namespace msa {
namespace sm90 {

template <int D>
struct QFwdCfg {
    using G = Geo90<D, kVarBF16>;
    static constexpr int kPipes = D == 256 ? 1 : 2;  // 64-row tiles (consumer warpgroups) per CTA
    static constexpr bool kOverlap = D != 256;       // Q.K^T of block j overlaps the softmax / P.V of j - 1
    static constexpr int kKS = D == 64 ? 3 : 2;      // K ring slots
    static constexpr int kVS = D == 64 ? 2 : 1;      // V ring slots
    static constexpr int kCons = 128 * kPipes;
    static constexpr int kThreads = kCons + (kPipes == 2 ? 128 : 32);
    static constexpr int kProdRegs = 56, kConsRegs = 224;  // setmaxnreg (two pipelines)
    static_assert(kPipes == 1 || 128 * kProdRegs + kCons * kConsRegs <= 65536, "register file");
    static constexpr int kOffK = 0;  // pipeline-relative offsets
    static constexpr int kOffV = kOffK + kKS * G::kKBytes;
    static constexpr int kOffQ = kOffV + kVS * G::kVBytes;
    static constexpr int kOffBar = kOffQ + G::kQBytes;
    static constexpr int kBars = 2 * kKS + 2 * kVS + 2;  // full/empty per slot, q_full, q_empty
    static constexpr int kPipeBytes = (kOffBar + 8 * kBars + 1023) / 1024 * 1024;  // next pipeline 1024-aligned
    static constexpr int kSmem = kPipes * kPipeBytes;
    static_assert(kSmem <= 232448, "sm_90 dynamic shared memory");
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
    uint32_t bars;  // kfull[KS], kempty[KS], vfull[VS], vempty[VS], qfull, qempty
    int ks, vs;
    __device__ __forceinline__ uint32_t kfull(int k) const { return bars + 8 * (k % ks); }
    __device__ __forceinline__ uint32_t kempty(int k) const { return bars + 8 * (ks + k % ks); }
    __device__ __forceinline__ uint32_t vfull(int k) const { return bars + 8 * (2 * ks + k % vs); }
    __device__ __forceinline__ uint32_t vempty(int k) const { return bars + 8 * (2 * ks + vs + k % vs); }
    __device__ __forceinline__ uint32_t qfull() const { return bars + 8 * (2 * ks + 2 * vs); }
    __device__ __forceinline__ uint32_t qempty() const { return bars + 8 * (2 * ks + 2 * vs + 1); }
};
// Parity a full barrier of a ring of n slots completes for stage k, and
// the parity of the empty barrier's completion that frees the slot for
// stage k >= n (the release of stage k - n).
__device__ __forceinline__ uint32_t full_parity(int k, int n) { return (uint32_t)(k / n) & 1u; }
__device__ __forceinline__ uint32_t empty_parity(int k, int n) { return (uint32_t)(k / n - 1) & 1u; }

template <int D>
__device__ __forceinline__ void qfwd_producer(const MsaQFwdParams& p, const MsaTensorMaps& maps, uint8_t* base, const QRings& B,
                                              const QRows& R, const QWalk& W, const BlockLoc& L, const KVSource& src) {
    using C = QFwdCfg<D>;
    using G = Geo90<D, kVarBF16>;
    const int lane = threadIdx.x & 31;
    int k = 0;
#pragma unroll 1
    for (int rt = 0, pass = 0; rt < R.nrows; rt += kTileRows, ++pass) {
        if (pass > 0) mbar_wait(B.qempty(), (uint32_t)(pass - 1) & 1u);
        load_q_tile<D, kVarBF16>(base + C::kOffQ, reinterpret_cast<const void*>(p.q), MSA_DT_BF16, R, rt, lane, 32);
        fence_async_smem();
        __syncwarp();
        if (lane == 0) mbar_arrive(B.qfull());
#pragma unroll 1
        for (int i = W.lo; i < W.hi; ++i) {
            int t0, nkeys;
            unsigned long long m;
            if (!W.at(i, t0, nkeys, m)) continue;
            if (k >= C::kKS) mbar_wait(B.kempty(k), empty_parity(k, C::kKS));
            produce_operand<D, kVarBF16>(&maps.k, src.k, base + C::kOffK + (k % C::kKS) * G::kKBytes, B.kfull(k), L, src, t0, nkeys);
            if (k >= C::kVS) mbar_wait(B.vempty(k), empty_parity(k, C::kVS));
            produce_operand<D, kVarBF16>(&maps.v, src.v, base + C::kOffV + (k % C::kVS) * G::kVBytes, B.vfull(k), L, src, t0, nkeys);
            ++k;
        }
    }
}

// Key limits of the thread's two rows for a block (t0, nkeys, token mask m).
__device__ __forceinline__ void row_lims(int (&bl)[2], const int (&lim)[2], const int (&tok)[2], int t0, int nkeys,
                                         unsigned long long m) {
#pragma unroll
    for (int i = 0; i < 2; ++i) bl[i] = block_lim(lim[i], t0, nkeys, ((m >> tok[i]) & 1ull) != 0);
}

// V slot of stage k ready for P.V: landed, rows past the block's end zeroed
// (P is 0 there, and 0 * NaN is NaN; whatever the boxes brought is not read).
// bar: the warpgroup's named barrier.
template <int D>
__device__ __forceinline__ void v_ready(uint8_t* sV, uint32_t vfull, uint32_t parity, int nkeys, int wt, int bar) {
    mbar_wait(vfull, parity);
    if (nkeys < kBlk) {
        zero_tail<D>(sV, nkeys, wt, 128);
        fence_async_smem();
        named_bar(bar, 128);
    }
}

// One warp's arrive on an empty barrier (count 4: one per consumer warp).
__device__ __forceinline__ void warp_release(uint32_t bar) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(bar);
}

// The rescale of O by the rows' alpha (fragment rows i = 0, 1).
template <int N>
__device__ __forceinline__ void rescale(float (&o)[N], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < N / 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e >> 1];
}

// Normalise O, stage it as BF16 in the (no longer read) Q buffer, store it
// with 16-byte stores and write LSE / temperature LSE.
template <int D>
__device__ __forceinline__ void store_tile(const MsaQFwdParams& p, const QRows& R, int rt, uint8_t* sQ, const Soft& st,
                                           const float (&o)[D / 2], const long long (&orow)[2], float oscale, int wt, int bar) {
    using G = Geo90<D, kVarBF16>;
    const int warp = wt >> 5, lane = wt & 31;
    named_bar(bar, 128);  // every warp's Q.K^T reads of sQ are complete
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float lse, tlse;
        const float f = finish(st, i, p.inv_temperature, lse, tlse) * oscale;
        const int r = 16 * warp + (lane >> 2) + 8 * i;
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
            *reinterpret_cast<uint32_t*>(sQ + swz<G::kQkSpan, kTileRows>(r, 2 * (8 * j + 2 * (lane & 3)))) =
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
                *reinterpret_cast<const uint4*>(sQ + swz<G::kQkSpan, kTileRows>(r, 16 * u));
    }
}

// Consumer warpgroup of one pipeline (wt: thread index in the warpgroup,
// bar: its named barrier).
template <int D>
__device__ __forceinline__ void qfwd_consumer(const MsaQFwdParams& p, uint8_t* base, const QRings& B, const QRows& R,
                                              const QWalk& W, int wt, int bar) {
    using C = QFwdCfg<D>;
    using G = Geo90<D, kVarBF16>;
    const int warp = wt >> 5, lane = wt & 31;
    const float scale = p.softmax_scale_log2, invT = p.inv_temperature;
    const float oscale = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
    uint8_t* sQ = base + C::kOffQ;
    const uint32_t aQ = smem_u32(sQ);
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
        uint32_t pa[32];
        mbar_wait(B.qfull(), (uint32_t)pass & 1u);
        // pk: the stage whose P is in pa (overlap: its P.V is still to run),
        // pn its key count; -1 before the first block.
        int pk = -1, pn = 0;
#pragma unroll 1
        for (int i = W.lo; i < W.hi; ++i) {
            int t0, nkeys;
            unsigned long long m;
            if (!W.at(i, t0, nkeys, m)) continue;
            int bl[2];
            row_lims(bl, lim, tok, t0, nkeys, m);
            float alpha[2];
            mbar_wait(B.kfull(k), full_parity(k, C::kKS));
            qk_issue<D, kVarBF16>(aQ, smem_u32(base + C::kOffK + (k % C::kKS) * G::kKBytes), s);
            if (C::kOverlap && pk >= 0) {
                uint8_t* sV = base + C::kOffV + (pk % C::kVS) * G::kVBytes;
                v_ready<D>(sV, B.vfull(pk), full_parity(pk, C::kVS), pn, wt, bar);
                pv_issue<D>(pa, smem_u32(sV), o, true);
                cute::warpgroup_wait<1>();  // S_k complete; P.V of stage pk may still run
                fence_regs(s);
                warp_release(B.kempty(k));
                softmax_fold(s, bl, scale, invT, p.pv_round, st, alpha);
                cute::warpgroup_wait<0>();
                fence_regs(o);
                fence_regs(pa);
                warp_release(B.vempty(pk));
                rescale(o, alpha);
                pack_p(s, pa);
            } else {
                cute::warpgroup_wait<0>();
                fence_regs(s);
                warp_release(B.kempty(k));
                softmax_fold(s, bl, scale, invT, p.pv_round, st, alpha);
                rescale(o, alpha);
                pack_p(s, pa);
                if (!C::kOverlap) {
                    uint8_t* sV = base + C::kOffV + (k % C::kVS) * G::kVBytes;
                    v_ready<D>(sV, B.vfull(k), full_parity(k, C::kVS), nkeys, wt, bar);
                    pv<D>(pa, smem_u32(sV), o, true);
                    warp_release(B.vempty(k));
                }
            }
            pk = k;
            pn = nkeys;
            ++k;
        }
        if (C::kOverlap && pk >= 0) {
            uint8_t* sV = base + C::kOffV + (pk % C::kVS) * G::kVBytes;
            v_ready<D>(sV, B.vfull(pk), full_parity(pk, C::kVS), pn, wt, bar);
            pv<D>(pa, smem_u32(sV), o, true);
            warp_release(B.vempty(pk));
        }
        store_tile<D>(p, R, rt, sQ, st, o, orow, oscale, wt, bar);
        warp_release(B.qempty());  // this warp's reads of sQ are done
    }
}

template <int D>
__device__ __forceinline__ void qfwd_impl(const MsaQFwdParams& p, const MsaTensorMaps& maps) {
    using C = QFwdCfg<D>;
    extern __shared__ __align__(1024) uint8_t smem_q[];
    // Role of the warp, made warp-uniform for the compiler (shuffle from
    // lane 0) so that the wgmma of a consumer are not on a divergent path.
    const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0);
    const bool producer = wg == C::kPipes;
    // Pipeline: the consumer warpgroup's index, or the producer warp's.
    const int pipe = producer ? __shfl_sync(0xffffffffu, (int)((threadIdx.x - C::kCons) >> 5), 0) : wg;
    uint8_t* base = smem_q + pipe * C::kPipeBytes;  // 1024-byte aligned (the 128-byte swizzle atoms)
    const QRings B{smem_u32(base + C::kOffBar), C::kKS, C::kVS};
    if (!producer && (threadIdx.x & 127) == 0) {
        {
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
            mbar_init_fence();
        }
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
        const int* page_row = p.page_table ? reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride : nullptr;
        const int dense_row0 = p.page_table ? 0 : reinterpret_cast<const int*>(p.cu_seqlens_k)[b];
        const KVSource src = kv_source(p.k, p.v, p.k_scale, p.v_scale, page_row, dense_row0, R.h, p.num_heads_kv, p.page_size, p.kv_dtype);
        const BlockLoc L{page_row != nullptr, page_row, p.page_size, R.h, dense_row0};
        qfwd_producer<D>(p, maps, base, B, R, q_walk(p, t, R), L, src);
        return;
    }
    if (C::kPipes > 1) setmaxnreg_inc<C::kConsRegs>();
    const int t = C::kPipes * blockIdx.x + pipe;
    if (t >= p.num_tiles) return;
    int b;
    const QRows R = q_tile_rows(p, t, D, b);
    qfwd_consumer<D>(p, base, B, R, q_walk(p, t, R), threadIdx.x & 127, 1 + pipe);
}

template <int D>
__device__ __forceinline__ void qfwd_entry(const MsaQFwdParams& p, const MsaTensorMaps& maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    qfwd_impl<D>(p, maps);
#else
    asm volatile("trap;");  // sm_90a kernel: no body for other targets
#endif
}

}  // namespace sm90
}  // namespace msa

#define MSA_SM90_QFWD(D)                                                                                               \
    extern "C" __global__ void __launch_bounds__(msa::sm90::QFwdCfg<D>::kThreads, 1)                                   \
        msa_sm90_qfwd_bf16_d##D(const __grid_constant__ MsaQFwdParams p, const __grid_constant__ MsaTensorMaps maps) { \
        msa::sm90::qfwd_entry<D>(p, maps);                                                                            \
    }

MSA_SM90_QFWD(64)
MSA_SM90_QFWD(128)
MSA_SM90_QFWD(256)

// Launch geometry (threads, dynamic shared memory), the same numbers as the
// HopperAmpereLaunch table of names_hopper_ampere.go (its test reads these lines).
#define MSA_HA_PIN(ARCH, ALGO, VAR, D, THREADS, SMEM)                                                       \
    static_assert(msa::sm90::QFwdCfg<D>::kThreads == (THREADS) && msa::sm90::QFwdCfg<D>::kSmem == (SMEM), \
                  "geometry of msa_" #ARCH "_" #ALGO "_" #VAR "_d" #D " (names_hopper_ampere.go)");
MSA_HA_PIN(sm90, qfwd, bf16, 64, 384, 182272)
MSA_HA_PIN(sm90, qfwd, bf16, 128, 384, 231424)
MSA_HA_PIN(sm90, qfwd, bf16, 256, 160, 230400)
#undef MSA_HA_PIN

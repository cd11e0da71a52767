// sm90_common.cuh - building blocks of the sm_90a tensor-core kernels
// (sm90_fwd.cu, sm90_decode.cu): TMA + mbarrier loads of a K/V block,
// GMMA shared-memory descriptors, wgmma Q.K^T (shared x shared) and P.V
// (P in registers), and the shared-memory layouts they agree on.
//
// Shared-memory operand layout (the one TMA writes and GMMA reads): a tile of
// R rows whose rows are RB bytes is stored as RB/SPAN column panels of
// [R rows][SPAN bytes], SPAN = min(128, RB), each panel swizzled with the
// SPAN-byte pattern (16-byte chunk index XOR row bits: Swizzle<3,4,3> for 128,
// <2,4,3> for 64, <1,4,3> for 32). Every panel starts 1024-byte aligned.
// Q and K are K-major operands (rows = query-head rows / keys, D contiguous);
// V is the MN-major B operand of P.V (rows = keys, D contiguous, bf16).
#ifndef MSA_SM90_COMMON_CUH
#define MSA_SM90_COMMON_CUH

#include <utility>
#include "shared/msa_tc_abi.h"
#include "shared/tc_frag.cuh"
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>

// The body of every sm_90a kernel: the call in the sm_90a image, a trap
// in the others (an sm_90a kernel launched on another architecture),
// whose targets lack the wgmma, setmaxnreg and TMA forms the bodies use.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MSA_SM90_BODY(...) __VA_ARGS__
#else
#define MSA_SM90_BODY(...) asm volatile("trap;")
#endif

namespace msa {
namespace sm90 {

using namespace msa::tc;

// ---- PTX wrappers -------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Make barrier initialisation visible to the async proxy (TMA complete_tx).
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "MSA_MBAR_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra MSA_MBAR_WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// Warpgroup register budget (sm_90a): every thread of the warpgroup executes it.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
// Generic-proxy shared-memory writes -> visible to wgmma / TMA (async proxy).
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void named_bar(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

// Byte offset of byte c of row `row` in a swizzled panel tile of R rows (see top).
template <int SPAN, int R>
__device__ __forceinline__ int swz(int row, int c) {
    static_assert(SPAN == 128 || SPAN == 64 || SPAN == 32, "swizzle span");
    const int panel = c / SPAN, cc = c % SPAN;
    const int sw = SPAN == 128 ? (row & 7) : SPAN == 64 ? ((row >> 1) & 3) : ((row >> 2) & 1);
    return panel * R * SPAN + row * SPAN + ((((cc >> 4) ^ sw) << 4) | (cc & 15));
}

// GMMA shared-memory descriptor (start, leading / stride byte offsets, swizzle).
template <int SPAN>
__device__ __forceinline__ uint64_t gdesc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    constexpr uint64_t layout = SPAN == 128 ? 1 : SPAN == 64 ? 2 : 3;
    return (uint64_t)((addr >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (layout << 62);
}

template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// ---- cp.async (16 bytes, L2 only) with zero fill: src_bytes = 0 writes 16 zero
// bytes and reads nothing; completion is tracked by commit groups. The
// L2::128B hint fetches whole 128-byte lines (the neighbouring chunks of a
// K/V row are copied by the neighbouring threads).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool live) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(live ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// ---- geometry of one kernel instance -------------------------------------------------
template <int D, int VAR>
struct Geo90 {
    static constexpr bool kQkFp8 = VAR == kVarFP8;                 // Q.K^T on the e4m3 wgmma
    static constexpr int kQkEs = kQkFp8 ? 1 : 2;                   // bytes per Q/K element as MMA operand
    static constexpr int kQkRow = D * kQkEs;                       // bytes per Q / K operand row
    static constexpr int kQkSpan = kQkRow < 128 ? kQkRow : 128;
    static constexpr int kVRow = 2 * D;                            // V operand is bf16
    static constexpr int kRawRow = KvStore<VAR>::row_bytes(D);     // bytes per stored K/V row
    static constexpr int kRawSpan = kRawRow < 128 ? kRawRow : 128;
    static constexpr bool kKDirect = VAR == kVarBF16 || VAR == kVarFP8;  // TMA lands K in its operand layout
    static constexpr bool kVDirect = VAR == kVarBF16;
    static constexpr int kMapEs = VAR == kVarBF16 ? 2 : 1;         // tensor-map element size (BFLOAT16 / UINT8)
    static constexpr int kInner = kRawSpan / kMapEs;               // box inner extent, elements
    static constexpr int kQBytes = kTileRows * kQkRow;
    static constexpr int kKBytes = kBlk * kQkRow;
    static constexpr int kVBytes = kBlk * kVRow;
    static constexpr int kRawBytes = kBlk * kRawRow;
    // one K/V stage: K operand, V operand, and the raw landing buffers of converted operands
    static constexpr int kStageBytes = kKBytes + kVBytes + (kKDirect ? 0 : kRawBytes) + (kVDirect ? 0 : kRawBytes);
    static_assert(kQkSpan >= 32 && kRawSpan >= 32 && kQkRow % kQkSpan == 0 && kRawRow % kRawSpan == 0, "panel geometry");
};

// ---- Q tile: 64 query-head rows, gathered with 16-byte loads (rows are scattered
// queries), converted to the Q.K^T operand type, stored swizzled. Executed by
// nthr consumer threads (wt = thread index among them).
template <int D, int VAR, class Rows>
__device__ __forceinline__ void load_q_tile(uint8_t* sQ, const void* q, int q_dtype, const Rows& R, int rt, int wt, int nthr = 128) {
    using G = Geo90<D, VAR>;
    constexpr int cpr = G::kQkRow / 16;  // 16-byte chunks per operand row
    for (int i = wt; i < kTileRows * cpr; i += nthr) {
        const int r = i / cpr, c = i % cpr;
        long long qoff, orow;
        int lim, qi;
        R.row(rt + r, qoff, orow, lim, qi);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (qoff >= 0) {
            if (G::kQkFp8) {
                v = *reinterpret_cast<const uint4*>(reinterpret_cast<const uint8_t*>(q) + qoff + 16 * c);
            } else if (q_dtype == MSA_DT_BF16) {
                v = *reinterpret_cast<const uint4*>(reinterpret_cast<const __nv_bfloat16*>(q) + qoff + 8 * c);
            } else {  // e4m3 Q feeding a bf16 product (exact)
                float f[8];
                load_chunk8(f, q, qoff, 8 * c, MSA_DT_E4M3, nullptr, 0, D);
                v = make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
            }
        }
        *reinterpret_cast<uint4*>(sQ + swz<G::kQkSpan, kTileRows>(r, 16 * c)) = v;
    }
}

// ---- K/V block loads (producer warp) ------------------------------------------------
// Where keys [t0, t0+nkeys) of one (sequence, KV head) live, and whether the
// ABI's boxes cover them without two boxes writing the same shared rows.
struct BlockLoc {
    bool paged;
    const int* page_row;  // paged: page_table row of the sequence
    int page_size, h, dense_row0;  // dense: cu_seqlens_k[b]
    // true when TMA boxes land the block exactly: dense, or a page-aligned block
    // (page_size <= 128, multiple of 8 rows so each box starts a swizzle atom)
    // or a block inside one page (page_size > 128).
    __device__ __forceinline__ bool tma_ok(int t0, int nkeys) const {
        if (!paged) return true;
        if (page_size <= kBlk)
            return page_size % 8 == 0 && t0 % page_size == 0 && (nkeys + page_size - 1) / page_size * page_size <= kBlk;
        return t0 % page_size + nkeys <= page_size;
    }
};

// Transaction bytes of one operand's boxes for a block (tma_ok blocks only).
template <int D, int VAR>
__device__ __forceinline__ uint32_t tma_bytes(const BlockLoc& L, int nkeys) {
    using G = Geo90<D, VAR>;
    if (L.paged && L.page_size <= kBlk) return (uint32_t)((nkeys + L.page_size - 1) / L.page_size * L.page_size * G::kRawRow);
    return (uint32_t)(kBlk * G::kRawRow);
}

// Issue the TMA boxes of one operand (K or V) of a block into dst (one thread).
//   dense: one box {inner, 1, 128} per panel at (panel*inner, h, cu_k[b] + t0);
//   paged, page_size <= 128: ceil(nkeys/page_size) boxes {inner, page_size, 1, 1}
//          at (panel*inner, 0, h, page), landing at shared row bx*page_size;
//   paged, page_size > 128: one box {inner, 128, 1, 1} at (panel*inner, t0 % page_size, h, page).
template <int D, int VAR>
__device__ __forceinline__ void tma_block(const CUtensorMap* map, uint32_t dst, uint32_t bar, const BlockLoc& L, int t0, int nkeys) {
    using G = Geo90<D, VAR>;
    constexpr int panels = G::kRawRow / G::kRawSpan;
    if (!L.paged) {
#pragma unroll
        for (int pn = 0; pn < panels; ++pn)
            tma_load_3d(dst + pn * kBlk * G::kRawSpan, map, bar, pn * G::kInner, L.h, L.dense_row0 + t0);
    } else if (L.page_size <= kBlk) {
        const int nbox = (nkeys + L.page_size - 1) / L.page_size;
#pragma unroll 1
        for (int bx = 0; bx < nbox; ++bx) {
            const int page = L.page_row[t0 / L.page_size + bx];
#pragma unroll
            for (int pn = 0; pn < panels; ++pn)
                tma_load_4d(dst + pn * kBlk * G::kRawSpan + bx * L.page_size * G::kRawSpan, map, bar, pn * G::kInner, 0, L.h, page);
        }
    } else {
        const int page = L.page_row[t0 / L.page_size];
#pragma unroll
        for (int pn = 0; pn < panels; ++pn)
            tma_load_4d(dst + pn * kBlk * G::kRawSpan, map, bar, pn * G::kInner, t0 % L.page_size, L.h, page);
    }
}

// Fallback for blocks the boxes cannot cover: the producer warp copies the raw
// rows with 16-byte loads into the same swizzled layout.
template <int D, int VAR>
__device__ __forceinline__ void manual_block(uint8_t* dst, const void* base, const KVSource& src, int t0, int nkeys) {
    using G = Geo90<D, VAR>;
    constexpr int cpr = G::kRawRow / 16;
    const int lane = threadIdx.x & 31;
    for (int i = lane; i < nkeys * cpr; i += 32) {
        const int j = i / cpr, c = i % cpr;
        long long elem, srow;
        src.locate(t0 + j, D, elem, srow);
        const uint4 v = *reinterpret_cast<const uint4*>(reinterpret_cast<const uint8_t*>(base) + srow * G::kRawRow + 16 * c);
        *reinterpret_cast<uint4*>(dst + swz<G::kRawSpan, kBlk>(j, 16 * c)) = v;
    }
}

// Producer warp: land K and V of keys [t0, t0+nkeys) in one stage (raw
// buffers for operands that are converted) and complete `full` (count 1):
// TMA path: lane 0 arrives with expect_tx(K bytes + V bytes), then issues the
// boxes; fallback: all lanes store, fence the async proxy, lane 0 arrives.
template <int D, int VAR>
__device__ __forceinline__ void produce_block(const MsaTensorMaps& maps, uint8_t* kland, uint8_t* vland, uint32_t full,
                                              const BlockLoc& L, const KVSource& src, int t0, int nkeys) {
    const int lane = threadIdx.x & 31;
    if (L.tma_ok(t0, nkeys)) {
        if (lane == 0) {
            mbar_arrive_tx(full, 2 * tma_bytes<D, VAR>(L, nkeys));
            tma_block<D, VAR>(&maps.k, smem_u32(kland), full, L, t0, nkeys);
            tma_block<D, VAR>(&maps.v, smem_u32(vland), full, L, t0, nkeys);
        }
    } else {
        manual_block<D, VAR>(kland, src.k, src, t0, nkeys);
        manual_block<D, VAR>(vland, src.v, src, t0, nkeys);
        fence_async_smem();
        __syncwarp();
        if (lane == 0) mbar_arrive(full);
    }
}

// Producer warp: land one operand (K or V, map / base pointer of that
// operand) of keys [t0, t0+nkeys) and complete its own barrier `full`
// (count 1), as produce_block does for both.
template <int D, int VAR>
__device__ __forceinline__ void produce_operand(const CUtensorMap* map, const void* base, uint8_t* land, uint32_t full,
                                                const BlockLoc& L, const KVSource& src, int t0, int nkeys) {
    const int lane = threadIdx.x & 31;
    if (L.tma_ok(t0, nkeys)) {
        if (lane == 0) {
            mbar_arrive_tx(full, tma_bytes<D, VAR>(L, nkeys));
            tma_block<D, VAR>(map, smem_u32(land), full, L, t0, nkeys);
        }
    } else {
        manual_block<D, VAR>(land, base, src, t0, nkeys);
        fence_async_smem();
        __syncwarp();
        if (lane == 0) mbar_arrive(full);
    }
}

// ---- consumers: operand preparation ---------------------------------------------------
// Convert a landed raw block (e4m3 or packed e2m1 bytes) into a bf16 operand
// (K-major / MN-major share the row layout: rows = keys, SPAN 128); rows >= nkeys
// become zero. Executed by nthr threads (ct = index among them).
template <int D, int VAR>
__device__ __forceinline__ void convert_block(uint8_t* dst, const uint8_t* raw, const uint8_t* scales, const KVSource& src,
                                              int t0, int nkeys, int ct, int nthr) {
    using G = Geo90<D, VAR>;
    constexpr int cpr = D / 8;  // 8-element chunks per row
    for (int i = ct; i < kBlk * cpr; i += nthr) {
        const int j = i / cpr, c = i % cpr;
        float f[8];
        if (j < nkeys) {
            if (VAR == kVarNVFP4) {
                const uint32_t u = *reinterpret_cast<const uint32_t*>(raw + swz<G::kRawSpan, kBlk>(j, 4 * c));
                long long elem, srow;
                src.locate(t0 + j, D, elem, srow);
                const float sc = e4m3_to_f32(scales[scale128x4(srow, c >> 1, D >> 4)]);
#pragma unroll
                for (int e = 0; e < 8; ++e) f[e] = e2m1_to_f32(u >> (4 * e)) * sc;
            } else {
                const uint2 u = *reinterpret_cast<const uint2*>(raw + swz<G::kRawSpan, kBlk>(j, 8 * c));
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    f[e] = e4m3_to_f32((uint8_t)(u.x >> (8 * e)));
                    f[4 + e] = e4m3_to_f32((uint8_t)(u.y >> (8 * e)));
                }
            }
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) f[e] = 0.f;
        }
        *reinterpret_cast<uint4*>(dst + swz<128, kBlk>(j, 16 * c)) =
            make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
    }
}

// Zero V operand rows [nkeys, 128) (whatever the boxes brought there: keys of
// another sequence, unwritten cache pages): P is 0 there, and 0 * NaN is NaN.
template <int D>
__device__ __forceinline__ void zero_tail(uint8_t* sV, int nkeys, int ct, int nthr) {
    constexpr int cpr = 2 * D / 16;
    for (int i = ct; i < (kBlk - nkeys) * cpr; i += nthr) {
        const int j = nkeys + i / cpr, c = i % cpr;
        *reinterpret_cast<uint4*>(sV + swz<128, kBlk>(j, 16 * c)) = make_uint4(0, 0, 0, 0);
    }
}

// Make the K / V operands of a landed stage ready for wgmma (conversion, tail
// zeroing), then fence the async proxy. The caller synchronises the nthr threads.
template <int D, int VAR>
__device__ __forceinline__ void prepare_block(uint8_t* sK, uint8_t* sV, const uint8_t* kraw, const uint8_t* vraw,
                                              const KVSource& src, int t0, int nkeys, int ct, int nthr) {
    using G = Geo90<D, VAR>;
    if (!G::kKDirect) convert_block<D, VAR>(sK, kraw, src.k_scale, src, t0, nkeys, ct, nthr);
    if (!G::kVDirect) convert_block<D, VAR>(sV, vraw, src.v_scale, src, t0, nkeys, ct, nthr);
    else if (nkeys < kBlk) zero_tail<D>(sV, nkeys, ct, nthr);
    fence_async_smem();
}

// ---- wgmma --------------------------------------------------------------------------------
namespace gm = cute::SM90::GMMA;

template <class Op, size_t... I>
__device__ __forceinline__ void mma_ss(uint64_t a, uint64_t b, float (&d)[sizeof...(I)], gm::ScaleOut sc, std::index_sequence<I...>) {
    Op::fma(a, b, d[I]..., sc);
}
template <class Op, size_t... I>
__device__ __forceinline__ void mma_rs(const uint32_t* a, uint64_t b, float (&d)[sizeof...(I)], gm::ScaleOut sc,
                                       std::index_sequence<I...>) {
    Op::fma(a[0], a[1], a[2], a[3], b, d[I]..., sc);
}

// S[64 rows x KEYS keys] = Q K^T (warpgroup-collective; s in the fragment
// layout). sK is a K tile of KEYS rows (panels of [KEYS][span]).
template <int VAR, int KEYS> struct QkOp;
template <int VAR> struct QkOp<VAR, 128> {
    using type = typename std::conditional<VAR == kVarFP8, cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>,
                                           cute::SM90::GMMA::MMA_64x128x16_F32BF16BF16_SS<gm::Major::K, gm::Major::K>>::type;
};
template <int VAR> struct QkOp<VAR, 64> {
    using type = typename std::conditional<VAR == kVarFP8, cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>,
                                           cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<gm::Major::K, gm::Major::K>>::type;
};
// Issued as one wgmma group and not waited for: s may be read only after
// cute::warpgroup_wait lets the group complete and fence_regs(s).
template <int D, int VAR, int KEYS = kBlk>
__device__ __forceinline__ void qk_issue(uint32_t sQ, uint32_t sK, float (&s)[KEYS / 2]) {
    using G = Geo90<D, VAR>;
    using Op = typename QkOp<VAR, KEYS>::type;
    constexpr int SP = G::kQkSpan;
    fence_regs(s);
    cute::warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < G::kQkRow / 32; ++kk) {  // 32 bytes of K per instruction (k16 bf16, k32 e4m3)
        const int pn = kk * 32 / SP, in = kk * 32 % SP;
        const uint64_t da = gdesc<SP>(sQ + pn * kTileRows * SP + in, 16, 8 * SP);
        const uint64_t db = gdesc<SP>(sK + pn * KEYS * SP + in, 16, 8 * SP);
        mma_ss<Op>(da, db, s, kk == 0 ? gm::ScaleOut::Zero : gm::ScaleOut::One, std::make_index_sequence<KEYS / 2>{});
    }
    cute::warpgroup_commit_batch();
    fence_regs(s);
}

// S = Q K^T, complete on return.
template <int D, int VAR, int KEYS = kBlk>
__device__ __forceinline__ void qk(uint32_t sQ, uint32_t sK, float (&s)[KEYS / 2]) {
    qk_issue<D, VAR, KEYS>(sQ, sK, s);
    cute::warpgroup_wait<0>();
    fence_regs(s);
}

template <int D> struct PvOp;
template <> struct PvOp<64> { using type = cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_RS<gm::Major::K, gm::Major::MN>; };
template <> struct PvOp<128> { using type = cute::SM90::GMMA::MMA_64x128x16_F32BF16BF16_RS<gm::Major::K, gm::Major::MN>; };
template <> struct PvOp<256> { using type = cute::SM90::GMMA::MMA_64x256x16_F32BF16BF16_RS<gm::Major::K, gm::Major::MN>; };

// O[64 x N] (+)= P V with P (bf16, registers: KEYS/4 packed pairs) as the A
// operand and V (bf16, MN-major: 8 keys x 128 B per swizzle atom, LBO = next
// 64 columns = one panel of KEYS rows, SBO = next 8 keys); sV is the panel
// of the first of the N columns. Issued as one wgmma group and not waited
// for: o may be read and pa rewritten only after cute::warpgroup_wait lets
// the group complete and fence_regs(o), fence_regs(pa).
template <int N, int KEYS = kBlk>
__device__ __forceinline__ void pv_issue(uint32_t (&pa)[KEYS / 4], uint32_t sV, float (&o)[N / 2], bool accumulate) {
    fence_regs(o);
    fence_regs(pa);
    cute::warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk) {
        const uint64_t db = gdesc<128>(sV + kk * 16 * 128, KEYS * 128, 8 * 128);
        mma_rs<typename PvOp<N>::type>(pa + 4 * kk, db, o, (kk == 0 && !accumulate) ? gm::ScaleOut::Zero : gm::ScaleOut::One,
                                       std::make_index_sequence<N / 2>{});
    }
    cute::warpgroup_commit_batch();
    fence_regs(o);
    fence_regs(pa);
}

// O (+)= P V, complete on return.
template <int N, int KEYS = kBlk>
__device__ __forceinline__ void pv(uint32_t (&pa)[KEYS / 4], uint32_t sV, float (&o)[N / 2], bool accumulate) {
    pv_issue<N, KEYS>(pa, sV, o, accumulate);
    cute::warpgroup_wait<0>();
    fence_regs(o);
    fence_regs(pa);
}

// Key limits of the thread's two rows for a block at t0 (nkeys keys): lim is the
// row's sequence-local bound; rows not selecting the block pass sel = false.
__device__ __forceinline__ int block_lim(int lim, int t0, int nkeys, bool sel) {
    return sel ? min(max(lim - t0, 0), nkeys) : 0;
}

}  // namespace sm90
}  // namespace msa

#endif  // MSA_SM90_COMMON_CUH

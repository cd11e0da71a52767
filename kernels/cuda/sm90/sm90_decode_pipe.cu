// sm90_decode_pipe.cu - paged decode on sm_90a built for the HBM bandwidth
// limit: the work items, rows, masks and outputs of sm90_decode.cu (dense and
// sparse q2k decode, split-KV), with a deeper cp.async ring, two CTAs per SM
// and the split-KV combine fused into the kernel.
//
// One CTA of one warpgroup (128 threads) per decode work item; every thread
// loads, converts and multiplies (no producer warp: cp.async needs no TMA
// issuer, and 128 threads keep the register file open for two CTAs).
//
// Stream: for each 64-row tile of the item's query-head rows, the item's keys
// are cut into spans of kPipeKeys = 64 keys - the KV chunk in order (dense),
// or each selected block of blk_kv keys in ascending block order (sparse,
// SparseWalk) - and span n lands in ring slot n % S. A slot holds the raw K
// and V rows of its span (64 x row bytes each, swizzled as the wgmma operand
// or as the raw landing buffer of a converted operand); rows past the span's
// key count are zero-filled by cp.async itself, so no key of another page and
// no NaN reaches P.V. With page_size 128 a span is half a page; with 16- or
// 32-token pages it is 4 or 2 pages: the copy of row j reads page
// page_table[(t0 + j) / page_size], so any page size and any page order work.
//
// Ring accounting (cp.async commit groups, no mbarriers): the prologue
// issues spans 0 .. S-2, one commit group each; iteration n issues span
// n+S-1 into slot (n-1) % S (freed by the barrier that closed iteration
// n-1) and commits, then waits with cp.async.wait_group S-1: n+S groups are
// committed, so groups 0 .. n, and span n with them, are complete. A group
// is committed whether or not a span was left to issue (empty groups
// complete at once), so the count never depends on the stream length; the
// consumer stops at the first span the stream does not have, which was
// never issued, and never waits on it. Two generators walk the same stream,
// one S-1 spans ahead for the loads and one for the products, so no span
// descriptor is stored in shared memory. The ring is drained (wait_group 0)
// before the epilogue reuses it.
//
// Bytes in flight (Little's law): HBM at 4.8 TB/s (H200) with ~1 us of
// loaded latency needs 4.8 MB in flight, 36 KB per SM of 132. Each CTA keeps
// S-1 spans in flight while it computes one: BF16 D 128 is 32 KB a span
// (K + V), 3 stages -> 64 KB per CTA, 128 KB per SM with two CTAs; E4M3 D 128
// is 16 KB a span, 4 stages -> 48 KB per CTA, 96 KB per SM. NVFP4 spans are
// small (D 128: 8 KB of packed K/V + 1 KB of block scales), so its ring may
// hold up to 8 stages: 7 at D 128 -> 54 KB per CTA, 108 KB per SM.
//
// Occupancy (two CTAs per SM at D <= 128): shared memory 2 x (kSmem + 1 KB
// reserved per CTA) <= 228 KB per SM, i.e. kSmem <= 113 KB = 115712 B
// (static_assert in PipeCfg, checked again by the Go table's test);
// registers 2 CTAs x 128 threads x 256 (255 rounded to the allocation unit
// of 8) = 65536, the whole register file, so any register count ptxas picks
// leaves room for two CTAs (__launch_bounds__(128, 2) states it; the gate
// caps the count at 255 and forbids spills). D 256 runs one CTA per SM: a
// BF16 span is 64 KB and the Q tile 32 KB, so two CTAs could not hold two
// stages each; one CTA of 227 KB holds 3 BF16 stages (128 KB in flight,
// as two CTAs at D 128) or 4 E4M3 / NVFP4 stages, and its 128 threads keep
// the 128-float O fragment, S and P in registers (<= 255, no spills).
//
// NVFP4 K/V (BF16 or E4M3 Q): a span's slot also holds the rows' e4m3
// block scales (D/16 a row, 4-byte cp.async copies out of the 128x4 scale
// layout, zero-filled like the rows), so the unpacking to bf16 (e2m1 x
// scale, exact in bf16) reads nothing from global memory; the K global
// scale multiplies the scores, the V global scale (output_scale) the output.
//
// Products on the tensor cores as in sm90_decode.cu: the 64 M rows are the
// item's query-head rows (qhead_per_kv heads x queries of the q tile), Q.K^T
// with K from the ring (bf16, or the e4m3 wgmma for fp8), P.V with V (bf16)
// from the ring. E4M3 operands of a bf16 product (V of fp8; K and V of
// bf16fp8) are widened into one bf16 buffer per operand by all 128 threads
// right after their span lands, while the next S-1 spans are still loading.
//
// Epilogue: the normalised O tile goes through shared memory (padded rows)
// and leaves in 16-byte float4 stores (split-KV partials) or 8-byte BF16
// stores (final output); LSE from the fragment owners. Split KV: the
// combine is fused, in two levels (shared/fused_combine.cuh, which the
// SM100 decode shares): the last CTA of a block of ~sqrt(n) splits merges
// the block, the last block merger the group, in combine.cu's mode-1
// arithmetic.
//
// fp8pv (msa_sm90_decpipe_fp8pv_d64 / _d128, E4M3 Q/K/V with E4M3 P.V
// rounding; MSA_CUDA_FP8PV=fp8 with the new decode): both products on the
// e4m3 wgmma. Instead of widening V to bf16, the warpgroup transposes the
// landed span into the K-major V^T operand (vt_transpose of
// sm90_fp8_vt.cuh, the first 64 key columns of its 128-byte rows: the same
// bytes as the widened V buffer, so the geometry is the fp8 kernel's), P
// leaves softmax_fold unrounded and its E4M3 conversion into the register
// A operand is the contract's rounding (pack_p_e4m3). The FP8 tensor
// cores keep about 14 bits of a running sum, so each span's P.V starts
// from zero and is added to the float32 O in registers (o = o * alpha +
// P.V): the truncation covers two k-groups of one span, never the walk.
// The second accumulator (D/2 floats) is why fp8pv stops at D = 128.
//
// Variants: bf16, fp8, bf16fp8 and nvfp4 at D = 64, 128 and 256; fp8pv at
// D = 64 and 128.
#include "shared/fused_combine.cuh"
#include "shared/lse_merge.cuh"
#include "sm90/sm90_common.cuh"
#include "sm90/sm90_fp8_vt.cuh"

namespace msa {
namespace sm90 {

constexpr int kPipeKeys = 64;         // keys per span = ring stage = softmax block
constexpr int kPipeThreads = 128;     // one warpgroup
constexpr int kPipeCTAs = 2;          // CTAs per SM the budgets are sized for
constexpr int kSmemPerSM = 233472;    // 228 KB of shared memory per sm_90 SM
constexpr int kSmemReservedCTA = 1024;  // reserved by the system per CTA

template <int D, int VAR>
struct PipeCfg {
    using G = Geo90<D, VAR>;
    static constexpr bool kFp4 = VAR == kVarNVFP4;
    static constexpr int kCTAs = D == 256 ? 1 : kPipeCTAs;  // CTAs per SM (see the top)
    static constexpr int kRawOp = kPipeKeys * G::kRawRow;  // one operand (K or V) of one span as stored
    static constexpr int kScaleRow = kFp4 ? D / 16 : 0;     // NVFP4 e4m3 block scales of one row
    static constexpr int kScaleOp = kPipeKeys * kScaleRow;  // K (or V) scales of one span, after both operands
    static constexpr int kStage = (2 * kRawOp + 2 * kScaleOp + 1023) / 1024 * 1024;
    static constexpr bool kCvtK = !G::kKDirect, kCvtV = !G::kVDirect;  // widened to bf16 in shared memory
    static constexpr int kCvtOp = kPipeKeys * 2 * D;
    static constexpr int kQ = kTileRows * G::kQkRow;
    static constexpr int kBudget = kSmemPerSM / kCTAs - kSmemReservedCTA;  // 115712 B per CTA (232448 B at one CTA)
    static constexpr int kFixed = (kCvtK ? kCvtOp : 0) + (kCvtV ? kCvtOp : 0) + kQ + 1024;  // + 1024-byte alignment
    static constexpr int kMaxStages = kFp4 ? 8 : 4;
    static constexpr int kFit = (kBudget - kFixed) / kStage;
    static constexpr int kStages = kFit < kMaxStages ? kFit : kMaxStages;
    static constexpr int kOffK = kStages * kStage;                    // widened K (bf16fp8)
    static constexpr int kOffV = kOffK + (kCvtK ? kCvtOp : 0);        // widened V (fp8, bf16fp8)
    static constexpr int kOffQ = kOffV + (kCvtV ? kCvtOp : 0);
    static constexpr int kSmem = kOffQ + kQ + 1024;
    static constexpr int kOStride = D + 4;  // floats per staged O row: conflict-free float2 writes, 16-byte rows
    static_assert(kStages >= 2 && kSmem <= kBudget, "kCTAs CTAs per SM, each with a ring of at least two stages");
    static_assert(kTileRows * kOStride * 4 <= kStages * kStage, "the O tile is staged in the drained ring");
    static_assert(kStage % 1024 == 0 && kCvtOp % 1024 == 0, "1024-byte aligned operand panels");
};

// One span of the stream: keys [t0, t0 + nk) of the sequence; bit r of mask:
// row r of the tile attends them (sparse decode; all ones for dense).
struct Span {
    int t0, nk;
    unsigned long long mask;
};

// The span stream of one row tile. Every thread runs it with the same
// values (SparseWalk is warp-collective and warp-uniform), so its branches
// never diverge.
struct SpanGen {
    SparseWalk walk;  // walk.q2k == nullptr: dense
    int t, hi, prev;
    unsigned long long mask;
    bool done;
    __device__ __forceinline__ void start() {
        prev = -1;
        done = false;
        if (walk.q2k) {
            t = hi = 0;
        } else {
            t = walk.kv_begin;
            hi = walk.kv_end;
            mask = ~0ull;
        }
    }
    __device__ __forceinline__ bool next(const DecRows& R, int rt, Span& s) {
        if (walk.q2k) {
#pragma unroll 1
            while (t >= hi && !done) {
                const int j = walk.next(R, rt, prev, mask);
                if (j == INT_MAX) {
                    done = true;
                    break;
                }
                t = (int)max((long long)walk.kv_begin, j * walk.blk);
                hi = (int)min((long long)walk.kv_end, (j + 1) * walk.blk);
                prev = j;
            }
        }
        if (t >= hi) return false;
        s = Span{t, min(kPipeKeys, hi - t), mask};
        t += kPipeKeys;
        return true;
    }
};

// 4-byte cp.async (L1-allocating: the only size the .cg form lacks) with
// zero fill, for the NVFP4 block scales of a span.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool live) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(live ? 4 : 0) : "memory");
}

// Store row of key j of span s (its page from the page table; 0 for a key
// past the span's end, whose copies zero-fill and read nothing) and whether
// the key is live.
template <int D>
__device__ __forceinline__ bool span_row(const KVSource& src, const Span& s, int j, long long& srow) {
    long long elem = 0;
    srow = 0;
    if (j >= s.nk) return false;
    src.locate(s.t0 + j, D, elem, srow);
    return true;
}

// Issue the cp.async copies of span s into a ring slot (K at 0, V at
// kRawOp), 16 bytes per copy, rows >= s.nk zero-filled.
template <int D, int VAR>
__device__ __forceinline__ void issue_span(uint8_t* slot, const KVSource& src, const Span& s, int tid) {
    using G = Geo90<D, VAR>;
    using C = PipeCfg<D, VAR>;
    constexpr int cpr = G::kRawRow / 16;
    const uint8_t* kb = reinterpret_cast<const uint8_t*>(src.k);
    const uint8_t* vb = reinterpret_cast<const uint8_t*>(src.v);
    const uint32_t dst = smem_u32(slot);
#pragma unroll 4
    for (int i = tid; i < kPipeKeys * cpr; i += kPipeThreads) {
        const int j = i / cpr, c = i % cpr;
        long long srow;
        const bool live = span_row<D>(src, s, j, srow);
        const long long g = srow * G::kRawRow + 16 * c;
        const uint32_t off = swz<G::kRawSpan, kPipeKeys>(j, 16 * c);
        cp_async16(dst + off, kb + g, live);
        cp_async16(dst + C::kRawOp + off, vb + g, live);
    }
    if (C::kFp4) {  // the rows' block scales: 4 consecutive scales (64 elements) are 4 contiguous bytes of the 128x4 layout
        constexpr int gpr = D / 64;
#pragma unroll 1
        for (int i = tid; i < kPipeKeys * gpr; i += kPipeThreads) {
            const int j = i / gpr, q = i % gpr;
            long long srow;
            const bool live = span_row<D>(src, s, j, srow);
            const long long g = scale128x4(srow, 4 * q, D >> 4);
            const uint32_t off = 2 * C::kRawOp + j * C::kScaleRow + 4 * q;
            cp_async4(dst + off, src.k_scale + g, live);
            cp_async4(dst + C::kScaleOp + off, src.v_scale + g, live);
        }
    }
}

// Widen one landed NVFP4 operand (64 rows of D/2 bytes, raw swizzle, and
// the rows' D/16 e4m3 block scales at sc) into the bf16 operand layout (64
// rows of 2D bytes, 128-byte swizzle): 16 raw bytes (32 elements, two scale
// blocks) per step become four 16-byte chunks. e2m1 x e4m3 is exact in bf16
// (at most 2 + 4 significant bits); zero-filled rows and scales stay zero.
template <int D, int VAR>
__device__ __forceinline__ void widen_span_fp4(uint8_t* dst, const uint8_t* raw, const uint8_t* sc, int tid) {
    using G = Geo90<D, VAR>;
    constexpr int cpr = D / 32;
#pragma unroll 2
    for (int i = tid; i < kPipeKeys * cpr; i += kPipeThreads) {
        const int j = i / cpr, c = i % cpr;
        const uint4 u = *reinterpret_cast<const uint4*>(raw + swz<G::kRawSpan, kPipeKeys>(j, 16 * c));
        const uint16_t s2 = *reinterpret_cast<const uint16_t*>(sc + j * (D / 16) + 2 * c);
        const float s0 = e4m3_to_f32((uint8_t)(s2 & 0xFF)), s1 = e4m3_to_f32((uint8_t)(s2 >> 8));
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float sf = q < 2 ? s0 : s1;
            float f[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) f[e] = e2m1_to_f32(w[q] >> (4 * e)) * sf;
            *reinterpret_cast<uint4*>(dst + swz<128, kPipeKeys>(j, 64 * c + 16 * q)) =
                make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
        }
    }
}

// Four E4M3 bytes -> four bf16 (exact: e4m3 -> f16 -> f32 -> bf16 lose nothing).
__device__ __forceinline__ uint2 e4m3x4_to_bf16x4(uint32_t u) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u & 0xFFFFu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u >> 16), __NV_E4M3);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
    return make_uint2(pack_bf16x2(a.x, a.y), pack_bf16x2(b.x, b.y));
}

// Widen one landed E4M3 operand (64 rows of D bytes, raw swizzle) into the
// bf16 operand layout (64 rows of 2D bytes, 128-byte swizzle): 16 raw bytes
// per step become two 16-byte chunks. Zero-filled rows stay zero.
template <int D, int VAR>
__device__ __forceinline__ void widen_span(uint8_t* dst, const uint8_t* raw, int tid) {
    using G = Geo90<D, VAR>;
    constexpr int cpr = D / 16;
#pragma unroll 2
    for (int i = tid; i < kPipeKeys * cpr; i += kPipeThreads) {
        const int j = i / cpr, c = i % cpr;
        const uint4 u = *reinterpret_cast<const uint4*>(raw + swz<G::kRawSpan, kPipeKeys>(j, 16 * c));
        const uint2 a = e4m3x4_to_bf16x4(u.x), b = e4m3x4_to_bf16x4(u.y), e = e4m3x4_to_bf16x4(u.z), f = e4m3x4_to_bf16x4(u.w);
        *reinterpret_cast<uint4*>(dst + swz<128, kPipeKeys>(j, 32 * c)) = make_uint4(a.x, a.y, b.x, b.y);
        *reinterpret_cast<uint4*>(dst + swz<128, kPipeKeys>(j, 32 * c + 16)) = make_uint4(e.x, e.y, f.x, f.y);
    }
}

template <int D, int VAR, bool PV8>
__device__ __forceinline__ void pipe_impl(const MsaDecodePipeParams& pp) {
    using C = PipeCfg<D, VAR>;
    static_assert(!PV8 || (VAR == kVarFP8 && D <= 128), "fp8pv: E4M3 Q/K/V, D <= 128 (two O accumulators in registers)");
    constexpr int S = C::kStages;
    const MsaDecodeParams& p = pp.d;
    extern __shared__ __align__(16) uint8_t smem_dyn[];
    uint8_t* base = smem_dyn + ((1024 - (smem_u32(smem_dyn) & 1023)) & 1023);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    DecodeItem item;
    if (!decode_item(p, blockIdx.x, item)) return;
    const int h = item.h, b = item.b;
    const DecRows R = dec_rows(p, item, D);
    const int* page_row = reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride;
    const KVSource src = kv_source(p.k, p.v, p.k_scale, p.v_scale, page_row, 0, h, p.num_heads_kv, p.page_size, p.kv_dtype);
    const SparseWalk walk{p.q2k ? reinterpret_cast<const int*>(p.q2k) +
                                      ((long long)h * p.batch * p.seqlen_q + (long long)b * p.seqlen_q) * p.top_k
                                : nullptr,
                          (long long)p.blk_kv, p.top_k, item.kv_begin, item.kv_end};
    uint8_t* sQ = base + C::kOffQ;
    float scale = p.softmax_scale_log2;
    if (C::kFp4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
    const float oscale = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
    const int t = lane & 3;

#pragma unroll 1
    for (int rt = 0; rt < R.nrows; rt += kTileRows) {
        __syncthreads();  // the previous tile's epilogue is done with the ring and Q
        load_q_tile<D, VAR>(sQ, reinterpret_cast<const void*>(p.q), p.q_dtype, R, rt, tid, kPipeThreads);
        SpanGen gi{walk}, gc{walk};  // issue (S-1 spans ahead) and consume
        gi.start();
        gc.start();
#pragma unroll 1
        for (int n = 0; n < S - 1; ++n) {
            Span s;
            if (gi.next(R, rt, s)) issue_span<D, VAR>(base + n * C::kStage, src, s, tid);
            cp_async_commit();
        }
        const FragRows fr = frag_rows(R, rt, warp, lane);
        Soft st;
        st.reset();
        float o[D / 2];
        zero_frag(o);
#pragma unroll 1
        for (int n = 0;; ++n) {
            Span s;
            if (gi.next(R, rt, s)) issue_span<D, VAR>(base + ((n + S - 1) % S) * C::kStage, src, s, tid);
            cp_async_commit();
            Span c;
            if (!gc.next(R, rt, c)) break;
            cp_async_wait<S - 1>();
            fence_async_smem();  // cp.async (generic proxy) writes -> wgmma reads
            __syncthreads();
            uint8_t* slot = base + (n % S) * C::kStage;
            uint8_t* sK = C::kCvtK ? base + C::kOffK : slot;
            uint8_t* sV = C::kCvtV ? base + C::kOffV : slot + C::kRawOp;
            if (C::kFp4) {
                widen_span_fp4<D, VAR>(sK, slot, slot + 2 * C::kRawOp, tid);
                widen_span_fp4<D, VAR>(sV, slot + C::kRawOp, slot + 2 * C::kRawOp + C::kScaleOp, tid);
                fence_async_smem();
                __syncthreads();
            } else if (C::kCvtK || C::kCvtV) {
                if (C::kCvtK) widen_span<D, VAR>(sK, slot, tid);
                if (C::kCvtV && PV8) vt_transpose<D, kPipeKeys, kPipeThreads>(sV, slot + C::kRawOp, c.nk, tid);
                if (C::kCvtV && !PV8) widen_span<D, VAR>(sV, slot + C::kRawOp, tid);
                fence_async_smem();
                __syncthreads();
            }
            float sc[kPipeKeys / 2];
            qk<D, VAR, kPipeKeys>(smem_u32(sQ), smem_u32(sK), sc);
            int bl[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) bl[i] = block_lim(fr.lim[i], c.t0, c.nk, (c.mask >> fr.rr[i]) & 1ull);
            float alpha[2];
            if (PV8) {
                // P unrounded into the e4m3 A operand (the E4M3 rounding);
                // this span's P.V from zero, added to O in float32.
                softmax_fold(sc, bl, scale, 0.f, MSA_ROUND_NONE, st, alpha);
                uint32_t p8[kPipeKeys / 8];
                pack_p_e4m3(sc, p8);
                float os[D / 2];
                pv8_issue<D, kPipeKeys>(p8, smem_u32(sV), os, false);
                cute::warpgroup_wait<0>();
                fence_regs(os);
#pragma unroll
                for (int j = 0; j < D / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) o[4 * j + e] = fmaf(o[4 * j + e], alpha[e >> 1], os[4 * j + e]);
            } else {
                uint32_t pa[kPipeKeys / 4];
                softmax_block(sc, bl, scale, 0.f, p.pv_round, st, pa, alpha);
#pragma unroll
                for (int j = 0; j < D / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e >> 1];
                pv<D, kPipeKeys>(pa, smem_u32(sV), o, true);
            }
            __syncthreads();  // every read of slot n % S is complete: iteration n+1 refills it
        }
        cp_async_wait<0>();
        __syncthreads();

        // ---- epilogue: O / l staged in the drained ring, rows leave in vectors
        float* sO = reinterpret_cast<float*>(base);
        float* lse_out = reinterpret_cast<float*>(p.split_kv ? p.lse_partial : p.lse);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float lse, tlse;
            const float inv = finish(st, i, 0.f, lse, tlse);
#pragma unroll
            for (int j = 0; j < D / 8; ++j)
                *reinterpret_cast<float2*>(sO + fr.rr[i] * C::kOStride + 8 * j + 2 * t) = make_float2(o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv);
            if (fr.orow[i] >= 0 && t == 0) lse_out[fr.orow[i]] = lse;
        }
        __syncthreads();
        const int rows = min(kTileRows, R.nrows - rt);
#pragma unroll 1
        for (int r = warp; r < rows; r += kPipeThreads / 32) {
            long long qoff, orr;
            int lm, qi;
            R.row(rt + r, qoff, orr, lm, qi);
#pragma unroll
            for (int c = lane; c < D / 4; c += 32) {
                const float4 v = *reinterpret_cast<const float4*>(sO + r * C::kOStride + 4 * c);
                if (p.split_kv)
                    *(reinterpret_cast<float4*>(reinterpret_cast<float*>(p.o_partial) + orr * D) + c) = v;
                else
                    *reinterpret_cast<uint2*>(reinterpret_cast<__nv_bfloat16*>(p.out) + orr * D + 4 * c) =
                        make_uint2(pack_bf16x2(v.x * oscale, v.y * oscale), pack_bf16x2(v.z * oscale, v.w * oscale));
            }
        }
    }
    if (!p.split_kv) return;

    // ---- the fused two-level combine of the (request, q tile, KV head) group ----
    fused::fused_combine<D, kPipeThreads>(pp, item, R, reinterpret_cast<int*>(sQ), oscale);  // Q is no longer read
}

}  // namespace sm90
}  // namespace msa

#define MSA_SM90_DECPIPE_PV(NAME, D, VAR, PV8)                                                                              \
    extern "C" __global__ void __launch_bounds__(msa::sm90::kPipeThreads, msa::sm90::PipeCfg<D, VAR>::kCTAs)               \
        msa_sm90_decpipe_##NAME##_d##D(const __grid_constant__ MsaDecodePipeParams p) {                                    \
        MSA_SM90_BODY(msa::sm90::pipe_impl<D, VAR, PV8>(p));                                                               \
    }
#define MSA_SM90_DECPIPE(NAME, D, VAR) MSA_SM90_DECPIPE_PV(NAME, D, VAR, false)

MSA_SM90_DECPIPE(bf16, 64, msa::tc::kVarBF16)
MSA_SM90_DECPIPE(bf16, 128, msa::tc::kVarBF16)
MSA_SM90_DECPIPE(fp8, 64, msa::tc::kVarFP8)
MSA_SM90_DECPIPE(fp8, 128, msa::tc::kVarFP8)
MSA_SM90_DECPIPE(bf16fp8, 64, msa::tc::kVarBF16FP8)
MSA_SM90_DECPIPE(bf16fp8, 128, msa::tc::kVarBF16FP8)
MSA_SM90_DECPIPE(bf16, 256, msa::tc::kVarBF16)
MSA_SM90_DECPIPE(fp8, 256, msa::tc::kVarFP8)
MSA_SM90_DECPIPE(bf16fp8, 256, msa::tc::kVarBF16FP8)
MSA_SM90_DECPIPE(nvfp4, 64, msa::tc::kVarNVFP4)
MSA_SM90_DECPIPE(nvfp4, 128, msa::tc::kVarNVFP4)
MSA_SM90_DECPIPE(nvfp4, 256, msa::tc::kVarNVFP4)
MSA_SM90_DECPIPE_PV(fp8pv, 64, msa::tc::kVarFP8, true)
MSA_SM90_DECPIPE_PV(fp8pv, 128, msa::tc::kVarFP8, true)

// Launch geometry (threads, CTAs per SM, dynamic shared memory, ring
// stages), the same numbers as the DecodePipeLaunch table of
// names_decode_pipe.go (its test reads these lines).
#define MSA_PIPE_PIN(VAR, D, THREADS, CTAS, SMEM, STAGES)                                                          \
    static_assert(msa::sm90::kPipeThreads == (THREADS) && msa::sm90::PipeCfg<D, msa::tc::kVar_##VAR>::kCTAs == (CTAS) && \
                      msa::sm90::PipeCfg<D, msa::tc::kVar_##VAR>::kSmem == (SMEM) &&                                  \
                      msa::sm90::PipeCfg<D, msa::tc::kVar_##VAR>::kStages == (STAGES),                                \
                  "geometry of msa_sm90_decpipe_" #VAR "_d" #D " (names_decode_pipe.go)");
MSA_PIPE_PIN(bf16, 64, 128, 2, 74752, 4)
MSA_PIPE_PIN(bf16, 128, 128, 2, 115712, 3)
MSA_PIPE_PIN(bf16, 256, 128, 1, 230400, 3)
MSA_PIPE_PIN(fp8, 64, 128, 2, 46080, 4)
MSA_PIPE_PIN(fp8, 128, 128, 2, 91136, 4)
MSA_PIPE_PIN(fp8, 256, 128, 1, 181248, 4)
MSA_PIPE_PIN(bf16fp8, 64, 128, 2, 58368, 4)
MSA_PIPE_PIN(bf16fp8, 128, 128, 2, 115712, 4)
MSA_PIPE_PIN(bf16fp8, 256, 128, 1, 230400, 4)
MSA_PIPE_PIN(nvfp4, 64, 128, 2, 66560, 8)
MSA_PIPE_PIN(nvfp4, 128, 128, 2, 114688, 7)
MSA_PIPE_PIN(nvfp4, 256, 128, 1, 228352, 7)
MSA_PIPE_PIN(fp8pv, 64, 128, 2, 46080, 4)
MSA_PIPE_PIN(fp8pv, 128, 128, 2, 91136, 4)
#undef MSA_PIPE_PIN

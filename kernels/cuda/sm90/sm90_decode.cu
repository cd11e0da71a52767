// sm90_decode.cu - paged decode with split-KV on sm_90a: the work items,
// rows, masks and outputs of decode.cu (dense and sparse q2k decode), with
// TMA loads through the rank-4 paged maps and wgmma.
//
// One CTA per decode work item (grid = work_count): kNC consumer warpgroups
// and one producer warp (160 threads for D = 64 / 128, 384 for D = 256: a whole producer warpgroup). Every
// consumer warpgroup scores the same 64 query-head rows of a tile; warpgroup g
// owns output columns [g*D/kNC, (g+1)*D/kNC) (D = 256 splits O in two halves
// so that S, P and O fit the register file without spilling: decode is bound
// by K/V bandwidth, the repeated Q.K^T is cheap). The producer
// walks the item's K/V stream - for each row tile, the 128-key spans of the
// item's KV chunk (dense) or of the blocks the tile's rows selected (sparse,
// the block walk of decode.cu), then an end marker - through a ring of
// kStages K/V stages. Stage s has a `full` mbarrier (count 1: the producer's
// arrive, with the TMA transaction bytes) and an `empty` mbarrier (count
// 4*kNC: one arrive per consumer warp once its wgmma reads are complete); use n of
// the ring is stage n % kStages with parity (n / kStages) & 1. The span's
// start, length and 64-row selection mask travel in the stage's descriptor.
// Variants: bf16 (BF16 Q/K/V), fp8 (E4M3 Q/K/V; Q.K^T on the e4m3 wgmma,
// V converted to bf16 in shared memory for P.V) and bf16fp8 (BF16 Q, E4M3
// K/V converted to bf16 in shared memory).
#include "sm90/sm90_common.cuh"
#include "sm90/sm90_ring.cuh"

namespace msa {
namespace sm90 {

struct StageDesc {
    int t0, nkeys, last, pad;
    unsigned long long mask;  // bit r: row r of the tile attends this span
    unsigned long long pad2;
};

template <int D, int VAR>
struct DecCfg {
    using G = Geo90<D, VAR>;
    static constexpr int kNC = D == 256 ? 2 : 1;  // consumer warpgroups
    static constexpr int kDO = D / kNC;           // output columns per warpgroup
    static constexpr int kCons = 128 * kNC;       // consumer threads
    // D = 256: the producer is a whole warpgroup (one working warp) so that
    // setmaxnreg can move registers to the consumers: 384 threads compile
    // at 168 registers; the producer drops to kProdRegs, the consumers rise
    // to kConsRegs (S, P and a 128-column O without spilling). The producer
    // keeps 56: the values computed before the role split that it still
    // needs must fit under its budget, and with 40 ptxas spilled three of
    // them (24-byte stack frame) in the BF16 variant.
    static constexpr int kProd = D == 256 ? 128 : 32;
    static constexpr int kThreads = kCons + kProd;
    static constexpr int kProdRegs = 56, kConsRegs = 224;
    static_assert(D != 256 || kProd * kProdRegs + kCons * kConsRegs <= 65536, "register file");
    static constexpr int kStages =
        2 * G::kStageBytes + G::kQBytes + 2 * (int)sizeof(StageDesc) + 2 * 16 + 1024 <= 232448 ? 2 : 1;
    static constexpr int kOffQ = kStages * G::kStageBytes;
    static constexpr int kOffDesc = kOffQ + G::kQBytes;
    static constexpr int kOffBar = kOffDesc + kStages * (int)sizeof(StageDesc);
    static constexpr int kSmem = kOffBar + 16 * kStages + 1024;
    static_assert(kSmem <= 232448, "sm_90 dynamic shared memory");
    // stage-relative operand offsets
    static constexpr int kK = 0, kV = G::kKBytes, kKraw = kV + G::kVBytes, kVraw = kKraw + (G::kKDirect ? 0 : G::kRawBytes);
};

template <int D, int VAR>
__device__ __forceinline__ void decode_impl(const MsaDecodeParams& p, const MsaTensorMaps& maps) {
    using C = DecCfg<D, VAR>;
    using G = Geo90<D, VAR>;
    constexpr int S = C::kStages;
    extern __shared__ __align__(16) uint8_t smem_dyn[];
    uint8_t* base = smem_dyn + ((1024 - (smem_u32(smem_dyn) & 1023)) & 1023);
    const int tid = threadIdx.x, lane = tid & 31;
    const int w = blockIdx.x;
    DecodeItem item;
    if (!decode_item(p, w, item)) return;
    const int h = item.h, b = item.b;
    int kv_begin = item.kv_begin, kv_end = item.kv_end;
    const DecRows R = dec_rows(p, item, D);
    const int* page_row = reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride;
    const KVSource src = kv_source(p.k, p.v, p.k_scale, p.v_scale, page_row, 0, h, p.num_heads_kv, p.page_size, p.kv_dtype);
    StageDesc* desc = reinterpret_cast<StageDesc*>(base + C::kOffDesc);
    const uint32_t bar0 = smem_u32(base + C::kOffBar);  // full[s] = bar0 + 8s, empty[s] = bar0 + 8(S + s)

    if (tid == 0) {
        for (int s = 0; s < S; ++s) {
            mbar_init(bar0 + 8 * s, 1);
            mbar_init(bar0 + 8 * (S + s), 4 * C::kNC);
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (tid >= C::kCons) {  // ---- producer warp
        if (D == 256) {
            setmaxnreg_dec<C::kProdRegs>();
            if (tid >= C::kCons + 32) return;  // the producer warpgroup's idle warps
        }
        const BlockLoc L{true, page_row, p.page_size, h, 0};
        uint32_t n = 0;
        auto acquire = [&](uint32_t& st) {
            st = n % S;
            if (n >= (uint32_t)S) mbar_wait(bar0 + 8 * (S + st), ring_empty_parity(n, (uint32_t)S));
        };
        auto emit = [&](int t0, int nk, unsigned long long mask) {
            uint32_t st;
            acquire(st);
            if (lane == 0) desc[st] = StageDesc{t0, nk, 0, 0, mask, 0};
            __syncwarp();
            uint8_t* sb = base + st * G::kStageBytes;
            produce_block<D, VAR>(maps, sb + (G::kKDirect ? C::kK : C::kKraw), sb + (G::kVDirect ? C::kV : C::kVraw),
                                  bar0 + 8 * st, L, src, t0, nk);
            ++n;
        };
        const SparseWalk walk{p.q2k ? reinterpret_cast<const int*>(p.q2k) +
                                          ((long long)h * p.batch * p.seqlen_q + (long long)b * p.seqlen_q) * p.top_k
                                    : nullptr,
                              (long long)p.blk_kv, p.top_k, kv_begin, kv_end};
#pragma unroll 1
        for (int rt = 0; rt < R.nrows; rt += kTileRows) {
            if (!p.q2k) {
#pragma unroll 1
                for (int t0 = kv_begin; t0 < kv_end; t0 += kBlk) emit(t0, min(kBlk, kv_end - t0), ~0ull);
            } else {
                int prev = -1;
#pragma unroll 1
                for (;;) {
                    unsigned long long mask;
                    const int j = walk.next(R, rt, prev, mask);
                    if (j == INT_MAX) break;
                    const int lo = (int)max((long long)kv_begin, j * walk.blk);
                    const int hi = (int)min((long long)kv_end, (j + 1) * walk.blk);
#pragma unroll 1
                    for (int t0 = lo; t0 < hi; t0 += kBlk) emit(t0, min(kBlk, hi - t0), mask);
                    prev = j;
                }
            }
            uint32_t st;  // end of this row tile's stream
            acquire(st);
            if (lane == 0) {
                desc[st] = StageDesc{0, 0, 1, 0, 0ull, 0};
                mbar_arrive(bar0 + 8 * st);
            }
            ++n;
        }
        return;
    }

    // ---- consumer warpgroups
    if (D == 256) setmaxnreg_inc<C::kConsRegs>();
    constexpr int DO = C::kDO;
    const int wg = tid >> 7, warp = (tid >> 5) & 3;
    const int col0 = wg * DO;  // first output column of this warpgroup
    const float scale = p.softmax_scale_log2;
    const float oscale = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
    uint8_t* sQ = base + C::kOffQ;
    uint32_t n = 0;
#pragma unroll 1
    for (int rt = 0; rt < R.nrows; rt += kTileRows) {
        named_bar(2, C::kCons);
        load_q_tile<D, VAR>(sQ, reinterpret_cast<const void*>(p.q), p.q_dtype, R, rt, tid, C::kCons);
        fence_async_smem();
        named_bar(2, C::kCons);
        const FragRows fr = frag_rows(R, rt, warp, lane);
        Soft st;
        st.reset();
        float o[DO / 2];
        zero_frag(o);
#pragma unroll 1
        for (;;) {
            const uint32_t sidx = n % S;
            mbar_wait(bar0 + 8 * sidx, ring_full_parity(n, (uint32_t)S));
            const StageDesc d = desc[sidx];
            if (d.last) {
                ring_warp_release(bar0 + 8 * (S + sidx));
                ++n;
                break;
            }
            uint8_t* sb = base + sidx * G::kStageBytes;
            prepare_block<D, VAR>(sb + C::kK, sb + C::kV, sb + C::kKraw, sb + C::kVraw, src, d.t0, d.nkeys, tid, C::kCons);
            named_bar(2, C::kCons);
            float s[64];
            qk<D, VAR>(smem_u32(sQ), smem_u32(sb + C::kK), s);
            int bl[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) bl[i] = block_lim(fr.lim[i], d.t0, d.nkeys, (d.mask >> fr.rr[i]) & 1ull);
            uint32_t pa[32];
            float alpha[2];
            softmax_block(s, bl, scale, 0.f, p.pv_round, st, pa, alpha);
#pragma unroll
            for (int j = 0; j < DO / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e >> 1];
            pv<DO>(pa, smem_u32(sb + C::kV) + (col0 / 64) * kBlk * 128, o, true);
            ring_warp_release(bar0 + 8 * (S + sidx));  // this warp's reads of the stage are complete
            ++n;
        }
        store_decode_rows<D, DO>(p, st, o, fr.orow, col0, lane, wg == 0, oscale);
    }
}

}  // namespace sm90
}  // namespace msa

#define MSA_SM90_DECODE(NAME, D, VAR)                                                                                    \
    extern "C" __global__ void __launch_bounds__(msa::sm90::DecCfg<D, VAR>::kThreads, 1)                                  \
        msa_sm90_decode_##NAME##_d##D(const __grid_constant__ MsaDecodeParams p, const __grid_constant__ MsaTensorMaps maps) { \
        MSA_SM90_BODY(msa::sm90::decode_impl<D, VAR>(p, maps));                                                                \
    }

MSA_SM90_DECODE(bf16, 64, msa::tc::kVarBF16)
MSA_SM90_DECODE(bf16, 128, msa::tc::kVarBF16)
MSA_SM90_DECODE(bf16, 256, msa::tc::kVarBF16)
MSA_SM90_DECODE(fp8, 64, msa::tc::kVarFP8)
MSA_SM90_DECODE(fp8, 128, msa::tc::kVarFP8)
MSA_SM90_DECODE(fp8, 256, msa::tc::kVarFP8)
MSA_SM90_DECODE(bf16fp8, 64, msa::tc::kVarBF16FP8)
MSA_SM90_DECODE(bf16fp8, 128, msa::tc::kVarBF16FP8)
MSA_SM90_DECODE(bf16fp8, 256, msa::tc::kVarBF16FP8)

// Launch geometry (threads, dynamic shared memory), the same numbers as the
// HopperAmpereLaunch table of names_hopper_ampere.go (its test reads these lines).
#define MSA_HA_PIN(ARCH, ALGO, VAR, D, THREADS, SMEM)                                                       \
    static_assert(msa::sm90::DecCfg<D, msa::tc::kVar_##VAR>::kThreads == (THREADS) && msa::sm90::DecCfg<D, msa::tc::kVar_##VAR>::kSmem == (SMEM), \
                  "geometry of msa_" #ARCH "_" #ALGO "_" #VAR "_d" #D " (names_hopper_ampere.go)");
MSA_HA_PIN(sm90, decode, bf16, 128, 160, 148576)
MSA_HA_PIN(sm90, decode, bf16, 64, 160, 74848)
MSA_HA_PIN(sm90, decode, bf16, 256, 384, 164912)
MSA_HA_PIN(sm90, decode, bf16fp8, 128, 160, 214112)
MSA_HA_PIN(sm90, decode, bf16fp8, 256, 384, 230448)
MSA_HA_PIN(sm90, decode, bf16fp8, 64, 160, 107616)
MSA_HA_PIN(sm90, decode, fp8, 128, 160, 140384)
MSA_HA_PIN(sm90, decode, fp8, 256, 384, 148528)
MSA_HA_PIN(sm90, decode, fp8, 64, 160, 70752)
#undef MSA_HA_PIN

// sm90_fwd.cu - block-sparse prefill partials on sm_90a (Hopper): TMA loads
// of the work item's K/V block, wgmma for Q.K^T and P.V, the online softmax of
// the portable kernel (base 2, P rounded per pv_round), partial O / LSE /
// temperature LSE written at the query's slot exactly as sparse_fwd.cu does.
//
// One CTA per forward-schedule work item (grid = capacity, like
// msa_sparse_fwd_*), 128*NC + 32 threads: NC consumer warpgroups (3, 2 for
// bf16fp8 D = 128 and fp8 D = 64, 1 for D = 256) and one producer warp. The producer lands the item's K and V block
// (128 keys) once, through the tensor maps (or, for a paged block the ABI's
// boxes cannot cover exactly, with 16-byte loads into the same layout) and
// completes one mbarrier. Consumer warpgroup g takes row tiles g, g+NC, ... of
// 64 query-head rows: gathers the tile's Q rows, S = Q K^T (wgmma, shared x
// shared, fp32 accumulators), masks / softmax in registers, O = P V (wgmma
// with P as the register A operand), normalises and stores.
// Variants: bf16 (BF16 Q/K/V), fp8 (E4M3 Q/K/V: Q.K^T on the e4m3 wgmma; V
// and the E4M3-rounded P are exact in bf16, so P.V runs on the bf16 wgmma with
// V converted in shared memory), bf16fp8 (BF16 Q, E4M3 K/V converted to bf16),
// nvfp4 (packed E2M1 K/V with E4M3 block scales dequantised to bf16; BF16 or
// E4M3 Q).
#include "sm90/sm90_common.cuh"

namespace msa {
namespace sm90 {

template <int D, int VAR>
struct FwdCfg {
    using G = Geo90<D, VAR>;
    // Consumer warpgroups: 3 (12 consumer warps per SM hide the tile chain's
    // latency; <= 152 registers), except where 152 registers spill (bf16fp8
    // D = 128 and fp8 D = 64 under ptxas of CUDA 13.0): 2; D = 256: 1.
    static constexpr bool kTwo = (VAR == kVarBF16FP8 && D == 128) || (VAR == kVarFP8 && D == 64);
    static constexpr int kNC = D == 256 ? 1 : kTwo ? 2 : 3;
    static constexpr int kThreads = 128 * kNC + 32;
    static constexpr int kOffK = 0;
    static constexpr int kOffV = kOffK + G::kKBytes;
    static constexpr int kOffKraw = kOffV + G::kVBytes;
    static constexpr int kOffVraw = kOffKraw + (G::kKDirect ? 0 : G::kRawBytes);
    static constexpr int kOffQ = kOffVraw + (G::kVDirect ? 0 : G::kRawBytes);
    static constexpr int kOffBar = kOffQ + kNC * G::kQBytes;
    static constexpr int kSmem = kOffBar + 64 + 1024;  // + slack to align the base to 1024
    static_assert(kSmem <= 232448, "sm_90 dynamic shared memory");
};

template <int D, int VAR>
__device__ __forceinline__ void fwd_impl(const MsaFwdParams& p, const MsaTensorMaps& maps) {
    using C = FwdCfg<D, VAR>;
    using G = Geo90<D, VAR>;
    extern __shared__ __align__(16) uint8_t smem_dyn[];
    uint8_t* base = smem_dyn + ((1024 - (smem_u32(smem_dyn) & 1023)) & 1023);
    const int tid = threadIdx.x;
    const int w = blockIdx.x;
    if (w >= p.capacity || w >= *reinterpret_cast<const int*>(p.work_count)) return;
    int b, t0, nkeys, h;
    const FwdRows R{fwd_rows(p, D, b, t0, nkeys, h)};
    if (nkeys <= 0) return;  // defensive: the schedule never emits empty blocks
    const int* page_row = p.page_table ? reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride : nullptr;
    const int dense_row0 = p.page_table ? 0 : reinterpret_cast<const int*>(p.cu_seqlens_k)[b];
    const KVSource src = kv_source(p.k, p.v, p.k_scale, p.v_scale, page_row, dense_row0, h, p.num_heads_kv, p.page_size, p.kv_dtype);
    const BlockLoc L{page_row != nullptr, page_row, p.page_size, h, dense_row0};
    uint8_t* sK = base + C::kOffK;
    uint8_t* sV = base + C::kOffV;
    uint8_t* sKraw = base + C::kOffKraw;
    uint8_t* sVraw = base + C::kOffVraw;
    const uint32_t full = smem_u32(base + C::kOffBar);

    if (tid == 0) {
        mbar_init(full, 1);
        mbar_init_fence();
    }
    __syncthreads();
    if (tid >= 128 * C::kNC) {  // producer warp: one K/V block per CTA
        produce_block<D, VAR>(maps, G::kKDirect ? sK : sKraw, G::kVDirect ? sV : sVraw, full, L, src, t0, nkeys);
        return;
    }

    float scale = p.softmax_scale_log2;
    if (VAR == kVarNVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
    const float invT = p.inv_temperature;
    const int wg = tid >> 7, wt = tid & 127, warp = wt >> 5, lane = tid & 31;
    uint8_t* sQ = base + C::kOffQ + wg * G::kQBytes;

    mbar_wait(full, 0);
    prepare_block<D, VAR>(sK, sV, sKraw, sVraw, src, t0, nkeys, tid, 128 * C::kNC);
    named_bar(1, 128 * C::kNC);

#pragma unroll 1
    for (int rt = wg * kTileRows; rt < R.nrows; rt += kTileRows * C::kNC) {
        named_bar(2 + wg, 128);  // the previous tile's wgmma reads of sQ are complete in every warp
        load_q_tile<D, VAR>(sQ, reinterpret_cast<const void*>(p.q), p.q_dtype, R, rt, wt);
        fence_async_smem();
        named_bar(2 + wg, 128);

        float s[64];
        qk<D, VAR>(smem_u32(sQ), smem_u32(sK), s);
        long long orow[2];
        int lim[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            long long qoff;
            int l, qi;
            R.row(rt + 16 * warp + (lane >> 2) + 8 * i, qoff, orow[i], l, qi);
            lim[i] = block_lim(l, t0, nkeys, true);
        }
        Soft st;
        st.reset();
        uint32_t pa[32];
        float alpha[2];
        softmax_block(s, lim, scale, invT, p.pv_round, st, pa, alpha);
        float o[D / 2];
#pragma unroll
        for (int e = 0; e < D / 2; ++e) o[e] = 0.f;
        pv<D>(pa, smem_u32(sV), o, false);

        store_fwd_rows<D>(p, st, invT, o, orow, lane);
    }
}

}  // namespace sm90
}  // namespace msa

#define MSA_SM90_FWD(NAME, D, VAR)                                                                                  \
    extern "C" __global__ void __launch_bounds__(msa::sm90::FwdCfg<D, VAR>::kThreads, 1)                             \
        msa_sm90_fwd_##NAME##_d##D(const __grid_constant__ MsaFwdParams p, const __grid_constant__ MsaTensorMaps maps) { \
        MSA_SM90_BODY(msa::sm90::fwd_impl<D, VAR>(p, maps));                                                             \
    }

MSA_SM90_FWD(bf16, 64, msa::tc::kVarBF16)
MSA_SM90_FWD(bf16, 128, msa::tc::kVarBF16)
MSA_SM90_FWD(bf16, 256, msa::tc::kVarBF16)
MSA_SM90_FWD(fp8, 64, msa::tc::kVarFP8)
MSA_SM90_FWD(fp8, 128, msa::tc::kVarFP8)
MSA_SM90_FWD(fp8, 256, msa::tc::kVarFP8)
MSA_SM90_FWD(bf16fp8, 64, msa::tc::kVarBF16FP8)
MSA_SM90_FWD(bf16fp8, 128, msa::tc::kVarBF16FP8)
MSA_SM90_FWD(bf16fp8, 256, msa::tc::kVarBF16FP8)
MSA_SM90_FWD(nvfp4, 64, msa::tc::kVarNVFP4)
MSA_SM90_FWD(nvfp4, 128, msa::tc::kVarNVFP4)
MSA_SM90_FWD(nvfp4, 256, msa::tc::kVarNVFP4)

// Launch geometry (threads, dynamic shared memory), the same numbers as the
// HopperAmpereLaunch table of names_hopper_ampere.go (its test reads these lines).
#define MSA_HA_PIN(ARCH, ALGO, VAR, D, THREADS, SMEM)                                                       \
    static_assert(msa::sm90::FwdCfg<D, msa::tc::kVar_##VAR>::kThreads == (THREADS) && msa::sm90::FwdCfg<D, msa::tc::kVar_##VAR>::kSmem == (SMEM), \
                  "geometry of msa_" #ARCH "_" #ALGO "_" #VAR "_d" #D " (names_hopper_ampere.go)");
MSA_HA_PIN(sm90, fwd, bf16, 128, 416, 115776)
MSA_HA_PIN(sm90, fwd, bf16, 256, 160, 164928)
MSA_HA_PIN(sm90, fwd, bf16, 64, 416, 58432)
MSA_HA_PIN(sm90, fwd, bf16fp8, 128, 288, 132160)
MSA_HA_PIN(sm90, fwd, bf16fp8, 256, 160, 230464)
MSA_HA_PIN(sm90, fwd, bf16fp8, 64, 416, 74816)
MSA_HA_PIN(sm90, fwd, fp8, 128, 416, 91200)
MSA_HA_PIN(sm90, fwd, fp8, 256, 160, 148544)
MSA_HA_PIN(sm90, fwd, fp8, 64, 288, 42048)
MSA_HA_PIN(sm90, fwd, nvfp4, 128, 416, 132160)
MSA_HA_PIN(sm90, fwd, nvfp4, 256, 160, 197696)
MSA_HA_PIN(sm90, fwd, nvfp4, 64, 416, 66624)
#undef MSA_HA_PIN

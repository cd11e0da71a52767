// sm80_decode.cu - paged decode with split-KV on sm_80 (and sm_86 / sm_89):
// the work items, rows, masks and outputs of decode.cu (dense and sparse q2k
// decode) on mma.sync tensor cores (sm80_common.cuh).
//
// One CTA per decode work item (grid = work_count), 128 threads (256 for
// D = 256: two column groups, see sm80_common.cuh). For each tile of 64
// query-head rows the CTA streams the softmax blocks of the item's KV chunk
// [kv_begin, kv_end) in 128-key steps (dense), or the blocks the tile's rows
// selected in q2k (sparse: warp 0 finds the next block as in decode.cu, each
// row attends only the blocks it selected, within its causal limit), and
// writes float partials at o_indptr[b] + kv_tile*q_stride + i (split_kv) or
// the final BF16 output (times output_scale) and LSE.
// Variants: bf16 (BF16 Q/K/V), fp8 (E4M3 Q/K/V widened to bf16 exactly, P
// rounded to e4m3 per pv_round) and bf16fp8 (BF16 Q, E4M3 K/V widened).
#include "sm80/sm80_common.cuh"

namespace msa {
namespace sm80 {

// The block stream of one row tile: dense 128-key steps over the chunk, or
// the sparse block walk (SparseWalk of tc_frag.cuh, run by warp 0 and
// broadcast through shared memory).
struct DecStream {
    const DecRows* R;
    SparseWalk walk;
    bool sparse;
    int rt, hi, prev;
    int* s_blk;
    unsigned long long* s_mask;

    __device__ __forceinline__ Blk walk_next() {
        __syncthreads();  // every thread has read the previous broadcast
        if ((threadIdx.x >> 5) == 0) {
            unsigned long long m;
            const int j = walk.next(*R, rt, prev, m);
            if ((threadIdx.x & 31) == 0) {
                *s_blk = j;
                *s_mask = m;
            }
        }
        __syncthreads();
        const int j = *s_blk;
        if (j == INT_MAX) return Blk{0, 0, 0ull};
        const int lo = (int)max((long long)walk.kv_begin, j * walk.blk);
        hi = (int)min((long long)walk.kv_end, (j + 1) * walk.blk);
        prev = j;
        return Blk{lo, min(kBlk, hi - lo), *s_mask};
    }
    __device__ __forceinline__ Blk first() {
        if (sparse) return walk_next();
        hi = walk.kv_end;
        const int n = walk.kv_end - walk.kv_begin;
        return n > 0 ? Blk{walk.kv_begin, min(kBlk, n), ~0ull} : Blk{0, 0, 0ull};
    }
    __device__ __forceinline__ Blk operator()(const Blk& b) {
        const int t = b.t0 + kBlk;
        if (t < hi) return Blk{t, min(kBlk, hi - t), b.mask};
        if (!sparse) return Blk{0, 0, 0ull};
        return walk_next();
    }
};

template <int D, int VAR>
__device__ __forceinline__ void decode_impl(const MsaDecodeParams& p) {
    constexpr int NC = D == 256 ? 2 : 1;
    using C = Cfg80<D, VAR, NC>;
    constexpr int DO = C::kDO;
    extern __shared__ __align__(16) uint8_t smem[];
    const int w = blockIdx.x;
    DecodeItem item;
    if (!decode_item(p, w, item)) return;
    const int h = item.h, b = item.b;
    int kv_begin = item.kv_begin, kv_end = item.kv_end;
    const DecRows R = dec_rows(p, item, D);
    const int* page_row = reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride;
    const KVSource src = kv_source(p.k, p.v, p.k_scale, p.v_scale, page_row, 0, h, p.num_heads_kv, p.page_size, p.kv_dtype);
    const float scale = p.softmax_scale_log2;
    const float oscale = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, cg = threadIdx.x >> 7;
    const int col0 = cg * DO;
    const SparseWalk walk{p.q2k ? reinterpret_cast<const int*>(p.q2k) +
                                      ((long long)h * p.batch * p.seqlen_q + (long long)b * p.seqlen_q) * p.top_k
                                : nullptr,
                          (long long)p.blk_kv, p.top_k, kv_begin, kv_end};

#pragma unroll 1
    for (int rt = 0; rt < R.nrows; rt += kTileRows) {
        __syncthreads();  // the previous tile's readers of the Q tile are done
        load_q<D, C::kThreads>(smem + C::kOffQ, reinterpret_cast<const void*>(p.q), p.q_dtype, R, rt);
        const FragRows fr = frag_rows(R, rt, warp, lane);
        DecStream ds{&R, walk, p.q2k != 0, rt, 0, -1, reinterpret_cast<int*>(smem + C::kOffMisc + 8),
                     reinterpret_cast<unsigned long long*>(smem + C::kOffMisc)};
        const Blk first = ds.first();
        Soft st;
        st.reset();
        float o[DO / 2];
        zero_frag(o);
        attend<D, VAR, NC, true>(smem, src, first, ds, fr.lim, fr.rr, scale, 0.f, p.pv_round, st, o);
        cp_async_wait_all();  // the Q copies of a tile without blocks
        store_decode_rows<D, DO>(p, st, o, fr.orow, col0, lane, cg == 0, oscale);
    }
}

}  // namespace sm80
}  // namespace msa

#define MSA_SM80_DECODE(NAME, D, VAR)                                                                                      \
    extern "C" __global__ void __launch_bounds__(D == 256 ? 256 : 128, 1)                                                   \
        msa_sm80_decode_##NAME##_d##D(const __grid_constant__ MsaDecodeParams p, const __grid_constant__ MsaTensorMaps maps) { \
        (void)maps;                                                                                                         \
        MSA_SM80_BODY(msa::sm80::decode_impl<D, VAR>(p));                                                                   \
    }

MSA_SM80_DECODE(bf16, 64, msa::tc::kVarBF16)
MSA_SM80_DECODE(bf16, 128, msa::tc::kVarBF16)
MSA_SM80_DECODE(bf16, 256, msa::tc::kVarBF16)
MSA_SM80_DECODE(fp8, 64, msa::tc::kVarFP8)
MSA_SM80_DECODE(fp8, 128, msa::tc::kVarFP8)
MSA_SM80_DECODE(fp8, 256, msa::tc::kVarFP8)
MSA_SM80_DECODE(bf16fp8, 64, msa::tc::kVarBF16FP8)
MSA_SM80_DECODE(bf16fp8, 128, msa::tc::kVarBF16FP8)
MSA_SM80_DECODE(bf16fp8, 256, msa::tc::kVarBF16FP8)

// Launch geometry (threads, dynamic shared memory), the same numbers as the
// HopperAmpereLaunch table of names_hopper_ampere.go (its test reads these lines).
#define MSA_HA_PIN(ARCH, ALGO, VAR, D, THREADS, SMEM)                                                       \
    static_assert(msa::sm80::Cfg80<D, msa::tc::kVar_##VAR, (D == 256 ? 2 : 1)>::kThreads == (THREADS) && msa::sm80::Cfg80<D, msa::tc::kVar_##VAR, (D == 256 ? 2 : 1)>::kSmem == (SMEM), \
                  "geometry of msa_" #ARCH "_" #ALGO "_" #VAR "_d" #D " (names_hopper_ampere.go)");
MSA_HA_PIN(sm80, decode, bf16, 128, 128, 49168)
MSA_HA_PIN(sm80, decode, bf16, 256, 256, 98320)
MSA_HA_PIN(sm80, decode, bf16, 64, 128, 24592)
MSA_HA_PIN(sm80, decode, bf16fp8, 128, 128, 40976)
MSA_HA_PIN(sm80, decode, bf16fp8, 256, 256, 81936)
MSA_HA_PIN(sm80, decode, bf16fp8, 64, 128, 20496)
MSA_HA_PIN(sm80, decode, fp8, 128, 128, 40976)
MSA_HA_PIN(sm80, decode, fp8, 256, 256, 81936)
MSA_HA_PIN(sm80, decode, fp8, 64, 128, 20496)
#undef MSA_HA_PIN

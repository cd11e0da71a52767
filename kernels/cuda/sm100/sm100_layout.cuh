// sm100_layout.cuh - the data of the SM100 tensor-core kernels, in one place:
// variants, shared-memory map, tensor-memory map, swizzle and UMMA descriptor
// encodings, TMA box geometry and the mbarrier transaction ledger.
//
// Plain constexpr C++ usable on the host and the device. The kernels
// (sm100_fwd.cu, sm100_decode.cu) take every offset and size from here, and
// the Go test cuda/emu_sm100_test.go re-derives the same numbers from its own
// model and checks them against the MSA_SM100_PIN lines at the end of this
// file (which the compiler checks against these functions with
// static_assert), so a change on either side without the other fails a test.
#ifndef SM100_LAYOUT_CUH
#define SM100_LAYOUT_CUH

#include <stdint.h>

#if defined(__CUDACC__)
#define MSA_HD __host__ __device__
#else
#define MSA_HD
#endif

namespace msa {
namespace sm100 {

// ---- variants -------------------------------------------------------------------
// kBF16:    BF16 Q/K/V, kind::f16 for both products, P rounded to bf16 (or to
//           e4m3 and held exactly in bf16 when pv_round = E4M3).
// kFP8:     E4M3 Q/K/V, kind::f8f6f4 for both products, P rounded to e4m3
//           (pv_round must be E4M3).
// kBF16FP8: BF16 Q, E4M3 K/V upconverted to bf16 in shared memory, kind::f16.
// kNVFP4:   NVFP4 K/V (E2M1 x E4M3 block scale) dequantised to bf16 in shared
//           memory, BF16 or E4M3 Q (E4M3 Q converted to bf16), kind::f16.
enum Variant : int { kBF16 = 0, kFP8 = 1, kBF16FP8 = 2, kNVFP4 = 3 };

constexpr int kThreads = 128;   // decode: 4 warps, warp w owns TMEM lanes 32w..32w+31 (prefill: FwdLayout::threads)
constexpr int kTileM = 128;     // UMMA M: rows of the accumulator = TMEM lanes
constexpr int kBlockKeys = 128; // keys per K/V tile (one softmax block)
constexpr int kKStepBytes = 32; // UMMA K per instruction: 16 bf16 or 32 e4m3 = 32 bytes
constexpr int kMaxDynSmem = 232448;
constexpr int kAlignSlack = 1024;  // the dynamic smem base is aligned up to 1024 in the kernel

// ---- residency and tensor memory ----------------------------------------------------
// An SM of the SM100 family (sm_100, sm_103) has 228 KiB of shared memory
// and 512 tensor-memory columns, shared by the CTAs resident on it. A CTA
// whose tcgen05.alloc finds too few free columns blocks in the allocator
// until a neighbour frees its columns, so every kernel here keeps
//   resident CTAs per SM x TMEM columns per CTA <= 512.
// The residency bound used is shared memory alone, counted without the
// per-CTA reservation of the driver (a reservation only lowers residency):
// floor(kSmemPerSM / dynamic smem). The prefill allocates all 512 columns,
// so it requests at least kSoleCtaSmem = 228 KiB / 2 + 1 KiB, which no two
// CTAs can share (2 x 117760 > 233472, and smaller carveouts hold fewer);
// a decode CTA allocates <= 256 columns and at most 512 / cols of them fit
// by their own shared memory (static_asserts of both layouts, and
// TestSM100Residency on the Go kernel table).
constexpr int kSmemPerSM = 233472;
constexpr int kTmemColsPerSM = 512;
constexpr int kSoleCtaSmem = kSmemPerSM / 2 + 1024;
MSA_HD constexpr int resident_by_smem(int smem_bytes) { return kSmemPerSM / smem_bytes; }

MSA_HD constexpr int imin(int a, int b) { return a < b ? a : b; }
MSA_HD constexpr int imax(int a, int b) { return a > b ? a : b; }
MSA_HD constexpr int align_up(int x, int a) { return (x + a - 1) / a * a; }
MSA_HD constexpr int pow2_ceil(int x) { return x <= 1 ? 1 : 2 * pow2_ceil((x + 1) / 2); }

// Bytes per element of the MMA operands in shared memory.
MSA_HD constexpr int q_mma_bytes(int v) { return v == kFP8 ? 1 : 2; }
MSA_HD constexpr int kv_mma_bytes(int v) { return v == kFP8 ? 1 : 2; }
MSA_HD constexpr int p_mma_bytes(int v) { return v == kFP8 ? 1 : 2; }
MSA_HD constexpr bool kv_converted(int v) { return v == kBF16FP8 || v == kNVFP4; }
// Bytes of one K/V row of D elements in global memory (the TMA source).
MSA_HD constexpr int kv_row_bytes(int v, int d) { return v == kBF16 ? 2 * d : v == kNVFP4 ? d / 2 : d; }

// Swizzle span of a tile whose rows are `row_bytes` long: the TMA box inner
// extent and the UMMA layout are min(row_bytes, 128) bytes wide (128B, 64B or
// 32B swizzle); a wider row is stored as row_bytes/span column blocks, each
// block `rows` x span bytes, one after the other.
MSA_HD constexpr int span_of(int row_bytes) { return imin(row_bytes, 128); }
MSA_HD constexpr int blocks_of(int row_bytes) { return row_bytes / span_of(row_bytes); }

// Byte offset of 16-byte chunk `c` (0 .. row_bytes/16) of row `r` in such a
// tile: the Swizzle<log2(span/16),4,3> pattern (16-byte chunk bits XOR the
// 128-byte row-group bits), valid because every tile starts 1024-aligned.
MSA_HD constexpr int swz_chunk(int r, int c, int span) {
    return span == 128 ? (c ^ (r & 7)) : span == 64 ? (c ^ ((r >> 1) & 3)) : span == 32 ? (c ^ ((r >> 2) & 1)) : c;
}
MSA_HD constexpr int tile_offset(int r, int c, int row_bytes, int rows) {
    return (c * 16 / span_of(row_bytes)) * rows * span_of(row_bytes) + r * span_of(row_bytes) +
           swz_chunk(r, c % (span_of(row_bytes) / 16), span_of(row_bytes)) * 16;
}

// UMMA shared-memory descriptor (SM100): bits [0,14) start >> 4, [16,30)
// leading byte offset >> 4, [32,46) stride byte offset >> 4, [46,48) version
// = 1, [49,52) base offset = 0, [52] lbo mode = 0, [61,64) layout: 2 =
// SWIZZLE_128B, 4 = SWIZZLE_64B, 6 = SWIZZLE_32B.
MSA_HD constexpr uint64_t layout_code(int span) { return span == 128 ? 2 : span == 64 ? 4 : 6; }
MSA_HD constexpr uint64_t umma_smem_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo, uint32_t span) {
    return (uint64_t)((saddr >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 46) | (layout_code((int)span) << 61);
}
// K-major operand (rows x K, K contiguous): 8-row groups at SBO = 8*span;
// LBO is unused for swizzled K-major layouts (encoded as 16 bytes).
// K step k (32 bytes of K each) starts at block (k*32/span), byte (k*32%span).
MSA_HD constexpr uint32_t kmajor_step_offset(int k, int row_bytes, int rows) {
    return (uint32_t)((k * kKStepBytes / span_of(row_bytes)) * rows * span_of(row_bytes) +
                      (k * kKStepBytes) % span_of(row_bytes));
}
MSA_HD constexpr uint32_t kmajor_sbo(int row_bytes) { return 8u * span_of(row_bytes); }
MSA_HD constexpr uint32_t kmajor_lbo() { return 16u; }
// MN-major operand (K rows x MN, MN contiguous; the V tile as TMA lands it):
// MN atoms of span bytes at LBO = rows*span (the next column block), 8-row
// K groups at SBO = 8*span. K step k (keys_per_step rows) starts at row
// k*keys_per_step of every block.
MSA_HD constexpr uint32_t mnmajor_lbo(int row_bytes, int rows) { return (uint32_t)(rows * span_of(row_bytes)); }
MSA_HD constexpr uint32_t mnmajor_sbo(int row_bytes) { return 8u * span_of(row_bytes); }
MSA_HD constexpr uint32_t mnmajor_step_offset(int k, int keys_per_step, int row_bytes) {
    return (uint32_t)(k * keys_per_step * span_of(row_bytes));
}

// UMMA instruction descriptor (kind::f16 / kind::f8f6f4, dense): [4,6) D
// format 1 = F32; [7,10) A format, [10,13) B format (kind::f16: 1 = BF16;
// kind::f8f6f4: 0 = E4M3); [15] A major, [16] B major (0 = K, 1 = MN);
// [17,23) N >> 3; [24,29) M >> 4.
MSA_HD constexpr uint32_t umma_idesc(bool f8, int m, int n, bool a_mn, bool b_mn) {
    return (1u << 4) | ((f8 ? 0u : 1u) << 7) | ((f8 ? 0u : 1u) << 10) | ((a_mn ? 1u : 0u) << 15) |
           ((b_mn ? 1u : 0u) << 16) | ((uint32_t)(n >> 3) << 17) | ((uint32_t)(m >> 4) << 24);
}
// MN-major operands (bit 15 / 16 = 1) are used for the V tile of the
// prefill's O = P V (B operand) and for V^T and P^T of the decode's O^T
// (A and B), FP8 (E4M3, kind::f8f6f4) included. The PTX ISA's tcgen05
// instruction-descriptor table lists "Transpose A / B Matrix" for
// kind::f8f6f4 as for kind::f16, and CUTLASS states MN-major is valid for
// E4M3, E5M2, INT8, F16, BF16 and TF32 sources, the sub-byte kind::f8f6f4
// types (E2M3, E3M2, E2M1) being K-major only
// (cute/arch/mma_sm100_desc.hpp, UMMA::InstrDescriptor a_major / b_major;
// unlike Hopper's wgmma, which transposes only 16-bit types and made FA3
// transpose FP8 V in shared memory). The NVFP4 variants dequantise to BF16
// before any MMA, so no sub-byte operand reaches a descriptor here.
MSA_HD constexpr bool umma_shape_ok(int m, int n) {
    return (m == 64 && n % 8 == 0 && n >= 8 && n <= 256) || (m == 128 && n % 16 == 0 && n >= 16 && n <= 256);
}

// ---- sparse prefill (msa_sm100_fwd_*) -------------------------------------------
// One CTA per forward-schedule work item; the item's query-head rows are
// processed in row tiles of 128 (kTileM) against one K/V block of 128 keys.
// Warp-specialised: `slots` softmax warpgroups (128 threads each; thread t
// of warpgroup s owns row t of the row tiles s, s + slots, ..., TMEM lane t)
// and one MMA warp, warp 4 * slots: TMEM allocation, and its lane 0 issues
// the K/V TMA and every S = Q K^T and O = P V (the CTA's only tcgen05.mma /
// tcgen05.commit thread). Slot s has its own Q/P tile in shared memory,
// its own S and O in tensor memory and its own mbarriers, so the tensor
// cores compute one slot's S = Q K^T or O = P V while the other slot's
// warpgroup runs its softmax or epilogue (two slots when both tiles fit in
// shared memory and both S/O pairs in the 512 TMEM columns, else one).
//
// Shared memory (byte offsets from the 1024-aligned base):
//   [qp_off, +qp_bytes)   slot 0: Q tile (K-major, 128 rows x D) during
//                         S = Q K^T, then P (K-major, 128 rows x 128 keys)
//                         for O = P V
//   [k_off,  +kv_bytes)   K tile (K-major: 128 keys x D), TMA or converter
//   [v_off,  +kv_bytes)   V tile (MN-major for the P.V product: 128 keys x D)
//   [raw_off,+raw_bytes)  converted variants: the raw K, then V, TMA tile
//   [bar_off, +8*num_bars) mbarriers (below), then the TMEM address
//   [qp1_off, +qp_bytes)  slot 1's Q/P tile (slots = 2), after the one-slot map
// Mbarriers (arrival counts): K ready, V ready (1 + TMA bytes); per slot s:
// Q ready (128: the warpgroup's gather has landed; for row tile 0 also the
// converted K/V), S done (1: tcgen05.commit), P ready (128: P stored, S
// read), O done (1: tcgen05.commit). Use n of a slot's barriers (its n-th
// row tile) completes phase n: wait parity n & 1.
// Tensor memory: S of slot s (FP32, 128 lanes x 128 columns) at column
// 128 s, O of slot s (128 x D) at 128 slots + D s; allocation = next power
// of 2 >= slots (128 + D).
template <int V, int D>
struct FwdLayout {
    static_assert(D == 64 || D == 128 || D == 256, "head dim");
    static constexpr int q_row_bytes = D * q_mma_bytes(V);
    static constexpr int kv_row = D * kv_mma_bytes(V);        // K/V row in shared memory
    static constexpr int p_row_bytes = kBlockKeys * p_mma_bytes(V);
    static constexpr int raw_row = kv_row_bytes(V, D);         // K/V row in global memory
    static constexpr int q_bytes = kTileM * q_row_bytes;
    static constexpr int p_bytes = kTileM * p_row_bytes;
    static constexpr int qp_off = 0;
    static constexpr int qp_bytes = imax(q_bytes, p_bytes);
    static constexpr int kv_bytes = kBlockKeys * kv_row;
    static constexpr int k_off = align_up(qp_off + qp_bytes, 1024);
    static constexpr int v_off = align_up(k_off + kv_bytes, 1024);
    static constexpr int raw_bytes = kv_converted(V) ? kBlockKeys * raw_row : 0;
    static constexpr int raw_off = align_up(v_off + kv_bytes, 1024);
    static constexpr int bar_off = align_up(raw_off + raw_bytes, 1024);
    static constexpr int bar_k = 0, bar_v = 1, bar_q = 2, bar_s = 4, bar_p = 6, bar_o = 8, num_bars = 10;  // + slot
    static constexpr int tmem_slot_off = bar_off + 8 * num_bars;
    static constexpr int one_slot_end = tmem_slot_off + 8;
    static constexpr int qp1_off = align_up(one_slot_end, 1024);
    static constexpr int slots =
        qp1_off + qp_bytes + kAlignSlack <= kMaxDynSmem && 2 * (kBlockKeys + D) <= 512 ? 2 : 1;
    // What the launcher requests: the map plus alignment slack, raised to
    // kSoleCtaSmem so that one CTA (which allocates all 512 TMEM columns)
    // is alone on its SM.
    static constexpr int map_bytes = (slots == 2 ? qp1_off + qp_bytes : one_slot_end) + kAlignSlack;
    static constexpr int smem_bytes = imax(map_bytes, kSoleCtaSmem);
    static constexpr int mma_warp = 4 * slots;  // TMEM, K/V TMA, every MMA and commit (lane 0)
    static constexpr int threads = 128 * slots + 32;
    static constexpr int tmem_cols = pow2_ceil(slots * (kBlockKeys + D));
    MSA_HD static constexpr int tmem_s_col(int s) { return kBlockKeys * s; }
    MSA_HD static constexpr int tmem_o_col(int s) { return kBlockKeys * slots + D * s; }
    MSA_HD static constexpr int qp_tile_off(int s) { return s == 0 ? qp_off : qp1_off; }
    static constexpr bool f8 = V == kFP8;
    static constexpr uint32_t idesc_qk = umma_idesc(f8, kTileM, kBlockKeys, false, false);
    static constexpr uint32_t idesc_pv = umma_idesc(f8, kTileM, D, false, true);
    static constexpr int qk_steps = q_row_bytes / kKStepBytes;   // UMMA instructions of S = Q K^T
    static constexpr int pv_steps = p_row_bytes / kKStepBytes;   // UMMA instructions of O = P V
    static constexpr int keys_per_pv_step = kKStepBytes / p_mma_bytes(V);
    // TMA boxes of one K or V tile: raw_row/span boxes of `rows` x span bytes.
    static constexpr int box_span = span_of(raw_row);
    static constexpr int boxes = blocks_of(raw_row);
    static_assert(smem_bytes <= kMaxDynSmem, "dynamic shared memory");
    static_assert(tmem_cols <= 512 && tmem_o_col(slots - 1) + D <= tmem_cols, "tensor memory columns");
    static_assert(resident_by_smem(smem_bytes) * tmem_cols <= kTmemColsPerSM, "co-resident CTAs' TMEM");
    static_assert(umma_shape_ok(kTileM, kBlockKeys) && umma_shape_ok(kTileM, D), "UMMA shape");
    static_assert(q_row_bytes == kv_row, "Q and K rows have one layout");
};

// ---- paged decode (msa_sm100_decode_*) ------------------------------------------
// One CTA (128 threads) per decode work item. Swapped products: S^T = K Q^T
// with the 128 keys of a block on M (TMEM lanes: thread t owns key t) and
// the item's query-head rows on N (kDecRows per row tile); O^T = V^T P^T
// with D on M (one M = 128 MMA per 128 elements of D; for D = 64 the upper
// 64 accumulator lanes are never read, their A-operand atom lies in the P^T
// region that follows V) and the rows on N.
//
// Shared memory (byte offsets from the 1024-aligned base):
//   [q_off, +q_bytes)   Q tile, K-major (kDecRows rows x D): the B operand of S^T
//   [k_off, +kv_bytes)  K tile (K-major, 128 keys x D): the A operand of S^T
//   [v_off, +kv_bytes)  V tile (keys x D, D contiguous): the MN-major A operand of O^T
//   [p_off, +p_bytes)   P^T, MN-major (128 keys x kDecRows rows, rows contiguous): B of O^T
//   [raw_off, +raw_bytes) converted variants (bf16fp8, nvfp4): the raw K tile
//                       (one stage: then the raw V tile), as TMA landed it,
//                       converted to BF16 into the K / V tiles; with two stages
//                       the other raw tiles follow the one-stage map (DecLayout)
//   [red_off, ...)      row state: warp partials red[4][R], running max m[R],
//                       running sum l[R], this block's max mcur[R], alpha[R],
//                       1/l inv[R], visible-key count vis[R], causal limit
//                       lim[R], sparse selection sel[R], output row orow[R]
//                       (int64), two ints of CTA-wide reduction
//   [bar_off, +24)      mbarriers: K ready, V ready, MMA done; then the TMEM address
// Tensor memory: S^T (128 lanes x kDecRows) at column 0; O^T block j (D
// elements 128j..128j+127 on the lanes) at column kDecRows * (1 + j).
constexpr int kDecRows = 64;  // query-head rows per decode row tile (UMMA N)
template <int V, int D>
struct DecLayout {
    static_assert(D == 64 || D == 128 || D == 256, "head dim");
    static_assert(V == kBF16 || V == kFP8 || V == kBF16FP8 || V == kNVFP4, "decode variants: bf16, fp8, bf16fp8, nvfp4");
    static constexpr bool f8 = V == kFP8;
    static constexpr int es = f8 ? 1 : 2;                     // MMA operand element size
    static constexpr int row_bytes = D * es;                  // Q/K/V row in shared memory
    static constexpr int raw_row = kv_row_bytes(V, D);        // K/V row in global memory (the TMA box rows)
    static constexpr int raw_bytes = kv_converted(V) ? kBlockKeys * raw_row : 0;
    static constexpr int q_bytes = kDecRows * row_bytes;
    static constexpr int kv_bytes = kBlockKeys * row_bytes;
    static constexpr int p_row_bytes = kDecRows * es;         // one key's row of P^T
    static constexpr int p_bytes = kBlockKeys * p_row_bytes;
    static constexpr int q_off = 0;
    static constexpr int k_off = align_up(q_off + q_bytes, 1024);
    static constexpr int v_off = align_up(k_off + kv_bytes, 1024);
    static constexpr int p_off = align_up(v_off + kv_bytes, 1024);
    static constexpr int raw_off = align_up(p_off + p_bytes, 1024);  // bf16fp8 / nvfp4: raw K, then V
    static constexpr int red_off = align_up(raw_off + raw_bytes, 1024);
    static constexpr int red_floats = 4 * kDecRows + 5 * kDecRows;  // red, m, l, mcur, alpha, inv
    static constexpr int red_ints = 3 * kDecRows + 2;                // vis, lim, sel, reduction
    static constexpr int orow_off = align_up(red_off + 4 * red_floats + 4 * red_ints, 16);
    static constexpr int bar_off = align_up(orow_off + 8 * kDecRows, 16);
    static constexpr int bar_k = 0, bar_v = 1, bar_mma = 2, num_bars = 3;
    static constexpr int tmem_slot_off = bar_off + 8 * num_bars;
    static constexpr int o_m = 128;                            // UMMA M of O^T
    static constexpr int o_mmas = D < 128 ? 1 : D / 128;       // O^T products per K step
    static constexpr int tmem_s_col = 0;
    static constexpr int tmem_o_col = kDecRows;
    static constexpr int tmem_cols = pow2_ceil(kDecRows + o_mmas * kDecRows);
    static constexpr uint32_t idesc_qk = umma_idesc(f8, kBlockKeys, kDecRows, false, false);
    static constexpr uint32_t idesc_pv = umma_idesc(f8, o_m, kDecRows, true, true);
    static constexpr int qk_steps = row_bytes / kKStepBytes;
    static constexpr int keys_per_pv_step = kKStepBytes / es;
    static constexpr int pv_steps = kBlockKeys / keys_per_pv_step;
    static constexpr int box_span = span_of(row_bytes);
    static constexpr int boxes = blocks_of(row_bytes);
    // A operand of O^T block j: M = 128 elements of D = 128*es/box_span atoms
    // of box_span bytes, LBO = one column block (128 keys x box_span) apart.
    static constexpr int o_atoms = 128 * es / box_span;
    // K/V stages. A second stage, when it fits, is appended after the
    // one-stage map (which stays as it is); its mbarriers (K, V ready) sit
    // at bar1_off, then vis1[kDecRows] (the visible-key counts of the
    // visits in stage 1).
    //   bf16, fp8 (K and V land by TMA as the MMA reads them): stage 0 is
    //     k_off / v_off, stage 1 K at k1_off and V at v1_off (v_extent
    //     bytes: the O^T A operand reads o_mmas * o_atoms column blocks,
    //     more than the tile at D = 64).
    //   bf16fp8, nvfp4 (converted in shared memory into k_off / v_off):
    //     raw K / V of stage 0 at raw_off / rv0_off, of stage 1 at rk1_off /
    //     rv1_off. With one stage the raw K then the raw V go through raw_off.
    static constexpr bool conv = kv_converted(V);
    static constexpr int one_stage_end = tmem_slot_off + 8;
    static constexpr int v_extent = imax(kv_bytes, o_mmas * o_atoms * kBlockKeys * box_span);
    static constexpr int s1_off = align_up(one_stage_end, 1024);
    static constexpr int k1_off = s1_off;
    static constexpr int v1_off = align_up(k1_off + kv_bytes, 1024);
    static constexpr int rv0_off = s1_off;
    static constexpr int rk1_off = align_up(rv0_off + raw_bytes, 1024);
    static constexpr int rv1_off = align_up(rk1_off + raw_bytes, 1024);
    static constexpr int bar1_off = align_up(conv ? rv1_off + raw_bytes : v1_off + v_extent, 16);
    static constexpr int vis1_off = bar1_off + 16;
    static constexpr int two_stage_end = vis1_off + 4 * kDecRows;
    static constexpr int stages = two_stage_end + kAlignSlack <= kMaxDynSmem ? 2 : 1;
    static constexpr int smem_bytes = (stages == 2 ? two_stage_end : one_stage_end) + kAlignSlack;
    static_assert(smem_bytes <= kMaxDynSmem, "dynamic shared memory");
    static_assert(tmem_cols <= 512 && tmem_o_col + o_mmas * kDecRows <= tmem_cols, "tensor memory columns");
    static_assert(resident_by_smem(smem_bytes) * tmem_cols <= kTmemColsPerSM, "co-resident CTAs' TMEM");
    static_assert(umma_shape_ok(kBlockKeys, kDecRows) && umma_shape_ok(o_m, kDecRows), "UMMA shape");
    // D = 64: the phantom upper atoms of the O^T A operand stay inside shared memory.
    static_assert(v_off + o_mmas * o_atoms * kBlockKeys * box_span <= red_off, "O^T A operand inside the tile map");
    static_assert(p_row_bytes <= 128, "P^T rows fit one swizzle atom (one N atom)");
};

// ---- query-major sparse prefill (msa_sm100_qfwd_*) -------------------------------
// One CTA per query tile of the query-major plan (cuda.QPlan, MsaQFwdParams,
// 128-row tiles on SM100: QTileRowsFor): the tile's query-head rows, in
// passes of 128 (kTileM), walk the union of the blocks its tokens selected,
// with the online softmax across blocks; O, LSE and temperature LSE are
// written once (no partials, no combine). Every variant at D = 64 and 128;
// bf16 and fp8 at D = 256 (qfwd_fits: a converted D = 256 map does not fit,
// and the sm80 query-major kernel runs it).
// Warp roles (FlashAttention-4 / CUTLASS example 77 on one tile):
//   warps 0-3  softmax warpgroup: thread t = row t = TMEM lane t; gathers
//              the pass's Q rows, reads S_j, masks, folds the online
//              softmax, stores P_j into tensor memory over S_j (the A
//              operand of O += P_j V_j) and the row's record (alpha, m,
//              l, temperature l) beside it; never waits for a product of O
//   warp 4     MMA warp: TMEM allocation; lane 0 issues every tcgen05.mma
//              and tcgen05.commit: S_{j+1} = Q K_{j+1}^T before O += P_j V_j,
//              so the tensor cores compute S_{j+1} while the softmax of
//              block j runs; S_{j+2} into the buffer that holds P_j only
//              once O done(j) has shown that O += P_j V_j read it
//   warp 5     load warp: lane 0 issues the K and V TMA of every block of
//              the walk: into `stages` ring slots (bf16, fp8), or into the
//              raw K and raw V tiles (bf16fp8, nvfp4)
//   warps 6-9  converter warpgroup (bf16fp8, nvfp4 only): thread t widens
//              key t of the raw K, then V tile to BF16 into the ring slot
//              (NVFP4: E2M1 x E4M3 block scale; rows past the block's
//              keys zeroed)
//   correction warpgroup (warps 6-9, or 10-13 after the converter): the
//              thread of lane l in warp w owns row 32 (w % 4) + l (its
//              TMEM lane); per block it reads the row's record, waits O
//              done(j-1), rescales O in tensor memory by alpha (skipped
//              when no row of its warp raised its max) and arrives on O
//              corrected(j); after the walk it normalises O and stores it
//              (16-byte BF16 stores), the LSE and the temperature LSE
// Shared memory (byte offsets from the 1024-aligned base):
//   [q_off, +q_bytes)               Q tile (K-major, 128 rows x D)
//   [k_off + i kv_bytes, ...)       K ring slot i < stages (K-major, 128 keys x D)
//   [v_off + i kv_bytes, ...)       V ring slot i (MN-major operand of P V)
//   [rk_off, +raw_bytes), [rv_off, +raw_bytes)  raw K and V tiles (converted variants)
//   [bar_off, +8 num_bars)          mbarriers, then the TMEM address
// Mbarriers (index: arrival count): K full / V full of slot i (bar_k + i,
// bar_v + i: 1 + TMA bytes; converted: the 128 converter threads), K empty
// / V empty of slot i (bar_ke + i, bar_ve + i: 1, tcgen05.commit after the
// product that read it), Q ready (bar_q: 128 gathers, once per pass), S
// full of TMEM buffer b (bar_s + b: 1 commit), P ready of S buffer b
// (bar_p + b: 128 softmax threads, once per block of that buffer: S read,
// P and the row's record stored over it; waited by the issuer and the
// correction warpgroup), O done (bar_o: 1 commit, once per block);
// converted: raw K / raw V full (bar_rk, bar_rv: 1 + TMA bytes) and empty
// (bar_rke, bar_rve: 128 converter threads), once per block; O corrected
// (bar_c: 128 correction threads, once per block: O rescaled for the
// block, or at a pass's first block the previous pass's O read by its
// epilogue). Slots for three ring stages are reserved whatever `stages` is, so
// the indices (the timeout sites) do not depend on the variant. Every
// counter (ring use, S buffer use, block) runs over all passes of the
// tile: wait parity (use & 1).
// Tensor memory: S of buffer b (128 lanes x 128 FP32 columns) at column
// 128 b, O (128 x D) at column 256; 512 columns, one CTA per SM
// (kSoleCtaSmem). P_j overwrites the S_j it was computed from, from the
// buffer's first column: a lane's 128 keys in 64 columns of BF16 pairs or
// 32 of E4M3 quads (the A operand of O += P_j V_j); P has no shared memory.
// The softmax leaves its row's record (alpha of the block, and the running
// m, l and temperature l after it) in the buffer's last 4 columns
// (tmem_rec_col) for the correction warpgroup.
// Bytes of the query-major map with `st` ring stages (without the
// alignment slack) for variant v, head dim d.
MSA_HD constexpr int qfwd_map_end(int v, int d, int st) {
    return align_up(align_up(align_up(kTileM * d * q_mma_bytes(v), 1024) + 2 * st * kBlockKeys * d * kv_mma_bytes(v), 1024) +
                        (kv_converted(v) ? 2 * kBlockKeys * kv_row_bytes(v, d) : 0),
                    1024) +
           8 * 23 + 8;
}
MSA_HD constexpr bool qfwd_fits_at(int v, int d, int st) { return qfwd_map_end(v, d, st) + kAlignSlack <= kMaxDynSmem; }
// Whether variant v at head dim d has a query-major kernel (its smallest
// map fits).
MSA_HD constexpr bool qfwd_fits(int v, int d) { return qfwd_fits_at(v, d, 1); }
template <int V, int D>
struct QFwdLayout {
    static_assert(D == 64 || D == 128 || D == 256, "head dim");
    static_assert(qfwd_fits(V, D), "no query-major map fits this variant and head dim");
    static constexpr bool f8 = V == kFP8;
    static constexpr bool conv = kv_converted(V);
    static constexpr int es = kv_mma_bytes(V);         // MMA operand element size (Q, K, V, P)
    static constexpr int q_row_bytes = D * q_mma_bytes(V);
    static constexpr int kv_row = D * es;
    static constexpr int raw_row = kv_row_bytes(V, D);  // K/V row in global memory (the TMA source)
    static constexpr int p_row_bytes = kBlockKeys * p_mma_bytes(V);  // one P row as the MMA reads it
    static constexpr int q_bytes = kTileM * q_row_bytes;
    static constexpr int kv_bytes = kBlockKeys * kv_row;
    static constexpr int raw_bytes = conv ? kBlockKeys * raw_row : 0;
    static constexpr int bar_k = 0, bar_v = 3, bar_ke = 6, bar_ve = 9, bar_q = 12, bar_s = 13, bar_p = 15, bar_o = 17, bar_rk = 18, bar_rv = 19, bar_rke = 20, bar_rve = 21, bar_c = 22, num_bars = 23;
    static constexpr int max_stages = 3;
    MSA_HD static constexpr bool fits(int st) { return qfwd_fits_at(V, D, st); }
    // As many ring stages as fit, up to 3: they keep K/V loads ahead of the walk.
    static constexpr int stages = fits(3) ? 3 : fits(2) ? 2 : 1;
    static constexpr int q_off = 0;
    static constexpr int k_off = align_up(q_bytes, 1024);
    static constexpr int v_off = k_off + stages * kv_bytes;
    static constexpr int rk_off = align_up(v_off + stages * kv_bytes, 1024);
    static constexpr int rv_off = rk_off + raw_bytes;
    static constexpr int bar_off = align_up(rv_off + raw_bytes, 1024);
    static constexpr int tmem_slot_off = bar_off + 8 * num_bars;
    static constexpr int map_bytes = tmem_slot_off + 8 + kAlignSlack;
    static constexpr int smem_bytes = imax(map_bytes, kSoleCtaSmem);
    static constexpr int softmax_threads = kTileM;
    static constexpr int mma_warp = 4, load_warp = 5, conv_warp0 = 6;  // converter warpgroup: warps 6-9
    static constexpr int corr_warp0 = conv ? 10 : 6;                   // correction warpgroup: the last four warps
    static constexpr int threads = softmax_threads + 64 + (conv ? 128 : 0) + 128;
    static constexpr int tmem_cols = 512;
    MSA_HD static constexpr int tmem_s_col(int b) { return kBlockKeys * b; }
    MSA_HD static constexpr int tmem_p_col(int b) { return tmem_s_col(b); }  // P_j over S_j
    static constexpr int tmem_o_col = 2 * kBlockKeys;
    static constexpr int p_cols = p_row_bytes / 4;  // TMEM columns of one P row
    static constexpr int p_cols_per_pv_step = kKStepBytes / 4;
    static constexpr int tmem_rec_col = kBlockKeys - 4;  // the softmax's record: alpha, m, l, tl
    static constexpr uint32_t idesc_qk = umma_idesc(f8, kTileM, kBlockKeys, false, false);
    static constexpr uint32_t idesc_pv = umma_idesc(f8, kTileM, D, false, true);
    static constexpr int qk_steps = q_row_bytes / kKStepBytes;
    static constexpr int pv_steps = p_row_bytes / kKStepBytes;
    static constexpr int keys_per_pv_step = kKStepBytes / p_mma_bytes(V);
    static_assert(stages <= max_stages && qfwd_map_end(V, D, stages) == tmem_slot_off + 8, "ring slots and the map");
    static_assert(p_cols <= tmem_rec_col && pv_steps * p_cols_per_pv_step == p_cols, "P and the record inside their S buffer");
    static_assert(corr_warp0 * 32 + 128 == threads, "the correction warpgroup is the last four warps");
    static_assert(smem_bytes <= kMaxDynSmem, "dynamic shared memory");
    static_assert(tmem_o_col + D <= tmem_cols, "tensor memory columns");
    static_assert(resident_by_smem(smem_bytes) * tmem_cols <= kTmemColsPerSM, "co-resident CTAs' TMEM");
    static_assert(umma_shape_ok(kTileM, kBlockKeys) && umma_shape_ok(kTileM, D), "UMMA shape");
    static_assert(q_row_bytes == kv_row, "Q and K rows have one layout");
};

// ---- tensor-memory lane ownership ------------------------------------------------
// tcgen05.ld / tcgen05.st of a warp reach only the lane quarter of its warp
// rank modulo 4: warp w accesses lanes 32 (w % 4) .. 32 (w % 4) + 31, and a
// thread reads the lane of its own lane id in that quarter. The lane field
// of a TMEM address is bits [16, 32).
MSA_HD constexpr uint32_t tmem_lane_base(int warp) { return (uint32_t)((warp & 3) * 32) << 16; }
// Decode: lane t of S^T is key t; lane t of O^T block j is element 128 j + t
// of D. For D = 64 the one O^T product is M = 128 with lanes 64..127
// phantom (their A atoms read the P^T region): warps 2 and 3 hold no
// element of D there, and neither rescale nor store those lanes.
MSA_HD constexpr uint32_t dec_lane_base(int warp) { return tmem_lane_base(warp); }
MSA_HD constexpr bool dec_lane_holds_d(int d, int j, int warp) { return 128 * j + 32 * (warp & 3) < d; }
// Prefill: softmax warpgroup s's warp 4 s + q reads lanes 32 q .. +31: row
// 32 q + lane of the slot's row tile.
MSA_HD constexpr uint32_t fwd_lane_base(int warp) { return tmem_lane_base(warp); }

// ---- TMA boxes of one K/V block and the transaction ledger ----------------------
// Dense K/V: one box column per span, `kBlockKeys` rows starting at the
// block's first key (rows past the tensor are zero-filled by the hardware).
// Paged K/V: rows = min(128, page_size) per box; the block's keys are covered
// by segments of `rows` keys, each inside one page; only segments that start
// before the block's last valid key are issued (the page table has no entry
// beyond the sequence). Requires page_size a power of 2 >= 8 and block starts
// that are multiples of min(128, page_size) (the launcher's precondition).
MSA_HD constexpr int paged_rows(int page_size) { return imin(kBlockKeys, page_size); }
// The launcher's precondition for paged K/V (else it runs the portable
// kernel): page_size a power of 2, every box landing 1024-byte aligned in
// shared memory (rows * span a multiple of 1024: the swizzle atom), and
// K/V blocks starting on box boundaries (blk_kv a multiple of the box rows).
MSA_HD constexpr bool paged_ok(int page_size, int blk_kv, int box_span) {
    return page_size >= 1 && (page_size & (page_size - 1)) == 0 && paged_rows(page_size) * box_span % 1024 == 0 &&
           blk_kv % paged_rows(page_size) == 0;
}
MSA_HD constexpr int segments_issued(int nkeys, int rows) { return (nkeys + rows - 1) / rows; }
// Bytes the K (or V) barrier expects: every issued box counts in full,
// out-of-bounds fill included.
MSA_HD constexpr uint32_t kv_tx_bytes(int nkeys, int paged, int page_size, int raw_row) {
    return paged ? (uint32_t)(segments_issued(nkeys, paged_rows(page_size)) * paged_rows(page_size) * raw_row)
                 : (uint32_t)(kBlockKeys * raw_row);
}
// Each mbarrier completes one phase per use. K and V barriers: one phase per
// K/V tile loaded (prefill: once per item; decode: once per block visited), so
// the wait parity of tile n is n & 1. Decode's MMA barrier completes twice per
// (row tile, block): after S (parity of commit 2n) and after O (2n + 1).
// Prefill's per-slot barriers complete once per row tile of the slot.
MSA_HD constexpr uint32_t kv_parity(int tile) { return (uint32_t)(tile & 1); }
MSA_HD constexpr uint32_t mma_parity(int commit) { return (uint32_t)(commit & 1); }
MSA_HD constexpr uint32_t slot_parity(int use) { return (uint32_t)(use & 1); }

}  // namespace sm100
}  // namespace msa

// Pinned values, checked by the compiler here and by cuda/emu_sm100_test.go
// (which parses these lines): MSA_SM100_PIN(layout, variant, D, field, value).
#define MSA_SM100_PIN(L, V, D, F, X) static_assert(msa::sm100::L<msa::sm100::V, D>::F == (X), #L " " #V " " #D " " #F)
MSA_SM100_PIN(FwdLayout, kBF16, 64, smem_bytes, 117760);
MSA_SM100_PIN(FwdLayout, kBF16, 128, smem_bytes, 133120);
MSA_SM100_PIN(FwdLayout, kBF16, 256, smem_bytes, 197720);
MSA_SM100_PIN(FwdLayout, kFP8, 64, smem_bytes, 117760);
MSA_SM100_PIN(FwdLayout, kFP8, 128, smem_bytes, 117760);
MSA_SM100_PIN(FwdLayout, kFP8, 256, smem_bytes, 117760);
MSA_SM100_PIN(FwdLayout, kBF16FP8, 64, smem_bytes, 117760);
MSA_SM100_PIN(FwdLayout, kBF16FP8, 128, smem_bytes, 149504);
MSA_SM100_PIN(FwdLayout, kBF16FP8, 256, smem_bytes, 230488);
MSA_SM100_PIN(FwdLayout, kNVFP4, 64, smem_bytes, 117760);
MSA_SM100_PIN(FwdLayout, kNVFP4, 128, smem_bytes, 141312);
MSA_SM100_PIN(FwdLayout, kNVFP4, 256, smem_bytes, 214104);
MSA_SM100_PIN(FwdLayout, kBF16, 64, tmem_cols, 512);
MSA_SM100_PIN(FwdLayout, kFP8, 64, map_bytes, 51200);
MSA_SM100_PIN(FwdLayout, kBF16, 128, map_bytes, 133120);
MSA_SM100_PIN(FwdLayout, kBF16, 128, slots, 2);
MSA_SM100_PIN(FwdLayout, kBF16, 128, num_bars, 10);
MSA_SM100_PIN(FwdLayout, kFP8, 256, slots, 1);
MSA_SM100_PIN(FwdLayout, kBF16, 128, threads, 288);
MSA_SM100_PIN(FwdLayout, kNVFP4, 256, threads, 160);
MSA_SM100_PIN(FwdLayout, kBF16, 256, slots, 1);
MSA_SM100_PIN(FwdLayout, kBF16, 128, tmem_cols, 512);
MSA_SM100_PIN(FwdLayout, kBF16, 256, tmem_cols, 512);
MSA_SM100_PIN(FwdLayout, kBF16, 128, idesc_qk, 0x08200490u);
MSA_SM100_PIN(FwdLayout, kBF16, 128, idesc_pv, 0x08210490u);
MSA_SM100_PIN(FwdLayout, kFP8, 128, idesc_qk, 0x08200010u);
MSA_SM100_PIN(FwdLayout, kFP8, 64, idesc_pv, 0x08110010u);

MSA_SM100_PIN(DecLayout, kBF16, 64, smem_bytes, 111888);
MSA_SM100_PIN(DecLayout, kBF16, 128, smem_bytes, 169232);
MSA_SM100_PIN(DecLayout, kBF16, 256, smem_bytes, 184880);
MSA_SM100_PIN(DecLayout, kFP8, 64, smem_bytes, 58640);
MSA_SM100_PIN(DecLayout, kFP8, 128, smem_bytes, 87312);
MSA_SM100_PIN(DecLayout, kFP8, 256, smem_bytes, 161040);
MSA_SM100_PIN(DecLayout, kBF16, 128, tmem_cols, 128);
MSA_SM100_PIN(DecLayout, kBF16, 256, tmem_cols, 256);
MSA_SM100_PIN(DecLayout, kBF16, 128, idesc_qk, 0x08100490u);
MSA_SM100_PIN(DecLayout, kBF16, 128, idesc_pv, 0x08118490u);
MSA_SM100_PIN(DecLayout, kFP8, 128, idesc_pv, 0x08118010u);
MSA_SM100_PIN(DecLayout, kBF16FP8, 64, smem_bytes, 95504);
MSA_SM100_PIN(DecLayout, kBF16FP8, 128, smem_bytes, 169232);
MSA_SM100_PIN(DecLayout, kBF16FP8, 256, smem_bytes, 217648);
MSA_SM100_PIN(DecLayout, kBF16FP8, 128, idesc_pv, 0x08118490u);
MSA_SM100_PIN(DecLayout, kNVFP4, 64, smem_bytes, 79120);
MSA_SM100_PIN(DecLayout, kNVFP4, 128, smem_bytes, 136464);
MSA_SM100_PIN(DecLayout, kNVFP4, 256, smem_bytes, 201264);
MSA_SM100_PIN(DecLayout, kNVFP4, 128, idesc_pv, 0x08118490u);
MSA_SM100_PIN(DecLayout, kBF16, 128, stages, 2);
MSA_SM100_PIN(DecLayout, kBF16, 256, stages, 1);
MSA_SM100_PIN(DecLayout, kFP8, 256, stages, 2);
MSA_SM100_PIN(DecLayout, kBF16FP8, 128, stages, 2);
MSA_SM100_PIN(DecLayout, kNVFP4, 256, stages, 1);

MSA_SM100_PIN(QFwdLayout, kBF16, 64, stages, 3);
MSA_SM100_PIN(QFwdLayout, kBF16, 128, stages, 3);
MSA_SM100_PIN(QFwdLayout, kBF16, 256, stages, 1);
MSA_SM100_PIN(QFwdLayout, kFP8, 128, stages, 3);
MSA_SM100_PIN(QFwdLayout, kFP8, 256, stages, 3);
MSA_SM100_PIN(QFwdLayout, kBF16, 128, threads, 320);
MSA_SM100_PIN(QFwdLayout, kBF16, 64, map_bytes, 115904);
MSA_SM100_PIN(QFwdLayout, kBF16, 128, smem_bytes, 230592);
MSA_SM100_PIN(QFwdLayout, kBF16, 256, smem_bytes, 197824);
MSA_SM100_PIN(QFwdLayout, kFP8, 64, smem_bytes, 117760);
MSA_SM100_PIN(QFwdLayout, kFP8, 128, smem_bytes, 117760);
MSA_SM100_PIN(QFwdLayout, kFP8, 256, smem_bytes, 230592);
MSA_SM100_PIN(QFwdLayout, kFP8, 128, idesc_pv, 0x08210010u);
MSA_SM100_PIN(QFwdLayout, kBF16, 128, p_cols, 64);
MSA_SM100_PIN(QFwdLayout, kFP8, 128, p_cols, 32);
MSA_SM100_PIN(QFwdLayout, kBF16FP8, 64, stages, 3);
MSA_SM100_PIN(QFwdLayout, kBF16FP8, 128, stages, 2);
MSA_SM100_PIN(QFwdLayout, kNVFP4, 256, stages, 1);
MSA_SM100_PIN(QFwdLayout, kBF16FP8, 128, threads, 448);
MSA_SM100_PIN(QFwdLayout, kBF16FP8, 64, smem_bytes, 132288);
MSA_SM100_PIN(QFwdLayout, kBF16FP8, 128, smem_bytes, 197824);
MSA_SM100_PIN(QFwdLayout, kNVFP4, 64, smem_bytes, 124096);
MSA_SM100_PIN(QFwdLayout, kNVFP4, 128, smem_bytes, 181440);
MSA_SM100_PIN(QFwdLayout, kNVFP4, 256, smem_bytes, 230592);
MSA_SM100_PIN(QFwdLayout, kNVFP4, 128, idesc_pv, 0x08210490u);

#endif  // SM100_LAYOUT_CUH

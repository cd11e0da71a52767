// sm90_gmma_layout_check.cu - host check (no GPU) that the shared-memory
// operand layouts and GMMA descriptors of sm90_common.cuh are CuTe's
// canonical ones: the swizzled byte offset of every element of the Q / K
// (K-major, 128B and 64B swizzle) and V (MN-major, 128B swizzle, 64-column
// panels holding all 128 keys) tiles equals the address CuTe's GMMA layout
// atoms give, and the descriptor fields (layout type, LBO, SBO) equal
// make_gmma_desc's. The start-address field is not compared: on the host
// CuTe cannot convert a shared-memory pointer (it prints "cast_smem_ptr_to_uint
// not supported" and uses 0). Not part of the fatbin (build.sh compiles only the
// .cu files of the family folders). Run with the pinned toolkit:
//   CUDA_HOME=$(bash kernels/cuda/build.sh --toolkit); CUTE=$(bash kernels/cuda/build.sh --cutlass)
//   $CUDA_HOME/bin/nvcc -std=c++17 -arch=sm_90a -I $CUTE -L $CUDA_HOME/lib \
//       -o /tmp/gmma kernels/cuda/hosttest/sm90_gmma_layout_check.cu && /tmp/gmma
// The mirror of gdesc() below must stay in step with sm90_common.cuh.
// It also checks the register fragments the consumers index (tc_frag.cuh,
// sm90_qfwd.cu; emulated by cuda/qprefill_sm90_emu_test.go's accRC / aRC):
// register r of warpgroup thread t (warp w, lane l) of the m64nN f32
// accumulator holds row 16w + l/4 + 8((r/2)%2), column 8(r/4) + 2(l%4) + r%2
// (CuTe's CLayout_64xN), and half h of register q of the register A
// operand of m64nNk16 holds row 16w + l/4 + 8(q%2), k 8(q/2) + 2(l%4) + h
// (ALayout_64x16).
// For the fp8pv kernels (sm90_fp8_vt.cuh) it checks the transposed V
// (D rows x 128 e4m3 key columns, K-major, 128-byte swizzle) and its
// descriptors against CuTe's Layout_K_SW128_Atom<float_e4m3_t>, the
// producer's transposition (vt_transpose, mirrored below byte for byte:
// every operand byte holds V[vt_key(k)][n], keys >= nkeys zero, every byte
// written once), and the P packing (pack_p_e4m3): byte b of register q of
// thread t, placed by CuTe's ALayout_64x32 at (row m, k), must be the
// score register that CLayout_64x128 places at (m, vt_key(k)).
#include <cstdio>
#include <vector>
#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
using namespace cute;
// gdesc() of sm90_common.cuh
template <int SPAN> uint64_t gdesc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    constexpr uint64_t layout = SPAN == 128 ? 1 : SPAN == 64 ? 2 : 3;
    return (uint64_t)((addr >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (layout << 62);
}
template <class T, class Atom, int R, int COLS, int KSTEP>
int check_k(const char* name, int span) {
    // K-major operand R rows x COLS elements, panels of span bytes (tile_to_shape: rows first)
    auto layout = tile_to_shape(Atom{}, make_shape(Int<R>{}, Int<COLS>{}));
    int bad = 0;
    const uint32_t base = 0x4000;
    {
        auto tk = make_tensor(make_smem_ptr(reinterpret_cast<T*>(0x10000)), layout);
        for (int r = 0; r < R; ++r) for (int c = 0; c < COLS; ++c) {
            int off = (int)(reinterpret_cast<uintptr_t>(raw_pointer_cast(&tk(r, c))) - 0x10000);
            int b = c * (int)sizeof(T), panel = b / span, cc = b % span;
            int sw = span == 128 ? (r & 7) : ((r >> 1) & 3);
            int mine = panel * R * span + r * span + ((((cc >> 4) ^ sw) << 4) | (cc & 15));
            if (off != mine) { if (bad < 5) printf("%s phys (r %d c %d) cute %d mine %d\n", name, r, c, off, mine); ++bad; }
        }
    }
    for (int k = 0; k < COLS / KSTEP; ++k) {
        auto t = make_tensor(make_smem_ptr(reinterpret_cast<T*>(base)), layout);
        auto sub = local_tile(t, make_shape(Int<R>{}, Int<KSTEP>{}), make_coord(0, k));
        uint64_t ref = GMMA::make_gmma_desc<GMMA::Major::K>(sub);
        const int bytes = k * 32, pn = bytes / span, in = bytes % span;
        uint64_t mine = span == 128 ? gdesc<128>(base + pn * R * span + in, 16, 8 * span)
                                    : gdesc<64>(base + pn * R * span + in, 16, 8 * span);
        // LBO is ignored by the hardware for swizzled K-major layouts: compare without it
        uint64_t mask = ~(uint64_t(0x3FFF) << 16) & ~uint64_t(0x3FFF);  // no LBO (ignored), no start address (host: 0)
        if ((ref & mask) != (mine & mask)) { printf("%s k=%d ref %016llx mine %016llx\n", name, k, (unsigned long long)ref, (unsigned long long)mine); ++bad; }
    }
    printf("%s: %d mismatches\n", name, bad);
    return bad;
}
template <int D>
int check_v() {
    // V: 128 keys x D bf16, MN-major B operand (N = D contiguous); my layout: panel of 64 columns holds all keys
    auto layout = tile_to_shape(GMMA::Layout_MN_SW128_Atom<bfloat16_t>{}, make_shape(Int<D>{}, Int<128>{}), Step<_2, _1>{});
    int bad = 0;
    const uint32_t base = 0x8000;
    // physical check: element (n, key) offset vs my swz<128, 128>(key, 2n)
    auto tv = make_tensor(make_smem_ptr(reinterpret_cast<bfloat16_t*>(0x10000)), layout);
    for (int n = 0; n < D; ++n) for (int key = 0; key < 128; ++key) {
        int off = (int)(reinterpret_cast<uintptr_t>(raw_pointer_cast(&tv(n, key))) - 0x10000);
        int panel = (2 * n) / 128, cc = (2 * n) % 128;
        int mine = panel * 128 * 128 + key * 128 + ((((cc >> 4) ^ (key & 7)) << 4) | (cc & 15));
        if (off != mine) { if (bad < 5) printf("V d%d (n %d key %d) cute %d mine %d\n", D, n, key, off, mine); ++bad; }
    }
    for (int kk = 0; kk < 8; ++kk) {
        auto t = make_tensor(make_smem_ptr(reinterpret_cast<bfloat16_t*>(base)), layout);
        auto sub = local_tile(t, make_shape(Int<D>{}, Int<16>{}), make_coord(0, kk));
        uint64_t ref = GMMA::make_gmma_desc<GMMA::Major::MN>(sub);
        uint64_t mine = gdesc<128>(base + kk * 16 * 128, 128 * 128, 8 * 128);
        { uint64_t mask = ~uint64_t(0x3FFF); if (D == 64) mask &= ~(uint64_t(0x3FFF) << 16); ref &= mask; mine &= mask; }
        if (ref != mine) { printf("Vdesc d%d kk=%d ref %016llx mine %016llx\n", D, kk, (unsigned long long)ref, (unsigned long long)mine); ++bad; }
    }
    printf("V d%d: %d mismatches\n", D, bad);
    return bad;
}
template <int N>
int check_acc() {
    int bad = 0;
    auto c = GMMA::CLayout_64xN<N>{};  // (thread, value) -> m + 64 n
    for (int t = 0; t < 128; ++t) for (int r = 0; r < N / 2; ++r) {
        const int idx = c(t, r), w = t / 32, l = t % 32;
        const int row = 16 * w + l / 4 + 8 * ((r / 2) % 2), col = 8 * (r / 4) + 2 * (l % 4) + r % 2;
        if (idx % 64 != row || idx / 64 != col) { if (bad < 5) printf("acc N %d t %d r %d: cute (%d, %d) mine (%d, %d)\n", N, t, r, idx % 64, idx / 64, row, col); ++bad; }
    }
    printf("accumulator 64x%d: %d mismatches\n", N, bad);
    return bad;
}
int check_a_regs() {
    int bad = 0;
    auto a = GMMA::ALayout_64x16{};  // (thread, value) -> m + 64 k; value 2q + h
    for (int t = 0; t < 128; ++t) for (int q = 0; q < 4; ++q) for (int h = 0; h < 2; ++h) {
        const int idx = a(t, 2 * q + h), w = t / 32, l = t % 32;
        const int row = 16 * w + l / 4 + 8 * (q % 2), k = 8 * (q / 2) + 2 * (l % 4) + h;
        if (idx % 64 != row || idx / 64 != k) { if (bad < 5) printf("A t %d q %d h %d: cute (%d, %d) mine (%d, %d)\n", t, q, h, idx % 64, idx / 64, row, k); ++bad; }
    }
    printf("register A 64x16: %d mismatches\n", bad);
    return bad;
}
// vt_key and the byte selection of sm90_fp8_vt.cuh.
int vt_key(int k) { return 32 * (k >> 5) + 8 * (2 * ((k >> 4) & 1) + ((k >> 1) & 1)) + 2 * ((k >> 2) & 3) + (k & 1); }
// __byte_perm on words held as byte codes (int: any value, -1 = zero byte)
struct W4 { int b[4]; };
W4 byte_perm(const W4& x, const W4& y, unsigned sel) {
    W4 r;
    for (int i = 0; i < 4; ++i) { const int n = (sel >> (4 * i)) & 7; r.b[i] = n < 4 ? x.b[n] : y.b[n - 4]; }
    return r;
}
// swz of sm90_common.cuh
int swz(int span, int R, int row, int c) {
    const int panel = c / span, cc = c % span;
    const int sw = span == 128 ? (row & 7) : span == 64 ? ((row >> 1) & 3) : ((row >> 2) & 1);
    return panel * R * span + row * span + ((((cc >> 4) ^ sw) << 4) | (cc & 15));
}
// vt_transpose<D, KEYS, THREADS> with byte codes: land holds code key * D
// + n at the landing layout of KEYS keys (CuTe's K-major e4m3 atom of span
// min(128, D)); returns the number of wrong, missing or twice-written
// operand bytes among the first KEYS key columns, and of bytes written
// beyond them (the 64-key spans of sm90_decode_pipe.cu's fp8pv kernels use
// the first 64 columns of the 128-byte rows, THREADS = 128).
template <int D, int KEYS = 128, int THREADS = 32>
int check_vt_transpose(int nkeys) {
    using LandAtom = typename std::conditional<D == 64, GMMA::Layout_K_SW64_Atom<float_e4m3_t>, GMMA::Layout_K_SW128_Atom<float_e4m3_t>>::type;
    auto land_l = tile_to_shape(LandAtom{}, make_shape(Int<KEYS>{}, Int<D>{}));
    auto vt_l = tile_to_shape(GMMA::Layout_K_SW128_Atom<float_e4m3_t>{}, make_shape(Int<D>{}, Int<128>{}));
    std::vector<int> land(KEYS * D, -2), vt(128 * D, -3), writes(128 * D, 0);
    for (int key = 0; key < KEYS; ++key) for (int n = 0; n < D; ++n) land[land_l(key, n)] = key * D + n;
    constexpr int span = D < 128 ? D : 128, cg = D / 4, tasks = KEYS / 16 * cg, iters = (tasks + THREADS - 1) / THREADS;
    for (int tid = 0; tid < THREADS; ++tid) for (int it = 0; it < iters; ++it) {
        const int task = THREADS * it + tid, c = task % cg, G = task / cg;
        if (tasks % THREADS != 0 && task >= tasks) break;
        W4 in[16];
        for (int j = 0; j < 16; ++j) for (int e = 0; e < 4; ++e)
            in[j].b[e] = 16 * G + j < nkeys ? land[swz(span, KEYS, 16 * G + j, 4 * c) + e] : -1;
        const int rot = (c >> 1) & 3;
        for (int q = 0; q < 4; ++q) {
            const int col = (q + rot) & 3;
            const unsigned sel = (unsigned)col | (unsigned)(col + 4) << 4;
            for (int x = 0; x < 4; ++x) {
                W4 w = byte_perm(byte_perm(in[2 * x], in[2 * x + 1], sel), byte_perm(in[2 * x + 8], in[2 * x + 9], sel), 0x5410);
                for (int e = 0; e < 4; ++e) { const int o = swz(128, D, 4 * c + col, 16 * G + 4 * x + e); vt[o] = w.b[e]; ++writes[o]; }
            }
        }
    }
    int bad = 0;
    for (int n = 0; n < D; ++n) for (int k = 0; k < 128; ++k) {
        const int o = vt_l(n, k), key = vt_key(k), want = key < nkeys ? key * D + n : -1;
        const bool ok = k < KEYS ? vt[o] == want && writes[o] == 1 : writes[o] == 0;
        if (!ok) { if (bad < 5) printf("vt d%d keys %d nkeys %d (n %d k %d): holds %d (%d writes), want %d\n", D, KEYS, nkeys, n, k, vt[o], writes[o], want); ++bad; }
    }
    return bad;
}
template <int D>
int check_vt() {
    int bad = check_k<float_e4m3_t, GMMA::Layout_K_SW128_Atom<float_e4m3_t>, D, 128, 32>(D == 64 ? "Vt e4m3 d64" : D == 128 ? "Vt e4m3 d128" : "Vt e4m3 d256", 128);
    int t = 0;
    for (int nkeys : {128, 77, 1}) t += check_vt_transpose<D>(nkeys);
    printf("vt_transpose d%d: %d mismatches\n", D, t);
    if (D <= 128) {  // the decode pipe's fp8pv spans: 64 keys, the whole warpgroup
        int u = 0;
        for (int nkeys : {64, 37, 1}) u += check_vt_transpose<D, 64, 128>(nkeys);
        printf("vt_transpose d%d, 64-key spans, 128 threads: %d mismatches\n", D, u);
        t += u;
    }
    return bad + t;
}
// pack_p_e4m3: register 4kc + q, byte b <- score register 16kc + 8(q/2) + 4(b/2) + 2(q%2) + b%2,
// for the score accumulators of a 128-key block and of a 64-key span.
template <int KEYS>
int check_p_e4m3_keys() {
    int bad = 0;
    auto a = GMMA::ALayout_64x32{};       // (thread, value) -> m + 64 k; value b + 4q
    auto c = GMMA::CLayout_64xN<KEYS>{};  // the score accumulator of KEYS keys
    for (int kc = 0; kc < KEYS / 32; ++kc) for (int t = 0; t < 128; ++t) for (int q = 0; q < 4; ++q) for (int b = 0; b < 4; ++b) {
        const int ia = a(t, b + 4 * q), m = ia % 64, k = 32 * kc + ia / 64;
        const int r = 16 * kc + 8 * (q >> 1) + 4 * (b >> 1) + 2 * (q & 1) + (b & 1);
        const int ic = c(t, r);
        if (ic % 64 != m || ic / 64 != vt_key(k)) { if (bad < 5) printf("P e4m3 keys %d kc %d t %d q %d b %d: A wants (%d, key %d), register %d holds (%d, %d)\n", KEYS, kc, t, q, b, m, vt_key(k), r, ic % 64, ic / 64); ++bad; }
    }
    return bad;
}
int check_p_e4m3() {
    int bad = check_p_e4m3_keys<128>() + check_p_e4m3_keys<64>();
    // vt_key is a permutation of each 32-key group
    std::vector<int> hit(128, 0);
    for (int k = 0; k < 128; ++k) if (vt_key(k) / 32 == k / 32) ++hit[vt_key(k)];
    for (int k = 0; k < 128; ++k) if (hit[k] != 1) { if (bad < 5) printf("vt_key: key %d taken %d times\n", k, hit[k]); ++bad; }
    printf("register A e4m3 64x32 (P pack): %d mismatches\n", bad);
    return bad;
}
int main() {
    int bad = 0;
    bad += check_p_e4m3(); bad += check_vt<64>(); bad += check_vt<128>(); bad += check_vt<256>();
    bad += check_acc<64>(); bad += check_acc<128>(); bad += check_acc<256>(); bad += check_a_regs();
    bad += check_k<bfloat16_t, GMMA::Layout_K_SW128_Atom<bfloat16_t>, 64, 64, 16>("Q bf16 d64", 128);
    bad += check_k<bfloat16_t, GMMA::Layout_K_SW128_Atom<bfloat16_t>, 64, 256, 16>("Q bf16 d256", 128);
    bad += check_k<bfloat16_t, GMMA::Layout_K_SW128_Atom<bfloat16_t>, 128, 128, 16>("K bf16 d128", 128);
    bad += check_k<float_e4m3_t, GMMA::Layout_K_SW64_Atom<float_e4m3_t>, 128, 64, 32>("K e4m3 d64", 64);
    bad += check_k<float_e4m3_t, GMMA::Layout_K_SW128_Atom<float_e4m3_t>, 64, 256, 32>("Q e4m3 d256", 128);
    bad += check_v<64>(); bad += check_v<128>(); bad += check_v<256>();
    return bad != 0;
}

// sm100_ptx.cuh - the Blackwell (SM100 family) building blocks of the
// tensor-core kernels, as inline PTX: mbarriers, TMA tensor loads,
// cp.async gathers, tensor-memory allocation, tcgen05.mma / commit / ld, and
// the UMMA shared-memory and instruction descriptors.
//
// Everything here is only compiled for the SM100 family images
// (MSA_SM100_ENABLED); the other images of the translation unit see the
// declarations of the kernels only, whose bodies trap there.
#ifndef SM100_PTX_CUH
#define SM100_PTX_CUH

#include <stdint.h>
#include "sm100/sm100_layout.cuh"

#if defined(__CUDA_ARCH__) && (defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) || \
                               (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ == 1000))
#define MSA_SM100_ENABLED 1
#endif

// The body of every SM100-family kernel: the call in the sm_100f image,
// a trap in the others (an SM100-family kernel launched on another
// architecture), where the tcgen05 bodies are not compiled.
#if defined(MSA_SM100_ENABLED)
#define MSA_SM100_BODY(...) __VA_ARGS__
#else
#define MSA_SM100_BODY(...) asm volatile("trap;")
#endif

namespace msa {
namespace sm100 {

#if defined(MSA_SM100_ENABLED)

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier ----------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival of the issuing thread plus `bytes` of expected transactions.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
// One plain arrival of the issuing thread (releases its earlier writes).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Whether the phase of the given parity has completed. mbar_try may
// suspend the thread for a bounded, system-dependent time while the phase
// is incomplete (the wait loop); mbar_test returns at once (the MMA
// issuer's poll of two barriers, where a suspension on one would delay the
// other).
__device__ __forceinline__ bool mbar_try(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%1], %2;\n"
        "selp.u32 %0, 1, 0, done;\n"
        "}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    return ok != 0;
}
__device__ __forceinline__ bool mbar_test(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "mbarrier.test_wait.parity.acquire.cta.shared::cta.b64 done, [%1], %2;\n"
        "selp.u32 %0, 1, 0, done;\n"
        "}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    return ok != 0;
}

// ---- bounded waits ----------------------------------------------------------------
// Every mbarrier wait of the SM100 kernels is bounded: a phase protocol
// that is wrong on real hardware must fail the launch, not hang the GPU.
// A wait that has not seen its phase after kWaitTimeoutNs of the global
// timer stores its site code (kernel family << 16 | site << 8 | parity) in
// msa_sm100_wait_timeout (readable with a debugger or a core dump) and,
// when the host has set msa_sm100_wait_word, in that host-mapped word, and
// executes trap, so the launch (and every later call on the context)
// returns an error to the host instead of never returning. After the trap
// the context is dead and no device global can be read; the host-mapped
// word is ordinary pinned host memory the launch layer reads to name the
// site (cuda/sm100_wait.go decodes it). Ten seconds is
// far above any legitimate wait inside one CTA (each wait covers one TMA
// tile, one product or one row tile's softmax / epilogue of a neighbour
// warpgroup: microseconds), and above the compute-preemption time slices a
// waiting CTA may sit out. The
// timer is read once every 1024 failed probes, so a wait that succeeds on
// its first probe costs nothing extra. Tensor memory held by the trapping
// CTA is not deallocated: the trap makes the context unusable, and the
// driver reclaims the hardware state when the context is destroyed.
// Hardware barriers (__syncthreads, bar.sync) cannot be bounded this way;
// every one of them is reached by all its threads unconditionally.
constexpr uint64_t kWaitTimeoutNs = 10000000000ull;
enum WaitKernel : uint32_t { kWaitFwd = 1, kWaitDecode = 2, kWaitQFwd = 3 };

__device__ unsigned int msa_sm100_wait_timeout;
// Device address of a host-mapped word (cuMemHostAlloc DEVICEMAP) the host
// stores once per module through cuModuleGetGlobal; null: none.
__device__ unsigned int* msa_sm100_wait_word;

__device__ __forceinline__ uint64_t global_timer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Deadline of a wait that has missed its first probes.
struct WaitClock {
    uint64_t start = 0;
    uint32_t probes = 0;
    // Count one failed probe; on the timeout, record `code` and trap.
    __device__ __forceinline__ void tick(uint32_t code) {
        if ((++probes & 1023u) != 0) return;
        const uint64_t now = global_timer_ns();
        if (start == 0) {
            start = now;
        } else if (now - start > kWaitTimeoutNs) {
            atomicExch(&msa_sm100_wait_timeout, code);
            // A plain store: system-scope atomics on host memory need
            // hostNativeAtomicSupported, and one code (any) is enough.
            if (unsigned int* w = msa_sm100_wait_word) *reinterpret_cast<volatile unsigned int*>(w) = code;
            __threadfence_system();
            asm volatile("trap;");
        }
    }
};

__device__ __forceinline__ uint32_t wait_code(WaitKernel k, uint32_t site, uint32_t parity) {
    return ((uint32_t)k << 16) | (site << 8) | parity;
}

// Block until the phase of the given parity has completed; trap after
// kWaitTimeoutNs (see above). `site` names the barrier in the timeout code.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, WaitKernel k, uint32_t site) {
    if (mbar_try(bar, parity)) return;
    WaitClock clock;
    while (!mbar_try(bar, parity)) clock.tick(wait_code(k, site, parity));
}

// Named barrier `id` (1..15) over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- TMA (cp.async.bulk.tensor), completion on an mbarrier ---------------------
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// ---- cp.async 16-byte gather (zero-filled when src_bytes == 0) -----------------
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Generic-proxy shared-memory writes -> visible to the async proxy (tcgen05.mma operands).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---- tensor memory -------------------------------------------------------------
// Whole warp: allocate `cols` columns, write the TMEM address to shared memory.
template <int kCols>
__device__ __forceinline__ void tmem_alloc(uint32_t dst_smem) {
    static_assert(kCols >= 32 && kCols <= 512 && (kCols & (kCols - 1)) == 0, "TMEM allocation: power of 2 in [32, 512]");
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(dst_smem), "n"(kCols)
                 : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
template <int kCols>
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(taddr), "n"(kCols) : "memory");
}
__device__ __forceinline__ void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void tc_fence_after() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

// One tcgen05.mma, cta_group::1, D[d_tmem] (+)= A * B[bdesc]^T (accumulate
// != 0 adds): KIND is f16 or f8f6f4; A_OP is the A operand's PTX form,
// "%1" for a shared-memory descriptor or "[%1]" for a tensor-memory
// address, A_CON its constraint ("l" / "r") and A its value.
#define MSA_UMMA_ASM(KIND, A_OP, A_CON, A)                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"                                             \
                 "tcgen05.mma.cta_group::1.kind::" KIND " [%0], " A_OP ", %2, %3, p;\n}\n" ::"r"(d_tmem), \
                 A_CON(A), "l"(bdesc), "r"(idesc), "r"(accumulate)                                        \
                 : "memory")

// D[tmem] (+)= A[smem] * B[smem]^T, one instruction, cta_group::1.
template <bool kF8>
__device__ __forceinline__ void umma(uint32_t d_tmem, uint64_t adesc, uint64_t bdesc, uint32_t idesc, uint32_t accumulate) {
    if constexpr (kF8)
        MSA_UMMA_ASM("f8f6f4", "%1", "l", adesc);
    else
        MSA_UMMA_ASM("f16", "%1", "l", adesc);
}
// D[tmem] (+)= A[tmem] * B[smem]^T, one instruction, cta_group::1: A is M
// lanes (lane = row) by K elements packed into 32-bit columns from column
// a_tmem (two bf16 or four e4m3 per column, the lowest K in the lowest
// bits). A tensor-memory A has no major-ness: idesc's A-transpose bit is 0.
template <bool kF8>
__device__ __forceinline__ void umma_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t bdesc, uint32_t idesc, uint32_t accumulate) {
    if constexpr (kF8)
        MSA_UMMA_ASM("f8f6f4", "[%1]", "r", a_tmem);
    else
        MSA_UMMA_ASM("f16", "[%1]", "r", a_tmem);
}
#undef MSA_UMMA_ASM
// Arrive once on `bar` when every tcgen05.mma issued so far by this thread has completed.
__device__ __forceinline__ void umma_commit(uint32_t bar) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(bar) : "memory");
}

// 32 consecutive columns of this thread's TMEM lane (warp w reads lanes 32*(w%4)..+31).
__device__ __forceinline__ void tmem_ld32(uint32_t taddr, float (&v)[32]) {
    uint32_t r[32];
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x32.b32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
          "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15]),
          "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]),
          "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
        : "r"(taddr));
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = __uint_as_float(r[i]);
}

// 32 consecutive columns of this thread's TMEM lane <- v (then wait for the stores).
__device__ __forceinline__ void tmem_st32(uint32_t taddr, const float (&v)[32]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], "
        "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
        "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};" ::"r"(taddr),
        "r"(__float_as_uint(v[0])), "r"(__float_as_uint(v[1])), "r"(__float_as_uint(v[2])), "r"(__float_as_uint(v[3])),
        "r"(__float_as_uint(v[4])), "r"(__float_as_uint(v[5])), "r"(__float_as_uint(v[6])), "r"(__float_as_uint(v[7])),
        "r"(__float_as_uint(v[8])), "r"(__float_as_uint(v[9])), "r"(__float_as_uint(v[10])), "r"(__float_as_uint(v[11])),
        "r"(__float_as_uint(v[12])), "r"(__float_as_uint(v[13])), "r"(__float_as_uint(v[14])), "r"(__float_as_uint(v[15])),
        "r"(__float_as_uint(v[16])), "r"(__float_as_uint(v[17])), "r"(__float_as_uint(v[18])), "r"(__float_as_uint(v[19])),
        "r"(__float_as_uint(v[20])), "r"(__float_as_uint(v[21])), "r"(__float_as_uint(v[22])), "r"(__float_as_uint(v[23])),
        "r"(__float_as_uint(v[24])), "r"(__float_as_uint(v[25])), "r"(__float_as_uint(v[26])), "r"(__float_as_uint(v[27])),
        "r"(__float_as_uint(v[28])), "r"(__float_as_uint(v[29])), "r"(__float_as_uint(v[30])), "r"(__float_as_uint(v[31]))
        : "memory");
    asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
}

// 8 or 16 consecutive 32-bit columns of this thread's TMEM lane <- w,
// without waiting: the caller issues tcgen05.wait::st (tmem_wait_st)
// before it publishes the columns.
__device__ __forceinline__ void tmem_st_u32x8(uint32_t taddr, const uint32_t (&w)[8]) {
    asm volatile("tcgen05.st.sync.aligned.32x32b.x8.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8};" ::"r"(taddr), "r"(w[0]),
                 "r"(w[1]), "r"(w[2]), "r"(w[3]), "r"(w[4]), "r"(w[5]), "r"(w[6]), "r"(w[7])
                 : "memory");
}
__device__ __forceinline__ void tmem_st_u32x16(uint32_t taddr, const uint32_t (&w)[16]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], "
        "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16};" ::"r"(taddr),
        "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]), "r"(w[4]), "r"(w[5]), "r"(w[6]), "r"(w[7]), "r"(w[8]), "r"(w[9]),
        "r"(w[10]), "r"(w[11]), "r"(w[12]), "r"(w[13]), "r"(w[14]), "r"(w[15])
        : "memory");
}
__device__ __forceinline__ void tmem_wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory"); }
// 4 consecutive columns of this thread's TMEM lane as floats: tmem_st4
// does not wait (tmem_wait_st), tmem_ld4 does.
__device__ __forceinline__ void tmem_st4(uint32_t taddr, const float (&v)[4]) {
    asm volatile("tcgen05.st.sync.aligned.32x32b.x4.b32 [%0], {%1, %2, %3, %4};" ::"r"(taddr), "r"(__float_as_uint(v[0])),
                 "r"(__float_as_uint(v[1])), "r"(__float_as_uint(v[2])), "r"(__float_as_uint(v[3]))
                 : "memory");
}
__device__ __forceinline__ void tmem_ld4(uint32_t taddr, float (&v)[4]) {
    uint32_t r[4];
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(taddr));
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = __uint_as_float(r[i]);
}

// ---- UMMA descriptors (see sm100_layout.cuh for the field map) ---------------------
// Shared-memory matrix descriptor: start address, leading / stride byte
// offsets (all >> 4), version 1 (SM100), base offset 0, swizzle code.
__device__ __forceinline__ uint64_t smem_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo, uint32_t span) {
    return umma_smem_desc(saddr, lbo, sbo, span);
}

#endif  // MSA_SM100_ENABLED

}  // namespace sm100
}  // namespace msa

#endif  // SM100_PTX_CUH

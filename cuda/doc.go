// Package cuda is the launch layer of the GPU path: it loads the kernel
// image that package fatbin (kernels/cuda/fatbin) embeds and launches its
// kernels (sparse prefill partials, combine, paged decode; portable and
// tensor-core kernels) through package cuda/driver, which opens
// libcuda.so.1 at run time: nothing here links a CUDA library, and without a
// driver Load returns an error wrapping driver.ErrNoDriver.
//
// The parameter mirrors and their builders (params.go), the tensor-map
// geometry and validation (tensormap.go), the dispatch by compute capability
// (dispatch.go), the query windows of the prefill partials and the Go model
// of the SM100 layouts are plain Go, built and tested everywhere. The driver
// calls (launch.go, device.go) need the build tag "cuda" and a cuda.h at
// compile time (kernels/cuda/tagged_build.sh or kernels/cuda/gpucheck.sh
// set the include path); no GPU is needed to build.
//
// A sparse prefill takes one of several paths (PrefillPath, read from
// MSA_CUDA_PREFILL by Load, or SetPrefillPath): kv (the default) runs the
// KV-major partials kernels and the combine; query runs the query-major
// kernel over a QPlan (qprefill_plan.go) and writes O and LSE once, on the
// family's own query-major kernel (QFwdName: the sm_90a wgmma kernels on
// Hopper, the tcgen05 kernels of sm100_qfwd.cu on SM100 with 128-row
// tiles, the mma.sync kernels of sm80_qfwd.cu elsewhere); query80 runs
// the mma.sync kernels on every family, so one run on a Hopper or
// Blackwell GPU can time both query-major kernels; kv2 runs the KV-major schedule on the persistent sm_90a kernel
// of sm90_fwd2.cu, which merges each row's partials itself (no combine
// launch; prefill_kv2.go holds its plan and window sizing; BF16 and FP8
// at D 64 / 128, the KV path elsewhere); auto weighs every query tile
// with the model the CPU path shares (kernels/plan PathCosts.Weigh, GPU
// constants in prefill_auto.go, first estimates from the datasheets) and
// runs the KV-major launches for the KV tiles' rows first, then the
// query-major kernel over the query tiles (Kernels.PrefillChoice says what
// it chose and why). MSA_CUDA_ARCH (portable, sm80, sm90, sm100) overrides the
// kernel family of every launch, not only the prefill's.
//
// Paged decode takes one of two kernels on sm_90 (DecodeKernel, read from
// MSA_CUDA_DECODE by Load, or SetDecodeKernel): old (the default) runs the
// first sm_90a decode and its combine kernel; new runs the pipelined decode
// of sm90_decode_pipe.cu (cp.async ring, two CTAs per SM, the split-KV
// combine fused into the kernel; decode_pipe.go holds its plan and counter
// sizing), which has been built and gated but not yet timed on a GPU. On
// SM100 the one tcgen05 decode runs in both modes: old launches
// msa_combine after a split-KV call, new hands the kernel the counters of
// the same fused combine (shared/fused_combine.cuh), never run on a GPU.
//
// The sm_90a query-major kernel of the fp8 variant runs P.V one of two
// ways (FP8PV, read from MSA_CUDA_FP8PV by Load, or SetFP8PV): widen (the
// default) widens V to BF16 and runs P.V on the bf16 wgmma; fp8 runs the
// msa_sm90_qfwd_fp8pv_* kernels, whose producer warp transposes V in
// shared memory for the e4m3 wgmma, built, gated and emulated but not yet
// timed on a GPU. The same switch selects the pipelined decode's FP8 form
// (msa_sm90_decpipe_fp8pv_*: V transposed by the warpgroup, P.V on the
// e4m3 wgmma per span), built and gated, not yet run on a GPU.
//
// It launches; it does not hold kernel code or the image. It depends on the
// kernels' Go side (kernels/plan, kernels/attn) and package fatbin, never on
// package op: the graph ops (op, build tag "cuda") import it, usually as
// mcuda, since Gorgonia's own gorgonia.org/gorgonia/cuda sits beside it.
package cuda

package cuda

import (
	"fmt"
	"math"
	"os"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

// DecodeKernel selects the decode kernels a Kernels launches: on sm_90a
// the TMA kernel (sm90/sm90_decode.cu, "old") or the pipelined one
// (sm90/sm90_decode_pipe.cu, "new": cp.async ring, two CTAs per SM, fused
// split-KV combine); on SM100 the one tcgen05 decode (sm100/sm100_decode.cu)
// followed by msa_combine ("old") or merging a split-KV call's partials
// itself ("new": shared/fused_combine.cuh, the pipelined kernel's
// combine). Other families ignore it. The default stays old until the GPU
// check's timing stage has measured both on a GPU of the family.
type DecodeKernel int

// Decode kernels.
const (
	DecodeOld DecodeKernel = iota // msa_sm90_decode_* + msa_combine_* (the default)
	DecodeNew                     // msa_sm90_decpipe_* on sm_90a, the SM100 decode with its combine fused, where they apply
)

// DecodeEnv is the environment variable Load reads the decode kernel from:
// "old" (the default, also when unset) or "new".
const DecodeEnv = "MSA_CUDA_DECODE"

// String is the name ParseDecodeKernel reads.
func (d DecodeKernel) String() string {
	if d == DecodeNew {
		return "new"
	}
	return "old"
}

// ParseDecodeKernel parses "old" or "new" ("" is old).
func ParseDecodeKernel(s string) (DecodeKernel, error) {
	switch s {
	case "", "old":
		return DecodeOld, nil
	case "new":
		return DecodeNew, nil
	}
	return DecodeOld, fmt.Errorf("cuda: %s=%q: want old or new", DecodeEnv, s)
}

// decodeKernelFromEnv is the one place the decode kernel is read from the
// environment (Load).
func decodeKernelFromEnv() (DecodeKernel, error) { return ParseDecodeKernel(os.Getenv(DecodeEnv)) }

// decodePipeKernelParams mirrors MsaDecodePipeParams (the decode block,
// then the fused combine's split counts, counters and counter stride).
type decodePipeKernelParams struct {
	Decode        decodeKernelParams
	SplitCounts   uint64 // int32 [Batch]
	Counters      uint64 // int32 [PipeCounters], 0 between launches
	CounterStride int32  // counters per (request, q tile, KV head) group
	pad0          int32
}

// PipeName is the pipelined decode kernel of variant v at head dim d.
func PipeName(v TCVariant, d int) string { return TCName(ArchSM90, "decpipe", v, d) }

// PipeFP8PVName is the pipelined decode kernel of the fp8 variant with
// P.V on the e4m3 wgmma (MSA_CUDA_FP8PV=fp8) at head dim d (64 or 128).
func PipeFP8PVName(d int) string { return fmt.Sprintf("msa_%s_decpipe_fp8pv_d%d", ArchSM90, d) }

// pipeFP8PVMaxD is the largest head dim of the fp8pv decode kernels: each
// span's P.V has an O accumulator of its own beside the running one, and
// at D 256 the two (128 registers each) exceed a thread's 255.
const pipeFP8PVMaxD = 128

// PipeNames lists the pipelined decode kernels the launcher looks up on
// family a (sm90 only: the kernels are sm_90a).
func PipeNames(a Arch) []string {
	if a != ArchSM90 {
		return nil
	}
	var out []string
	for _, d := range []int{64, 128, 256} {
		for _, v := range []TCVariant{VarBF16, VarFP8, VarBF16FP8, VarNVFP4} {
			out = append(out, PipeName(v, d))
		}
		if d <= pipeFP8PVMaxD {
			out = append(out, PipeFP8PVName(d))
		}
	}
	return out
}

// pipeVariant is the pipelined kernel's variant for Q dtype q and K/V dtype
// kv: the sm_90a variants of DecodeVariant, and NVFP4 K/V with BF16 or E4M3
// Q, which the old sm_90a decode lacks.
func pipeVariant(q, kv Dtype) (TCVariant, bool) {
	if kv == NVFP4 && (q == BF16 || q == E4M3) {
		return VarNVFP4, true
	}
	return DecodeVariant(ArchSM90, q, kv)
}

// PipeBlock is the split block of the pipelined kernel's two-level fused
// combine for a request of n splits: all n for n <= 16, else ceil(sqrt(n)),
// so that no CTA merges more than max(16, ~sqrt(n)) partials
// (pipe_block of sm90_decode_pipe.cu).
func PipeBlock(n int) int {
	if n <= 16 {
		return max(n, 1)
	}
	g := int(math.Sqrt(float64(n)))
	for g*g < n {
		g++
	}
	for g > 1 && (g-1)*(g-1) >= n {
		g--
	}
	return g
}

// PipeCounterStride is the counters of one (request, q tile, KV head)
// group of schedule s: the group's block count plus one per split block, at
// most 1 + ceil(sqrt(max splits)) (1 + 1 below 17 splits).
func PipeCounterStride(s *plan.DecodeSchedule) int {
	n := s.MaxSplits
	for _, c := range s.SplitCounts {
		n = max(n, int(c))
	}
	blocks := 1
	for m := 17; m <= n; m++ { // the block count is not monotone in n: take the largest
		blocks = max(blocks, (m+PipeBlock(m)-1)/PipeBlock(m))
	}
	return 1 + blocks
}

// PipeCounters is the number of int32 counters the fused combine of
// schedule s uses: PipeCounterStride per (request, q tile, KV head) group,
// 0 when s does not split KV (no combine).
func PipeCounters(s *plan.DecodeSchedule) int {
	if s == nil || !s.SplitKV {
		return 0
	}
	return s.Params.Batch * s.NumQTiles * s.Params.Hkv * PipeCounterStride(s)
}

// TCDecodePipePlan decides whether the decode of a runs on family arch's
// pipelined kernel under FP8 P.V mode m: the kernel name and its launch
// data, or why it cannot (the caller then runs the old kernel). The fp8
// variant runs its fp8pv kernel under FP8PVFP8 at D <= 128; at D 256 the
// widened-V kernel runs, and note says so (for Fallbacks). a must have
// passed newDecodeKernelParams.
func TCDecodePipePlan(arch Arch, a *DecodeArgs, m FP8PV) (name string, l fatbin.PipeLaunch, note, why string) {
	if arch != ArchSM90 {
		return "", l, "", fmt.Sprintf("the pipelined decode is an sm_90a kernel, this GPU runs the %v family", arch)
	}
	v, ok := pipeVariant(a.QDtype, a.KVDtype)
	switch {
	case !ok:
		return "", l, "", fmt.Sprintf("no pipelined decode variant for Q %s, K/V %s", a.QDtype, a.KVDtype)
	case !HeadDimSupported(a.D):
		return "", l, "", fmt.Sprintf("head dim %d: the pipelined decode has D = 64, 128 and 256", a.D)
	case v == VarFP8 && a.PVRound != RoundE4M3:
		return "", l, "", "the fp8 variant rounds P to e4m3 (pv_round must be E4M3)"
	case !aligned(a.Q, 16) || !aligned(a.K, 16) || !aligned(a.V, 16):
		return "", l, "", "Q, K or V not 16-byte aligned"
	}
	name = PipeName(v, a.D)
	if v == VarFP8 && m == FP8PVFP8 {
		if a.D <= pipeFP8PVMaxD {
			name = PipeFP8PVName(a.D)
		} else {
			note = fmt.Sprintf("head dim %d: the fp8pv decode has D <= %d (a span's P.V accumulator beside O); %s runs", a.D, pipeFP8PVMaxD, name)
		}
	}
	l, found := fatbin.DecodePipeLaunch[name]
	if !found {
		return "", l, "", name + " is not in the launch table"
	}
	return name, l, note, ""
}

// newDecodePipeParams is the pipelined kernel's block: p plus the device
// split counts and counters of schedule s (none when s does not split KV).
func newDecodePipeParams(p decodeKernelParams, s *plan.DecodeSchedule, splitCounts, counters uint64) decodePipeKernelParams {
	if p.SplitKV == 0 || s == nil || !s.SplitKV {
		return decodePipeKernelParams{Decode: p}
	}
	return decodePipeKernelParams{Decode: p, SplitCounts: splitCounts, Counters: counters, CounterStride: int32(PipeCounterStride(s))}
}

package cuda

import (
	"fmt"
	"os"
)

// FP8PV selects how the sm_90a query-major prefill kernel and the
// pipelined decode kernel (MSA_CUDA_DECODE=new) of the fp8 variant (E4M3
// Q, K and V) run P.V. Both round P to E4M3 as the contract's FP8 P.V
// path does; they differ in the product:
//
//   - widen (msa_sm90_qfwd_fp8_d*, the default): the consumers widen each
//     landed V block to BF16 in shared memory (exact) and P.V runs on the
//     bf16 wgmma with float32 accumulation;
//   - fp8 (msa_sm90_qfwd_fp8pv_d*): the producer warp transposes each
//     landed V block into the K-major layout the e4m3 wgmma reads, the
//     consumers pack P into its register operand, and P.V runs on the e4m3
//     wgmma (twice the rate, half the operand bytes; its accumulator keeps
//     about 14 bits per k-group of 32 products). The decode's fp8 form
//     (msa_sm90_decpipe_fp8pv_d64 / _d128; PipeFP8PVName) transposes
//     each 64-key span with the whole warpgroup and adds each span's P.V
//     to a float32 O; at D 256 the widened-V decode runs.
//
// Other variants and families ignore it. The default stays widen until the
// GPU check's timing stage has measured both on a Hopper GPU.
type FP8PV int

// P.V modes of the sm_90a query-major fp8 kernel.
const (
	FP8PVWiden FP8PV = iota // V widened to BF16, bf16 wgmma (the default)
	FP8PVFP8                // V transposed by the producer, e4m3 wgmma
)

// FP8PVEnv is the environment variable Load reads the FP8 P.V mode from:
// "widen" (the default, also when unset) or "fp8".
const FP8PVEnv = "MSA_CUDA_FP8PV"

// String is the name ParseFP8PV reads.
func (m FP8PV) String() string {
	if m == FP8PVFP8 {
		return "fp8"
	}
	return "widen"
}

// ParseFP8PV parses "widen" or "fp8" ("" is widen).
func ParseFP8PV(s string) (FP8PV, error) {
	switch s {
	case "", "widen":
		return FP8PVWiden, nil
	case "fp8":
		return FP8PVFP8, nil
	}
	return FP8PVWiden, fmt.Errorf("cuda: %s=%q: want widen or fp8", FP8PVEnv, s)
}

// fp8pvFromEnv is the one place the FP8 P.V mode is read from the
// environment (Load).
func fp8pvFromEnv() (FP8PV, error) { return ParseFP8PV(os.Getenv(FP8PVEnv)) }

// QFwdFP8PVName is the sm_90a query-major kernel of the fp8 variant with
// P.V on the e4m3 wgmma at head dim d.
func QFwdFP8PVName(d int) string { return fmt.Sprintf("msa_%s_qfwd_fp8pv_d%d", ArchSM90, d) }

// qfwdKernelFor returns the kernel that runs the query-major launch named
// name under P.V mode m: the fp8pv kernel of the same head dim for the
// sm_90a fp8 kernels under FP8PVFP8, else name itself.
func qfwdKernelFor(name string, m FP8PV) string {
	if m != FP8PVFP8 {
		return name
	}
	for _, d := range []int{64, 128, 256} {
		if name == QFwdName(ArchSM90, VarFP8, d) {
			return QFwdFP8PVName(d)
		}
	}
	return name
}

package plan

import (
	"strings"

	"github.com/sparseattn/msa/cuda"
)

// PrefillMode is one way of running a prefill: the portable kernels, or
// the tensor-core kernels on a prefill path (and, for the sm_90a
// query-major FP8 kernel, its P.V mode), so that one run checks and times
// every path on the same inputs (A/B).
type PrefillMode struct {
	Portable bool
	Path     cuda.PrefillPath
	FP8PV    cuda.FP8PV
}

// Label is the suffix of a row's name.
func (m PrefillMode) Label() string {
	switch {
	case m.Portable:
		return " (portable)"
	case m.Path == cuda.PrefillQuery && m.FP8PV == cuda.FP8PVFP8:
		return " (query fp8pv)"
	case m.Path == cuda.PrefillQuery:
		return " (query)"
	case m.Path == cuda.PrefillQuery80:
		return " (query80)"
	case m.Path == cuda.PrefillKV2:
		return " (kv2)"
	case m.Path == cuda.PrefillAuto:
		return " (auto alternate)"
	case m.Path == cuda.PrefillAutoKV2:
		return " (auto-kv2 alternate)"
	}
	return " (kv)"
}

// FP8Walk reports whether an FP8 prefill (E4M3 Q and K/V) in this mode on
// family a may accumulate P.V over a whole query-major walk on the FP8
// tensor cores, so that its bound takes that accumulator's truncations
// (check.Prefill.PV8Walk): the sm_90a fp8pv kernel, and on SM100 the
// tcgen05 query-major kernel (kind::f8f6f4 into tensor memory across the
// walk), which the query and auto paths run.
func (m PrefillMode) FP8Walk(a cuda.Arch) bool {
	if m.Portable {
		return false
	}
	return m.FP8PV == cuda.FP8PVFP8 || a == cuda.ArchSM100 && (m.Path == cuda.PrefillQuery || m.Path.Auto())
}

// PrefillModes lists the modes of a prefill on family a (tc: the device
// has tensor-core kernels): the portable kernels alone without them; else
// the KV-major then the query-major path, the auto path with its tiles
// alternating between the two (cuda.AlternateTiles: both kinds of launch
// in one call, so the partition is checked on the GPU), on sm90 the
// query-major path on the FP8 P.V kernel for an FP8 prefill (fp8), the
// sm80 mma.sync query-major kernel, the persistent KV-major kernel with
// the fused combine (kv2) and the auto path with its KV tiles on it
// (auto-kv2, tiles alternating as for auto); on SM100 the sm80 mma.sync
// query-major kernel next to the tcgen05 one; the portable kernels last.
func PrefillModes(a cuda.Arch, tc, fp8 bool) []PrefillMode {
	if !tc {
		return []PrefillMode{{Portable: true}}
	}
	ms := []PrefillMode{{Path: cuda.PrefillKV}, {Path: cuda.PrefillQuery}, {Path: cuda.PrefillAuto}}
	if a == cuda.ArchSM90 {
		if fp8 {
			ms = append(ms, PrefillMode{Path: cuda.PrefillQuery, FP8PV: cuda.FP8PVFP8})
		}
		ms = append(ms, PrefillMode{Path: cuda.PrefillQuery80}, PrefillMode{Path: cuda.PrefillKV2}, PrefillMode{Path: cuda.PrefillAutoKV2})
	}
	if a == cuda.ArchSM100 {
		ms = append(ms, PrefillMode{Path: cuda.PrefillQuery80})
	}
	return append(ms, PrefillMode{Portable: true})
}

// DecodeMode is one way of running a decode: the portable kernels, or the
// tensor-core path with the old or the new (pipelined sm_90a) kernel, the
// new one also with P.V on the e4m3 wgmma (FP8PV: MSA_CUDA_FP8PV=fp8).
type DecodeMode struct {
	Portable bool
	Kernel   cuda.DecodeKernel
	FP8PV    bool
}

// FP8Walk reports whether an FP8 decode (E4M3 Q and K/V) in this mode on
// family a accumulates P.V over a work item's whole walk on the FP8 tensor
// cores, so that its bound takes that accumulator's truncations
// (check.Decode.PV8Walk): the SM100 decode (kind::f8f6f4 into tensor
// memory across its visits), which both of its modes run.
func (m DecodeMode) FP8Walk(a cuda.Arch) bool {
	return !m.Portable && a == cuda.ArchSM100
}

// Label is the suffix of a row's name: none for the old tensor-core kernel
// (the rows' names before the A/B, which bench/tables.go pairs with their
// " (portable)" rows), " (new)" for the pipelined kernel (SM100: the
// decode with its combine fused), " (new fp8pv)"
// for its fp8pv kernels.
func (m DecodeMode) Label() string {
	switch {
	case m.Portable:
		return " (portable)"
	case m.Kernel == cuda.DecodeNew && m.FP8PV:
		return " (new fp8pv)"
	case m.Kernel == cuda.DecodeNew:
		return " (new)"
	}
	return ""
}

// DecodeModes lists the modes of a decode on family a (fp8: E4M3 Q and
// K/V): the portable kernels alone without tensor-core kernels; else the
// old kernel, the new one where it exists (sm90: the pipelined kernel, for
// fp8 also with P.V on the e4m3 wgmma; SM100: its decode with the combine
// fused), and the portable kernels.
func DecodeModes(a cuda.Arch, tc, fp8 bool) []DecodeMode {
	if !tc {
		return []DecodeMode{{Portable: true}}
	}
	out := []DecodeMode{{Kernel: cuda.DecodeOld}}
	switch {
	case len(cuda.PipeNames(a)) > 0:
		out = append(out, DecodeMode{Kernel: cuda.DecodeNew})
		if fp8 {
			out = append(out, DecodeMode{Kernel: cuda.DecodeNew, FP8PV: true})
		}
	case a == cuda.ArchSM100:
		out = append(out, DecodeMode{Kernel: cuda.DecodeNew})
	}
	return append(out, DecodeMode{Portable: true})
}

// NewDecodeOwn reports whether a decode in the new-kernel mode that
// launched kern (the launches' names joined by "+") ran launches of its own
// rather than the old mode's: the sm_90a pipelined kernel, or the SM100
// decode with its combine fused, which differs from the old launch only
// when the schedule splits KV (split; without a split neither launches a
// combine). Where it is false the old mode's row already covers the case
// (Fallbacks says why the new kernel did not apply).
func NewDecodeOwn(kern string, split bool) bool {
	switch {
	case strings.Contains(kern, "_decpipe_"):
		return true
	case strings.HasPrefix(kern, "msa_sm100_decode_"):
		return split && !strings.Contains(kern, "msa_combine_")
	}
	return false
}

// FitRows returns the KV-major rows whose auto fit the arrival of row i
// completes, given the times of a prefill case so far (times[0]: the
// query-major row, times[1]: kv, times[2]: kv2; 0 = not timed yet): the
// rows come in any order, so the query row completes every KV-major row
// timed before it and a KV-major row after the query row completes
// itself.
func FitRows(i int, times []float64) []int {
	var out []int
	if len(times) == 0 || times[0] == 0 {
		return nil
	}
	for j := 1; j < len(times); j++ {
		if times[j] > 0 && (i == 0 || i == j) {
			out = append(out, j)
		}
	}
	return out
}

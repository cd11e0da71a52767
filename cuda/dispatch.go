package cuda

import (
	"fmt"
)

// Dispatch of the tensor-core kernels (kernels/cuda/shared/msa_tc_abi.h), in plain
// Go so that the choice is unit-tested without a GPU. The cgo launcher
// (launch.go) looks every name up in the loaded fatbin and runs the portable
// kernel whenever TCFwdPlan / TCDecodePlan say no or the name is missing.

// Arch is the kernel family a device runs.
type Arch int

// Kernel families, by compute capability (ArchFor).
const (
	ArchPortable Arch = iota // msa_sparse_fwd / msa_decode / msa_combine only
	ArchSM80                 // 8.x: mma.sync kernels (msa_sm80_*)
	ArchSM90                 // 9.0: wgmma + TMA kernels (msa_sm90_*)
	ArchSM100                // 10.x: tcgen05 + TMA kernels (msa_sm100_*)
)

// ArchFor maps a compute capability to its kernel family: 10.x -> SM100
// (sm_100f SASS runs on the whole family), 9.0 -> SM90 (sm_90a SASS runs on
// 9.0 only), 8.x -> SM80, anything else -> portable (compute_80 PTX JIT).
func ArchFor(major, minor int) Arch {
	switch {
	case major == 10:
		return ArchSM100
	case major == 9 && minor == 0:
		return ArchSM90
	case major == 8:
		return ArchSM80
	}
	return ArchPortable
}

// ParseArch parses a family name as String writes it.
func ParseArch(s string) (Arch, bool) {
	for _, a := range []Arch{ArchPortable, ArchSM80, ArchSM90, ArchSM100} {
		if a.String() == s {
			return a, true
		}
	}
	return ArchPortable, false
}

// String is the kernel-name prefix of the family ("portable" for none).
func (a Arch) String() string {
	switch a {
	case ArchSM80:
		return "sm80"
	case ArchSM90:
		return "sm90"
	case ArchSM100:
		return "sm100"
	}
	return "portable"
}

// TCVariant names the dtype variant of a tensor-core kernel.
type TCVariant string

// Tensor-core kernel variants (msa_tc_abi.h).
const (
	VarBF16    TCVariant = "bf16"    // BF16 Q/K/V
	VarFP8     TCVariant = "fp8"     // E4M3 Q/K/V
	VarBF16FP8 TCVariant = "bf16fp8" // BF16 Q, E4M3 K/V
	VarNVFP4   TCVariant = "nvfp4"   // NVFP4 K/V, BF16 or E4M3 Q
)

// SM100 returns the SM100 layout variant of v.
func (v TCVariant) SM100() SM100Variant {
	switch v {
	case VarFP8:
		return SM100FP8
	case VarBF16FP8:
		return SM100BF16FP8
	case VarNVFP4:
		return SM100NVFP4
	}
	return SM100BF16
}

// FwdVariant is the prefill variant for Q / K/V dtypes (ok false: no
// tensor-core kernel has this combination).
func FwdVariant(q, kv Dtype) (TCVariant, bool) {
	switch {
	case kv == NVFP4 && (q == BF16 || q == E4M3):
		return VarNVFP4, true
	case q == BF16 && kv == BF16:
		return VarBF16, true
	case q == E4M3 && kv == E4M3:
		return VarFP8, true
	case q == BF16 && kv == E4M3:
		return VarBF16FP8, true
	}
	return "", false
}

// DecodeVariant is the decode variant of family a: BF16, FP8, or BF16 Q
// with E4M3 K/V on every tensor-core family; NVFP4 K/V (BF16 or E4M3 Q)
// only where hasDecode says so (SM100).
func DecodeVariant(a Arch, q, kv Dtype) (TCVariant, bool) {
	v, ok := FwdVariant(q, kv)
	if v == VarNVFP4 {
		return v, hasDecode(a, v)
	}
	return v, ok
}

// hasDecode reports whether family a has a decode kernel of variant v:
// every variant on SM100; the sm90 and sm80 families have no NVFP4 decode
// (it runs on the portable kernel there).
func hasDecode(a Arch, v TCVariant) bool { return v != VarNVFP4 || a == ArchSM100 }

// TCName is the extern "C" name msa_<arch>_<algo>_<variant>_d<D>.
func TCName(a Arch, algo string, v TCVariant, d int) string {
	return fmt.Sprintf("msa_%s_%s_%s_d%d", a, algo, v, d)
}

// TCNames lists every tensor-core kernel name the launcher may look up for
// family a (algo fwd: four variants; decode: three, four on SM100; head dims
// 64, 128, 256).
func TCNames(a Arch) []string {
	if a == ArchPortable {
		return nil
	}
	var out []string
	for _, d := range []int{64, 128, 256} {
		for _, v := range []TCVariant{VarBF16, VarFP8, VarBF16FP8, VarNVFP4} {
			out = append(out, TCName(a, "fwd", v, d))
		}
		for _, v := range []TCVariant{VarBF16, VarFP8, VarBF16FP8, VarNVFP4} {
			if hasDecode(a, v) {
				out = append(out, TCName(a, "decode", v, d))
			}
		}
	}
	return out
}

// TCPlan is one tensor-core launch: the kernel, its tensor maps (validated)
// and, where the Go layout model knows it, the dynamic shared memory.
type TCPlan struct {
	Name       string        // kernel symbol in the fatbin (TCName)
	Q, K, V    TensorMapSpec // tensor-map specs of the operands (validated, encoded at launch)
	SmemBytes  int           // from the Go layout model; 0: the launcher's kernel table, else the device's opt-in maximum
	GridBlocks int           // CTAs launched: one per work item of the schedule
}

func aligned(p uint64, n uint64) bool { return p%n == 0 }

// TCFwdPlan decides whether the sparse prefill of a can run on family
// arch's tensor-core kernel and returns the launch (why is the reason when
// it cannot; the portable kernel then runs). a must already have passed
// newFwdKernelParams; a.KVRows (dense total_k or the page count) must be
// set for tensor maps to be built.
func TCFwdPlan(arch Arch, a *FwdArgs, workItems int) (p TCPlan, why string) {
	if arch == ArchPortable {
		return p, "no tensor-core kernels for this GPU"
	}
	v, ok := FwdVariant(a.QDtype, a.KVDtype)
	switch {
	case !ok:
		return p, fmt.Sprintf("no tensor-core variant for Q %s, K/V %s", a.QDtype, a.KVDtype)
	case v == VarFP8 && a.PVRound != RoundE4M3:
		return p, "the fp8 variant rounds P to e4m3 (pv_round must be E4M3)"
	case a.BlkKV > sm100BlockKeys:
		return p, "blk_kv above 128"
	case a.KVRows < 1:
		return p, "K/V row count (KVRows) not given"
	case !aligned(a.Q, 16) || !aligned(a.K, 16) || !aligned(a.V, 16):
		return p, "Q, K or V not 16-byte aligned"
	case !aligned(a.OPartial, 16):
		return p, "O partials not 16-byte aligned"
	}
	var err error
	p.Name = TCName(arch, "fwd", v, a.D)
	p.GridBlocks = workItems
	if p.Q, err = QMapSpec(a.Q, a.QDtype, a.D, a.Hq, a.Hq/a.Hkv, max(a.TotalQ, 1)); err != nil {
		return TCPlan{}, err.Error()
	}
	ps := 0
	if a.PageTable != 0 {
		ps = a.PageSize
	}
	if p.K, err = KVMapSpec("k", a.K, a.KVDtype, a.D, a.Hkv, ps, a.KVRows); err != nil {
		return TCPlan{}, err.Error()
	}
	if p.V, err = KVMapSpec("v", a.V, a.KVDtype, a.D, a.Hkv, ps, a.KVRows); err != nil {
		return TCPlan{}, err.Error()
	}
	if arch == ArchSM100 {
		l := SM100Fwd(v.SM100(), a.D)
		if ps > 0 && !SM100PagedOK(ps, a.BlkKV, l.BoxSpan) {
			return TCPlan{}, fmt.Sprintf("page size %d with blk_kv %d: the SM100 boxes need a power-of-2 page and box-aligned blocks", ps, a.BlkKV)
		}
		p.SmemBytes = l.SmemBytes
	}
	return p, ""
}

// TCDecodePlan is TCFwdPlan for paged decode (a.NumPages must be set).
func TCDecodePlan(arch Arch, a *DecodeArgs, workItems int) (p TCPlan, why string) {
	if arch == ArchPortable {
		return p, "no tensor-core kernels for this GPU"
	}
	v, ok := DecodeVariant(arch, a.QDtype, a.KVDtype)
	switch {
	case !ok:
		return p, fmt.Sprintf("no tensor-core decode variant for Q %s, K/V %s", a.QDtype, a.KVDtype)
	case v == VarFP8 && a.PVRound != RoundE4M3:
		return p, "the fp8 variant rounds P to e4m3 (pv_round must be E4M3)"
	case a.NumPages < 1:
		return p, "page count (NumPages) not given"
	case !aligned(a.Q, 16) || !aligned(a.K, 16) || !aligned(a.V, 16):
		return p, "Q, K or V not 16-byte aligned"
	}
	var err error
	p.Name = TCName(arch, "decode", v, a.D)
	p.GridBlocks = workItems
	if p.Q, err = QMapSpec(a.Q, a.QDtype, a.D, a.Hq, a.Hq/a.Hkv, max(a.Batch*a.SeqlenQ, 1)); err != nil {
		return TCPlan{}, err.Error()
	}
	if p.K, err = KVMapSpec("k", a.K, a.KVDtype, a.D, a.Hkv, a.PageSize, a.NumPages); err != nil {
		return TCPlan{}, err.Error()
	}
	if p.V, err = KVMapSpec("v", a.V, a.KVDtype, a.D, a.Hkv, a.PageSize, a.NumPages); err != nil {
		return TCPlan{}, err.Error()
	}
	if arch == ArchSM100 {
		blk := sm100PagedRows(a.PageSize) // dense decode: blocks start on box boundaries
		if a.Q2K != 0 {
			blk = a.BlkKV // sparse decode: the selected blocks must
		}
		if !SM100PagedOK(a.PageSize, blk, spanOf(rowBytes(a.KVDtype, a.D))) {
			return TCPlan{}, fmt.Sprintf("page size %d, blk_kv %d: the SM100 boxes need a power-of-2 page of >= 1024/span rows and box-aligned blocks", a.PageSize, blk)
		}
		p.SmemBytes = SM100Dec(v.SM100(), a.D).SmemBytes
	}
	return p, ""
}

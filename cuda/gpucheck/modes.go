//go:build cuda

package main

import (
	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/cuda/gpucheck/plan"
)

// runMode is one way of running a prefill case (plan.PrefillMode) as the
// launcher's settings: the kernel path and the prefill path, so that one
// run checks and times every path (A/B).
type runMode struct {
	path    cuda.Path
	prefill cuda.PrefillPath
	fp8pv   cuda.FP8PV       // the sm_90a query-major fp8 kernel's P.V (MSA_CUDA_FP8PV)
	choose  cuda.TileChooser // the auto path's tiles (nil: the model)
	fp8Walk bool             // FP8 P.V may accumulate over a whole walk (plan.PrefillMode.FP8Walk)
}

func prefillRunMode(m plan.PrefillMode, a cuda.Arch) runMode {
	if m.Portable {
		return runMode{path: cuda.PathPortable, prefill: cuda.PrefillKV}
	}
	md := runMode{path: cuda.PathAuto, prefill: m.Path, fp8pv: m.FP8PV, fp8Walk: m.FP8Walk(a)}
	if m.Path.Auto() {
		md.choose = cuda.AlternateTiles // both kinds of launch in one call
	}
	return md
}

// planArch is the family the plan's modes are listed for: the device's,
// or portable where the fatbin has no tensor-core kernel for it.
func planArch(k *cuda.Kernels) cuda.Arch {
	if len(k.TensorCoreKernels()) == 0 {
		return cuda.ArchPortable
	}
	return k.Arch()
}

func (r *report) planArch() cuda.Arch { return planArch(r.k) }

// modes lists the modes of a case (plan.PrefillModes; for a decode's
// probes, the tensor-core and the portable path).
func (r *report) modes(prefill bool) []runMode {
	a := r.planArch()
	if !prefill && a != cuda.ArchPortable {
		return []runMode{{path: cuda.PathAuto, prefill: cuda.PrefillKV}, {path: cuda.PathPortable, prefill: cuda.PrefillKV}}
	}
	return r.prefillCaseModes(false)
}

// prefillCaseModes lists the modes of a prefill with E4M3 Q and K/V (fp8)
// or not (plan.PrefillModes).
func (r *report) prefillCaseModes(fp8 bool) []runMode {
	a := r.planArch()
	var out []runMode
	for _, m := range plan.PrefillModes(a, a != cuda.ArchPortable, fp8) {
		out = append(out, prefillRunMode(m, a))
	}
	return out
}

// apply selects mode m for the next launches.
func (r *report) apply(m runMode) {
	r.k.SetPath(m.path)
	r.k.SetPrefillPath(m.prefill)
	r.k.SetFP8PV(m.fp8pv)
	r.k.SetPrefillChooser(m.choose)
}

// restore selects the tensor-core path, the prefill path Load read from
// MSA_CUDA_PREFILL and the FP8 P.V mode it read from MSA_CUDA_FP8PV.
func (r *report) restore() {
	r.apply(runMode{path: cuda.PathAuto, prefill: r.prefillDefault, fp8pv: r.fp8pvDefault})
}

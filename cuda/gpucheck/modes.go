//go:build cuda

package main

import "github.com/sparseattn/msa/cuda"

// runMode is one way of running a case: the kernel path (tensor-core
// where it applies, or portable) and, for a prefill, the KV-major or the
// query-major algorithm, so that one run checks and times both (A/B).
type runMode struct {
	path    cuda.Path
	prefill cuda.PrefillPath
	fp8pv   cuda.FP8PV // the sm_90a query-major fp8 kernel's P.V (MSA_CUDA_FP8PV)
}

// label is the suffix of a timing row's name ("" for the default mode).
func (m runMode) label() string {
	switch {
	case m.path == cuda.PathPortable:
		return " (portable)"
	case m.prefill == cuda.PrefillQuery && m.fp8pv == cuda.FP8PVFP8:
		return " (query fp8pv)"
	case m.prefill == cuda.PrefillQuery:
		return " (query)"
	case m.prefill == cuda.PrefillQuery80:
		return " (query80)"
	case m.prefill == cuda.PrefillKV2:
		return " (kv2)"
	}
	return " (kv)"
}

// modes lists the modes of a case: the portable kernels alone where the
// device has no tensor-core kernels; else the tensor-core kernels (for a
// prefill, KV-major then query-major; on sm90 also the query-major path on
// the sm80 mma.sync kernel, next to the wgmma one, and the persistent
// KV-major kernel with the fused combine, kv2) and the portable kernels.
func (r *report) modes(prefill bool) []runMode {
	return prefillModes(len(r.k.TensorCoreKernels()) > 0, r.k.Arch(), prefill)
}

// prefillModes is modes for a device with (tc) or without tensor-core
// kernels, of family a.
func prefillModes(tc bool, a cuda.Arch, prefill bool) []runMode {
	if !tc {
		return []runMode{{path: cuda.PathPortable, prefill: cuda.PrefillKV}}
	}
	if !prefill {
		return []runMode{{path: cuda.PathAuto, prefill: cuda.PrefillKV}, {path: cuda.PathPortable, prefill: cuda.PrefillKV}}
	}
	ms := []runMode{{path: cuda.PathAuto, prefill: cuda.PrefillKV}, {path: cuda.PathAuto, prefill: cuda.PrefillQuery}}
	if a == cuda.ArchSM90 {
		ms = append(ms, runMode{path: cuda.PathAuto, prefill: cuda.PrefillQuery80}, runMode{path: cuda.PathAuto, prefill: cuda.PrefillKV2})
	}
	return append(ms, runMode{path: cuda.PathPortable, prefill: cuda.PrefillKV})
}

// prefillCaseModes is modes(true) for a prefill with E4M3 Q and K/V (fp8) or
// not: on sm90 an fp8 prefill also runs the query-major path with P.V on
// the e4m3 wgmma (the fp8pv kernels, MSA_CUDA_FP8PV=fp8) next to the
// widened-V kernel, so that one run checks and times both.
func (r *report) prefillCaseModes(fp8 bool) []runMode {
	ms := r.modes(true)
	if !fp8 || r.k.Arch() != cuda.ArchSM90 || len(r.k.TensorCoreKernels()) == 0 {
		return ms
	}
	for i, m := range ms {
		if m.path == cuda.PathAuto && m.prefill == cuda.PrefillQuery {
			pv := runMode{path: cuda.PathAuto, prefill: cuda.PrefillQuery, fp8pv: cuda.FP8PVFP8}
			return append(ms[:i+1:i+1], append([]runMode{pv}, ms[i+1:]...)...)
		}
	}
	return ms
}

// apply selects mode m for the next launches.
func (r *report) apply(m runMode) {
	r.k.SetPath(m.path)
	r.k.SetPrefillPath(m.prefill)
	r.k.SetFP8PV(m.fp8pv)
}

// restore selects the tensor-core path, the prefill path Load read from
// MSA_CUDA_PREFILL and the FP8 P.V mode it read from MSA_CUDA_FP8PV.
func (r *report) restore() {
	r.apply(runMode{path: cuda.PathAuto, prefill: r.prefillDefault, fp8pv: r.fp8pvDefault})
}

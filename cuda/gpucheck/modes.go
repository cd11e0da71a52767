//go:build cuda

package main

import "github.com/sparseattn/msa/cuda"

// runMode is one way of running a case: the kernel path (tensor-core
// where it applies, or portable) and, for a prefill, the KV-major or the
// query-major algorithm, so that one run checks and times both (A/B).
type runMode struct {
	path    cuda.Path
	prefill cuda.PrefillPath
}

// label is the suffix of a timing row's name ("" for the default mode).
func (m runMode) label() string {
	switch {
	case m.path == cuda.PathPortable:
		return " (portable)"
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
		return []runMode{{cuda.PathPortable, cuda.PrefillKV}}
	}
	if !prefill {
		return []runMode{{cuda.PathAuto, cuda.PrefillKV}, {cuda.PathPortable, cuda.PrefillKV}}
	}
	ms := []runMode{{cuda.PathAuto, cuda.PrefillKV}, {cuda.PathAuto, cuda.PrefillQuery}}
	if a == cuda.ArchSM90 {
		ms = append(ms, runMode{cuda.PathAuto, cuda.PrefillQuery80}, runMode{cuda.PathAuto, cuda.PrefillKV2})
	}
	return append(ms, runMode{cuda.PathPortable, cuda.PrefillKV})
}

// apply selects mode m for the next launches.
func (r *report) apply(m runMode) {
	r.k.SetPath(m.path)
	r.k.SetPrefillPath(m.prefill)
}

// restore selects the tensor-core path and the prefill path Load read
// from MSA_CUDA_PREFILL.
func (r *report) restore() { r.apply(runMode{cuda.PathAuto, r.prefillDefault}) }

//go:build cuda

package main

import (
	"fmt"
	"sort"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/cuda/gpucheck/plan"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

// decodeMode is one way of running a decode case (plan.DecodeMode): the
// kernel path and, on the tensor-core path, the sm_90a decode kernel
// (MSA_CUDA_DECODE old or new) and the FP8 P.V mode (MSA_CUDA_FP8PV), so
// that one run checks and times every kernel on the same inputs.
type decodeMode struct {
	path    cuda.Path
	kernel  cuda.DecodeKernel
	fp8pv   cuda.FP8PV
	fp8Walk bool // FP8 P.V accumulates over an item's walk (plan.DecodeMode.FP8Walk)
}

func decodeRunMode(m plan.DecodeMode, a cuda.Arch) decodeMode {
	if m.Portable {
		return decodeMode{path: cuda.PathPortable, kernel: cuda.DecodeOld, fp8pv: cuda.FP8PVWiden}
	}
	md := decodeMode{path: cuda.PathAuto, kernel: m.Kernel, fp8pv: cuda.FP8PVWiden, fp8Walk: m.FP8Walk(a)}
	if m.FP8PV {
		md.fp8pv = cuda.FP8PVFP8
	}
	return md
}

// label is the suffix of a row's name (plan.DecodeMode.Label).
func (m decodeMode) label() string {
	return plan.DecodeMode{Portable: m.path == cuda.PathPortable, Kernel: m.kernel, FP8PV: m.fp8pv == cuda.FP8PVFP8}.Label()
}

// decodeModes lists the modes of a decode case with E4M3 Q and K/V (fp8)
// or not (plan.DecodeModes).
func (r *report) decodeModes(fp8 bool) []decodeMode {
	a := r.planArch()
	var out []decodeMode
	for _, m := range plan.DecodeModes(a, a != cuda.ArchPortable, fp8) {
		out = append(out, decodeRunMode(m, a))
	}
	return out
}

// applyDecode selects mode m for the next launches.
func (r *report) applyDecode(m decodeMode) {
	r.k.SetPath(m.path)
	r.k.SetDecodeKernel(m.kernel)
	r.k.SetFP8PV(m.fp8pv)
}

// restoreDecode selects the tensor-core path, the decode kernel Load read
// from MSA_CUDA_DECODE and the FP8 P.V mode it read from MSA_CUDA_FP8PV.
func (r *report) restoreDecode() {
	r.applyDecode(decodeMode{path: cuda.PathAuto, kernel: r.decodeDefault, fp8pv: r.fp8pvDefault})
}

// pipeOccupancy prints how many CTAs of each pipelined decode kernel the
// driver keeps resident per SM; fewer than the kernel's design
// (fatbin.DecodePipeLaunch's CTAs: PipeCTAsPerSM, one at D = 256) is a
// failure (its shared memory or registers grew).
func (r *report) pipeOccupancy() {
	occ, err := r.k.PipeOccupancy(r.dev)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed++
		fmt.Printf("occupancy: ERROR %v\n", err)
		return
	}
	names := make([]string, 0, len(occ))
	for n := range occ {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		status := "ok"
		if want := fatbin.DecodePipeLaunch[n].CTAs; occ[n] < want {
			r.failed++
			status = fmt.Sprintf("FAIL: want >= %d", want)
		}
		fmt.Printf("occupancy: %s %d CTAs per SM (%s)\n", n, occ[n], status)
	}
}

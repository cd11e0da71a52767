//go:build !amd64 || purego

package tile

import "github.com/sparseattn/msa/kernels/lowp"

// amxLanes: no AMX lane path on this platform or build.
type amxLanes struct{}

// lanesKernFor: no lane kernels on this platform or build.
func lanesKernFor(d int) lanesKern { return lanesGeneric }

// lanesBF16Kern: no bf16-product lane kernels on this platform or build.
func lanesBF16Kern(d int) (lanesKern, bool) { return lanesGeneric, false }

// lanesBF16ScoresOK: no VDPBF16PS scores on this platform or build.
func lanesBF16ScoresOK(d int) bool { return false }

func lanesUpdateSIMD(l *Lanes, k, v []float32, n int) { lanesUpdateGeneric(l, k, v, n) }

func lanesUpdateStagedSIMD(l *Lanes, src Stager, n int, ahead, pre lanesAhead) { panic("unreachable") }

// haveVBMI: no AVX512_VBMI e4m3 conversion on this platform or build.
const haveVBMI = false

// lanesInPlace512: no AVX-512 lane kernels on this platform or build.
const lanesInPlace512 = false

func widenE4M3VBMI(dst []float32, src []lowp.Float8E4M3FN) { panic("unreachable") }

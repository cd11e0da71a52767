//go:build !amd64 || purego

package tile

import "github.com/sparseattn/msa/kernels/lowp"

// lanesKernFor: no lane kernels on this platform or build.
func lanesKernFor(d int) lanesKern { return lanesGeneric }

func lanesUpdateSIMD(l *Lanes, k, v []float32, n int) { lanesUpdateGeneric(l, k, v, n) }

func lanesUpdateStagedSIMD(l *Lanes, src Stager, n int, ahead, pre lanesAhead) { panic("unreachable") }

// WidenE4M3x64 widens src (a multiple of 64 values) into dst with
// lowp.DecodeE4M3 (the AVX512_VBMI kernel is amd64 assembly).
func WidenE4M3x64(dst []float32, src []lowp.Float8E4M3FN) {
	if len(src)%64 != 0 || len(dst) < len(src) {
		panic("tile: WidenE4M3x64: want a multiple of 64 values and room for them")
	}
	lowp.DecodeE4M3(dst[:len(src)], src)
}

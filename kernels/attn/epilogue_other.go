//go:build !amd64 || purego

package attn

import "github.com/sparseattn/msa/kernels/lowp"

const haveAsm = false

func hasF16C() bool { return false }

func hasVBMI() bool { return false }

func storeRowsBF16AVX512(*lowp.BFloat16, *int32, *float32, *float32, int, int, int) {
	panic("unreachable")
}
func scaleF32AVX512(*float32, *float32, int, float32)       { panic("unreachable") }
func axpyBF16AVX512(*float32, *lowp.BFloat16, int, float32) { panic("unreachable") }
func axpyF32AVX512(*float32, *float32, int, float32)        { panic("unreachable") }

func decodeBF16AVX512(*float32, *lowp.BFloat16, int) { panic("unreachable") }

func decodeE4M3AVX512(*float32, *lowp.Float8E4M3FN, int) { panic("unreachable") }

func decodeE4M3x32AVX512(*float32, *lowp.Float8E4M3FN, int) { panic("unreachable") }

func decodeNVFP4AVX512(*float32, *uint8, *float32, int, float32, *float32) { panic("unreachable") }

func maxFiniteBitsAVX512(*float32, int) uint32 { panic("unreachable") }

func decodeBF16MaxAVX512(*float32, *lowp.BFloat16, int) uint32 { panic("unreachable") }

func sumSlotsBF16AVX512(*float32, *lowp.BFloat16, uintptr, *float32, int, int) {
	panic("unreachable")
}
func sumSlotsF32AVX512(*float32, *float32, uintptr, *float32, int, int) { panic("unreachable") }
func decodeBF16MaxAVX2(*float32, *lowp.BFloat16, int) uint32            { panic("unreachable") }

func storeRowsBF16AVX2(*lowp.BFloat16, *int32, *float32, *float32, int, int, int) {
	panic("unreachable")
}
func scaleF32AVX2(*float32, *float32, int, float32)       { panic("unreachable") }
func axpyBF16AVX2(*float32, *lowp.BFloat16, int, float32) { panic("unreachable") }
func axpyF32AVX2(*float32, *float32, int, float32)        { panic("unreachable") }

func decodeBF16AVX2(*float32, *lowp.BFloat16, int) { panic("unreachable") }

func decodeE4M3AVX2(*float32, *lowp.Float8E4M3FN, int) { panic("unreachable") }

func decodeE4M3x32AVX2(*float32, *lowp.Float8E4M3FN, int) bool { panic("unreachable") }

func decodeE4M3x32FoldAVX2(*float32, *lowp.Float8E4M3FN, int) bool { panic("unreachable") }

func maxFiniteBitsAVX2(*float32, int) uint32 { panic("unreachable") }
func sumSlotsBF16AVX2(*float32, *lowp.BFloat16, uintptr, *float32, int, int) {
	panic("unreachable")
}
func sumSlotsF32AVX2(*float32, *float32, uintptr, *float32, int, int) { panic("unreachable") }

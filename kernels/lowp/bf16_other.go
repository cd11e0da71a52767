//go:build !amd64 || purego

package lowp

// haveAVX512 is false: the conversions run the portable loops.
const haveAVX512 = false

func encodeBF16SIMD([]BFloat16, []float32) int { return 0 }
func decodeBF16SIMD([]float32, []BFloat16) int { return 0 }

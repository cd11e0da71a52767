//go:build !amd64 || purego

package attn

func mergeWeightsAVX512(*float32, *float32, int) (float32, float32) { panic("unreachable") }
func mergeWeightsAVX2(*float32, *float32, int) (float32, float32)   { panic("unreachable") }

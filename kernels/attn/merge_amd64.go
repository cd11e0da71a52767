//go:build amd64 && !purego

package attn

// mergeWeightsAVX512 is mergeWeights for n >= 1 LSEs with AVX-512
// (merge_amd64.s): e^x in float32 within 2 ulp, the sum by lanes. When m
// is -inf it returns s = 0 and leaves w alone.
//
//go:noescape
func mergeWeightsAVX512(l, w *float32, n int) (m, s float32)

// mergeWeightsAVX2 is mergeWeightsAVX512 with AVX2 and FMA.
//
//go:noescape
func mergeWeightsAVX2(l, w *float32, n int) (m, s float32)

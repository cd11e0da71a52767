//go:build !amd64 || purego

package overlap

// loops: the loops are AVX2 assembly.
func loops() map[string]func(q, k *float32, src *byte, dst *float32, n int) { return nil }

// loops512: the loops are AVX-512 assembly.
func loops512() map[string]func(q, k *float32, src *byte, dst *float32, n int) { return nil }

// loopsDec: the loops are AVX2 assembly.
func loopsDec() map[string]func(q, k *float32, src *byte, dst *float32, n int) { return nil }

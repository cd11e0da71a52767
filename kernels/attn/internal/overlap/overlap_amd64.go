//go:build amd64 && !purego

package overlap

import "golang.org/x/sys/cpu"

// fmaLoop, convLoop and bothLoop run n iterations of 4 unrolled steps: the
// multiply-adds of one column, the conversion of 16 values, or both.
//
//go:noescape
func fmaLoop(q, k *float32, src *byte, dst *float32, n int)

//go:noescape
func convLoop(q, k *float32, src *byte, dst *float32, n int)

//go:noescape
func bothLoop(q, k *float32, src *byte, dst *float32, n int)

// loops returns the three loops, or nil where the CPU lacks AVX2, FMA or
// F16C.
func loops() map[string]func(q, k *float32, src *byte, dst *float32, n int) {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA || !cpu.X86.HasF16C {
		return nil
	}
	return map[string]func(q, k *float32, src *byte, dst *float32, n int){"fma": fmaLoop, "conv": convLoop, "both": bothLoop}
}

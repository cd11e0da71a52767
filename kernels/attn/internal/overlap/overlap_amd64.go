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

// fma512Loop, conv512Loop and both512Loop run n iterations of the AVX-512
// counterparts (overlap512_amd64.s): 4 steps of the Q.K lane kernel's
// multiply-adds, 3 steps of the VBMI e4m3 conversion of 64 values, or both
// interleaved.
//
//go:noescape
func fma512Loop(q, k *float32, src *byte, dst *float32, n int)

//go:noescape
func conv512Loop(q, k *float32, src *byte, dst *float32, n int)

//go:noescape
func both512Loop(q, k *float32, src *byte, dst *float32, n int)

// loops512 returns the AVX-512 loops, or nil where the CPU lacks
// AVX512F/BW or AVX512_VBMI.
func loops512() map[string]func(q, k *float32, src *byte, dst *float32, n int) {
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512BW || !cpu.X86.HasAVX512VBMI {
		return nil
	}
	return map[string]func(q, k *float32, src *byte, dst *float32, n int){"fma": fma512Loop, "conv": conv512Loop, "both": both512Loop}
}

// fmaDecLoop, convDecLoop and bothDecLoop run n steps of the decode-ratio
// loops (overlap_amd64.s): 48 multiply-adds of the AVX2 Q.K lane kernel,
// the staging of 24 e4m3 values, or both interleaved.
//
//go:noescape
func fmaDecLoop(q, k *float32, src *byte, dst *float32, n int)

//go:noescape
func convDecLoop(q, k *float32, src *byte, dst *float32, n int)

//go:noescape
func bothDecLoop(q, k *float32, src *byte, dst *float32, n int)

// convNoMulDecLoop and bothNoMulDecLoop are convDecLoop and bothDecLoop
// without the conversion's 2^8 multiply (as if folded into a scale).
//
//go:noescape
func convNoMulDecLoop(q, k *float32, src *byte, dst *float32, n int)

//go:noescape
func bothNoMulDecLoop(q, k *float32, src *byte, dst *float32, n int)

// loopsDec returns the decode-ratio loops, or nil where the CPU lacks
// AVX2, FMA or F16C.
func loopsDec() map[string]func(q, k *float32, src *byte, dst *float32, n int) {
	if loops() == nil {
		return nil
	}
	return map[string]func(q, k *float32, src *byte, dst *float32, n int){"fma": fmaDecLoop, "conv": convDecLoop, "both": bothDecLoop, "conv-nomul": convNoMulDecLoop, "both-nomul": bothNoMulDecLoop}
}

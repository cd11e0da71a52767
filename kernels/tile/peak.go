package tile

// PeakLoop returns the calibration kernel of a tier: a tight loop of
// independent multiply-add chains on registers only, the denominator of the
// "percent of peak" figures. The function runs iters iterations and returns
// the flops it did:
//
//   - "avx512": 12 zmm accumulators of VFMADD231PS; one instruction counts
//     2*16 = 32 flops.
//   - "avx2": 12 ymm accumulators of VFMADD231PS; 2*8 = 16 flops.
//   - "avx512bf16": 12 zmm accumulators of VDPBF16PS; each of the 16 fp32
//     lanes does two bf16 products and two additions, so one instruction
//     counts 4*16 = 64 flops (the same count as two fp32 FMAs, so that the
//     4*m*n*d flops of an Update compare directly).
//   - "amxbf16": 4 AMX accumulator tiles of TDPBF16PS (16x16 fp32 outputs,
//     32 bf16 products each), operand tiles in registers; one instruction
//     counts 16*16*32*2 = 16384 flops.
//   - "generic": scalar Go multiply-adds, 2 flops each.
//
// It returns nil for a tier that is unknown, has no loop, or is not
// supported by this CPU. The loops are kernels of the tier's instruction
// set, generated with the others (asmgen); timing them is package
// internal/calib's.
func PeakLoop(tier string) func(iters int) float64 {
	t := findTier(tier)
	if t == nil || t.peak == nil || t.missing() != "" {
		return nil
	}
	return t.peak
}

// peakSink keeps the generic calibration loop from being optimised away.
var peakSink float32

// peakGeneric is the scalar calibration loop: 8 independent multiply-add
// chains (Go does not fuse them on the baseline GOAMD64).
func peakGeneric(iters int) float64 {
	var a0, a1, a2, a3, a4, a5, a6, a7 float32
	x, y := float32(0.999), float32(1e-3)
	for i := 0; i < iters; i++ {
		a0 = a0*x + y
		a1 = a1*x + y
		a2 = a2*x + y
		a3 = a3*x + y
		a4 = a4*x + y
		a5 = a5*x + y
		a6 = a6*x + y
		a7 = a7*x + y
	}
	if s := a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7; s == 42 { // never: keeps the loop alive
		peakSink = s
	}
	return float64(iters) * 8 * 2
}

package tile

import (
	"runtime"
	"sync"
	"time"
)

// PeakGFLOPS measures the multiply-add throughput of one core for a tier with
// a tight loop of independent accumulators and returns GFLOP/s, the
// denominator of the "percent of peak" figures:
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
// It runs for about dur on the calling goroutine, timing windows of about
// 0.1-0.5 ms, and returns the best window's rate: on a time-shared machine
// that is the rate of the core when the goroutine has it, which is also what
// BenchmarkUpdate's best-window metric reports. It returns 0 for a tier that
// is unknown or not supported by this CPU.
func PeakGFLOPS(tier string, dur time.Duration) float64 {
	t := findTier(tier)
	if t == nil || t.peak == nil || t.missing() != "" {
		return 0
	}
	const iters = 1 << 12
	t.peak(iters) // warm up (clock ramp, page in the code)
	best := 0.0
	start := time.Now()
	for time.Since(start) < dur {
		w := time.Now()
		f := t.peak(iters)
		if r := f / time.Since(w).Seconds() / 1e9; r > best {
			best = r
		}
	}
	return best
}

// SustainedGFLOPS runs the calibration loop of PeakGFLOPS for about dur on
// the calling goroutine and returns the average rate over the whole
// interval (all flops / elapsed time) rather than the best window's: on a
// time-shared machine it includes the time the core was not ours, like a
// timed op of the same duration does (0 for an unknown or unsupported
// tier).
func SustainedGFLOPS(tier string, dur time.Duration) float64 {
	t := findTier(tier)
	if t == nil || t.peak == nil || t.missing() != "" {
		return 0
	}
	const iters = 1 << 12
	f := 0.0
	start := time.Now()
	for time.Since(start) < dur {
		f += t.peak(iters)
	}
	return f / time.Since(start).Seconds() / 1e9
}

// SumOnThreads runs rate(0), ..., rate(n-1) at once, each on its own
// goroutine locked to an OS thread (as the ops' workers run), and returns
// the sum of their results: the combined rate of n workers measuring at the
// same time (PeakGFLOPS, SustainedGFLOPS, UpdateMeter.Sustained).
func SumOnThreads(n int, rate func(i int) float64) float64 {
	rates := make([]float64, n)
	var wg sync.WaitGroup
	for i := range rates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			rates[i] = rate(i)
		}()
	}
	wg.Wait()
	all := 0.0
	for _, r := range rates {
		all += r
	}
	return all
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

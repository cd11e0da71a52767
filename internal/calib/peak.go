package calib

import (
	"runtime"
	"sync"
	"time"
)

// Loop is a calibration kernel: it runs iters iterations of a multiply-add
// loop and returns the flops it did (tile.PeakLoop gives each CPU tier's).
type Loop func(iters int) float64

// loopIters is the iterations of one timed window of a Loop: about 0.1-0.5
// ms for the tiers' loops (12 independent chains per iteration), short
// enough that a window usually falls inside one scheduler time slice.
const loopIters = 1 << 12

// PeakGFLOPS runs loop for about dur on the calling goroutine, timing
// windows of loopIters iterations, and returns the best window's rate in
// GFLOP/s: on a time-shared machine that is the rate of the core when the
// goroutine has it, which is also what the kernels' best-window benchmark
// metrics report. It returns 0 for a nil loop (a tier that is unknown or not
// supported by this CPU).
func PeakGFLOPS(loop Loop, dur time.Duration) float64 {
	if loop == nil {
		return 0
	}
	loop(loopIters) // warm up (clock ramp, page in the code)
	best := 0.0
	start := time.Now()
	for time.Since(start) < dur {
		w := time.Now()
		f := loop(loopIters)
		if r := f / time.Since(w).Seconds() / 1e9; r > best {
			best = r
		}
	}
	return best
}

// SustainedGFLOPS runs loop for about dur on the calling goroutine and
// returns the average rate over the whole interval (all flops / elapsed
// time) rather than the best window's: on a time-shared machine it includes
// the time the core was not ours, like a timed op of the same duration does
// (0 for a nil loop).
func SustainedGFLOPS(loop Loop, dur time.Duration) float64 {
	if loop == nil {
		return 0
	}
	f := 0.0
	start := time.Now()
	for time.Since(start) < dur {
		f += loop(loopIters)
	}
	return f / time.Since(start).Seconds() / 1e9
}

// SumOnThreads runs rate(0), ..., rate(n-1) at once, each on its own
// goroutine locked to an OS thread (as the ops' workers run), and returns
// the sum of their results: the combined rate of n workers measuring at the
// same time (PeakGFLOPS, SustainedGFLOPS, updatemeter.Meter.Sustained).
func SumOnThreads(n int, rate func(i int) float64) float64 {
	rates := make([]float64, max(n, 0))
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

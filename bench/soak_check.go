package main

import (
	"fmt"
	"slices"
)

// growth compares a sampled quantity's maximum over the last third of a
// run with its maximum over the middle third; the first third is the
// warm-up and is not judged. A quantity that leaks a little every step
// ends the last third above anything the middle third reached, by the
// leak rate times a third of the run; a flat one may differ only by what
// legitimately comes and goes between samples (the allowance).
type growth struct {
	name      string // the quantity, as the failure message names it
	unit      string // "MiB" or "" (a count)
	mid, last float64
	allowance float64
	why       string // how the allowance is derived
	judged    bool   // false when there are too few samples
}

// sudogCacheBytes bounds a P's sudog cache: 128 sudogs of under 128 bytes
// (soakChecks).
const sudogCacheBytes = 128 * 128

// minPerThird is the fewest samples each third needs to be judged.
const minPerThird = 3

// checkGrowth judges xs (samples in time order) against allowance.
func checkGrowth(name, unit string, xs []float64, allowance float64, why string) growth {
	g := growth{name: name, unit: unit, allowance: allowance, why: why}
	n := len(xs)
	if n < 3*minPerThird {
		return g
	}
	g.judged = true
	g.mid = slices.Max(xs[n/3 : 2*n/3])
	g.last = slices.Max(xs[2*n/3:])
	return g
}

func (g growth) grew() bool { return g.judged && g.last-g.mid > g.allowance }

func (g growth) value(x float64) string {
	if g.unit == "MiB" {
		return fmt.Sprintf("%.2f MiB", x/(1<<20))
	}
	return fmt.Sprintf("%.0f", x)
}

// String is the check's verdict line.
func (g growth) String() string {
	if !g.judged {
		return fmt.Sprintf("%s: not judged (fewer than %d samples per third; lengthen -soak or shorten -soak-every)", g.name, minPerThird)
	}
	verdict := "flat"
	if g.grew() {
		verdict = "GREW"
	}
	return fmt.Sprintf("%s %s: max %s in the last third against %s in the middle third (%+.4g%s, allowance %s: %s)",
		g.name, verdict, g.value(g.last), g.value(g.mid), scaled(g.last-g.mid, g.unit), unitSuffix(g.unit), g.value(g.allowance), g.why)
}

func scaled(x float64, unit string) float64 {
	if unit == "MiB" {
		return x / (1 << 20)
	}
	return x
}

func unitSuffix(unit string) string {
	if unit == "" {
		return ""
	}
	return " " + unit
}

// soakChecks judges the samples: the Go heap and the goroutine count must
// stay flat; RSS is reported, not judged.
//
// Heap allowance: the live heap is read after a forced GC between steps,
// when nothing of a step is in flight, so it holds the caches, the
// loop's fixed buffers and what the library keeps for reuse (workspaces,
// schedules, worker pools). Those reuse buffers only grow when a step
// needs a larger one, and priming runs the largest shapes before the first
// sample; a buffer a step keeps is allocated by that step, so a correct
// loop moves the live heap between two samples by at most the most one
// step allocates (maxStepAlloc, measured over the run). A leak of L bytes
// per step raises the last third's maximum by L times the steps of a
// third, which passes that bound once the third has more steps than
// maxStepAlloc / L.
//
// The runtime adds one term: a goroutine that waits (the ops' callers on
// their workers) takes a sudog from its P's cache and the waker may
// return it to another P's, so the per-P caches fill slowly, over
// minutes, up to their bound of 128 sudogs per P. A sudog is under 128
// bytes (112 in Go 1.26), so this is at most sudogCacheBytes per P.
//
// Goroutine allowance 0: samples are taken between steps, when the ops
// have returned; the worker goroutines they keep (eager pool, the
// wrapper's pool) were started by priming and are reused, so the count is
// the same at every sample.
//
// RSS is not judged: after the heap is flat it follows the runtime's
// scavenger (which returns freed pages to the OS in the background) and
// the kernel, not the program.
func soakChecks(s []soakSample, maxStepAlloc uint64, procs int) (heap, gor growth) {
	hs := make([]float64, len(s))
	gs := make([]float64, len(s))
	for i, x := range s {
		hs[i], gs[i] = float64(x.heapLive), float64(x.goroutines)
	}
	heap = checkGrowth("Go heap (live bytes after GC)", "MiB", hs, float64(maxStepAlloc)+float64(procs*sudogCacheBytes),
		fmt.Sprintf("the most one step allocated + %d Ps x %d KiB of the runtime's sudog caches", procs, sudogCacheBytes>>10))
	gor = checkGrowth("goroutine count", "", gs, 0,
		"samples fall between steps, and the ops' worker goroutines are started by priming and reused")
	return heap, gor
}

package main

import (
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// stepHist is a histogram of step times in logarithmic buckets: bucket i
// holds durations in [histMin*histRatio^i, histMin*histRatio^(i+1)), so a
// quantile read from it (the bucket's upper edge) is at most 2% above the
// true value. A fixed array, so that recording a step allocates nothing
// and the soak loop's own memory does not grow with the step count.
type stepHist struct {
	n      int64
	counts [histBuckets]int64
	max    time.Duration
}

const (
	histMin     = time.Microsecond
	histRatio   = 1.02
	histBuckets = 1100 // histMin * 1.02^1100 is about 2.9e9 s: every step fits
)

func (h *stepHist) add(d time.Duration) {
	i := 0
	if d > histMin {
		i = min(int(math.Log(float64(d)/float64(histMin))/math.Log(histRatio)), histBuckets-1)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
}

// quantile returns the upper edge of the bucket holding the p-quantile
// (nearest rank), capped at the largest recorded step; 0 when empty.
func (h *stepHist) quantile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := max(int64(math.Ceil(p*float64(h.n))), 1)
	var seen int64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return min(time.Duration(float64(histMin)*math.Pow(histRatio, float64(i+1))), h.max)
		}
	}
	return h.max
}

func (h *stepHist) reset() { *h = stepHist{} }

// soakSample is one point of the soak's time series, taken between steps.
type soakSample struct {
	at         time.Duration // since the first sample
	steps      int64         // steps so far
	tokens     int64         // prefill + decode tokens so far
	p50, p99   time.Duration // step times since the previous sample
	heapLive   uint64        // bytes of live heap objects after a forced GC
	rss        int64         // resident set size in bytes; -1: unknown on this OS
	goroutines int
	active     int // requests in flight
	gcs        uint64
}

// Metrics read through runtime/metrics. /gc/heap/live:bytes is the heap
// the last completed GC found live; read right after runtime.GC() it is
// the live heap at that moment.
const (
	metricHeapLive   = "/gc/heap/live:bytes"
	metricHeapAllocs = "/gc/heap/allocs:bytes"
	metricGCs        = "/gc/cycles/total:gc-cycles"
	metricGoroutines = "/sched/goroutines:goroutines"
)

// soakMeter records step times and the bytes each step allocates, and
// takes the samples. Its buffers are allocated up front.
type soakMeter struct {
	all, window  stepHist
	steps        int64
	maxStepAlloc uint64 // the most heap bytes one step allocated
	lastAllocs   uint64
	samples      []soakSample
	allocs       []metrics.Sample // metricHeapAllocs
	state        []metrics.Sample // live heap, GC cycles, goroutines
}

func newSoakMeter(samples int) *soakMeter {
	m := &soakMeter{
		samples: make([]soakSample, 0, samples),
		allocs:  []metrics.Sample{{Name: metricHeapAllocs}},
		state:   []metrics.Sample{{Name: metricHeapLive}, {Name: metricGCs}, {Name: metricGoroutines}},
	}
	m.lastAllocs = m.heapAllocs()
	return m
}

func (m *soakMeter) heapAllocs() uint64 {
	metrics.Read(m.allocs)
	return m.allocs[0].Value.Uint64()
}

// stepDone records a step's time and what it allocated (the heap bytes
// allocated since the previous step or sample ended).
func (m *soakMeter) stepDone(d time.Duration) {
	m.steps++
	m.all.add(d)
	m.window.add(d)
	a := m.heapAllocs()
	m.maxStepAlloc = max(m.maxStepAlloc, a-m.lastAllocs)
	m.lastAllocs = a
}

// sample forces a GC (so that the live heap is exact, with nothing of a
// step in flight) and records the state.
func (m *soakMeter) sample(at time.Duration, l *soakLoop) {
	runtime.GC()
	metrics.Read(m.state)
	active := 0
	for i := range l.reqs {
		if l.reqs[i].active {
			active++
		}
	}
	m.samples = append(m.samples, soakSample{
		at: at, steps: m.steps, tokens: l.prefillTokens + l.decodeTokens,
		p50: m.window.quantile(0.5), p99: m.window.quantile(0.99),
		heapLive: m.state[0].Value.Uint64(), gcs: m.state[1].Value.Uint64(),
		goroutines: int(m.state[2].Value.Uint64()),
		rss:        readRSS(), active: active,
	})
	m.window.reset()
	// The GC and this sample's own allocations are not a step's.
	m.lastAllocs = m.heapAllocs()
}

// readRSS returns the resident set size from /proc/self/statm (its second
// field, in pages), or -1 where there is no such file (not Linux).
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	return parseStatm(string(b), os.Getpagesize())
}

// parseStatm returns the resident pages of a /proc/self/statm line times
// the page size, or -1 when the line is malformed.
func parseStatm(s string, pageSize int) int64 {
	f := strings.Fields(s)
	if len(f) < 2 {
		return -1
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || pages < 0 {
		return -1
	}
	return pages * int64(pageSize)
}

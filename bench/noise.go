package main

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Noise rules. A row is flagged noisy when any of these holds (README.md,
// "Noise"); the run is flagged when any row is.
const (
	// noisyIQR: the interquartile range of the timed calls above this
	// fraction of their median.
	noisyIQR = 0.10
	// noisyMaxMin: the slowest timed call above this multiple of the fastest.
	noisyMaxMin = 1.5
	// noisyOthers: other processes used more than this share of all CPUs'
	// time while the case ran (from /proc/stat, less this process's own
	// CPU time).
	noisyOthers = 0.25
	// noisySteal: the hypervisor took more than this share of all CPUs'
	// time (/proc/stat's steal column).
	noisySteal = 0.05
	// noisyExcessLoad: the 1-minute load average, less this process's
	// workers, above this multiple of the CPU count at the start or the end
	// of the case.
	noisyExcessLoad = 0.5
)

// spread summarises the timed calls of one case.
type spread struct {
	reps                int
	best, median, worst float64 // ms
	q1, q3              float64 // ms, linear-interpolated quartiles
	relIQR              float64 // (q3 - q1) / median
	maxMin              float64 // worst / best
	ok                  bool    // at least one sample
}

// quantile returns the p-quantile (0..1) of sorted xs by linear
// interpolation between the closest ranks.
func quantile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := p * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	f := pos - float64(lo)
	return sorted[lo]*(1-f) + sorted[hi]*f
}

// spreadOf computes the spread of the per-call times (ms) of one case.
func spreadOf(samples []float64) spread {
	if len(samples) == 0 {
		return spread{}
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	sp := spread{reps: len(s), best: s[0], worst: s[len(s)-1], median: s[len(s)/2],
		q1: quantile(s, 0.25), q3: quantile(s, 0.75), ok: true}
	if sp.median > 0 {
		sp.relIQR = (sp.q3 - sp.q1) / sp.median
	}
	if sp.best > 0 {
		sp.maxMin = sp.worst / sp.best
	}
	return sp
}

// cpuSample is a snapshot of the machine's CPU time (/proc/stat's
// aggregate cpu line, in seconds summed over CPUs), this process's CPU
// time and the load average.
type cpuSample struct {
	busy, steal, total float64 // seconds over all CPUs
	self               float64 // this process's user + system seconds
	load               float64 // 1-minute load average
	statOK, loadOK     bool
}

// clockTick is USER_HZ, the unit of /proc/stat (100 on every Linux ABI Go
// supports).
const clockTick = 100

// parseProcStat reads the aggregate "cpu" line of /proc/stat: busy is
// user + nice + system + irq + softirq (guest time is already inside user),
// steal the hypervisor's share, total every column up to steal (idle and
// iowait included), all in seconds.
func parseProcStat(b []byte) (busy, steal, total float64, ok bool) {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var v [8]float64
		for i := 1; i < len(f) && i <= 8; i++ {
			x, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return 0, 0, 0, false
			}
			v[i-1] = x / clockTick
		}
		// user nice system idle iowait irq softirq steal
		busy = v[0] + v[1] + v[2] + v[5] + v[6]
		steal = v[7]
		total = busy + v[3] + v[4] + steal
		return busy, steal, total, true
	}
	return 0, 0, 0, false
}

// parseLoadAvg returns the 1-minute load average of /proc/loadavg.
func parseLoadAvg(b []byte) (float64, bool) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	x, err := strconv.ParseFloat(f[0], 64)
	return x, err == nil
}

func readCPUSample() cpuSample {
	var s cpuSample
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		s.busy, s.steal, s.total, s.statOK = parseProcStat(b)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		s.load, s.loadOK = parseLoadAvg(b)
	}
	s.self = processCPUSeconds()
	return s
}

// withChild counts the CPU time of a child process that has exited (ps:
// its state; nil when it did not start) as this process's own in sample
// s, so that a baseline measured in a child (PyTorch) is not counted as
// other processes' load while it runs.
func withChild(s cpuSample, ps *os.ProcessState) cpuSample {
	if ps != nil {
		s.self += (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	return s
}

// loadStats is what the rest of the machine did while one case ran.
type loadStats struct {
	ok                 bool    // /proc/stat was readable at both ends
	loadStart, loadEnd float64 // 1-minute load average (0 when unknown)
	others             float64 // share of all CPUs' time used by other processes
	steal              float64 // share of all CPUs' time stolen by the hypervisor
}

// loadBetween compares two samples taken around a case.
func loadBetween(a, b cpuSample) loadStats {
	ls := loadStats{loadStart: a.load, loadEnd: b.load}
	if !a.statOK || !b.statOK {
		return ls
	}
	total := b.total - a.total
	if total <= 0 {
		return ls
	}
	ls.ok = true
	ls.others = max(0, (b.busy-a.busy)-(b.self-a.self)) / total
	ls.others = min(ls.others, 1)
	ls.steal = max(0, b.steal-a.steal) / total
	return ls
}

// noiseVerdict lists why a row is noisy (nil when it is not): the spread of
// its timed calls, the load and steal around it, and any ratio above 100%.
func noiseVerdict(sp spread, ls loadStats, ncpu, workers int, ratios map[string]float64) []string {
	var why []string
	if sp.ok && sp.reps < minReps {
		why = append(why, fmt.Sprintf("only %d reps", sp.reps))
	}
	if sp.ok && (sp.relIQR > noisyIQR || sp.maxMin > noisyMaxMin) {
		why = append(why, "spread")
	}
	excess := max(ls.loadStart, ls.loadEnd) - float64(workers)
	if (ls.ok && ls.others > noisyOthers) || excess > noisyExcessLoad*float64(ncpu) {
		why = append(why, "load")
	}
	if ls.ok && ls.steal > noisySteal {
		why = append(why, "steal")
	}
	for _, v := range ratios {
		if v > 100 {
			why = append(why, ">100%")
			break
		}
	}
	return why
}

// minReps is the least number of timed calls per case (after one warm-up
// call), enforced by timeIt.
const minReps = 3

// pct formats a percentage column: a ratio above 100% is never printed as
// a value but as "noisy>100" (a time-shared core, or for %BW a working set
// that stayed in cache: README.md, "Noise").
func pct(x float64) string {
	if x > 100 {
		return "noisy>100"
	}
	return f1(x)
}

// pctCSV is pct for the CSV: the number when at most 100, else empty (the
// raw value is in the notes).
func pctCSV(x float64) string {
	if x > 100 {
		return ""
	}
	return num(x)
}

// describeNoise is the note explaining a row's noise figures.
func describeNoise(sp spread, ls loadStats) string {
	var parts []string
	if sp.ok {
		parts = append(parts, fmt.Sprintf("%d reps, best %s / median %s / worst %s ms (max/min %.2f, IQR %.0f%% of median)",
			sp.reps, f1(sp.best), f1(sp.median), f1(sp.worst), sp.maxMin, 100*sp.relIQR))
	}
	if ls.ok {
		parts = append(parts, fmt.Sprintf("others used %.0f%% and steal %.0f%% of the CPUs", 100*ls.others, 100*ls.steal))
	}
	if ls.loadStart > 0 || ls.loadEnd > 0 {
		parts = append(parts, fmt.Sprintf("load average %.2f -> %.2f", ls.loadStart, ls.loadEnd))
	}
	return strings.Join(parts, ", ")
}

package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
)

// soakReport is the outcome of a soak run: the time series, the totals
// and the growth checks.
type soakReport struct {
	samples               []soakSample
	steps                 int64
	prefillTok, decodeTok int64
	admitted, done        int64
	p50, p99, maxStep     time.Duration
	maxStepAlloc          uint64
	heap, goroutines      growth
	verify, verifyDetail  string // the decode outputs checked at each sample (checker.verdict)
}

// report finishes the run's figures and judges the samples.
func (m *soakMeter) report(l *soakLoop, ck *checker) (*soakReport, error) {
	if m.steps == 0 {
		return nil, fmt.Errorf("no step finished within the duration")
	}
	r := &soakReport{
		samples: m.samples, steps: m.steps, prefillTok: l.prefillTokens, decodeTok: l.decodeTokens,
		admitted: l.admitted, done: l.done,
		p50: m.all.quantile(0.5), p99: m.all.quantile(0.99), maxStep: m.all.max,
		maxStepAlloc: m.maxStepAlloc,
	}
	r.heap, r.goroutines = soakChecks(m.samples, m.maxStepAlloc, runtime.GOMAXPROCS(0))
	r.verify, r.verifyDetail = ck.verdict()
	return r, nil
}

// soakHeader names the time series' columns (the CSV's heap and RSS
// columns are in bytes: heap_live_bytes, rss_bytes).
var soakHeader = []string{"t_s", "steps", "tokens", "step_p50_ms", "step_p99_ms", "heap_live_mib", "rss_mib", "goroutines", "active", "gc_cycles"}

func msCell(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", ms(d))
}

func (s soakSample) cells(bytes bool) []string {
	size := func(x float64) string {
		if bytes {
			return fmt.Sprintf("%.0f", x)
		}
		return fmt.Sprintf("%.2f", x/(1<<20))
	}
	rss := "-"
	if s.rss >= 0 {
		rss = size(float64(s.rss))
	}
	return []string{
		fmt.Sprintf("%.2f", s.at.Seconds()), fmt.Sprint(s.steps), fmt.Sprint(s.tokens),
		msCell(s.p50), msCell(s.p99),
		size(float64(s.heapLive)), rss,
		fmt.Sprint(s.goroutines), fmt.Sprint(s.active), fmt.Sprint(s.gcs),
	}
}

// rows is the time series with a header row: sizes in MiB for the
// table, in bytes for the CSV (-out DIR: DIR/soak.csv). Step times are
// those of the steps since the previous sample ("-" in the first row and
// wherever no step ended in between).
func (r *soakReport) rows(bytes bool) [][]string {
	h := slices.Clone(soakHeader)
	if bytes {
		h[5], h[6] = "heap_live_bytes", "rss_bytes"
	}
	rows := [][]string{h}
	for _, s := range r.samples {
		rows = append(rows, s.cells(bytes))
	}
	return rows
}

// print writes the time series table, the totals and the checks.
func (r *soakReport) print(w io.Writer) {
	fmt.Fprintln(w)
	alignRows(w, r.rows(false), "")
	last := r.samples[len(r.samples)-1]
	secs := last.at.Seconds()
	fmt.Fprintf(w, "\n%d steps in %.1f s (%.1f steps/s); %d requests admitted, %d finished; tokens: %d prefill + %d decode = %.0f tokens/s\n",
		r.steps, secs, float64(r.steps)/secs, r.admitted, r.done, r.prefillTok, r.decodeTok, float64(r.prefillTok+r.decodeTok)/secs)
	fmt.Fprintf(w, "step time: p50 %.3f ms, p99 %.3f ms, max %.3f ms (p50/p99 from 2%% buckets); the most one step allocated: %.2f MiB\n",
		ms(r.p50), ms(r.p99), ms(r.maxStep), float64(r.maxStepAlloc)/(1<<20))
	if last.rss < 0 {
		fmt.Fprintln(w, "RSS: not measured (no /proc/self/statm on this OS)")
	} else {
		fmt.Fprintf(w, "RSS: %.2f MiB at the first sample, %.2f MiB at the last (reported, not judged)\n",
			float64(r.samples[0].rss)/(1<<20), float64(last.rss)/(1<<20))
	}
	fmt.Fprintf(w, "decode outputs at each sample against float64: %s, %s\n", r.verify, r.verifyDetail)
	fmt.Fprintln(w, r.heap)
	fmt.Fprintln(w, r.goroutines)
}

// failures lists the checks that failed or could not be made.
func (r *soakReport) failures() []string {
	var f []string
	if r.verify != "ok" {
		f = append(f, "decode outputs wrong: "+r.verifyDetail)
	}
	for _, g := range []growth{r.heap, r.goroutines} {
		if !g.judged || g.grew() {
			f = append(f, g.String())
		}
	}
	return f
}

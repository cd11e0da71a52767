package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// The reference's own decoders must agree with the format definitions the
// kernels use (they are written independently, from docs/contract.md).
func TestDecoders(t *testing.T) {
	for b := 0; b < 256; b++ {
		x := lowp.Float8E4M3FN(b)
		got, want := e4m3Val(x), float64(x.Float32())
		if !(got == want || math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("e4m3 %#x: %v, want %v", b, got, want)
		}
	}
	for b := 0; b < 1<<16; b += 7 {
		x := lowp.BFloat16(b)
		got, want := bf16Val(x), float64(x.Float32())
		if !(got == want || math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("bf16 %#x: %v, want %v", b, got, want)
		}
	}
	rows, d := 300, 64
	x := normals(rows*d, 1)
	packed, scales, err := lowp.QuantizeNVFP4(x, rows, d, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	src := nvfp4Rows{packed: packed, scales: scales, global: 0.5}
	want := make([]float32, d)
	for r := 0; r < rows; r++ {
		lowp.DequantizeNVFP4Row(want, packed, scales, r, d, 0.5)
		for c, g := range src.row(r, d) {
			if g != float64(want[c]) {
				t.Fatalf("nvfp4 row %d col %d: %v, want %v", r, c, g, want[c])
			}
		}
	}
}

// causalQ2K must pick distinct visible blocks, the diagonal first, and
// count visible pairs exactly.
func TestCausalQ2K(t *testing.T) {
	for _, tc := range []struct{ T, topK, blk int }{{1000, 4, 128}, {512, 16, 128}, {2048, 8, 64}} {
		q2k, pairs, err := causalQ2K(tc.T, 2, tc.topK, tc.blk, 3)
		if err != nil {
			t.Fatal(err)
		}
		var brute int64
		for h := 0; h < 2; h++ {
			for q := 0; q < tc.T; q++ {
				list := q2k[(h*tc.T+q)*tc.topK : (h*tc.T+q+1)*tc.topK]
				if int(list[0]) != q/tc.blk {
					t.Fatalf("q %d: first block %d, want diagonal %d", q, list[0], q/tc.blk)
				}
				seen := map[int32]bool{}
				n := 0
				for _, j := range list {
					if j < 0 {
						continue
					}
					n++
					if seen[j] || int(j) > q/tc.blk {
						t.Fatalf("q %d: bad list %v", q, list)
					}
					seen[j] = true
					for k := int(j) * tc.blk; k < (int(j)+1)*tc.blk; k++ {
						if k <= q && k < tc.T {
							brute++
						}
					}
				}
				if n != min(tc.topK, q/tc.blk+1) {
					t.Fatalf("q %d: %d blocks, want %d", q, n, min(tc.topK, q/tc.blk+1))
				}
			}
		}
		if brute != pairs {
			t.Fatalf("%+v: pairs %d, brute force %d", tc, pairs, brute)
		}
	}
}

// The checker must flag an output that is off by more than the tolerance.
func TestCheckerDetects(t *testing.T) {
	keys := [][]float64{{1, 0}, {0, 1}, {1, 1}}
	vals := [][]float64{{1, 2}, {3, 4}, {-1, 0.5}}
	want := refAttention([]float64{0.3, -0.2}, keys, vals, 0.7)
	ck := &checker{tol: makeTolerance(true, false, false)}
	good := []float32{float32(want[0]), float32(want[1])}
	ck.row("good", good, want, maxAbs(vals))
	if v, _ := ck.verdict(); v != "ok" {
		t.Fatalf("exact output rejected")
	}
	bad := []float32{float32(want[0] + 0.1), float32(want[1])}
	ck.row("bad", bad, want, maxAbs(vals))
	if v, _ := ck.verdict(); v != "FAIL" {
		t.Fatalf("output off by 0.1 accepted")
	}
}

// The paired reference windows must measure something and the medians be
// the middle element.
func TestRefMeter(t *testing.T) {
	m := newRefMeter(calibration{peakTier: peakTier(tile.Tier()), decodeTier: decodePeakTier(tile.Tier())}, 2, 4<<20)
	for _, kind := range []string{"prefill", "decode"} {
		loop, scale := m.cal.loopFor(caseSpec{Kind: kind, DType: "bf16", D: 128})
		if pk := m.peak(10*time.Millisecond, loop, scale); !(pk > 0) {
			t.Fatalf("%s peak window: %v GFLOP/s", kind, pk)
		}
	}
	if bw := m.bandwidth(10 * time.Millisecond); !(bw > 0) {
		t.Fatalf("bandwidth window: %v GB/s", bw)
	}
	if got := refWindow(time.Millisecond); got != 20*time.Millisecond {
		t.Fatalf("refWindow(1ms) = %v", got)
	}
	if got := refWindow(time.Minute); got != 250*time.Millisecond {
		t.Fatalf("refWindow(1m) = %v", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Fatalf("median = %v", got)
	}
	if got := median(nil); got != 0 {
		t.Fatalf("median(nil) = %v", got)
	}
	r := &result{flops: 1e9}
	p := &paired{m: m, r: r}
	p.after(10 * time.Millisecond)
	p.finish()
	if !(r.pctPeak > 0) || r.pctBW != 0 || r.pctKern != 0 {
		t.Fatalf("paired: %%peak %v, %%BW %v, %%kern %v (want > 0, 0 without bandwidth, 0 without a kernel meter)", r.pctPeak, r.pctBW, r.pctKern)
	}
	// The kernel windows: prefill's and decode's tiles measure something;
	// a tile no meter can be made for (rows 0, or 17 decode lanes) none.
	for _, c := range []struct {
		key  meterKey
		want bool
	}{{meterKey{128, 64, false}, true}, {meterKey{16, 64, true}, true}, {meterKey{0, 64, false}, false}, {meterKey{17, 64, true}, false}} {
		r := &result{flops: 1e9}
		p := &paired{m: m, r: r, kern: c.key}
		p.after(10 * time.Millisecond)
		p.finish()
		if (r.pctKern > 0) != c.want {
			t.Fatalf("paired, kernel %+v: %%kern %v, want > 0: %v", c.key, r.pctKern, c.want)
		}
	}
}

// Decode runs FP32 lane kernels on every tier, so its peak loop is the
// FP32 one of the same width even on the avx512bf16 tier, and a decode
// case reports against that peak.
func TestDecodePeakTier(t *testing.T) {
	for tier, want := range map[string]string{"amxbf16": "amxbf16", "avx512bf16": "avx512", "avx512bf16-emulated": "avx512", "avx512": "avx512", "avx2": "avx2", "generic": "generic"} {
		if got := decodePeakTier(tier); got != want {
			t.Errorf("decodePeakTier(%q) = %q, want %q", tier, got, want)
		}
	}
	cal := calibration{peakTier: "avx512bf16", peak: 400, decodeTier: "avx512", decPeak: 200}
	for kind, want := range map[string]float64{"prefill": 400, "nvfp4": 400, "decode": 200} {
		r := &result{c: caseSpec{Kind: kind}, flops: 1e9, timeMS: 10}
		r.derive(cal)
		if r.peak != want || r.pctBurst != 100*100/want {
			t.Errorf("%s: peak %v, %%burst %v; want %v, %v", kind, r.peak, r.pctBurst, want, 100*100/want)
		}
	}
}

// timeIt must time at least minReps calls however long the warm-up took
// (the old rule dropped to 2 after a slow warm-up).
func TestTimeItMinReps(t *testing.T) {
	calls := 0
	_, _, reps, err := timeIt(time.Nanosecond, minReps, 100, func() error {
		calls++
		if calls == 1 {
			time.Sleep(5 * time.Millisecond) // a warm-up far over 2*minTime
		}
		return nil
	}, nil)
	if err != nil || reps < minReps || calls != reps+1 {
		t.Fatalf("reps %d, calls %d, err %v; want >= %d timed calls after one warm-up", reps, calls, err, minReps)
	}
}

func TestSpreadAndNoiseFlags(t *testing.T) {
	sp := spreadOf([]float64{10, 11, 10.5, 10.2})
	if sp.reps != 4 || sp.best != 10 || sp.worst != 11 || sp.median != 10.5 || math.Abs(sp.maxMin-1.1) > 1e-12 {
		t.Fatalf("spread %+v", sp)
	}
	if got := quantile([]float64{1, 2, 3, 4, 5}, 0.25); got != 2 {
		t.Fatalf("quantile = %v, want 2", got)
	}
	quiet := loadStats{ok: true, loadStart: 2, loadEnd: 2.2, others: 0.05, steal: 0.01}
	if why := noiseVerdict(sp, quiet, 2, 2, map[string]float64{"%peak": 60}); why != nil {
		t.Fatalf("quiet case flagged: %v", why)
	}
	for _, tc := range []struct {
		name    string
		samples []float64
		ls      loadStats
		ratio   float64
		want    string
	}{
		{"max/min", []float64{10, 10, 16}, quiet, 50, "spread"},
		{"IQR", []float64{10, 12, 14, 16, 18}, quiet, 50, "spread"},
		{"others", []float64{10, 10, 10}, loadStats{ok: true, others: 0.5}, 50, "load"},
		{"load average", []float64{10, 10, 10}, loadStats{loadStart: 2, loadEnd: 13}, 50, "load"},
		{"steal", []float64{10, 10, 10}, loadStats{ok: true, steal: 0.2}, 50, "steal"},
		{"ratio", []float64{10, 10, 10}, quiet, 216, ">100%"},
		{"reps", []float64{10, 10}, quiet, 50, "only 2 reps"},
	} {
		why := noiseVerdict(spreadOf(tc.samples), tc.ls, 2, 2, map[string]float64{"%peak": tc.ratio})
		if !slices.Contains(why, tc.want) {
			t.Errorf("%s: flags %v, want %q among them", tc.name, why, tc.want)
		}
	}

	// The run is noisy when any row is, and says why.
	cal := calibration{peak: 100, bw: 10, ncpu: 2, workers: 2}
	clean := &result{c: caseSpec{Name: "a", Kind: "prefill"}, flops: 1e9, timeMS: 100, reps: 3, samples: []float64{100, 100, 101}, load: quiet, pctPeak: 10}
	noisy := &result{c: caseSpec{Name: "b", Kind: "prefill"}, flops: 1e9, timeMS: 100, reps: 3, samples: []float64{60, 100, 300}, load: loadStats{ok: true, others: 0.7}, pctPeak: 10}
	clean.derive(cal)
	noisy.derive(cal)
	if v := runNoise([]*result{clean}); v != "" {
		t.Fatalf("clean run flagged: %q", v)
	}
	v := runNoise([]*result{clean, noisy})
	if !strings.HasPrefix(v, "NOISY RUN: 1 of 2 cases") || !strings.Contains(v, "spread 1") || !strings.Contains(v, "load 1") || !strings.Contains(v, "70%") {
		t.Fatalf("run verdict %q", v)
	}
}

func TestProcStatAndLoad(t *testing.T) {
	stat := "cpu  1000 0 200 5000 100 0 50 300 0 0\ncpu0 500 0 100 2500 50 0 25 150 0 0\n"
	busy, steal, total, ok := parseProcStat([]byte(stat))
	if !ok || busy != 12.5 || steal != 3 || total != 66.5 {
		t.Fatalf("parseProcStat: busy %v steal %v total %v ok %v", busy, steal, total, ok)
	}
	if _, _, _, ok := parseProcStat([]byte("intr 1 2 3\n")); ok {
		t.Fatal("parseProcStat accepted a file without a cpu line")
	}
	if l, ok := parseLoadAvg([]byte("12.73 7.96 3.76 14/195 29617\n")); !ok || l != 12.73 {
		t.Fatalf("parseLoadAvg = %v, %v", l, ok)
	}
	// 10 s of 2 CPUs: 20 CPU-seconds, 14 busy of which 4 are ours, 2 stolen.
	a := cpuSample{busy: 100, steal: 10, total: 1000, self: 1, statOK: true, load: 1}
	b := cpuSample{busy: 114, steal: 12, total: 1020, self: 5, statOK: true, load: 3}
	ls := loadBetween(a, b)
	if !ls.ok || math.Abs(ls.others-0.5) > 1e-12 || math.Abs(ls.steal-0.1) > 1e-12 || ls.loadStart != 1 || ls.loadEnd != 3 {
		t.Fatalf("loadBetween = %+v", ls)
	}
	if s := readCPUSample(); !s.statOK || s.total <= 0 {
		t.Logf("no /proc/stat here: %+v", s)
	}
}

// A ratio above 100% is never printed as a value: not in the table, not
// in the CSV; the raw figure appears only in the notes, marked.
func TestRatioClamp(t *testing.T) {
	if got := pct(216); got != "noisy>100" {
		t.Fatalf("pct(216) = %q", got)
	}
	if got := pct(99.5); got != "99.5" {
		t.Fatalf("pct(99.5) = %q", got)
	}
	if got := pct(100); got != "100" {
		t.Fatalf("pct(100) = %q", got)
	}
	if pctCSV(1398) != "" || pctCSV(42) != "42" {
		t.Fatalf("pctCSV: %q %q", pctCSV(1398), pctCSV(42))
	}
	r := &result{c: caseSpec{Name: "decode-fp8-b8-4k", Kind: "decode"}, flops: 1e9, bytes: 1e8, timeMS: 10, reps: 3,
		samples: []float64{10, 10, 10}, pctPeak: 216, pctBW: 1398, pctRoof: 300}
	r.derive(calibration{peak: 1000, bw: 1, ncpu: 2, workers: 2}) // %BW best = 1000
	var buf bytes.Buffer
	printTable(&buf, []*result{r})
	out := buf.String()
	lines := strings.Split(out, "\n")
	row := lines[2]
	for _, bad := range []string{"216", "1398", "1000", "300"} {
		if strings.Contains(row, bad) {
			t.Errorf("table row prints %s as a result: %q", bad, row)
		}
	}
	if !strings.Contains(row, " noisy ") || !strings.Contains(row, "NOISY") || !strings.Contains(out, "NOISY (>100%)") {
		t.Errorf("row %q: want the noisy %%lim cell and the NOISY flag, the notes the >100%% reason", row)
	}
	var md bytes.Buffer
	for _, c := range tableColumns([]*result{r}) {
		md.WriteString(c.cell(r) + " ")
	}
	if strings.Count(md.String(), "noisy>100") != 3 || !strings.Contains(md.String(), "NOISY:>100%") {
		t.Errorf("results.md row %q: want three noisy>100 cells (%%peak, %%BW, %%roof) and the >100%% flag", md.String())
	}
	if !strings.Contains(out, "%peak measured 216") || !strings.Contains(out, "NOISY RUN") {
		t.Errorf("notes lack the raw ratio or the run verdict:\n%s", out)
	}
}

// Off a terminal, progress is one complete line per case: no '\r', no
// phase fragments.
func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	p := newProgressTo(3, false, &buf)
	p.phase("prefill-bf16-2k", "sparse")
	r := &result{c: caseSpec{Name: "prefill-bf16-2k"}, timeMS: 12.5, reps: 3, gflops: 90, sp: spreadOf([]float64{12, 12.5, 13}),
		load: loadStats{ok: true, others: 0.4, loadEnd: 3.5}, noise: []string{"load"}}
	p.step(r)
	p.step(&result{c: caseSpec{Name: "decode-fp8-b8-64k"}, err: "skipped: K+V is 3 GiB"})
	p.stepText("PyTorch", "baselines finished")
	p.finish()
	out := buf.String()
	if strings.Contains(out, "\r") {
		t.Fatalf("line mode wrote a carriage return: %q", out)
	}
	var lines []string // each entry's first line (the others are indented)
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if strings.HasPrefix(l, "[") {
			lines = append(lines, l)
		} else if len(lines) > 0 {
			lines[len(lines)-1] += " " + strings.TrimSpace(l)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("want 3 entries, got %d: %q", len(lines), out)
	}
	for i, want := range []string{"[1/3", "[2/3", "[3/3"} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[0], "prefill-bf16-2k: 12.5 ms median of 3") || !strings.Contains(lines[0], "NOISY (load)") {
		t.Errorf("case line %q", lines[0])
	}
	if !strings.Contains(lines[1], "skipped") {
		t.Errorf("skipped line %q", lines[1])
	}
	// The PyTorch script's stderr lines become notes, whole lines only.
	buf.Reset()
	nw := &noteWriter{p: p, name: "PyTorch"}
	fmt.Fprint(nw, "1 of 2 measurements done (a)\n2 of 2 mea")
	fmt.Fprint(nw, "surements done (b)\n")
	if got := buf.String(); strings.Count(got, "\n") != 2 || strings.Contains(got, "\r") || !strings.Contains(got, "PyTorch: 2 of 2 measurements done (b)") {
		t.Fatalf("notes %q", got)
	}
	// The bar redraws one line with '\r'.
	buf.Reset()
	b := newProgressTo(2, true, &buf)
	b.phase("x", "y")
	b.step(r)
	if !strings.HasPrefix(buf.String(), "\r[") || strings.Contains(buf.String(), "\n") {
		t.Fatalf("bar output %q", buf.String())
	}
}

func plotResults() []*result {
	mk := func(kind, dt string, T, batch int, gf, xd float64, ex bool) *result {
		name := fmt.Sprintf("%s-%s-b%d-%d", kind, dt, batch, T)
		r := &result{c: caseSpec{Name: name, Kind: kind, DType: dt, SeqLen: T, Batch: batch}, timeMS: 1, gflops: gf, pctPeak: 40,
			denseMS: xd, speedupDense: xd, denseExtrap: ex, torch: torchResult{ms: xd / 2, speedup: xd / 2, extrap: ex}, tsparse: torchResult{ms: 3, speedup: 3}}
		if kind == "decode" {
			r.pctRoof = 70
		}
		return r
	}
	return []*result{
		mk("prefill", "bf16", 2048, 1, 100, 10, false),
		mk("prefill", "bf16", 8192, 1, 110, 40, true),
		mk("nvfp4", "bf16", 8192, 1, 95, 35, true),
		mk("decode", "fp8", 4096, 8, 50, 5, false),
		mk("decode", "fp8", 16384, 8, 55, 6, false),
		mk("decode", "bf16", 4096, 32, 40, 4, false),
		{c: caseSpec{Name: "decode-bf16-b32-64k", Kind: "decode", SeqLen: 65536, Batch: 32}, err: "skipped: too big"},
	}
}

// The plot has a prefill row (tokens) and a decode row (context, one line
// per dtype and batch), y scaled to the data, the peak as a reference line
// only near the data, and extrapolated points marked.
func TestPlotPanels(t *testing.T) {
	ps := buildPanels(calibration{peak: 250, peakTier: "avx512"}, plotResults())
	if len(ps) != 4 {
		t.Fatalf("%d panels, want 4 (prefill and decode x GFLOP/s and speedup)", len(ps))
	}
	pre, preX, dec, decX := ps[0], ps[1], ps[2], ps[3]
	if !strings.Contains(pre.xLabel, "tokens") || !strings.Contains(dec.xLabel, "context") {
		t.Fatalf("x labels %q, %q", pre.xLabel, dec.xLabel)
	}
	if !slices.Equal(pre.xs, []float64{2048, 8192}) || !slices.Equal(dec.xs, []float64{4096, 16384}) {
		t.Fatalf("x ticks %v, %v", pre.xs, dec.xs)
	}
	var names []string
	for _, s := range dec.series {
		names = append(names, s.name)
	}
	if !slices.Equal(names, []string{"decode fp8 b8", "decode bf16 b32"}) {
		t.Fatalf("decode series %v", names)
	}
	// Decode is judged by its roofline, prefill by the compute peak.
	if got := dec.series[0].pts[0].label; got != "70%" || !strings.Contains(dec.title, "roofline") {
		t.Fatalf("decode label %q, title %q: want the paired %%roof", got, dec.title)
	}
	if len(pre.series) != 2 || pre.series[0].pts[0].label != "40%" {
		t.Fatalf("prefill series %+v", pre.series)
	}
	// Peak 250 is within 3x of the prefill data (110): reference line, axis
	// above it; decode (max 55) is scaled to its data, the peak only named.
	if pre.peak != 250 || pre.yMax < 250 {
		t.Fatalf("prefill peak %v, yMax %v", pre.peak, pre.yMax)
	}
	if dec.peak != 0 || dec.yMax > 100 || !strings.Contains(dec.title, "above the axis") {
		t.Fatalf("decode peak %v, yMax %v, title %q", dec.peak, dec.yMax, dec.title)
	}
	if strings.Contains(pre.title, "NOISY") {
		t.Fatalf("quiet results titled noisy: %q", pre.title)
	}
	rs := plotResults()
	rs[0].noise = []string{"load"}
	if got := buildPanels(calibration{peak: 250}, rs)[0].title; !strings.Contains(got, "NOISY: 1 of 3 points") {
		t.Fatalf("noisy prefill title %q", got)
	}
	if !preX.logY || !decX.logY {
		t.Fatal("speedup panels must be log scale")
	}
	extrap := 0
	for _, s := range preX.series {
		for _, p := range s.pts {
			if p.extrap {
				extrap++
				if p.label != "extrap." {
					t.Errorf("extrapolated point of %s unlabelled", s.name)
				}
			}
		}
	}
	if extrap != 4 { // 8K prefill and NVFP4 8K, vs Gorgonia and PyTorch dense
		t.Fatalf("%d extrapolated prefill points, want 4", extrap)
	}
	for _, s := range decX.series {
		for _, p := range s.pts {
			if p.extrap {
				t.Fatalf("decode point marked extrapolated: %s", s.name)
			}
		}
	}
	// Only decode results: one row.
	if got := buildPanels(calibration{peak: 250}, plotResults()[3:]); len(got) != 2 {
		t.Fatalf("decode only: %d panels", len(got))
	}
	// The time panel: one bar series per baseline that ran, ours first;
	// none without a timed case.
	if tp, err := timePlot(plotResults()); err != nil || tp == nil || strings.Contains(tp.Title.Text, "reference BLAS") {
		t.Fatalf("time panel %v, %v", tp, err)
	}
	if tp, err := timePlot(plotResults()[6:]); err != nil || tp != nil {
		t.Fatalf("time panel of no timed case: %v, %v", tp, err)
	}
	rb := plotResults()
	rb[0].tsparse.refBLAS = true
	if got := buildPanels(calibration{}, rb)[1].title; !strings.Contains(got, "reference BLAS") {
		t.Fatalf("speed-up title against the reference BLAS: %q", got)
	}
	path := filepath.Join(t.TempDir(), "plot.png")
	if err := writePlot(path, calibration{peak: 250, peakTier: "avx512"}, plotResults()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() < 1000 {
		t.Fatalf("plot.png: %v, %v", fi, err)
	}
}

// The sparse PyTorch baseline is scaled by selected (query, block) pairs,
// which must match the Go case's q2k lists.
func TestTorchScaling(t *testing.T) {
	for _, tc := range []struct{ T, topK, blk int }{{2048, 16, 128}, {1000, 4, 128}, {8192, 16, 128}} {
		q2k, _, err := causalQ2K(tc.T, 1, tc.topK, tc.blk, 1)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, j := range q2k {
			if j >= 0 {
				n++
			}
		}
		if got := selectedSlots(tc.T, tc.topK, tc.blk); got != n {
			t.Fatalf("%+v: selectedSlots %d, q2k has %d", tc, got, n)
		}
	}
	r := &result{}
	plans := []torchPlan{
		{dst: &r.torch, id: "d", factor: 64, extrap: true, what: "PyTorch dense FP32", note: "n"},
		{dst: &r.tsparse, id: "s", slots: 1000, what: "PyTorch same sparse work FP32", note: "n"},
		{dst: &r.tbf16, id: "x", slots: 1000, what: "PyTorch same sparse work BF16"},
	}
	applyTorch(plans, map[string]torchMeasure{
		"d": {MS: 2, Best: 2, Worst: 2, Reps: 3, Method: "matmul+softmax"},
		"s": {MS: 5, Best: 5, Worst: 5, Reps: 3, Slots: 100, Method: "gather"},
		"x": {Error: "boom"},
	}, false)
	if r.torch.ms != 128 || !r.torch.extrap || r.tsparse.ms != 50 || r.tsparse.extrap || r.tbf16.ms != 0 || !strings.Contains(r.tbf16.note, "boom") {
		t.Fatalf("applyTorch: %+v %+v %+v", r.torch, r.tsparse, r.tbf16)
	}
	if !strings.Contains(blasName("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0"), "reference") ||
		!strings.HasPrefix(blasName("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"), "OpenBLAS") {
		t.Fatal("blasName")
	}
}

func TestBF16PeakNote(t *testing.T) {
	for _, c := range []struct {
		tier   string
		bf, fp float64
		want   string
	}{
		{"avx512bf16", 121, 242, "VDPBF16PS peaks at 0.50x the FP32 multiply-add rate on this CPU, so tier avx512bf16 is slower"},
		{"avx512bf16", 236, 118, "VDPBF16PS peaks at 2.00x the FP32 multiply-add rate on this CPU, the most tier avx512bf16"},
		{"avx512bf16", 100, 101, "0.99x the FP32 multiply-add rate on this CPU: tier avx512bf16 gains nothing"},
		{"amxbf16", 3470, 236, "TDPBF16PS peaks at 14.70x the FP32 multiply-add rate on this CPU, the most tier amxbf16"},
	} {
		if got := bf16PeakNote(c.tier, c.bf, c.fp); !strings.Contains(got, c.want) {
			t.Errorf("bf16PeakNote(%s, %v, %v) = %q, want it to contain %q", c.tier, c.bf, c.fp, got, c.want)
		}
	}
}

// The terminal table and its legend fit in termWidth columns with the
// longest case names and every baseline filled, and the legend names each
// column.
func TestTermTableWidth(t *testing.T) {
	var rs []*result
	for _, name := range []string{"prefill-bf16-32k-corr", "decode-bf16-b32-64k"} {
		r := &result{c: caseSpec{Name: name, Kind: "prefill"}, timeMS: 12345, gflops: 1234, pctPeak: 99.9, denseMS: 9e6, denseExtrap: true,
			torch: torchResult{ms: 9e6, extrap: true, refBLAS: true}, tsparse: torchResult{ms: 9e6, refBLAS: true},
			tdbf16: torchResult{ms: 9e6, extrap: true, refBLAS: true},
			tbf16:  torchResult{ms: 9e6, refBLAS: true}, noise: []string{"spread", "load"}, verify: "ok", denseVerify: "FAIL",
			denseNote: strings.Repeat("a long note on how the dense baseline was measured ", 5)}
		r.derive(calibration{ncpu: 2, workers: 2})
		r.noise = []string{"spread", "load"}
		r.tier = "avx512bf16-emulated" // the longest abbreviation (shortTier)
		rs = append(rs, r)
	}
	var buf bytes.Buffer
	printTable(&buf, rs)
	lines := strings.Split(buf.String(), "\n")
	for _, l := range lines {
		if len(l) > termWidth {
			t.Errorf("line of %d > %d columns: %q", len(l), termWidth, l)
		}
	}
	legend := buf.String()[strings.Index(buf.String(), "Columns:"):]
	legend = legend[:strings.Index(legend, "! against")]
	for _, l := range strings.Split(strings.TrimSpace(legend), "\n") {
		if len(l) > termWidth {
			t.Errorf("legend line of %d > %d columns: %q", len(l), termWidth, l)
		}
	}
	for _, c := range termColumns[1:] {
		if !strings.Contains(strings.ReplaceAll(legend, "\n", " "), " "+c.name+" ") {
			t.Errorf("legend does not explain column %s", c.name)
		}
	}
	if !strings.Contains(lines[2], "x*!") || !strings.Contains(buf.String(), "not a real speed-up") {
		t.Errorf("speed-ups against the reference BLAS are not marked:\n%s", buf.String())
	}
}

// termCell returns r's cell of the terminal column named name.
func termCell(t *testing.T, name string, r *result) string {
	t.Helper()
	for _, c := range termColumns {
		if c.name == name {
			return c.cell(r)
		}
	}
	t.Fatalf("no terminal column %q", name)
	return ""
}

// Only the reference BLAS's own path is flagged, not the optimised
// libraries Debian installs under the same file name.
func TestRefBLAS(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0":        true,
		"/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3": false,
		"/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3":      false,
		"/opt/intel/mkl/lib/libmkl_rt.so":                         false,
		"":                                                        false,
	} {
		if isRefBLAS(path) != want {
			t.Errorf("isRefBLAS(%q) = %v, want %v", path, !want, want)
		}
	}
	r := &result{c: caseSpec{Name: "c"}, timeMS: 1}
	applyTorch([]torchPlan{{dst: &r.torch, id: "d", factor: 1, what: "PyTorch dense FP32"},
		{dst: &r.tsparse, id: "s", factor: 1, what: "PyTorch same sparse work FP32"},
		{dst: &r.tbf16, id: "b", factor: 1, what: "PyTorch same sparse work BF16"}},
		map[string]torchMeasure{"d": {MS: 2, Method: "matmul+softmax"}, "s": {MS: 3, Method: "oneDNN linear+softmax (fastest of ...)"},
			"b": {MS: 4, Method: "gather"}}, true)
	r.derive(calibration{ncpu: 2, workers: 2})
	if !r.torch.refBLAS || !strings.Contains(r.torch.note, "reference BLAS") || termCell(t, "x_torch", r) != "2.00x!" {
		t.Fatalf("reference BLAS run: %+v, cell %q", r.torch, termCell(t, "x_torch", r))
	}
	// oneDNN and BF16 do not go through the BLAS: unmarked.
	if r.tsparse.refBLAS || r.tbf16.refBLAS || termCell(t, "x_tsp", r) != "3.00x" {
		t.Fatalf("oneDNN or BF16 result marked: %+v %+v", r.tsparse, r.tbf16)
	}
}

// %lim: decode by its paired %roof, or without one (GPU mode) by the larger
// of %peak and %BW; prefill by %peak alone.
func TestLimitPct(t *testing.T) {
	for _, c := range []struct {
		r    result
		want float64
	}{
		{result{c: caseSpec{Kind: "decode"}, pctPeak: 20, pctBW: 70, pctRoof: 75}, 75},
		{result{c: caseSpec{Kind: "decode"}, pctPeak: 20, pctBW: 70}, 70},
		{result{c: caseSpec{Kind: "prefill"}, pctPeak: 20, pctBW: 70, pctRoof: 90}, 20},
	} {
		if got := limitPct(&c.r); got != c.want {
			t.Errorf("%s %%peak %v %%BW %v %%roof %v: %%lim %v, want %v", c.r.c.Kind, c.r.pctPeak, c.r.pctBW, c.r.pctRoof, got, c.want)
		}
	}
}

// A BF16 prefill whose query-major tiles take Q.K on VDPBF16PS while its
// tier keeps float32 products is bounded by the mixed rate (half its flops
// at each loop's), not by the FP32 peak it can exceed; FP8 and NVFP4
// cases, decode and the bf16-product tiers keep their loop's peak.
func TestMixedQKPeak(t *testing.T) {
	defer func(s string) { tile.SetTier(s) }(tile.TierSetting())
	bf := caseSpec{Name: "prefill-bf16-8k", Kind: "prefill", DType: "bf16", D: 128}
	fp8 := caseSpec{Name: "prefill-fp8-8k", Kind: "prefill", DType: "fp8", D: 128}
	nv := caseSpec{Name: "nvfp4kv-bf16q-8k", Kind: "nvfp4", DType: "bf16", D: 128}
	dec := caseSpec{Name: "decode-bf16-b8-4k", Kind: "decode", DType: "bf16", D: 128}
	c := calibration{peakTier: "avx512", peak: 200, decodeTier: "avx512", decPeak: 200, mixScale: 4.0 / 3}
	if err := tile.SetTier("avx512"); err != nil {
		t.Skip("no avx512 tier here")
	}
	wantMixed := attn.BF16Scores(attn.BF16, attn.BF16, 128)
	if l, v := c.peakFor(bf); wantMixed != (l == "avx512+vdpbf16ps-qk" && math.Abs(v-800.0/3) < 1e-9) {
		t.Errorf("BF16 prefill on avx512 (bf16 scores %v): peakFor = %s, %v", wantMixed, l, v)
	}
	if _, s := c.loopFor(bf); wantMixed != (s == 4.0/3) {
		t.Errorf("BF16 prefill on avx512: paired window scale %v", s)
	}
	for _, cs := range []caseSpec{fp8, nv, dec} {
		if l, v := c.peakFor(cs); v != 200 || l != "avx512" {
			t.Errorf("%s: peakFor = %s, %v; want the FP32 loop's 200", cs.Name, l, v)
		}
		if _, s := c.loopFor(cs); s != 1 {
			t.Errorf("%s: paired window scale %v, want 1", cs.Name, s)
		}
	}
	// Without a mixed bound (no VDPBF16PS here, or a bf16 tier) nothing is scaled.
	c.mixScale = 0
	if l, v := c.peakFor(bf); v != 200 || l != "avx512" {
		t.Errorf("no mix: peakFor = %s, %v", l, v)
	}
}

// A baseline measured in a child process (PyTorch) is the bench's own
// load, not other processes': withChild moves the child's CPU time from
// "others" to "self", so that the baseline is not flagged NOISY for its
// own threads.
func TestWithChildCPU(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	before := readCPUSample()
	cmd := exec.Command(sh, "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	after := readCPUSample()
	child := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	if child <= 0 {
		t.Skip("the child's CPU time is not reported here")
	}
	got := withChild(after, cmd.ProcessState)
	if d := got.self - after.self; math.Abs(d-child) > 1e-9 {
		t.Fatalf("withChild added %v s, want the child's %v s", d, child)
	}
	if withChild(after, nil) != after {
		t.Fatal("withChild without a child changed the sample")
	}
	if !before.statOK {
		return
	}
	plain, counted := loadBetween(before, after), loadBetween(before, got)
	if counted.others > plain.others {
		t.Fatalf("others %v with the child counted as the bench's, %v without", counted.others, plain.others)
	}
	if plain.others < 0.05 {
		t.Logf("the child's load was not visible as others (%v): the host's accounting is coarse", plain.others)
	} else if counted.others > plain.others-0.5*child/(after.total-before.total) {
		t.Fatalf("others went from %v only to %v after counting %v s of child CPU", plain.others, counted.others, child)
	}
}

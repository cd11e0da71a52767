package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op"
)

type config struct {
	quick, verify, tiny bool
	targets             bool   // -targets: the CPU target matrix (targets.go)
	tables, into        string // -tables DIR [-into FILE]: Markdown tables of DIR's result CSVs (tables.go)
	minTimeSet          bool   // -min-time was given
	workers             int
	tier                string
	shapes              []int
	contexts, batches   []int
	nvfp4Len            int
	topK                int
	selects             []string // prefill selection patterns: random, correlated
	path                string   // -path: prefill path (attn.ParsePrefillPath), "" keeps MSA_PREFILL_PATH
	dtype               string
	page                int
	out                 string
	cases               map[string]bool
	progress            bool
	minTime             time.Duration
	spin                time.Duration // -spin: op.SetWorkerSpin
	denseMinTime        time.Duration
	peakTime            time.Duration
	ref                 *refMeter // paired reference windows (nil with -cpuprofile)
	bwBytes             int
	verifyRows          int
	noDense             bool
	denseMax            int
	denseHeads          int
	denseReqs           int
	torch               string
	python              string
	torchBF16           bool
	torchMax            int
	torchTimeout        time.Duration
	maxKVGiB            float64
	cpuProfile          string
	denseCache          map[string]*denseEntry
	device              string // -device: cpu, or cuda (gpu_cuda.go)
}

func parseInts(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		if strings.HasSuffix(strings.ToLower(f), "k") {
			mult, f = 1024, f[:len(f)-1]
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad length %q", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

func parseFlags() (*config, error) {
	cfg := &config{denseCache: map[string]*denseEntry{}}
	flag.BoolVar(&cfg.quick, "quick", false, "reduced suite (under a minute): prefill 2K/4K, NVFP4 2K, decode batch 8 at 4K")
	flag.BoolVar(&cfg.verify, "verify", false, "check every case (and the dense baseline) against a float64 reference on sampled rows; exit 1 on failure")
	flag.BoolVar(&cfg.targets, "targets", false, "run the CPU performance targets: prefill, NVFP4 and decode on every supported tier among avx512, avx2 and avx512bf16, on 1 and 2 workers, each as a child run; print and write (-out DIR, default bench-targets-<time>) the table of targets met (bench/README.md, Targets); takes only -out, -min-time, -torch and -python")
	flag.StringVar(&cfg.tables, "tables", "", "render the result CSVs of DIR (targets.csv files of -targets, timing.csv files of the GPU check) as Markdown tables and exit; takes only -into")
	flag.StringVar(&cfg.into, "into", "", "with -tables: replace the generated block of this Markdown file instead of printing the tables")
	flag.BoolVar(&cfg.tiny, "tiny", false, "tiny shapes for CI (prefill 512, NVFP4 384, decode batch 2 at 1000)")
	flag.IntVar(&cfg.workers, "workers", runtime.GOMAXPROCS(0), "worker goroutines (op Workers, calibration, PyTorch threads); also sets GOMAXPROCS")
	flag.StringVar(&cfg.tier, "tier", "", "kernel tier (tile.SetTier), run for every case: generic, avx2, avx512, avx512bf16, amxbf16; default: automatic (prefill on the bf16 twin)")
	shapes := flag.String("shapes", "", "prefill sequence lengths, comma-separated (e.g. 2048,8192 or 2k,8k)")
	contexts := flag.String("contexts", "", "decode contexts, comma-separated (default 4k,16k,64k)")
	batches := flag.String("batches", "", "decode batch sizes, comma-separated (default 8,32)")
	flag.IntVar(&cfg.nvfp4Len, "nvfp4-len", 0, "NVFP4 prefill length (default 8192; 2048 with -quick)")
	flag.IntVar(&cfg.topK, "topk", 16, "selected blocks per query (4, 8, 16 or 32)")
	selects := flag.String("select", "random", "prefill selection patterns, comma-separated: random (the diagonal block and uniformly random visible ones) and correlated (BlockScores + TopKBlocks with the first and diagonal blocks kept, on Q and K whose neighbouring tokens are correlated; case names end in -corr)")
	flag.StringVar(&cfg.path, "path", "", "prefill path: auto, query or kv (attn.SetProcessPrefillPath); default: MSA_PREFILL_PATH, else auto. Each prefill case reports the path that ran")
	flag.StringVar(&cfg.dtype, "dtype", "", "bf16 or fp8: prefill Q/K/V dtype (NVFP4: Q dtype) and the only decode dtype; default: prefill bf16, decode fp8 and bf16")
	flag.IntVar(&cfg.page, "page", 128, "decode page size (tokens)")
	flag.StringVar(&cfg.out, "out", "", "directory for results.csv, results.md and plot.png")
	caseList := flag.String("cases", "prefill,nvfp4,decode,graph,backward", "case groups to run: prefill, nvfp4, decode, graph (model graphs: graph.go), backward (float32 training path: backward.go)")
	flag.BoolVar(&cfg.progress, "progress", false, "draw the '\\r' progress bar on stderr even when stdout or stderr is not a terminal (default there: one line per case on stdout)")
	flag.DurationVar(&cfg.minTime, "min-time", 0, "minimum timed duration per case (default 1s; 300ms with -quick)")
	flag.DurationVar(&cfg.spin, "spin", 0, "worker spin (op.SetWorkerSpin): how long idle worker goroutines poll for the next call before they block; 5ms (attn.BackToBackSpin) is what back-to-back callers may set; default 0, the library's default")
	flag.IntVar(&cfg.verifyRows, "verify-rows", 32, "query rows sampled per prefill case by -verify (decode: rows/16 requests, at least 1)")
	dense := flag.Bool("dense", true, "measure the Gorgonia dense baseline")
	flag.IntVar(&cfg.denseMax, "dense-max", 4096, "longest prefill length measured directly by the dense baselines; longer ones are extrapolated by (T/Tm)^2")
	flag.IntVar(&cfg.torchMax, "torch-max", 8192, "longest prefill length measured directly by the PyTorch dense baseline (one head); longer ones are extrapolated by (T/Tm)^2")
	flag.IntVar(&cfg.denseHeads, "dense-heads", 1, "query heads timed by the Gorgonia prefill baseline (scaled to Hq)")
	flag.IntVar(&cfg.denseReqs, "dense-reqs", 2, "decode requests timed by the Gorgonia baseline (scaled to the batch)")
	flag.StringVar(&cfg.torch, "torch", "", "PyTorch baseline: auto (when importable) or off; default auto, off with -tiny")
	flag.StringVar(&cfg.python, "python", "/usr/bin/python3", "Python interpreter with torch")
	flag.BoolVar(&cfg.torchBF16, "torch-bf16", true, "also time PyTorch in BF16: dense attention (columns tdbf16_ms, x_tdbf16) and the same sparse/paged work (tbf16_ms, x_tbf16)")
	flag.DurationVar(&cfg.torchTimeout, "torch-timeout", 10*time.Minute, "limit for the whole PyTorch run")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of each case's timed op calls (not the baselines; graph cases: their runs and eager replays) to FILE.<case>")
	flag.Float64Var(&cfg.maxKVGiB, "max-kv-gib", 2, "skip cases whose K+V storage exceeds this many GiB")
	flag.StringVar(&cfg.device, "device", "cpu", "cpu, or cuda: time prefill, NVFP4 and decode on GPU 0 (a binary built with -tags cuda; bench/README.md, GPU mode)")
	registerSoakFlags()
	registerCPFlags()
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %v", flag.Args())
	}
	if cfg.tables != "" || cfg.into != "" {
		var other []string
		flag.Visit(func(f *flag.Flag) {
			if f.Name != "tables" && f.Name != "into" {
				other = append(other, "-"+f.Name)
			}
		})
		switch {
		case cfg.tables == "":
			return nil, fmt.Errorf("-into %s: want -tables DIR with it", cfg.into)
		case len(other) > 0:
			return nil, fmt.Errorf("-tables takes only -into, not %s", strings.Join(other, ", "))
		}
		return cfg, nil
	}
	if cfg.targets {
		var other []string
		flag.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "min-time":
				cfg.minTimeSet = true
			case "targets", "out", "torch", "python":
			default:
				other = append(other, "-"+f.Name)
			}
		})
		if len(other) > 0 {
			return nil, fmt.Errorf("-targets runs a fixed matrix and takes only -out, -min-time, -torch and -python, not %s", strings.Join(other, ", "))
		}
	}
	var err error
	if cfg.shapes, err = parseInts(*shapes); err != nil {
		return nil, fmt.Errorf("-shapes: %v", err)
	}
	if cfg.contexts, err = parseInts(*contexts); err != nil {
		return nil, fmt.Errorf("-contexts: %v", err)
	}
	if cfg.batches, err = parseInts(*batches); err != nil {
		return nil, fmt.Errorf("-batches: %v", err)
	}
	switch cfg.torch {
	case "":
		cfg.torch = "auto"
		if cfg.tiny {
			cfg.torch = "off"
		}
	case "auto", "off":
	default:
		return nil, fmt.Errorf("-torch: want auto or off, got %q", cfg.torch)
	}
	cfg.noDense = !*dense
	cfg.cases = map[string]bool{}
	for _, c := range strings.Split(*caseList, ",") {
		c = strings.TrimSpace(c)
		switch c {
		case "prefill", "nvfp4", "decode", "graph", "backward":
			cfg.cases[c] = true
		case "":
		default:
			return nil, fmt.Errorf("-cases: unknown group %q (want prefill, nvfp4, decode, graph, backward)", c)
		}
	}
	switch cfg.device {
	case "cpu", "cuda":
	default:
		return nil, fmt.Errorf("-device: want cpu or cuda, got %q", cfg.device)
	}
	for _, sel := range strings.Split(*selects, ",") {
		switch sel = strings.TrimSpace(sel); sel {
		case "random", "correlated":
			cfg.selects = append(cfg.selects, sel)
		case "":
		default:
			return nil, fmt.Errorf("-select: unknown pattern %q (want random, correlated)", sel)
		}
	}
	if len(cfg.selects) == 0 {
		cfg.selects = []string{"random"}
	}
	if cfg.path != "" {
		p, err := attn.ParsePrefillPath(cfg.path)
		if err != nil {
			return nil, fmt.Errorf("-path: %v", err)
		}
		attn.SetProcessPrefillPath(p)
	}
	switch cfg.dtype {
	case "", "bf16", "fp8":
	default:
		return nil, fmt.Errorf("-dtype: want bf16 or fp8, got %q", cfg.dtype)
	}
	switch cfg.topK {
	case 4, 8, 16, 32:
	default:
		return nil, fmt.Errorf("-topk: want 4, 8, 16 or 32, got %d", cfg.topK)
	}
	if cfg.workers < 1 || cfg.page < 1 || cfg.denseMax < 1 || cfg.torchMax < 1 || cfg.denseHeads < 1 || cfg.denseReqs < 1 || cfg.nvfp4Len < 0 {
		return nil, fmt.Errorf("-workers, -page, -dense-max, -torch-max, -dense-heads, -dense-reqs must be >= 1")
	}
	fast := cfg.quick || cfg.tiny
	if cfg.minTime == 0 {
		cfg.minTime = time.Second
		if fast {
			cfg.minTime = 300 * time.Millisecond
		}
	}
	cfg.denseMinTime, cfg.peakTime, cfg.bwBytes = 500*time.Millisecond, 500*time.Millisecond, 512<<20
	if fast {
		cfg.denseMinTime, cfg.peakTime = 200*time.Millisecond, 200*time.Millisecond
	}
	if cfg.tiny {
		cfg.bwBytes = 64 << 20
		cfg.minTime = min(cfg.minTime, 100*time.Millisecond)
		cfg.denseMinTime = 50 * time.Millisecond
		cfg.peakTime = 50 * time.Millisecond
	}
	return cfg, nil
}

type machineInfo struct {
	cpu     string
	ncpu    int
	memGiB  float64
	workers int
	tier    string
}

func readMachine(cfg *config) *machineInfo {
	mi := &machineInfo{cpu: "unknown", ncpu: runtime.NumCPU(), workers: cfg.workers, tier: tile.Tier()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		// The first processor's block; family and model tell CPU kinds
		// with the same model name apart (AMD EPYC: Zen 3, 4, 5).
		fields := map[string]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() && sc.Text() != "" {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
				fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		f.Close()
		if v := fields["model name"]; v != "" {
			mi.cpu = v
		}
		if fam, model := fields["cpu family"], fields["model"]; fam != "" && model != "" {
			mi.cpu += fmt.Sprintf(" (family %s, model %s)", fam, model)
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				var kb float64
				fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%g", &kb)
				mi.memGiB = kb / (1 << 20)
			}
		}
	}
	return mi
}

// loadAvg returns the 1-minute load average from /proc/loadavg ("?" when
// unknown): above the CPU count, other processes share the cores and every
// figure is noisy.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if cfg.tables != "" {
		if err := runTables(cfg.tables, cfg.into); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -tables:", err)
			os.Exit(1)
		}
		return
	}
	if cfg.targets {
		if err := runTargets(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if cpMode() {
		os.Exit(runCP(cfg))
	}
	if soakMode() {
		os.Exit(runSoak(cfg))
	}
	if cfg.device == "cuda" {
		os.Exit(runGPU(cfg))
	}
	runtime.GOMAXPROCS(cfg.workers)
	op.SetWorkerSpin(cfg.spin)
	if cfg.tier != "" {
		if err := tile.SetTier(cfg.tier); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
	}
	wall := time.Now()
	mi := readMachine(cfg)
	header := []string{
		fmt.Sprintf("CPU: %s, %d logical CPUs, %.1f GiB RAM, load average %s at start", mi.cpu, mi.ncpu, mi.memGiB, loadAvg()),
		fmt.Sprintf("Go %s %s/%s, GOMAXPROCS %d, workers %d, worker spin %v", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), cfg.workers, cfg.spin),
		tierLine(mi.tier),
	}
	for _, h := range header {
		printWrapped(os.Stdout, h, "  ")
	}
	cal, err := calibrate(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	calLines := []string{
		fmt.Sprintf("peak (calib.PeakGFLOPS %q): %.0f GFLOP/s on 1 goroutine, %.0f GFLOP/s on %d at once", cal.peakTier, cal.peak1, cal.peak, cfg.workers),
	}
	if cal.decodeTier != cal.peakTier {
		calLines = append(calLines, fmt.Sprintf("decode peak (calib.PeakGFLOPS %q; decode runs FP32 lane kernels): %.0f GFLOP/s on 1 goroutine, %.0f GFLOP/s on %d at once",
			cal.decodeTier, cal.decPeak1, cal.decPeak, cfg.workers))
		if bf16Tier(cal.peakTier) {
			calLines = append(calLines, bf16PeakNote(cal.peakTier, cal.peak1, cal.decPeak1))
		}
	}
	if cal.mixScale > 0 {
		calLines = append(calLines, fmt.Sprintf("BF16 prefill peak (%s+vdpbf16ps-qk): %.0f GFLOP/s: the query-major tiles take Q.K on VDPBF16PS "+
			"(exact products, float32 results) and P.V in FP32, half the flops each; with the VDPBF16PS loop at %.0f GFLOP/s on %d at once, "+
			"the bound is %.2fx the FP32 peak, and the paired window after each call scales the FP32 loop by it",
			cal.peakTier, cal.peak*cal.mixScale, cal.mixBF16, cfg.workers, cal.mixScale))
	}
	calLines = append(calLines,
		fmt.Sprintf("read bandwidth (%d goroutines over a %d MiB buffer, best of 5): %.1f GB/s (uint64 sum %.1f, bytes.IndexByte scan %.1f)",
			cfg.workers, cal.bwBytes>>20, cal.bw, cal.bwSum, cal.bwScan))
	for _, h := range calLines {
		printWrapped(os.Stdout, h, "  ")
	}
	header = append(header, calLines...)

	if cfg.cpuProfile == "" {
		cfg.ref = newRefMeter(cal, cfg.workers, cfg.bwBytes)
	}
	suite := buildSuite(cfg)
	prog := newProgress(len(suite)+1, cfg.progress)
	var rs []*result
	failed := false
	for _, c := range suite {
		r := &result{c: c}
		rs = append(rs, r)
		if gib := c.kvBytes() / (1 << 30); gib > cfg.maxKVGiB {
			r.err = fmt.Sprintf("skipped: K+V is %.2f GiB, above -max-kv-gib %.2f", gib, cfg.maxKVGiB)
			prog.step(r)
			continue
		}
		before := readCPUSample()
		if err := runCase(cfg, c, r, prog); err != nil {
			r.err = err.Error()
			failed = true
		}
		r.load = loadBetween(before, readCPUSample())
		debug.FreeOSMemory() // return the case's buffers before the next one
		r.derive(cal)
		if r.verify == "FAIL" || r.denseVerify == "FAIL" {
			failed = true
		}
		prog.step(r)
	}
	prog.phase("PyTorch", "baseline")
	torchStatus := runTorch(cfg, rs, prog)
	prog.stepText("PyTorch", "baselines finished")
	prog.finish()
	for _, r := range rs {
		r.derive(cal)
	}
	header = append(header, torchStatus)
	if len(rs) > 0 { // -cases with only the graph or backward group: no table of their own here
		fmt.Println(torchStatus)
		fmt.Println()
		printTable(os.Stdout, rs)
	}
	fmt.Printf("\nwall time %.1f s, load average %s at the end\n", time.Since(wall).Seconds(), loadAvg())
	if cfg.out != "" {
		if err := writeOutputs(cfg.out, mi, cal, header, rs); err != nil {
			fmt.Fprintln(os.Stderr, "bench: writing results:", err)
			os.Exit(1)
		}
		fmt.Printf("wrote %s/results.csv, results.md, plot.png\n", cfg.out)
	}
	if cfg.cases["graph"] {
		if err := runGraphGroup(cfg, header); err != nil {
			fmt.Fprintln(os.Stderr, "bench: graph:", err)
			failed = true
		}
	}
	if cfg.cases["backward"] {
		if err := runBackwardGroup(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "bench: backward:", err)
			failed = true
		}
	}
	if failed {
		fmt.Fprintln(os.Stderr, "bench: FAILED (see the verify column and notes)")
		os.Exit(1)
	}
}

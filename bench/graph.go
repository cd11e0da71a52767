package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/gonum/blas/gonum"
	G "gorgonia.org/gorgonia"

	"github.com/sparseattn/msa/bench/graphprof"
	"github.com/sparseattn/msa/internal/cputime"
	msablas "github.com/sparseattn/msa/kernels/blas"
)

// Flags of the graph group (registered here so that parseFlags sees them).
var (
	graphLens     = flag.String("graph-lens", "", "graph group: prefill lengths (default 2k; 1k with -quick, 512 with -tiny; full size: 2k,4k,8k,16k,32k)")
	graphBatches  = flag.String("graph-batches", "", "graph group: decode batch sizes (default 8,32; 8 with -quick, 2 with -tiny)")
	graphContexts = flag.String("graph-contexts", "", "graph group: decode contexts (default 4k,16k; 4k with -quick, 1000 with -tiny; full size: 4k,16k,64k)")
	graphModel    = flag.Int("graph-model", 0, "graph group: d_model (default 1024; 256 with -quick and -tiny; full size: 2048)")
	graphLayers   = flag.Int("graph-layers", 4, "graph group: decode layers")
	graphBLAS     = flag.String("graph-blas", "gonum,msa", "graph group: BLAS of Gorgonia's matmuls, a list of gonum (Gorgonia's default, pure Go), msa (kernels/blas, the SIMD GEMM tiles, the recommended default) and openblas (gonum's netlib binding to OpenBLAS; -tags openblas); cases on msa end in -msablas, on openblas in -openblas")
	graphMachines = flag.String("graph-machines", "tape,lisp", "graph group: machines for the prefill layer (tape, lisp); decode always runs in a TapeMachine")
)

// graphCase is one case of the graph group.
type graphCase struct {
	name    string
	kind    string // "prefill" or "decode"
	machine string // "tape" or "lisp"
	seqLen  int    // prefill tokens or decode context at the first step
	batch   int
	layers  int
	dm      graphDims
	topK    int
	blk     int
	page    int
	blas    string // "gonum", "msa" or "openblas" (-graph-blas)
}

// tokens is the number of tokens one run processes.
func (c graphCase) tokens() int {
	if c.kind == "prefill" {
		return c.seqLen
	}
	return c.batch
}

// graphResult is one measured graph case.
type graphResult struct {
	c                    graphCase
	reps                 []time.Duration // RunAll times
	med, lo, hi          time.Duration
	eagerReps            []time.Duration // eager replay after each run (sum over the nodes)
	eagerNodes           []graphprof.NodeStat
	eagerMed             time.Duration
	overhead             float64   // median over runs of run / its eager replay
	allocs, bytes        float64   // median per run (decode: per step), Let/Reset included
	minBytes             float64   // the smallest run's bytes: a per-step copy shows in every run
	peakRSS              float64   // bytes, VmHWM over the case (0 when unknown)
	rssStart             float64   // bytes, VmRSS before the case (the benchmark\'s own buffers)
	ls                   loadStats // the machine around the case (noise.go)
	sp                   spread    // of the RunAll times (noise.go)
	noiseNote            string    // describeNoise
	noisy                string    // why the row is noisy (noiseVerdict), or ""
	prof                 graphprof.Report
	setupMS              float64       // graph construction and the machine
	cpuReps              []float64     // process CPU time of each RunAll (ns; empty where unknown)
	cpuMed               time.Duration // their median (0 when unknown)
	err                  string
	kindGraph, kindEager map[string]time.Duration // per run
	kindOrder            []string
	unattributed, attrib time.Duration // per run
}

// graphSuite returns the graph cases selected by the flags.
func graphSuite(cfg *config) ([]graphCase, error) {
	// Default sizes are scaled down from the target model (d_model
	// 2048, prefill 2K-32K, decode contexts 4K-64K) so that the group fits
	// the default suite on 2 cores: Gorgonia's float32 projections
	// (gonum's Go GEMM, a few GFLOP/s per core) take 90% of a prefill layer
	// (4 T d_model Hq D flops for Q and the output). The flags restore the
	// full sizes.
	lens, batches, contexts, model := []int{2048}, []int{8, 32}, []int{4096, 16384}, 1024
	switch {
	case cfg.tiny:
		lens, batches, contexts, model = []int{512}, []int{2}, []int{1000}, 256
	case cfg.quick:
		lens, batches, contexts, model = []int{1024}, []int{8}, []int{4096}, 256
	}
	var err error
	for _, f := range []struct {
		s   string
		dst *[]int
	}{{*graphLens, &lens}, {*graphBatches, &batches}, {*graphContexts, &contexts}} {
		if f.s == "" {
			continue
		}
		if *f.dst, err = parseInts(f.s); err != nil {
			return nil, err
		}
	}
	if *graphModel > 0 {
		model = *graphModel
	}
	if *graphLayers < 1 {
		return nil, fmt.Errorf("-graph-layers must be >= 1")
	}
	if *graphPairs < 0 {
		return nil, fmt.Errorf("-graph-pairs must be >= 0 (0: no BLAS pairs); got %d", *graphPairs)
	}
	var machines []string
	for _, m := range strings.Split(*graphMachines, ",") {
		switch m = strings.TrimSpace(m); m {
		case "tape", "lisp":
			machines = append(machines, m)
		case "":
		default:
			return nil, fmt.Errorf("-graph-machines: unknown machine %q (want tape, lisp)", m)
		}
	}
	var blases []string
	for _, b := range strings.Split(*graphBLAS, ",") {
		switch b = strings.TrimSpace(b); b {
		case "gonum", "msa":
		case "openblas":
			if _, err := msablas.OpenBLAS(); err != nil {
				return nil, fmt.Errorf("-graph-blas openblas: %w", err)
			}
		default:
			return nil, fmt.Errorf("-graph-blas: unknown BLAS %q (want gonum, msa, openblas)", b)
		}
		blases = append(blases, b)
	}
	dm := graphDims{model: model, hq: 16, hkv: 1, d: 128}
	var cs []graphCase
	for _, t := range lens {
		for _, m := range machines {
			cs = append(cs, graphCase{name: fmt.Sprintf("graph-prefill-%s-%s", kLabel(t), m), kind: "prefill", machine: m,
				seqLen: t, batch: 1, layers: 1, dm: dm, topK: cfg.topK, blk: 128})
		}
	}
	for _, b := range batches {
		for _, t := range contexts {
			cs = append(cs, graphCase{name: fmt.Sprintf("graph-decode-L%d-b%d-%s", *graphLayers, b, kLabel(t)), kind: "decode",
				machine: "tape", seqLen: t, batch: b, layers: *graphLayers, dm: dm, page: cfg.page})
		}
	}
	var all []graphCase
	for _, b := range blases {
		for _, c := range cs {
			c.blas = b
			switch b {
			case "msa":
				c.name += "-msablas"
			case "openblas":
				c.name += "-openblas"
			}
			all = append(all, c)
		}
	}
	return all, nil
}

// useGraphBLAS makes name (gonum, msa or openblas, checked by graphSuite)
// the BLAS of Gorgonia and tensor.
func useGraphBLAS(name string) {
	switch name {
	case "msa":
		G.Use(msablas.New())
	case "openblas":
		if b, err := msablas.OpenBLAS(); err == nil {
			G.Use(b)
		}
	default:
		G.Use(gonum.Implementation{})
	}
}

// runGraphGroup runs the graph cases, prints their table and per-kind
// breakdowns and, with -out, writes graph.csv, graph-kinds.csv, graph.md
// and one stacked-bar PNG per case.
func runGraphGroup(cfg *config, header []string) error {
	cs, err := graphSuite(cfg)
	if err != nil {
		return err
	}
	npairs := 0
	if *graphPairs > 0 {
		npairs = len(pairCases(cs))
	}
	prog := newGraphProgress(len(cs)+npairs, cfg.progress)
	var rs []*graphResult
	failed := false
	for _, c := range cs {
		r := &graphResult{c: c}
		rs = append(rs, r)
		useGraphBLAS(c.blas)
		stop := profile(cfg, c.name) // -cpuprofile: the case's runs and eager replays
		err := runGraphCase(cfg, r, prog)
		stop()
		useGraphBLAS("gonum")
		if err != nil {
			r.err = err.Error()
			failed = true
		}
		runtime.GC()
		debug.FreeOSMemory()
		prog.step()
	}
	ps, pairsFailed := runPairsGroup(cfg, cs, prog)
	failed = failed || pairsFailed
	prog.finish()
	fmt.Println()
	printGraphTable(os.Stdout, rs)
	printBLASPairs(os.Stdout, ps)
	if cfg.out != "" {
		if err := writeGraphOutputs(cfg.out, header, rs); err != nil {
			return err
		}
		if err := writeCSVRows(filepath.Join(cfg.out, "graph-pairs.csv"), pairCSVRows(ps)); err != nil {
			return err
		}
		fmt.Printf("wrote %s/graph.csv, graph-kinds.csv, graph-pairs.csv, graph.md, graph-<case>.png\n", cfg.out)
	}
	if failed {
		return fmt.Errorf("a graph case failed (see the notes)")
	}
	return nil
}

// graphRunner is a case's graph with its machine and step hooks.
type graphRunner struct {
	g       *G.ExprGraph
	machine string
	m       G.VM
	before  func() error // before RunAll (Let the inputs)
	after   func() error // after RunAll and Reset
}

// run performs one serving-loop call and returns the RunAll time. A
// TapeMachine is Reset after the run; a LispMachine is replaced before it
// (untimed): in gorgonia v0.9.18 lispMachine.Reset leaves every node but
// the last with its stale value (see graph_test/helpers_test.go).
func (gr *graphRunner) run() (time.Duration, error) {
	if gr.machine == "lisp" {
		if gr.m != nil {
			gr.m.Close()
		}
		gr.m = G.NewLispMachine(gr.g, G.ExecuteFwdOnly())
	}
	if err := gr.before(); err != nil {
		return 0, err
	}
	t0 := time.Now()
	err := gr.m.RunAll()
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if gr.machine == "tape" {
		gr.m.Reset()
	}
	return d, gr.after()
}

// newGraphRunner builds case c's graph and its step hooks; start makes
// the machine.
func newGraphRunner(cfg *config, c graphCase) (*graphRunner, error) {
	gr := &graphRunner{machine: c.machine}
	seed := uint64(c.seqLen)*7 + uint64(c.batch)
	switch c.kind {
	case "prefill":
		pg, err := buildPrefillGraph(c.seqLen, c.dm, c.topK, c.blk, cfg.workers, seed)
		if err != nil {
			return nil, err
		}
		gr.g = pg.g
		gr.before = func() error { return pg.in.next(pg.x) }
		gr.after = func() error { return nil }
	case "decode":
		dg, err := buildDecodeGraph(c.batch, c.seqLen, c.layers, c.page, c.dm, 512, cfg.workers, seed)
		if err != nil {
			return nil, err
		}
		gr.g = dg.g
		gr.before, gr.after = dg.prepareStep, dg.finishStep
	default:
		return nil, fmt.Errorf("unknown graph case kind %q", c.kind)
	}
	return gr, nil
}

// start makes a TapeMachine (a LispMachine is made per run).
func (gr *graphRunner) start() {
	if gr.machine == "tape" {
		gr.m = G.NewTapeMachine(gr.g)
	}
}

func (gr *graphRunner) close() {
	if gr.m != nil {
		gr.m.Close()
	}
}

// runGraphCase builds the case's graph, attaches the profiler, runs it
// once to warm up, then at least 3 times and until -min-time (at most 500
// runs). Every run is profiled node by node and followed by an eager replay
// of its nodes on its own inputs (graphprof's Eager), so that each graph
// time is paired with an eager time measured right after it, under the
// same load: the overhead is the median of the per-run ratios.
func runGraphCase(cfg *config, r *graphResult, prog *graphProgress) error {
	c := r.c
	cpu0 := readCPUSample()
	r.rssStart = procStatus("VmRSS:")
	resetPeakRSS()
	prog.phase(c.name, "build")
	t0 := time.Now()
	gr, err := newGraphRunner(cfg, c)
	if err != nil {
		return err
	}
	defer gr.close()
	p, err := graphprof.Attach(gr.g, graphprof.Capture())
	if err != nil {
		return err
	}
	gr.start()
	r.setupMS = ms(time.Since(t0))

	prog.phase(c.name, "warm-up")
	p.Disable()
	if _, err := gr.run(); err != nil {
		return err
	}
	p.Reset()
	p.Enable()
	prog.phase(c.name, "graph "+c.machine)
	var ms0, ms1 runtime.MemStats
	var allocs, bytes []float64 // per step: the median is the steady state
	var ratios []float64
	var eagerNode [][]float64 // per node, its time in each replay
	start := time.Now()
	for len(r.reps) < 3 || (time.Since(start) < cfg.minTime && len(r.reps) < 500) {
		runtime.ReadMemStats(&ms0)
		cpu0, cpuOK := cputime.Process()
		d, err := gr.run()
		if cpu1, ok := cputime.Process(); ok && cpuOK {
			r.cpuReps = append(r.cpuReps, float64(cpu1-cpu0))
		}
		runtime.ReadMemStats(&ms1)
		if err != nil {
			return err
		}
		allocs = append(allocs, float64(ms1.Mallocs-ms0.Mallocs))
		bytes = append(bytes, float64(ms1.TotalAlloc-ms0.TotalAlloc))
		p.AddRun(d)
		r.reps = append(r.reps, d)

		prog.phase(c.name, fmt.Sprintf("eager replay %d", len(r.reps)))
		e, err := p.Eager(1)
		if err != nil {
			return err
		}
		r.eagerReps = append(r.eagerReps, e.Reps[0])
		if r.eagerNodes == nil {
			r.eagerNodes = e.Nodes
			eagerNode = make([][]float64, len(e.Nodes))
		}
		for i, n := range e.Nodes {
			eagerNode[i] = append(eagerNode[i], float64(n.Total))
		}
		ratios = append(ratios, float64(d)/float64(e.Reps[0]))
		prog.phase(c.name, "graph "+c.machine)
	}
	// The median step, not the mean: one-time allocations (a worker's
	// scratch, made the first time the dynamic schedule hands that worker
	// an item, which may be any step) are not the steady state.
	r.minBytes = slices.Min(append([]float64{math.Inf(1)}, bytes...))
	r.allocs, r.bytes = median(allocs), median(bytes)
	r.prof = p.Report()
	p.Disable()
	for i := range r.eagerNodes { // each node's median replay: robust to a replay preempted by the host
		r.eagerNodes[i].Total = time.Duration(median(eagerNode[i]))
	}
	s := append([]time.Duration(nil), r.reps...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	r.med, r.lo, r.hi = s[len(s)/2], s[0], s[len(s)-1]
	if len(r.cpuReps) > 0 {
		r.cpuMed = time.Duration(median(r.cpuReps))
	}
	r.eagerMed = graphprof.EagerResult{Reps: r.eagerReps}.Median()
	r.overhead = median(ratios)
	r.peakRSS = procStatus("VmHWM:")
	r.ls = loadBetween(cpu0, readCPUSample())
	r.derive(cfg)
	p.Detach()
	return nil
}

// derive fills the per-kind times per run and the noise flag (the
// benchmark's noise rules, noise.go, on the RunAll times).
func (r *graphResult) derive(cfg *config) {
	runs := time.Duration(max(r.prof.Runs, 1))
	r.kindGraph, r.kindEager = map[string]time.Duration{}, map[string]time.Duration{}
	for _, k := range r.prof.Kinds {
		r.kindGraph[k.Kind] = k.Total / runs
		r.kindOrder = append(r.kindOrder, k.Kind)
	}
	for _, n := range r.eagerNodes {
		r.kindEager[n.Kind] += n.Total
	}
	r.unattributed, r.attrib = r.prof.Unattributed/runs, r.prof.Attributed/runs
	samples := make([]float64, len(r.reps))
	for i, d := range r.reps {
		samples[i] = ms(d)
	}
	r.sp = spreadOf(samples)
	r.noisy = strings.Join(noiseVerdict(r.sp, r.ls, runtime.NumCPU(), cfg.workers, nil), ", ")
	r.noiseNote = describeNoise(r.sp, r.ls)
}

// resetPeakRSS resets the kernel's peak-RSS mark of this process (Linux
// clear_refs 5), so that VmHWM then reads the peak since.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// procStatus returns a size field of /proc/self/status ("VmHWM:", the
// peak RSS; "VmRSS:", the current RSS) in bytes (0 when unknown).
func procStatus(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(v), "%g", &kb)
			return kb * 1024
		}
	}
	return 0
}

// graphProgress shows the graph case and phase on stderr ("graph 2/6
// case: phase") when enabled (-progress, or stderr is a terminal). A nil
// *graphProgress shows nothing.
type graphProgress struct {
	total, done, last int
	w                 io.Writer
}

func newGraphProgress(total int, force bool) *graphProgress {
	if !force {
		fi, err := os.Stderr.Stat()
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			return nil
		}
	}
	return &graphProgress{total: total, w: os.Stderr}
}

func (p *graphProgress) phase(name, what string) {
	if p == nil {
		return
	}
	line := fitWidth(fmt.Sprintf("graph %d/%d %s: %s", p.done+1, p.total, name, what))
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", max(0, p.last-len(line))))
	p.last = len(line)
}

func (p *graphProgress) step() {
	if p != nil {
		p.done++
	}
}

func (p *graphProgress) finish() {
	if p != nil {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.last))
	}
}

//go:build cuda

// Command gpucheck is the GPU check of a bare machine: it needs an NVIDIA
// driver (libcuda.so.1, opened at run time) and nothing else. It compares
// every kernel family with an independent float64 reference under two
// criteria derived from the arithmetic (each element within its bound;
// each element and the RMS within the statistical model), and with the CPU path
// (package kernels/attn) on the same inputs over a shape matrix; recovers
// the attended token sets from exact probes (Q = 0, position-coded V) and
// compares them token by token with the reference's; checks fully masked
// rows (O = 0, LSE = -inf) and run-to-run determinism; times the kernels at
// the benchmark's default shapes; and writes gpucheck.md, gpucheck.csv,
// probes.csv and timing.csv to -out (kernels/cuda/GPU_CHECK.md).
//
// Exit status: 0 all checks passed, 1 a check failed, 2 no usable GPU
// (the reason on one line: no driver, no device, no kernel image).
//
// Build (kernels/cuda/gpucheck.sh --build): CGO_ENABLED=1 with the include
// path of a cuda.h; no CUDA library is linked.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/cuda/driver"
	"github.com/sparseattn/msa/cuda/gpucheck/plan"
	"github.com/sparseattn/msa/cuda/internal/check"
)

// Peak figures of the H200 (SXM): dense BF16 and FP8 tensor-core
// throughput and HBM3e bandwidth; other GPUs are reported against these
// too, with the device name in the report.
const (
	peakBF16TFLOPS = 989
	peakFP8TFLOPS  = 1979
	peakHBMGBs     = 4800
)

type report struct {
	dev      *cuda.Device
	k        *cuda.Kernels
	rows     []string // CSV rows of the correctness table
	md       []string // Markdown rows of the correctness table
	timing   []string // CSV rows of the timing table
	timingMD []string
	probes   []string // CSV rows of the probe table
	probesMD []string
	choices  []string        // Markdown rows: the auto path's choice per timed prefill case
	chosen   map[string]bool // the timed prefill cases whose choice is printed
	// Per timed prefill case: the auto choice, and the times of the
	// query-major path and of the kv and kv2 KV-major paths alone
	// (autoFit).
	autoCh   map[string]cuda.AutoChoice
	pathMS   map[string][3]float64
	failed   int
	skipped  int
	deadline time.Time
	workers  int

	only, skip *regexp.Regexp // case selection (-only, -skip); nil selects all
	dir        string         // where the report is rewritten after every case
	header     string
	start      time.Time

	mu       sync.Mutex // guards the tables against the watchdog
	caseName string     // the case in flight, for the watchdog
	caseFrom time.Time

	prefillDefault cuda.PrefillPath  // the prefill path Load read from MSA_CUDA_PREFILL
	decodeDefault  cuda.DecodeKernel // the decode kernel Load read from MSA_CUDA_DECODE
	fp8pvDefault   cuda.FP8PV        // the FP8 P.V mode Load read from MSA_CUDA_FP8PV
}

func main() {
	out := flag.String("out", os.Getenv("OUT"), "directory for gpucheck.md, gpucheck.csv, timing.csv (default $OUT, else ./gpucheck-out)")
	budget := flag.Duration("budget", 270*time.Second, "stop starting new cases after this long")
	quick := flag.Bool("quick", false, "correctness matrix at D 128 only, one timing case per family")
	only := flag.String("only", "", "run only the cases whose name matches this regular expression")
	skip := flag.String("skip", "", "skip the cases whose name matches this regular expression")
	caseTimeout := flag.Duration("case-timeout", 60*time.Second, "a case whose GPU work runs longer than this is reported as hung and the check stops (exit 1)")
	planOut := flag.Bool("plan", false, "print the runbook's plan for -arch (every stage, case and timing row in run order with its limits and estimate, and the total) and exit; needs no driver")
	stagesOut := flag.Bool("stages", false, "print the runbook's stage lines for -arch (name, kind, limit, budget, case timeout, -only, -skip; tab-separated) and exit; needs no driver")
	rowsOut := flag.Bool("rows", false, "print the planned timing rows for -arch (stage, row name; tab-separated) and exit; needs no driver")
	archName := flag.String("arch", "sm90", "kernel family of -plan and -stages: portable, sm80, sm90 or sm100")
	stage := flag.String("stage", "", "run the cases of the runbook's check stage NAME for the device's kernel family (instead of -only / -skip)")
	deviceInfo := flag.Bool("device-info", false, "open device 0, load the kernels, print one line \"sm_XY <name> (kernel family F, plan P)\" (P: the family of the runbook's plan, portable where the fatbin has no tensor-core kernel for F) and exit (2 with the reason when there is no usable GPU)")
	flag.Parse()
	if *out == "" {
		*out = "gpucheck-out"
	}
	if *planOut || *stagesOut || *rowsOut {
		a, err := plan.ParseArch(*archName)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpucheck: -arch: %v\n", err)
			os.Exit(2)
		}
		switch {
		case *planOut:
			err = plan.Write(os.Stdout, a)
		case *rowsOut:
			err = plan.WriteRows(os.Stdout, a)
		default:
			err = plan.WriteStages(os.Stdout, plan.Stages(a))
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpucheck: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *stage != "" && (*only != "" || *skip != "") {
		fmt.Fprintf(os.Stderr, "gpucheck: -stage %q selects its own cases: give it without -only / -skip (got -only %q -skip %q)\n", *stage, *only, *skip)
		os.Exit(2)
	}
	var onlyRE, skipRE *regexp.Regexp
	for _, f := range []struct {
		name, expr string
		re         **regexp.Regexp
	}{{"-only", *only, &onlyRE}, {"-skip", *skip, &skipRE}} {
		if f.expr == "" {
			continue
		}
		re, err := regexp.Compile(f.expr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpucheck: %s %q: not a regular expression: %v\n", f.name, f.expr, err)
			os.Exit(2)
		}
		*f.re = re
	}
	if *caseTimeout <= 0 {
		fmt.Fprintf(os.Stderr, "gpucheck: -case-timeout must be positive, got %v\n", *caseTimeout)
		os.Exit(2)
	}
	start := time.Now()
	dev, err := cuda.OpenDevice(0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpucheck: %v\n", err) // driver.ErrNoDriver: one line, what is missing
		os.Exit(2)
	}
	defer dev.Close()
	k, err := cuda.Load(dev)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpucheck: %v\n", err)
		os.Exit(2)
	}
	if *deviceInfo {
		fmt.Printf("sm_%d%d %s (kernel family %s, plan %s)\n", dev.Major, dev.Minor, dev.Name, k.Arch(), planArch(k))
		if err := k.Close(dev); err != nil {
			fmt.Fprintf(os.Stderr, "gpucheck: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *stage != "" {
		st, err := plan.Find(planArch(k), *stage)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gpucheck: -stage: %v\n", err)
			os.Exit(2)
		}
		onlyRE, skipRE = compileOrNil(st.Only), compileOrNil(st.Skip)
	}
	ver, _ := driver.DriverVersion()
	r := &report{dev: dev, k: k, deadline: start.Add(*budget), workers: max(runtime.NumCPU(), 1), only: onlyRE, skip: skipRE, dir: *out, start: start,
		prefillDefault: k.PrefillPath(), decodeDefault: k.DecodeKernel(), fp8pvDefault: k.FP8PV()}
	header := fmt.Sprintf("GPU: %s (sm_%d%d, %d SMs, %.0f GiB), driver CUDA %d.%d, kernel family %s, tensor-core kernels in the fatbin: %d",
		dev.Name, dev.Major, dev.Minor, dev.SMs, float64(dev.Memory)/(1<<30), ver/1000, ver%1000/10, k.Arch(), len(k.TensorCoreKernels()))
	fmt.Println(header)
	r.header = header
	go r.watchdog(*caseTimeout)
	r.pipeOccupancy()

	for i, c := range check.PrefillMatrix() {
		if *quick && !strings.Contains(c.Name, "/d128/") {
			continue
		}
		r.prefill(c, uint64(i+1), i == 0)
	}
	for i, c := range check.DecodeMatrix() {
		if *quick && !strings.Contains(c.Name, "/d128/") {
			continue
		}
		r.decode(c, uint64(i+1))
	}
	for i, c := range check.ProbePrefillMatrix() {
		r.probePrefill(c, uint64(i+101))
	}
	for i, c := range check.TLSEOverflowMatrix() {
		r.tlseOverflow(c, uint64(i+201))
	}
	for i, c := range check.ProbeDecodeMatrix() {
		for _, md := range r.decodeModes(c.QD == cuda.E4M3 && c.KVD == cuda.E4M3) {
			if md.path == cuda.PathAuto { // the probes check the kernels of the tensor-core path
				r.applyDecode(md)
				r.probeDecode(c, uint64(i+101), md.label())
			}
		}
		r.restoreDecode()
	}
	r.timings(*quick)
	if err := r.write(*out, header, time.Since(start)); err != nil {
		fmt.Fprintf(os.Stderr, "gpucheck: writing the report: %v\n", err)
		os.Exit(1)
	}
	fb := k.Fallbacks()
	for n, why := range fb {
		fmt.Printf("fallback: %s did not run: %s\n", n, why)
	}
	if err := k.Close(dev); err != nil {
		fmt.Fprintf(os.Stderr, "gpucheck: %v\n", err)
		r.failed++
	}
	fmt.Printf("gpucheck: %d failed, %d skipped, %.0f s; report in %s\n", r.failed, r.skipped, time.Since(start).Seconds(), *out)
	if r.failed > 0 {
		os.Exit(1)
	}
}

// compileOrNil compiles a plan's expression ("" selects all: nil); the
// plan's tests compile every one.
func compileOrNil(expr string) *regexp.Regexp {
	if expr == "" {
		return nil
	}
	return regexp.MustCompile(expr)
}

// mem is the device memory of one case, with the read-back of its
// results.
type mem struct{ *cuda.Arena }

func (m *mem) result(o, lse, tlse uint64, rows, d int) (check.Result, error) {
	var r check.Result
	ob, err := m.Device().Get(o, rows*d*2)
	if err != nil {
		return r, err
	}
	r.O = make([]float32, rows*d)
	for i := range r.O {
		r.O[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(ob[2*i:])) << 16)
	}
	get := func(p uint64) ([]float32, error) {
		b, err := m.Device().Get(p, rows*4)
		if err != nil {
			return nil, err
		}
		f := make([]float32, rows)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return f, nil
	}
	if r.LSE, err = get(lse); err != nil {
		return r, err
	}
	if tlse != 0 {
		r.TLSE, err = get(tlse)
	}
	return r, err
}

// Columns of gpucheck.csv: errors, tolerances and margins against the
// reference under both criteria (the per-element bound; the statistical
// criterion's max tolerance and RMS), the comparison with the CPU path,
// masked rows, determinism.
const csvHeader = "case,kernels,max_rel_o,tol_o,margin_o,max_rel_lse,tol_lse,margin_lse,bad_o,bad_lse," +
	"stat_tol_o,stat_margin_o,rms_o,rms_tol_o,rms_margin_o,stat_tol_lse,stat_margin_lse,rms_lse,rms_tol_lse,rms_margin_lse,bad_stat_o,bad_stat_lse," +
	"masked_rows,bad_masked,nan,cpu_max_rel_o,cpu_max_rel_lse,cpu_ok,deterministic,status"

// timingHeader are the columns of timing.csv.
// union_per_tile is a prefill's mean union of selected blocks per 64-row
// query-major tile (check.Prefill.TileUnion), empty for a decode.
const timingHeader = "case,kernels,ms,tflops,pct_peak_flops,gbs,pct_hbm,union_per_tile,status"

// probeHeader are the columns of probes.csv.
const probeHeader = "case,kernels,rows,tokens,attended,wrong_tokens,wrong_counts,status,first_mismatch"

// margin formats a tolerance / error ratio ("exact": no error at all).
func margin(x float64) string {
	if math.IsInf(x, 1) {
		return "exact"
	}
	return fmt.Sprintf("%.3g", x)
}

// blankRow is a CSV row of name with only a status.
func blankRow(header, name, status string) string {
	return name + strings.Repeat(",", strings.Count(header, ",")) + status
}

// out records a correctness row: d against the reference, cpu against the
// CPU path.
func (r *report) out(name, kernels string, d, cpu check.Diff, det bool, err error) {
	status := "ok"
	switch {
	case err != nil:
		status = "ERROR: " + strings.ReplaceAll(err.Error(), ",", ";")
	case !d.BoundOK():
		status = "FAIL (bound)"
	case !d.StatOK():
		status = "FAIL (statistical)"
	case !d.OK():
		status = "FAIL"
	case !cpu.OK():
		status = "FAIL (vs CPU path)"
	case !det:
		status = "FAIL (not deterministic)"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if status != "ok" {
		r.failed++
	}
	fmt.Printf("%-70s %-44s O %.2e (bound %.2e margin %s; stat %.2e margin %s; RMS %.2e tol %.2e margin %s) "+
		"LSE %.2e (bound %.2e margin %s; stat %.2e margin %s; RMS %.2e tol %.2e margin %s) masked %d %s\n", name, kernels,
		d.MaxRelO, d.TolO, margin(d.MarginO), d.StatTolO, margin(d.StatMarginO), d.RMSO, d.RMSTolO, margin(d.RMSMarginO()),
		d.MaxRelLSE, d.TolLSE, margin(d.MarginLSE), d.StatTolLSE, margin(d.StatMarginLSE), d.RMSLSE, d.RMSTolLSE, margin(d.RMSMarginLSE()),
		d.Masked, status)
	r.rows = append(r.rows, fmt.Sprintf("%s,%s,%.3e,%.3e,%s,%.3e,%.3e,%s,%d,%d,%.3e,%s,%.3e,%.3e,%s,%.3e,%s,%.3e,%.3e,%s,%d,%d,%d,%d,%d,%.3e,%.3e,%v,%v,%s",
		name, kernels, d.MaxRelO, d.TolO, margin(d.MarginO), d.MaxRelLSE, d.TolLSE, margin(d.MarginLSE), d.BadO, d.BadLSE,
		d.StatTolO, margin(d.StatMarginO), d.RMSO, d.RMSTolO, margin(d.RMSMarginO()),
		d.StatTolLSE, margin(d.StatMarginLSE), d.RMSLSE, d.RMSTolLSE, margin(d.RMSMarginLSE()), d.BadStatO, d.BadStatLSE,
		d.Masked, d.BadMasked, d.NaN, cpu.MaxRelO, cpu.MaxRelLSE, cpu.OK(), det, status))
	r.md = append(r.md, fmt.Sprintf("| %s | %s | %.2e | %.2e | %s | %.2e | %s | %.2e | %.2e | %s | %.2e | %.2e | %s | %.2e | %s | %.2e | %.2e | %s | %d | %v | %v | %s |",
		name, kernels, d.MaxRelO, d.TolO, margin(d.MarginO), d.StatTolO, margin(d.StatMarginO), d.RMSO, d.RMSTolO, margin(d.RMSMarginO()),
		d.MaxRelLSE, d.TolLSE, margin(d.MarginLSE), d.StatTolLSE, margin(d.StatMarginLSE), d.RMSLSE, d.RMSTolLSE, margin(d.RMSMarginLSE()),
		d.Masked, cpu.OK(), det, status))
}

// probeOut records a probe row.
func (r *report) probeOut(name, kernels string, d check.ProbeDiff, err error) {
	status := "ok"
	switch {
	case err != nil:
		status = "ERROR: " + strings.ReplaceAll(err.Error(), ",", ";")
	case !d.OK():
		status = "FAIL"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if status != "ok" {
		r.failed++
	}
	first := strings.ReplaceAll(d.First, ",", ";")
	fmt.Printf("%-70s %-44s %d rows, %d tokens (%d attended): %d wrong tokens, %d wrong counts %s %s\n", name, kernels,
		d.Rows, d.Tokens, d.Attended, d.WrongTokens, d.WrongCount, status, first)
	r.probes = append(r.probes, fmt.Sprintf("%s,%s,%d,%d,%d,%d,%d,%s,%s", name, kernels, d.Rows, d.Tokens, d.Attended, d.WrongTokens, d.WrongCount, status, first))
	r.probesMD = append(r.probesMD, fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d | %s |", name, kernels, d.Rows, d.Tokens, d.Attended, d.WrongTokens, d.WrongCount, status))
}

// begin marks the start of a case's GPU work for the watchdog; begin("")
// marks its end and rewrites the report with the cases so far, so that a
// run killed from outside still leaves one.
func (r *report) begin(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.caseName, r.caseFrom = name, time.Now()
	if name == "" && r.dir != "" && r.header != "" {
		if err := r.write(r.dir, r.header, time.Since(r.start)); err != nil {
			fmt.Fprintf(os.Stderr, "gpucheck: writing the report: %v\n", err)
		}
	}
}

// watchdog ends the check when one case's GPU work has run longer than
// limit: a kernel that never finishes (a barrier deadlock, a hung copy)
// would otherwise block the synchronisation until the outer timeout kills
// the process with no word on which case it was.
func (r *report) watchdog(limit time.Duration) {
	for range time.Tick(time.Second) {
		r.mu.Lock()
		name, since := r.caseName, time.Since(r.caseFrom)
		if name != "" && since > limit {
			r.failed++
			r.rows = append(r.rows, blankRow(csvHeader, name, "HUNG (GPU work did not finish)"))
			r.md = append(r.md, fmt.Sprintf("| %s |%s HUNG: GPU work did not finish in %v |", name, strings.Repeat(" |", 20), limit))
			if err := r.write(r.dir, r.header, time.Since(r.start)); err != nil {
				fmt.Fprintf(os.Stderr, "gpucheck: writing the report: %v\n", err)
			}
			fmt.Printf("gpucheck: HUNG: %s: its GPU work has not finished after %.0f s (case timeout %v); stopping\n", name, since.Seconds(), limit)
			os.Exit(1)
		}
		r.mu.Unlock()
	}
}

// selected reports whether the -only / -skip expressions let case name run.
func (r *report) selected(name string) bool {
	return (r.only == nil || r.only.MatchString(name)) && (r.skip == nil || !r.skip.MatchString(name))
}

func (r *report) late(name string) bool {
	if !r.selected(name) {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Now().After(r.deadline) {
		r.skipped++
		if row, ok := strings.CutPrefix(name, "timing "); ok { // a timing row: in timing.csv
			r.timing = append(r.timing, blankRow(timingHeader, row, "skipped (time budget)"))
			r.timingMD = append(r.timingMD, fmt.Sprintf("| %s |%s skipped (time budget) |", row, strings.Repeat(" |", 7)))
			return true
		}
		r.rows = append(r.rows, blankRow(csvHeader, name, "skipped (time budget)"))
		r.md = append(r.md, fmt.Sprintf("| %s |%s skipped (time budget) |", name, strings.Repeat(" |", 20)))
		return true
	}
	return false
}

// prefillRun is one prefill case's device buffers and launch arguments.
type prefillRun struct {
	m      *mem
	a      *cuda.FwdArgs
	ca     *cuda.CombineArgs
	window int // queries per window of partials
	rows   int // TotalQ * Hq
}

// uploadPrefill copies case c's inputs and plan to the device and
// allocates its partials and outputs.
func (r *report) uploadPrefill(c *check.Prefill) (*prefillRun, error) {
	m := &mem{cuda.NewArena(r.dev)}
	B := len(c.CuQ) - 1
	a := &cuda.FwdArgs{Q: m.Put(c.Q.Enc), K: m.Put(c.K.Enc), V: m.Put(c.V.Enc), CuSeqlensQ: m.PutI32(c.CuQ), CuSeqlensK: m.PutI32(c.CuK),
		TotalQ: c.TotalQ, Hq: c.Hq, Hkv: c.Hkv, D: c.D, BlkKV: c.Blk, TopK: c.TopK, NumBatch: B,
		QDtype: c.QD, KVDtype: c.KVD, PartialDtype: c.PD, PVRound: c.Round(), Causal: c.Causal, KVRows: c.KVRows(), SoftmaxScale: c.Scale}
	if c.KVD == cuda.NVFP4 {
		a.KScale, a.VScale, a.KGlobalScale = m.Put(c.K.Scales), m.Put(c.V.Scales), m.PutF32(c.K.Global)
	}
	if c.Paged {
		a.PageTable, a.SequsedK, a.PageSize, a.PageTableStride = m.PutI32(c.PageTable), m.PutI32(c.SeqK), c.PageSize, c.MaxPages
	}
	slots := 1
	for _, n := range c.Sched.SplitCounts {
		slots = max(slots, int(n))
	}
	window := cuda.WindowQueries(c.TotalQ, slots, c.Hq, c.D, partialBytes(c.PD))
	ob, lb := cuda.PartialBytes(window, slots, c.Hq, c.D, partialBytes(c.PD))
	a.OPartial, a.LSEPartial = m.Alloc(int(ob)), m.Alloc(int(lb))
	if c.Temp > 0 {
		a.TLSEPartial, a.Temperature = m.Alloc(int(lb)), c.Temp
	}
	rows := c.TotalQ * c.Hq
	ca := &cuda.CombineArgs{OPartial: a.OPartial, LSEPartial: a.LSEPartial, TLSEPartial: a.TLSEPartial,
		Out: m.Alloc(rows * c.D * 2), LSE: m.Alloc(rows * 4), TotalQ: c.TotalQ, Hq: c.Hq, Hkv: c.Hkv, D: c.D, TopK: c.TopK, PartialDtype: c.PD}
	if c.Temp > 0 {
		ca.TLSE = m.Alloc(rows * 4)
	}
	if c.KVD == cuda.NVFP4 {
		ca.OutputScale = m.PutF32(c.V.Global)
	}
	if m.Err() != nil {
		err := m.Err()
		m.Free()
		return nil, err
	}
	return &prefillRun{m: m, a: a, ca: ca, window: window, rows: rows}, nil
}

// once runs the prefill in windows of w queries on the current path and
// reads the result back; kern names the kernels that ran.
func (p *prefillRun) once(r *report, c *check.Prefill, w int) (res check.Result, kern string, err error) {
	if err := r.k.SparsePrefill(r.dev, p.a, p.ca, c.CSR, c.Sched, c.CuQ, w); err != nil {
		return res, "", err
	}
	kern = strings.Join(dedup(r.k.LastKernels()), "+")
	if err := cuda.Synchronize(r.dev); err != nil {
		return res, kern, r.k.Explain(err) // names a timed-out SM100 wait's site
	}
	res, err = p.m.result(p.ca.Out, p.ca.LSE, p.ca.TLSE, p.rows, c.D)
	return res, kern, err
}

// prefill runs case c on the GPU (tensor-core path where it applies, and
// the portable kernels), twice each, and compares with the reference and
// with the CPU path.
func (r *report) prefill(c *check.Prefill, seed uint64, windowed bool) {
	if r.late(c.Name) {
		return
	}
	if err := c.Gen(seed); err != nil {
		r.out(c.Name, "", check.Diff{}, check.Diff{}, false, err)
		return
	}
	ref, cpu := c.Reference(), c.CPU(r.workers)
	if d := ref.Check(cpu); !d.OK() { // the two references disagree: say so, whatever the GPU does
		r.out(c.Name, "CPU path vs reference", d, d, true, nil)
	}
	r.begin(c.Name)
	defer r.begin("")
	pr, err := r.uploadPrefill(c)
	if err != nil {
		r.out(c.Name, "", check.Diff{}, check.Diff{}, false, err)
		return
	}
	defer func() {
		if err := pr.m.Free(); err != nil {
			r.out(c.Name, "free", check.Diff{}, check.Diff{}, false, err)
		}
	}()
	var ref8 *check.Reference // the bounds of kernels accumulating P.V over the walk on FP8 (fp8Walk)
	fp8 := c.QD == cuda.E4M3 && c.KVD == cuda.E4M3
	for _, md := range r.prefillCaseModes(fp8) {
		ref := ref
		if fp8 && md.fp8Walk {
			if ref8 == nil {
				ref8 = c.WalkReference()
			}
			ref = ref8
		}
		r.apply(md)
		g1, kern, err := pr.once(r, c, pr.window)
		var g2 check.Result
		if err == nil {
			g2, _, err = pr.once(r, c, pr.window)
		}
		r.out(c.Name, kern, ref.Check(g1), ref.CheckPair(g1, cpu), err == nil && check.Identical(g1, g2), err)
		if windowed && err == nil && pr.window > 37 { // windows of 37 queries must give the same bits
			g3, _, err := pr.once(r, c, 37)
			r.out(c.Name+"/window37", kern, ref.Check(g3), ref.CheckPair(g3, cpu), err == nil && check.Identical(g1, g3), err)
		}
		if strings.Contains(kern, "msa_sparse_fwd") { // the portable path ran already
			break
		}
	}
	r.restore()
}

// probe runs the probe passes of a case on every path: set(pass) loads the
// pass's inputs, run uploads and runs them on the current path, and
// check compares a result with the reference's attended sets.
func (r *report) probe(name string, prefill bool, passes int, set func(pass int) error, run func() (check.Result, string, error),
	checkPass func(pass int, got check.Result) check.ProbeDiff) {
	r.begin(name)
	defer r.begin("")
	paths := r.modes(prefill)
	diffs := make([]check.ProbeDiff, len(paths))
	kerns := make([]string, len(paths))
	errs := make([]error, len(paths))
	for pass := 0; pass < passes; pass++ {
		if err := set(pass); err != nil {
			r.probeOut(name, "", check.ProbeDiff{}, err)
			return
		}
		for i, path := range paths {
			if errs[i] != nil || (i > 0 && strings.Contains(kerns[0], "msa_sparse_fwd")) || (i > 0 && strings.Contains(kerns[0], "msa_decode_d")) {
				continue
			}
			r.apply(path)
			g, kern, err := run()
			kerns[i], errs[i] = kern, err
			if err == nil {
				diffs[i].Add(checkPass(pass, g))
			}
		}
	}
	r.restore()
	for i := range paths {
		if kerns[i] == "" && errs[i] == nil {
			continue
		}
		r.probeOut(name, kerns[i], diffs[i], errs[i])
	}
}

// probePrefill runs the probe passes of prefill case c.
func (r *report) probePrefill(c *check.Prefill, seed uint64) {
	if r.late(c.Name) {
		return
	}
	if err := c.Gen(seed); err != nil {
		r.probeOut(c.Name, "", check.ProbeDiff{}, err)
		return
	}
	r.probe(c.Name, true, c.ProbePasses(), c.SetProbe, r.prefillOnce(c), c.CheckProbe)
}

// prefillOnce uploads case c's current inputs, runs them on the current
// path and frees the device memory: one probe pass.
func (r *report) prefillOnce(c *check.Prefill) func() (check.Result, string, error) {
	return func() (check.Result, string, error) {
		pr, err := r.uploadPrefill(c)
		if err != nil {
			return check.Result{}, "", err
		}
		g, kern, err := pr.once(r, c, pr.window)
		if ferr := pr.m.Free(); err == nil {
			err = ferr
		}
		return g, kern, err
	}
}

// tlseOverflow runs the temperature-LSE overflow probe c on every
// prefill path: rows that see a key must give +inf, rows that see none
// -inf (check.TLSEOverflowMatrix).
func (r *report) tlseOverflow(c *check.Prefill, seed uint64) {
	if r.late(c.Name) {
		return
	}
	err := c.Gen(seed)
	if err == nil {
		err = c.SetTLSEOverflow(seed)
	}
	if err != nil {
		r.probeOut(c.Name, "", check.ProbeDiff{}, err)
		return
	}
	r.probe(c.Name, true, 1, func(int) error { return nil }, r.prefillOnce(c), func(_ int, got check.Result) check.ProbeDiff { return c.CheckTLSEOverflow(got) })
}

// probeDecode runs the probe passes of decode case c.
func (r *report) probeDecode(c *check.Decode, seed uint64, label string) {
	name := c.Name + label
	if r.late(name) {
		return
	}
	c.SMs = r.dev.SMs // the CUDA executor's split for this GPU
	if err := c.Gen(seed); err != nil {
		r.probeOut(name, "", check.ProbeDiff{}, err)
		return
	}
	r.probe(name, false, c.ProbePasses(), c.SetProbe, func() (check.Result, string, error) {
		m := &mem{cuda.NewArena(r.dev)}
		a := r.decodeArgs(m, c)
		if m.Err() != nil {
			err := m.Err()
			m.Free()
			return check.Result{}, "", err
		}
		g, kern, err := r.decodeOnce(m, a, c)
		if ferr := m.Free(); err == nil {
			err = ferr
		}
		return g, kern, err
	}, c.CheckProbe)
}

func partialBytes(d cuda.Dtype) int {
	switch d {
	case cuda.F32:
		return 4
	case cuda.BF16, cuda.F16:
		return 2
	}
	return 1
}

func dedup(s []string) []string {
	var out []string
	for _, x := range s {
		if len(out) == 0 || out[len(out)-1] != x {
			out = append(out, x)
		}
	}
	return out
}

func (r *report) decodeArgs(m *mem, c *check.Decode) *cuda.DecodeArgs {
	rows := c.Batch * c.SeqlenQ * c.Hq
	a := &cuda.DecodeArgs{Q: m.Put(c.Q.Enc), K: m.Put(c.K.Enc), V: m.Put(c.V.Enc),
		SequsedK: m.PutI32(c.SeqUsed), PageTable: m.PutI32(c.PageTable),
		Out: m.Alloc(rows * c.D * 2), LSE: m.Alloc(rows * 4),
		Batch: c.Batch, SeqlenQ: c.SeqlenQ, Hq: c.Hq, Hkv: c.Hkv, D: c.D, PageSize: c.PageSize,
		PageTableStride: c.MaxPages, QDtype: c.QD, KVDtype: c.KVD, PVRound: c.Round(), NumPages: c.NumPages}
	if c.KVD == cuda.NVFP4 {
		a.KScale, a.VScale = m.Put(c.K.Scales), m.Put(c.V.Scales)
		a.KGlobalScale, a.OutputScale = m.PutF32(c.K.Global), m.PutF32(c.V.Global)
	}
	if c.Q2K != nil {
		a.Q2K, a.TopK, a.BlkKV = m.PutI32(c.Q2K), c.TopK, c.Blk
	}
	if c.Sched.SplitKV {
		a.OPartial = m.Alloc(c.Sched.PartialRows * c.Hq * c.D * 4)
		a.LSEPartial = m.Alloc(c.Sched.PartialRows * c.Hq * 4)
	}
	return a
}

// decodeOnce runs decode case c with arguments a on the current path.
func (r *report) decodeOnce(m *mem, a *cuda.DecodeArgs, c *check.Decode) (res check.Result, kern string, err error) {
	if err := r.k.Decode(r.dev, a, c.Sched); err != nil {
		return res, "", err
	}
	kern = strings.Join(dedup(r.k.LastKernels()), "+")
	if err := cuda.Synchronize(r.dev); err != nil {
		return res, kern, r.k.Explain(err) // names a timed-out SM100 wait's site
	}
	res, err = m.result(a.Out, a.LSE, 0, c.Batch*c.SeqlenQ*c.Hq, c.D)
	return res, kern, err
}

// decode runs case c like prefill.
func (r *report) decode(c *check.Decode, seed uint64) {
	if r.late(c.Name) {
		return
	}
	c.SMs = r.dev.SMs // the CUDA executor's split for this GPU
	if err := c.Gen(seed); err != nil {
		r.out(c.Name, "", check.Diff{}, check.Diff{}, false, err)
		return
	}
	ref, cpu := c.Reference(), c.CPU(r.workers)
	if d := ref.Check(cpu); !d.OK() {
		r.out(c.Name, "CPU path vs reference", d, d, true, nil)
	}
	r.begin(c.Name)
	defer r.begin("")
	m := &mem{cuda.NewArena(r.dev)}
	defer func() {
		if err := m.Free(); err != nil {
			r.out(c.Name, "free", check.Diff{}, check.Diff{}, false, err)
		}
	}()
	a := r.decodeArgs(m, c)
	if m.Err() != nil {
		r.out(c.Name, "", check.Diff{}, check.Diff{}, false, m.Err())
		return
	}
	defer r.restoreDecode()
	portable := false         // a row of the portable kernel was written
	var ref8 *check.Reference // the bounds of kernels accumulating P.V over the walk on FP8 (fp8Walk)
	fp8 := c.QD == cuda.E4M3 && c.KVD == cuda.E4M3
	for _, md := range r.decodeModes(fp8) {
		r.applyDecode(md)
		g1, kern, err := r.decodeOnce(m, a, c)
		if md.kernel == cuda.DecodeNew && err == nil && !plan.NewDecodeOwn(kern, c.Sched.SplitKV) {
			continue // the same launches as the old mode (Fallbacks says why): the old kernel's row covers it
		}
		if md.fp8pv == cuda.FP8PVFP8 && err == nil && !strings.Contains(kern, "_fp8pv_") {
			continue // no fp8pv kernel here (D 256): the new kernel's row covers it
		}
		if strings.Contains(kern, "msa_decode_d") {
			if portable {
				continue // the old mode already fell back to the portable kernel (e.g. NVFP4 on sm90)
			}
			portable = true
		}
		ref := ref
		if fp8 && md.fp8Walk && strings.Contains(kern, "msa_sm100_decode_") {
			if ref8 == nil {
				ref8 = c.WalkReference()
			}
			ref = ref8
		}
		var g2 check.Result
		if err == nil {
			g2, _, err = r.decodeOnce(m, a, c)
		}
		split := fmt.Sprintf(" (split %v; %d items)", c.Sched.SplitKV, c.Sched.WorkCount) // no comma: a CSV field
		r.out(c.Name, kern+split, ref.Check(g1), ref.CheckPair(g1, cpu), err == nil && check.Identical(g1, g2), err)
	}
}

// timings times the A/B rows of the plan (plan.Rows) in their order:
// the rows that decide the issues' targets first. Each case is generated
// once for its consecutive rows, and a correlated selection once per
// length for all its cases (the block scoring of 128K tokens is seconds of
// host work); every row is in timing.csv as soon as it is measured (begin
// rewrites the report after each).
func (r *report) timings(quick bool) {
	fmt.Printf("timing: %s\n", r.defaults())
	var (
		cur    string // the case generated last
		pc     *check.Prefill
		dc     *check.Decode
		genErr error
		sels   = &check.Selections{Workers: r.workers}
	)
	quickCase := map[bool]string{} // -quick: the first prefill and the first decode case
	for _, row := range plan.Rows(r.planArch()) {
		name, tc := row.Name(), row.Case
		if quick {
			if quickCase[tc.Prefill] == "" {
				quickCase[tc.Prefill] = tc.Name
			}
			if quickCase[tc.Prefill] != tc.Name {
				continue
			}
		}
		if r.late("timing " + name) {
			continue
		}
		if tc.Name != cur {
			cur, pc, dc = tc.Name, nil, nil
			if tc.Prefill {
				pc = check.TimingPrefill(tc.Name, tc.T, tc.Q, tc.KV)
				genErr = pc.GenTiming(1, tc.Select, sels)
			} else {
				dc = check.TimingDecode(tc.Name, tc.Batch, tc.Ctx, tc.Q)
				dc.SMs = r.dev.SMs
				genErr = dc.Gen(1)
			}
		}
		switch {
		case genErr != nil:
			r.timeRow(name, "", 0, 0, 0, noUnion, tc.FP8(), genErr)
		case tc.Prefill:
			r.timePrefill(pc, name, prefillRunMode(row.Prefill, r.planArch()), tc.FP8())
		default:
			r.timeDecode(dc, name, decodeRunMode(row.Decode, r.planArch()), tc.FP8())
		}
	}
}

// defaults names the paths a run without A/B switches uses, as Load read
// them from the environment.
func (r *report) defaults() string {
	return fmt.Sprintf("default paths (what a run without A/B switches uses): prefill %s (%s), decode %v (%s), FP8 P.V %v (%s)",
		r.prefillDefault, cuda.PrefillEnv, r.decodeDefault, cuda.DecodeEnv, r.fp8pvDefault, cuda.FP8PVEnv)
}

// noUnion is timeRow's union of a row without one (decode).
const noUnion = -1

// timeRow records a timing row; union is the prefill's mean union of
// selected blocks per query-major tile (check.Prefill.TileUnion), or
// noUnion.
func (r *report) timeRow(name, kern string, ms, flop, bytes, union float64, fp8 bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, uText := "", ""
	if union >= 0 {
		u, uText = fmt.Sprintf("%.2f", union), fmt.Sprintf(" %6.2f blocks/tile", union)
	}
	if err != nil {
		err = r.k.Explain(err) // names a timed-out SM100 wait's site
		r.failed++
		fmt.Printf("timing %-36s ERROR %v\n", name, err)
		r.timing = append(r.timing, fmt.Sprintf("%s,%s,,,,,,%s,ERROR: %s", name, kern, u, strings.ReplaceAll(err.Error(), ",", ";")))
		r.timingMD = append(r.timingMD, fmt.Sprintf("| %s | %s | | | | | | %s | error |", name, kern, u))
		return
	}
	peak := float64(peakBF16TFLOPS)
	if fp8 {
		peak = peakFP8TFLOPS
	}
	tf := flop / (ms * 1e-3) / 1e12
	gbs := bytes / (ms * 1e-3) / 1e9
	fmt.Printf("timing %-36s %-40s %9.3f ms %8.1f TFLOP/s (%5.1f%% of %.0f) %8.0f GB/s (%5.1f%% of %d)%s\n",
		name, kern, ms, tf, 100*tf/peak, peak, gbs, 100*gbs/peakHBMGBs, peakHBMGBs, uText)
	r.timing = append(r.timing, fmt.Sprintf("%s,%s,%.4f,%.2f,%.1f,%.0f,%.1f,%s,ok", name, kern, ms, tf, 100*tf/peak, gbs, 100*gbs/peakHBMGBs, u))
	r.timingMD = append(r.timingMD, fmt.Sprintf("| %s | %s | %.3f | %.1f | %.1f%% of %.0f | %.0f | %.1f%% | %s | ok |", name, kern, ms, tf, 100*tf/peak, peak, gbs, 100*gbs/peakHBMGBs, u))
}

// sameRow records a timing row whose launches are those of the case's old
// decode row (plan.NewDecodeOwn is false), so it is not timed twice.
func (r *report) sameRow(name, kern string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	const status = "same launches as the old row"
	fmt.Printf("timing %-36s %-40s %s\n", name, kern, status)
	r.timing = append(r.timing, fmt.Sprintf("%s,%s,,,,,,,%s", name, kern, status))
	r.timingMD = append(r.timingMD, fmt.Sprintf("| %s | %s | | | | | | | %s |", name, kern, status))
}

// timePrefill times generated case c (GenTiming) in mode md, reported as
// name with the mean union of its selected blocks per query-major tile.
func (r *report) timePrefill(c *check.Prefill, name string, md runMode, fp8 bool) {
	r.begin("timing " + name)
	defer r.begin("")
	union, err := c.TileUnion()
	if err != nil {
		r.timeRow(name, "", 0, 0, 0, noUnion, fp8, err)
		return
	}
	m := &mem{cuda.NewArena(r.dev)}
	defer m.Free()
	a := &cuda.FwdArgs{Q: m.Put(c.Q.Enc), K: m.Put(c.K.Enc), V: m.Put(c.V.Enc), CuSeqlensQ: m.PutI32(c.CuQ), CuSeqlensK: m.PutI32(c.CuK),
		TotalQ: c.TotalQ, Hq: c.Hq, Hkv: c.Hkv, D: c.D, BlkKV: c.Blk, TopK: c.TopK, NumBatch: 1,
		QDtype: c.QD, KVDtype: c.KVD, PartialDtype: c.PD, PVRound: c.Round(), Causal: true, KVRows: c.KVRows()}
	if c.KVD == cuda.NVFP4 {
		a.KScale, a.VScale, a.KGlobalScale = m.Put(c.K.Scales), m.Put(c.V.Scales), m.PutF32(c.K.Global)
	}
	window := cuda.WindowQueries(c.TotalQ, c.TopK, c.Hq, c.D, 2)
	ob, lb := cuda.PartialBytes(window, c.TopK, c.Hq, c.D, 2)
	a.OPartial, a.LSEPartial = m.Alloc(int(ob)), m.Alloc(int(lb))
	rows := c.TotalQ * c.Hq
	ca := &cuda.CombineArgs{OPartial: a.OPartial, LSEPartial: a.LSEPartial, Out: m.Alloc(rows * c.D * 2), LSE: m.Alloc(rows * 4),
		TotalQ: c.TotalQ, Hq: c.Hq, Hkv: c.Hkv, D: c.D, TopK: c.TopK, PartialDtype: c.PD}
	if c.KVD == cuda.NVFP4 {
		ca.OutputScale = m.PutF32(c.V.Global)
	}
	if m.Err() != nil {
		r.timeRow(name, "", 0, 0, 0, union, fp8, m.Err())
		return
	}
	r.autoChoice(c, a)
	r.apply(md)
	defer r.restore()
	pl, err := r.k.PrepareSparsePrefill(r.dev, a, ca, c.CSR, c.Sched, c.CuQ, window)
	if err != nil {
		r.timeRow(name, "", 0, 0, 0, union, fp8, err)
		return
	}
	kern := strings.Join(dedup(pl.Kernels()), "+")
	ms, err := r.dev.Time(5, func() error { return pl.Launch(r.dev) }) // kernels only: the plan is uploaded
	if err == nil {
		err = cuda.CheckFiniteBF16(r.dev, ca.Out, rows*c.D)
	}
	// bytes: Q, K, V read once, O written, and on the KV-major path the
	// partials written and read back
	es := map[cuda.Dtype]float64{cuda.BF16: 2, cuda.E4M3: 1, cuda.NVFP4: 0.5 + 1.0/16}
	bytes := float64(rows*c.D)*(es[c.QD]+2) + 2*float64(c.TotalQ*c.Hkv*c.D)*es[c.KVD]
	if !strings.Contains(kern, "_qfwd_") {
		bytes += 2 * float64(check.SlotRows(c)) * float64(c.Hq/c.Hkv) * float64(c.D*2+4)
	}
	r.timeRow(name, kern, ms, c.FLOP(), bytes, union, fp8, err)
	if err == nil {
		r.autoFit(c, a, md, ms)
	}
}

// autoChoice prints, once per timed prefill case, what the auto path's
// model chooses for it on this GPU (cuda.ChooseAutoPrefill: host work, no
// GPU time): tiles per path, the model's totals and what decided, next to
// the case's query and kv rows.
func (r *report) autoChoice(c *check.Prefill, a *cuda.FwdArgs) {
	if r.chosen[c.Name] {
		return
	}
	ch, err := cuda.ChooseAutoPrefill(r.k.Arch(), r.dev.Name, a, c.CSR, c.Sched, c.CuQ)
	text := ch.String()
	if err != nil {
		text = "ERROR: " + err.Error()
	}
	fmt.Printf("timing %-36s %s\n", c.Name+" (auto choice)", text)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.chosen == nil {
		r.chosen = map[string]bool{}
	}
	r.chosen[c.Name] = true
	r.choices = append(r.choices, fmt.Sprintf("| %s | %s |", c.Name, text))
	if err == nil {
		if r.autoCh == nil {
			r.autoCh = map[string]cuda.AutoChoice{}
		}
		r.autoCh[c.Name] = ch
	}
}

// autoFit records the time of case c on mode md when it is one of the
// paths the auto choice weighs (the tensor-core query-major kernel auto
// launches, or a KV-major kernel: kv for auto, kv2 for auto-kv2), and once
// the query time and a KV-major time are in prints the rate they measure
// beside the model's and the KVSlot that gives it (cuda.AutoFit): one
// "(auto fit)" line from the kv row, one "(auto-kv2 fit)" line from the
// kv2 row, so that one GPU run fits the model's constants for each.
func (r *report) autoFit(c *check.Prefill, a *cuda.FwdArgs, md runMode, ms float64) {
	slot := map[cuda.PrefillPath]int{cuda.PrefillQuery: 0, cuda.PrefillKV: 1, cuda.PrefillKV2: 2}
	i, ok := slot[md.prefill]
	if md.path != cuda.PathAuto || md.choose != nil || md.fp8pv != r.fp8pvDefault || !ok {
		return
	}
	r.mu.Lock()
	if r.pathMS == nil {
		r.pathMS = map[string][3]float64{}
	}
	t := r.pathMS[c.Name]
	t[i] = ms
	r.pathMS[c.Name] = t
	ch, weighed := r.autoCh[c.Name]
	r.mu.Unlock()
	if !weighed || ch.Limit != "" {
		return // not weighed: the choice line says why
	}
	for _, j := range plan.FitRows(i, t[:]) {
		r.printAutoFit(c, a, ch, j, t[0], t[j])
	}
}

// printAutoFit prints and records the fit of case c from its query-major
// time queryMS and the time kvMS of KV-major kernel j (1: kv, 2: kv2).
func (r *report) printAutoFit(c *check.Prefill, a *cuda.FwdArgs, ch cuda.AutoChoice, j int, queryMS, kvMS float64) {
	label, kv := " (auto fit)", "kv"
	if j == 2 {
		label, kv = " (auto-kv2 fit)", "kv2"
	}
	var text string
	model, fitted, rate, err := cuda.AutoFit(r.dev.Name, a, ch, queryMS, kvMS)
	if err != nil {
		text = "ERROR: " + err.Error()
	} else {
		text = fmt.Sprintf("measured rate %.3g (model %.3g): KVSlot %.4g gives it at %d-key blocks (model %.4g); query %.3f ms, %s %.3f ms",
			rate, ch.Rate, fitted.KVSlot, c.Blk, model.KVSlot, queryMS, kv, kvMS)
		if fc, err := cuda.ChooseAutoPrefillWith(r.k.Arch(), fitted, a, c.CSR, c.Sched, c.CuQ); err == nil {
			text += fmt.Sprintf("; with it %d tiles query, %d kv (model: %d, %d)", fc.QueryTiles, fc.KVTiles, ch.QueryTiles, ch.KVTiles)
		}
	}
	fmt.Printf("timing %-36s %s\n", c.Name+label, text)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.choices = append(r.choices, fmt.Sprintf("| %s%s | %s |", c.Name, label, text))
}

// timeDecode times generated case c in mode md, reported as name; the
// bytes are the minimum traffic (every K/V byte once, Q read, O written),
// so GB/s over the HBM peak is the fraction of bandwidth reached.
func (r *report) timeDecode(c *check.Decode, name string, md decodeMode, fp8 bool) {
	r.begin("timing " + name)
	defer r.begin("")
	m := &mem{cuda.NewArena(r.dev)}
	defer m.Free()
	a := r.decodeArgs(m, c)
	if m.Err() != nil {
		r.timeRow(name, "", 0, 0, 0, noUnion, fp8, m.Err())
		return
	}
	r.applyDecode(md)
	defer r.restoreDecode()
	pl, err := r.k.PrepareDecode(r.dev, a, c.Sched)
	if err != nil {
		r.timeRow(name, "", 0, 0, 0, noUnion, fp8, err)
		return
	}
	kern := strings.Join(dedup(pl.Kernels()), "+")
	if md.kernel == cuda.DecodeNew && !plan.NewDecodeOwn(kern, c.Sched.SplitKV) {
		r.sameRow(name, kern)
		return
	}
	ms, err := r.dev.Time(20, func() error { return pl.Launch(r.dev) })
	if err == nil {
		err = cuda.CheckFiniteBF16(r.dev, a.Out, c.Batch*c.SeqlenQ*c.Hq*c.D)
	}
	r.timeRow(name, kern, ms, c.FLOP(), c.Bytes(), noUnion, fp8, err)
}

// replaceFile writes data to path through a temporary file and a rename,
// so that a run killed while rewriting its report leaves the previous
// complete file, never a truncated one.
func replaceFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// write rewrites the report's files under dir with the rows so far.
func (r *report) write(dir, header string, took time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	csv := csvHeader + "\n" + strings.Join(r.rows, "\n") + "\n"
	if err := replaceFile(filepath.Join(dir, "gpucheck.csv"), []byte(csv), 0o644); err != nil {
		return err
	}
	pcsv := probeHeader + "\n" + strings.Join(r.probes, "\n") + "\n"
	if err := replaceFile(filepath.Join(dir, "probes.csv"), []byte(pcsv), 0o644); err != nil {
		return err
	}
	tcsv := timingHeader + "\n" + strings.Join(r.timing, "\n") + "\n"
	if err := replaceFile(filepath.Join(dir, "timing.csv"), []byte(tcsv), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# GPU check, %s\n\n%s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), header)
	fmt.Fprintf(&b, "%d failed, %d skipped, %.0f s.\n\n", r.failed, r.skipped, took.Seconds())
	b.WriteString("## Correctness vs the float64 reference\n\nTwo criteria, both must hold (kernels/cuda/GPU_CHECK.md, \"Tolerances\"). " +
		"err is the max |gpu-ref|/(1+|ref|); bound is the largest per-element bound applied in the same measure (each element has its own, " +
		"derived from the arithmetic) and its margin the smallest bound/error over the elements; stat is the largest statistical max tolerance " +
		"and its margin the smallest allowed/needed pre-rounding deviation; RMS is the root mean square error, RMS tol k_N times the model's " +
		"expected RMS, and its margin RMS tol/RMS. A margin below 1 fails. masked = rows that attend no key (checked O = 0, LSE = -inf); " +
		"vs CPU = within both criteria (doubled) of the CPU path (kernels/attn); deterministic = two runs bit-identical.\n\n")
	b.WriteString("| case | kernels | err O | bound O | margin | stat O | margin | RMS O | RMS tol O | margin | err LSE | bound LSE | margin | " +
		"stat LSE | margin | RMS LSE | RMS tol LSE | margin | masked | vs CPU | deterministic | status |\n" +
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n")
	b.WriteString(strings.Join(r.md, "\n"))
	b.WriteString("\n\n## Probes: attended token sets (Q = 0, position-coded V)\n\nrows = (query row, head) pairs over all passes; " +
		"tokens = memberships checked; wrong tokens = memberships that differ from the reference's set; wrong counts = rows whose exp(LSE) is not the set's size.\n\n")
	b.WriteString("| case | kernels | rows | tokens | attended | wrong tokens | wrong counts | status |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	b.WriteString(strings.Join(r.probesMD, "\n"))
	fmt.Fprintf(&b, "\n\n## Timing (bench default shapes: Hq %d, Hkv %d, D %d, topK %d, blk %d; decode page %d)\n\n", check.BenchHq, check.BenchHkv,
		check.BenchD, check.BenchTopK, check.BenchBlk, check.BenchPage)
	fmt.Fprintf(&b, "Peaks: H200 dense BF16 %d TFLOP/s, FP8 %d TFLOP/s, HBM %d GB/s. The %s.\n\n", peakBF16TFLOPS, peakFP8TFLOPS, peakHBMGBs, r.defaults())
	b.WriteString("Prefill rows: the selection pattern is in the case name (correlated: BlockScores + TopKBlocks on token-correlated Q and K; " +
		"random: the bench's default; local: a local window); blocks/tile is the mean union of the blocks a 64-row query tile's tokens selected.\n\n")
	b.WriteString("| case | kernels | ms | TFLOP/s | % of peak | GB/s | % of HBM | blocks/tile | status |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	b.WriteString(strings.Join(r.timingMD, "\n"))
	b.WriteString("\n\n### The auto path's choice per prefill case\n\nWhat MSA_CUDA_PREFILL=auto would run, by the model's " +
		"first-estimate GPU constants (cuda/prefill_auto.go; no GPU time): query-major and KV-major tiles, the model's totals with every " +
		"tile on one path and as chosen, and what decided. An (auto fit) row follows each case timed on the query and the kv path alone, " +
		"an (auto-kv2 fit) row each case timed on the query and the kv2 path: the rate (query-major cost per row and key over the " +
		"KV-major one) the two times measure beside the model's, and the KVSlot that gives it (cuda.AutoFit), the constant to put in " +
		"gpuPathCosts for this GPU (for auto and auto-kv2), and the tiles per path with it.\n\n| case | choice |\n|---|---|\n")
	b.WriteString(strings.Join(r.choices, "\n"))
	b.WriteString("\n")
	return replaceFile(filepath.Join(dir, "gpucheck.md"), []byte(b.String()), 0o644)
}

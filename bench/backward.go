package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// The backward group times the float32 training path of the sparse prefill
// (package grad's kernels through op.SparseAttentionFunc with float32 q, k, v
// and op.SparseAttentionBackwardFunc) on the prefill group's workload: one
// causal sequence of T tokens, Hq 16, Hkv 1, D 128, blk_kv 128, topK
// (-topk) blocks per query (causalQ2K), on 1 and 2 workers. Backward flops
// are counted as 2.5x the forward's (the FlashAttention convention: the
// backward recomputes QK^T and does four more products of that size); the
// forward's are 4*D per visible (query, head, key). The BF16 forward
// (op.SparseAttentionFunc with BF16 inputs and a prebuilt schedule) of the same
// problem is timed too, for the ratio to the inference kernels. Besides
// wall-clock GFLOP/s the table gives GFLOP per CPU-second of this process
// (getrusage, all workers): on a machine shared with other processes the
// wall-clock figures measure the share of the CPUs the run got, the
// per-CPU-second ones what the code does while it runs.

// backwardRow is one (case, workers) measurement.
type backwardRow struct {
	name                  string
	workers               int
	fwdBF16, fwdF32, bwd  time.Duration
	repsBF16, repsF32, rB int
	cpuBF16, cpuF32       float64 // process CPU seconds per call (all workers)
	cpuBwd                float64
	flops                 float64 // forward flops
	load                  loadStats
	verify                string    // -verify: "ok", "FAIL: ..." or "" (not run)
	spreads               [3]spread // per-call times of the BF16 forward, float32 forward, backward
	err                   error
}

// backwardLens returns the sequence lengths of the group.
func backwardLens(cfg *config) []int {
	switch {
	case cfg.tiny:
		return []int{256}
	case cfg.quick:
		return []int{1024}
	}
	return []int{1024, 2048}
}

// widenF32 decodes a BFloat16 tensor to a new float32 tensor.
func widenF32(t *tensor.Dense) *tensor.Dense {
	src := t.Data().([]lowp.BFloat16)
	dst := make([]float32, len(src))
	lowp.DecodeBF16(dst, src)
	return tensor.New(tensor.WithShape(t.Shape().Clone()...), tensor.WithBacking(dst))
}

// runBackwardGroup runs and prints the backward group.
func runBackwardGroup(cfg *config) error {
	minTime := cfg.minTime
	if minTime == 0 {
		minTime = time.Second
		if cfg.quick || cfg.tiny {
			minTime = 300 * time.Millisecond
		}
	}
	var rows []*backwardRow
	failed := false
	for _, T := range backwardLens(cfg) {
		c := caseSpec{Name: "backward-f32-" + kLabel(T), Kind: "prefill", DType: "bf16", SeqLen: T, Batch: 1,
			HQ: 16, HKV: 1, D: 128, TopK: cfg.topK, Blk: 128}
		p, err := buildPrefill(cfg, c)
		if err != nil {
			return err
		}
		q, k, v := widenF32(p.q), widenF32(p.k), widenF32(p.v)
		dO := widenF32(p.q) // any dO of O's shape
		flops := 4 * float64(c.D*c.HQ/c.HKV) * float64(p.pairs)
		for _, w := range []int{1, 2} {
			r := &backwardRow{name: c.Name, workers: w, flops: flops}
			rows = append(rows, r)
			before := readCPUSample()
			r.err = timeBackward(cfg, c, p, q, k, v, dO, w, minTime, r)
			r.load = loadBetween(before, readCPUSample())
			if r.err != nil {
				failed = true
			}
			if !cfg.progress {
				fmt.Printf("[backward] %s workers %d: forward f32 %.1f ms, backward %.1f ms\n", c.Name, w, ms(r.fwdF32), ms(r.bwd))
			}
		}
		runtime.GC()
		debug.FreeOSMemory()
	}
	printBackwardTable(os.Stdout, cfg, rows)
	if cfg.out != "" {
		if err := writeBackwardCSV(cfg.out, rows); err != nil {
			return err
		}
		fmt.Printf("wrote %s/backward.csv\n", cfg.out)
	}
	if failed {
		return fmt.Errorf("a backward case failed")
	}
	return nil
}

// timeBackward times the BF16 forward, the float32 forward and the float32
// backward of one case on w workers.
func timeBackward(cfg *config, c caseSpec, p *prefillProb, q, k, v, dO *tensor.Dense, w int, minTime time.Duration, r *backwardRow) error {
	sched, err := op.FwdScheduleFunc(p.rowPtr, p.qIdx, op.ScheduleArgs{
		CuSeqlensQ: p.cuQ, CuSeqlensK: p.cuK, TotalQ: c.SeqLen, TopK: c.TopK, QheadPerKV: c.HQ / c.HKV, BlkKV: c.Blk, Workers: w})
	if err != nil {
		return err
	}
	bf := op.SparseArgs{CuSeqlensQ: p.cuQ, CuSeqlensK: p.cuK, BlkKV: c.Blk, Causal: true, Schedule: sched, Workers: w}
	var samples [3][]float64 // ms per timed call, for the noise verdict
	rec := func(i int) func(time.Duration) {
		return func(d time.Duration) { samples[i] = append(samples[i], float64(d)/float64(time.Millisecond)) }
	}
	defer func() {
		for i := range samples {
			r.spreads[i] = spreadOf(samples[i])
		}
	}()
	cpuB := readCPUSample().self
	if r.fwdBF16, _, r.repsBF16, err = timeIt(minTime, minReps, 1000, func() error {
		_, err := op.SparseAttentionFunc(p.q, p.k, p.v, p.rowPtr, p.qIdx, c.TopK, bf)
		return err
	}, rec(0)); err != nil {
		return err
	}
	args := op.SparseArgs{CuSeqlensQ: p.cuQ, CuSeqlensK: p.cuK, BlkKV: c.Blk, Causal: true, Workers: w}
	var res *op.Result
	cpu0 := readCPUSample().self
	r.cpuBF16 = (cpu0 - cpuB) / float64(r.repsBF16+1)
	if r.fwdF32, _, r.repsF32, err = timeIt(minTime, minReps, 1000, func() error {
		var err error
		res, err = op.SparseAttentionFunc(q, k, v, p.rowPtr, p.qIdx, c.TopK, args)
		return err
	}, rec(1)); err != nil {
		return err
	}
	cpu1 := readCPUSample().self
	r.bwd, _, r.rB, err = timeIt(minTime, minReps, 1000, func() error {
		_, err := op.SparseAttentionBackwardFunc(q, k, v, res.Out, res.LSE, dO, nil, p.rowPtr, p.qIdx, c.TopK, args)
		return err
	}, rec(2))
	cpu2 := readCPUSample().self
	r.cpuF32 = (cpu1 - cpu0) / float64(r.repsF32+1) // timeIt's warm-up call included
	r.cpuBwd = (cpu2 - cpu1) / float64(r.rB+1)
	if err != nil || !cfg.verify {
		return err
	}
	gr, err := op.SparseAttentionBackwardFunc(q, k, v, res.Out, res.LSE, dO, nil, p.rowPtr, p.qIdx, c.TopK, args)
	if err != nil {
		return err
	}
	r.verify = verifyBackward(res, dO, gr)
	if r.verify != "ok" {
		return fmt.Errorf("verify: %s", r.verify)
	}
	return nil
}

// verifyBackward checks two exact identities of the backward (without
// dLSE) in float64, per KV head and column c: the dV rows sum to the dO
// rows of every (query, head) that sees a key (the probabilities of a row
// sum to 1), and the dK rows sum to 0 (the dS of a row sum to
// dO.O - Delta = 0). Tolerance: 1e-4 of the sum of the terms' magnitudes.
func verifyBackward(res *op.Result, dO *tensor.Dense, gr *op.Gradients) string {
	qs, ks := res.Out.Shape(), gr.DK.Shape()
	hq, hkv, d := qs[1], ks[1], qs[2]
	lse := res.LSE.Data().([]float32)
	do := dO.Data().([]float32)
	dk, dv := gr.DK.Data().([]float32), gr.DV.Data().([]float32)
	for h := 0; h < hkv; h++ {
		for c := 0; c < d; c++ {
			var sumV, sumK, absV, absK, want float64
			for t := 0; t < ks[0]; t++ {
				x, y := float64(dv[(t*hkv+h)*d+c]), float64(dk[(t*hkv+h)*d+c])
				sumV, absV = sumV+x, absV+abs(x)
				sumK, absK = sumK+y, absK+abs(y)
			}
			for q := 0; q < qs[0]; q++ {
				for g := h * hq / hkv; g < (h+1)*hq/hkv; g++ {
					if l := lse[q*hq+g]; l == l && l > -1e30 {
						x := float64(do[(q*hq+g)*d+c])
						want, absV = want+x, absV+abs(x)
					}
				}
			}
			if e := abs(sumV - want); e > 1e-4*max(absV, 1) {
				return fmt.Sprintf("FAIL: head %d column %d: sum dV = %g, sum dO = %g", h, c, sumV, want)
			}
			if abs(sumK) > 1e-4*max(absK, 1) {
				return fmt.Sprintf("FAIL: head %d column %d: sum dK = %g, want 0", h, c, sumK)
			}
		}
	}
	return "ok"
}

func abs(x float64) float64 { return max(x, -x) }

// backwardFigures is one row's derived figures: GFLOP/s wall-clock and
// per CPU-second of each pass, the backward's ratios and the 2-worker
// scaling ("-" on one worker).
type backwardFigures struct {
	gfBF16, gfF32, gfBwd    float64 // wall-clock GFLOP/s
	cpuBF16, cpuF32, cpuBwd float64 // GFLOP per CPU-second (0: unknown)
	bwdF32, bwdBF16         float64 // backward / forward GFLOP/s, %
	scaleFwd, scaleBwd      string  // 1-worker time / this row's
}

// figures derives a row's figures; one maps a case to its 1-worker row.
func (r *backwardRow) figures(one map[string]*backwardRow) backwardFigures {
	rate := func(flops, sec float64) float64 { // 0 where the time is unknown
		if sec <= 0 {
			return 0
		}
		return flops / sec / 1e9
	}
	f := backwardFigures{gfBF16: rate(r.flops, r.fwdBF16.Seconds()), gfF32: rate(r.flops, r.fwdF32.Seconds()),
		gfBwd: rate(2.5*r.flops, r.bwd.Seconds()), cpuBF16: rate(r.flops, r.cpuBF16), cpuF32: rate(r.flops, r.cpuF32),
		cpuBwd: rate(2.5*r.flops, r.cpuBwd), scaleFwd: "-", scaleBwd: "-"}
	if f.gfF32 > 0 {
		f.bwdF32 = 100 * f.gfBwd / f.gfF32
	}
	if f.gfBF16 > 0 {
		f.bwdBF16 = 100 * f.gfBwd / f.gfBF16
	}
	if o := one[r.name]; o != nil && r.workers > 1 && o.err == nil && r.fwdF32 > 0 && r.bwd > 0 {
		f.scaleFwd = fmt.Sprintf("%.2fx", o.fwdF32.Seconds()/r.fwdF32.Seconds())
		f.scaleBwd = fmt.Sprintf("%.2fx", o.bwd.Seconds()/r.bwd.Seconds())
	}
	return f
}

// oneWorker maps each case to its 1-worker row.
func oneWorker(rows []*backwardRow) map[string]*backwardRow {
	one := map[string]*backwardRow{}
	for _, r := range rows {
		if r.workers == 1 {
			one[r.name] = r
		}
	}
	return one
}

// backwardTermHeader is the terminal table's columns; backward.csv
// (backwardCSVHeader) has every figure.
var backwardTermHeader = []string{"case", "w", "bwd_ms", "bf16_GF", "f32_GF", "bwd_GF", "b/f32", "b/bf16", "fwd_2w", "bwd_2w",
	"verify", "noise"}

// backwardTermLegend explains every column of backwardTermHeader.
const backwardTermLegend = "Columns: case the float32 training case (T tokens); w workers; " +
	"bwd_ms median backward time; bf16_GF, f32_GF and bwd_GF wall-clock GFLOP/s of the BF16 forward, " +
	"the float32 forward and the float32 backward; b/f32 and b/bf16 the backward's GFLOP/s as a share of " +
	"each forward's; fwd_2w and bwd_2w the 1-worker time / the 2-worker time; " +
	"verify two exact sum rules of the gradients (-verify; \"-\" without it; a failure's detail follows the table); " +
	"noise NOISY when the noise rules flag a pass (the reasons follow the table). " +
	"Every figure (forward times, GFLOP per CPU-second, the other processes' CPU share, load): " +
	"backward.csv with -out."

// printBackwardTable prints the group's table within termWidth columns:
// GFLOP/s of each pass, the backward's ratio to both forwards and the
// 2-worker scaling, then the legend and the rows' failure and noise
// details.
func printBackwardTable(w io.Writer, cfg *config, rows []*backwardRow) {
	fmt.Fprintln(w)
	printWrapped(w, fmt.Sprintf("backward group: float32 training path, Hq 16, Hkv 1, D 128, causal, topK %d, blk_kv 128; "+
		"median times; backward flops = 2.5 x forward", cfg.topK), "")
	one := oneWorker(rows)
	table := [][]string{backwardTermHeader}
	var details []string
	for _, r := range rows {
		if r.err != nil {
			table = append(table, []string{r.name, strconv.Itoa(r.workers), "error", "", "", "", "", "", "", "", "", ""})
			details = append(details, fmt.Sprintf("%s workers %d: error: %v", r.name, r.workers, r.err))
			continue
		}
		f := r.figures(one)
		verify, noise := verifyCell(r.verify), backwardNoise(r)
		if strings.HasPrefix(verify, "FAIL") {
			details = append(details, fmt.Sprintf("%s workers %d: verify %s", r.name, r.workers, verify))
			verify = "FAIL"
		}
		if noise != "ok" {
			details = append(details, fmt.Sprintf("%s workers %d: %s", r.name, r.workers, noise))
			noise = "NOISY"
		}
		table = append(table, []string{r.name, strconv.Itoa(r.workers), f1(ms(r.bwd)), f1(f.gfBF16), f1(f.gfF32), f1(f.gfBwd),
			fmt.Sprintf("%.0f%%", f.bwdF32), fmt.Sprintf("%.0f%%", f.bwdBF16), f.scaleFwd, f.scaleBwd, verify, noise})
	}
	alignRows(w, table, "")
	for _, d := range details {
		printWrapped(w, d, "  ")
	}
	fmt.Fprintln(w)
	printWrapped(w, backwardTermLegend, "")
}

// backwardCSVHeader is backward.csv's columns: every figure of a row.
var backwardCSVHeader = []string{"case", "workers", "fwd_bf16_ms", "fwd_f32_ms", "bwd_ms", "reps_bf16", "reps_f32", "reps_bwd",
	"fwd_bf16_gflops", "fwd_f32_gflops", "bwd_gflops", "bwd_over_fwd_f32_pct", "bwd_over_fwd_bf16_pct", "scaling_fwd_f32",
	"scaling_bwd", "fwd_bf16_gflop_per_cpu_s", "fwd_f32_gflop_per_cpu_s", "bwd_gflop_per_cpu_s", "others_cpu_pct",
	"load", "verify", "noise", "error"}

// writeBackwardCSV writes dir/backward.csv: every figure of every row.
func writeBackwardCSV(dir string, rows []*backwardRow) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	one := oneWorker(rows)
	out := [][]string{backwardCSVHeader}
	for _, r := range rows {
		if r.err != nil {
			out = append(out, append([]string{r.name, strconv.Itoa(r.workers)}, make([]string, len(backwardCSVHeader)-3)...))
			out[len(out)-1] = append(out[len(out)-1], r.err.Error())
			continue
		}
		f := r.figures(one)
		others := ""
		if r.load.ok {
			others = num(100 * r.load.others)
		}
		out = append(out, []string{r.name, strconv.Itoa(r.workers), num(ms(r.fwdBF16)), num(ms(r.fwdF32)), num(ms(r.bwd)),
			strconv.Itoa(r.repsBF16), strconv.Itoa(r.repsF32), strconv.Itoa(r.rB), num(f.gfBF16), num(f.gfF32), num(f.gfBwd),
			num(f.bwdF32), num(f.bwdBF16), f.scaleFwd, f.scaleBwd, num(f.cpuBF16), num(f.cpuF32), num(f.cpuBwd), others,
			fmt.Sprintf("%.2f-%.2f", r.load.loadStart, r.load.loadEnd), r.verify, backwardNoise(r), ""})
	}
	return writeCSVRows(filepath.Join(dir, "backward.csv"), out)
}

// backwardNoise is the noise column: "ok", or NOISY with the reasons of
// the README's noise rules over the three timed passes.
func backwardNoise(r *backwardRow) string {
	seen := map[string]bool{}
	var why []string
	for _, sp := range r.spreads {
		for _, w := range noiseVerdict(sp, r.load, runtime.NumCPU(), r.workers, nil) {
			if !seen[w] {
				seen[w] = true
				why = append(why, w)
			}
		}
	}
	if len(why) == 0 {
		return "ok"
	}
	return "NOISY:" + strings.Join(why, ",")
}

// verifyCell is the verify column: "-" when -verify was not given.
func verifyCell(v string) string {
	if v == "" {
		return "-"
	}
	return v
}

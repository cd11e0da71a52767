package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"
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

// printBackwardTable prints the group's table: GFLOP/s of each pass, the
// backward's ratio to both forwards and the 2-worker scaling.
func printBackwardTable(w *os.File, cfg *config, rows []*backwardRow) {
	fmt.Fprintf(w, "\nbackward group: float32 training path, Hq 16, Hkv 1, D 128, causal, topK %d, blk_kv 128; median times; backward flops = 2.5 x forward\n", cfg.topK)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tworkers\tfwd bf16 ms\tGFLOP/s\tfwd f32 ms\tGFLOP/s\tbwd ms\tGFLOP/s\tbwd/fwd f32\tbwd/fwd bf16\tscaling fwd f32\tscaling bwd\tfwd bf16 GFLOP/CPU-s\tfwd f32 GFLOP/CPU-s\tbwd GFLOP/CPU-s\tbwd/fwd f32 per CPU-s\tbwd/fwd bf16 per CPU-s\tverify\tothers CPU\tload\tnoise\t")
	gf := func(flops float64, d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return flops / d.Seconds() / 1e9
	}
	one := map[string]*backwardRow{}
	for _, r := range rows {
		if r.workers == 1 {
			one[r.name] = r
		}
	}
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\t%d\terror: %v\t\t\t\t\t\t\t\t\t\t\t\t\n", r.name, r.workers, r.err)
			continue
		}
		fb, ff, bw := gf(r.flops, r.fwdBF16), gf(r.flops, r.fwdF32), gf(2.5*r.flops, r.bwd)
		sf, sb := "-", "-"
		if o := one[r.name]; o != nil && r.workers > 1 && o.err == nil {
			sf = fmt.Sprintf("%.2fx", o.fwdF32.Seconds()/r.fwdF32.Seconds())
			sb = fmt.Sprintf("%.2fx", o.bwd.Seconds()/r.bwd.Seconds())
		}
		others := "?"
		if r.load.ok {
			others = pct(100*r.load.others) + "%"
		}
		perCPU := func(flops, sec float64) float64 {
			if sec <= 0 {
				return 0
			}
			return flops / sec / 1e9
		}
		pb, pf, pw := perCPU(r.flops, r.cpuBF16), perCPU(r.flops, r.cpuF32), perCPU(2.5*r.flops, r.cpuBwd)
		share := func(a, b float64) float64 { // 0 where the CPU time is unknown
			if b <= 0 {
				return 0
			}
			return 100 * a / b
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f%%\t%.0f%%\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.0f%%\t%.0f%%\t%s\t%s\t%.1f->%.1f\t%s\t\n",
			r.name, r.workers, ms(r.fwdBF16), fb, ms(r.fwdF32), ff, ms(r.bwd), bw, 100*bw/ff, 100*bw/fb, sf, sb,
			pb, pf, pw, share(pw, pf), share(pw, pb), verifyCell(r.verify), others, r.load.loadStart, r.load.loadEnd, backwardNoise(r))
	}
	tw.Flush()
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

package attn

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/cputime"
)

// BenchmarkKVCombine compares the KV-major path's two combines (runFused
// against the separate form of runKVMajor's window loop) on one causal
// sequence of 8K and 32K tokens: 16 query heads on one KV head, D 128,
// 128-key blocks, topK 16 full lists of visible blocks, random and local
// selection, BF16 Q with BF16 or NVFP4 K/V, BF16 partials, on 1 and 2
// workers and the avx512 and avx512bf16 tiers. Each b.N round runs one
// call of each form, alternating which goes first, so that both see the
// same host; it reports each form's median process CPU time per call
// (cpu-ms-sep, cpu-ms-fused; cputime.Process: on a shared host it counts
// this process's cycles only), their ratio fused/sep, the median wall
// times (wall-ms-sep, wall-ms-fused) and the 1-minute load average read
// before the rounds. MSA_KVCOMBINE_WIN=x<n> multiplies the fused window
// (fusedWindow) by n, to measure the window size. Run it with
// -benchtime=5x.
func BenchmarkKVCombine(b *testing.B) {
	mult := 1
	if v, ok := strings.CutPrefix(os.Getenv("MSA_KVCOMBINE_WIN"), "x"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("MSA_KVCOMBINE_WIN=x%s: want x and a positive integer", v)
		}
		mult = n
	}
	built := map[string]*qmProblem{} // each case is built once, for both tiers
	benchTiers(b, []string{"avx512", "avx512bf16"}, func(b *testing.B, tn string, _ vec) {
		for _, tokens := range []int{8192, 32768} {
			for _, kv := range []Dtype{BF16, NVFP4} {
				for _, pattern := range []string{"random", "local"} {
					c := qmCase{seqQ: []int{tokens}, seqK: []int{tokens}, hkv: 1, qpk: 16, d: 128, blk: 128, topK: 16,
						causal: true, qDtype: BF16, kvDtype: kv, pattern: pattern, full: true}
					for _, workers := range []int{1, 2} {
						b.Run(fmt.Sprintf("tokens=%d/kv=%s/%s/workers=%d", tokens, kv, pattern, workers), func(b *testing.B) {
							pr := built[c.String()]
							if pr == nil {
								pr = c.build(b, 1)
								pr.p.Partial = PartialBF16
								built[c.String()] = pr
							}
							pr.p.Path = PathKV
							kvCombineAB(b, pr.p, workers, mult)
						})
					}
				}
			}
		}
	})
}

// kvCombineAB runs BenchmarkKVCombine's interleaved A/B of one case.
func kvCombineAB(b *testing.B, p *Prefill, workers, mult int) {
	pool := NewPool(workers)
	defer pool.Close()
	var ws [2]*Workspace
	for i, m := range []combineMode{combineSeparate, combineFused} {
		ws[i] = NewWorkspace(workers, p.D)
		ws[i].combine = m
	}
	ws[1].fixedWin = mult * fusedWindow(p, maxSlots(p), workers)
	if !ws[1].cacheFits(p) {
		b.Fatal("the call's blocks exceed the fused form's block cache: it would run the separate form")
	}
	out := newOutput(p.TotalQ*p.HQ, p.D)
	for _, w := range ws {
		RunPrefill(p, w, pool, out) // warm-up: buffers, pages
	}
	load := loadAvg1()
	var cpu, wall [2][]time.Duration
	for r := range b.N {
		for k := range 2 {
			i := (r + k) % 2
			c0, ok0 := cputime.Process()
			t0 := time.Now()
			RunPrefill(p, ws[i], pool, out)
			wall[i] = append(wall[i], time.Since(t0))
			if c1, ok1 := cputime.Process(); ok0 && ok1 {
				cpu[i] = append(cpu[i], c1-c0)
			}
		}
	}
	med := func(d []time.Duration) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1e3
	}
	if len(cpu[0]) > 0 {
		b.ReportMetric(med(cpu[0]), "cpu-ms-sep")
		b.ReportMetric(med(cpu[1]), "cpu-ms-fused")
		b.ReportMetric(med(cpu[1])/med(cpu[0]), "fused/sep")
	}
	b.ReportMetric(med(wall[0]), "wall-ms-sep")
	b.ReportMetric(med(wall[1]), "wall-ms-fused")
	b.ReportMetric(float64(ws[1].win), "fused-win")
	b.ReportMetric(load, "load1")
}

// loadAvg1 returns the 1-minute load average of /proc/loadavg, or -1
// where there is none.
func loadAvg1() float64 {
	if s, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(s)); len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				return v
			}
		}
	}
	return -1
}

package plan

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/cuda/internal/check"
)

// TimingCase is one timed problem at the bench's shape (check.BenchHq and
// the rest): a causal prefill of T tokens, or a decode of Batch requests
// of Ctx tokens; generated once per stage and timed in each of its rows'
// modes.
type TimingCase struct {
	Name    string
	Prefill bool
	T       int // prefill tokens
	Batch   int // decode requests
	Ctx     int // decode context per request
	Q, KV   cuda.Dtype
	// Select is a prefill's block selection pattern (check.GenTiming):
	// check.Correlated, the targets' primary rows; check.Random, the
	// bench's default; check.Local, a local window.
	Select check.Selection
}

// FP8 reports whether the case times against the FP8 peak (E4M3 Q).
func (c TimingCase) FP8() bool { return c.Q == cuda.E4M3 }

// Row is one A/B timing row: a case in one mode, in the stage that times it.
type Row struct {
	Stage   string
	Case    TimingCase
	Prefill PrefillMode // Case.Prefill
	Decode  DecodeMode  // !Case.Prefill
}

// Name is the row's name in timing.csv (and, after "timing ", its case
// name for -only / -skip).
func (r Row) Name() string {
	if r.Case.Prefill {
		return r.Case.Name + r.Prefill.Label()
	}
	return r.Case.Name + r.Decode.Label()
}

func prefillCase(dt string, T int, q, kv cuda.Dtype, sel check.Selection) TimingCase {
	return TimingCase{Name: fmt.Sprintf("prefill %s %dK %s", dt, T/1024, sel), Prefill: true, T: T, Q: q, KV: kv, Select: sel}
}

func decodeCase(dt cuda.Dtype, batch, ctx int) TimingCase {
	return TimingCase{Name: fmt.Sprintf("decode %s b%d %dK", dt, batch, ctx/1024), Batch: batch, Ctx: ctx, Q: dt, KV: dt}
}

// rowSel selects rows of a group: the cases and, per case, the modes
// whose labels are in labels (nil: every mode of the device), or where
// none of those exists on the family, those in fallback.
type rowSel struct {
	cases    []TimingCase
	labels   []string
	fallback []string
}

// timingGroup is one timing stage.
type timingGroup struct {
	name, what string
	limit      int
	sel        []rowSel
	rest       bool // every row of allCases no earlier group took
}

var (
	bf16, fp8 = cuda.BF16, cuda.E4M3
	abPrefill = []string{" (kv)", " (query)", " (kv2)"}
	abDecode  = []string{"", " (new)", " (new fp8pv)"} // fp8pv: FP8 cases only (DecodeModes)
)

// timingGroups are the timing stages in the order of what they decide
// (issue targets first): the BF16 8K prefill A/B of the paths, the decode
// target at batch 32 x 64K, the FP8 prefill's P.V A/B, the small-batch
// decode target, long prefills, the random and local selections against
// the correlated one of the prefill rows before; after the graph test
// (groupGraphAfter) every other row of allCases. Every prefill row but
// those of t-selection takes the correlated selection, on which the
// targets are defined first.
var timingGroups = []timingGroup{
	{name: "t-prefill-bf16-8k", limit: 30, what: "prefill BF16 8K, correlated selection: kv / query / kv2",
		sel: []rowSel{{[]TimingCase{prefillCase("bf16", 8192, bf16, bf16, check.Correlated)}, abPrefill, nil}}},
	{name: "t-decode-b32", limit: 30, what: "decode b32 x 64K BF16 and FP8: old / new (/ new fp8pv for FP8)",
		sel: []rowSel{{[]TimingCase{decodeCase(bf16, 32, 65536), decodeCase(fp8, 32, 65536)}, abDecode, nil}}},
	{name: "t-prefill-fp8-8k", limit: 20, what: "prefill FP8 8K, correlated selection: query (V widened) / query fp8pv",
		sel: []rowSel{{[]TimingCase{prefillCase("fp8", 8192, fp8, fp8, check.Correlated)}, []string{" (query)", " (query fp8pv)"}, nil}}},
	{name: "t-decode-small", limit: 30, what: "decode b1/4/8 x 8K/32K/128K BF16: new (old where there is no new kernel)",
		sel: []rowSel{{smallDecode(), []string{" (new)"}, abDecode[:1]}}}, // the old kernel where there is no new one
	{name: "t-prefill-long", limit: 35, what: "prefill BF16 32K / 128K, correlated selection: kv / query / kv2",
		sel: []rowSel{{[]TimingCase{prefillCase("bf16", 32768, bf16, bf16, check.Correlated), prefillCase("bf16", 131072, bf16, bf16, check.Correlated)}, abPrefill, nil}}},
	{name: "t-selection", limit: 15, what: "prefill BF16 8K, random and local selection (against the correlated rows above): kv / query / kv2",
		sel: []rowSel{{[]TimingCase{prefillCase("bf16", 8192, bf16, bf16, check.Random), prefillCase("bf16", 8192, bf16, bf16, check.Local)}, abPrefill, nil}}},
	{name: "t-rest", limit: 15, what: "every other timing row (query80, portable, FP8 kv, NVFP4 K/V, the other decode kernel at small batch, the decode grid)", rest: true},
}

// groupGraphAfter is how many timing groups run before the graph test.
const groupGraphAfter = 6

func smallDecode() []TimingCase {
	var out []TimingCase
	for _, b := range []int{1, 4, 8} {
		for _, ctx := range []int{8192, 32768, 131072} {
			out = append(out, decodeCase(bf16, b, ctx))
		}
	}
	return out
}

// allCases are the cases of the rest group, in order; caseRows leaves out
// the portable kernels beyond 32K tokens of prefill and 64K of decode
// context (one 128K prefill on them would outlast the case watchdog).
func allCases() []TimingCase {
	out := []TimingCase{prefillCase("bf16", 8192, bf16, bf16, check.Correlated), prefillCase("bf16", 32768, bf16, bf16, check.Correlated),
		prefillCase("fp8", 8192, fp8, fp8, check.Correlated), prefillCase("bf16q-nvfp4kv", 8192, bf16, cuda.NVFP4, check.Correlated),
		decodeCase(bf16, 32, 65536), decodeCase(fp8, 32, 65536)}
	out = append(out, smallDecode()...)
	for _, dt := range []cuda.Dtype{fp8, bf16} {
		for _, b := range []int{8, 32} {
			for _, ctx := range []int{4096, 16384, 65536} {
				if b == 32 && ctx == 65536 {
					continue
				}
				out = append(out, decodeCase(dt, b, ctx))
			}
		}
	}
	return out
}

// caseRows lists case c's rows on family a whose labels are in labels
// (nil: all).
func caseRows(stage string, c TimingCase, a cuda.Arch, labels []string) []Row {
	tc := a != cuda.ArchPortable
	var out []Row
	keep := func(l string) bool {
		if labels == nil {
			return true
		}
		for _, x := range labels {
			if x == l {
				return true
			}
		}
		return false
	}
	if c.Prefill {
		// No auto row: its alternating tiles time nothing a user runs, and
		// the model's choice, printed with each case's first row, costs no
		// GPU time (the plan has no room for a row per case).
		for _, m := range PrefillModes(a, tc, c.Q == cuda.E4M3 && c.KV == cuda.E4M3) {
			if keep(m.Label()) && !(m.Portable && c.T > 32768) && !m.Path.Auto() {
				out = append(out, Row{Stage: stage, Case: c, Prefill: m})
			}
		}
		return out
	}
	for _, m := range DecodeModes(a, tc, c.Q == cuda.E4M3 && c.KV == cuda.E4M3) {
		if keep(m.Label()) && !(m.Portable && c.Ctx > 65536) {
			out = append(out, Row{Stage: stage, Case: c, Decode: m})
		}
	}
	return out
}

// Rows lists the A/B timing rows on family a in run order, each in its
// stage; a row appears once.
func Rows(a cuda.Arch) []Row {
	var out []Row
	seen := map[string]bool{}
	add := func(r Row) {
		if !seen[r.Name()] {
			seen[r.Name()] = true
			out = append(out, r)
		}
	}
	for _, g := range timingGroups {
		if g.rest {
			for _, c := range allCases() {
				for _, r := range caseRows(g.name, c, a, nil) {
					add(r)
				}
			}
			continue
		}
		for _, s := range g.sel {
			for _, c := range s.cases {
				rs := caseRows(g.name, c, a, s.labels)
				if len(rs) == 0 && s.fallback != nil {
					rs = caseRows(g.name, c, a, s.fallback)
				}
				for _, r := range rs {
					add(r)
				}
			}
		}
	}
	return out
}

// stageOnly is the -only expression of timing stage name on family a: its
// rows' names, exactly.
func stageOnly(a cuda.Arch, name string) string {
	var names []string
	for _, r := range Rows(a) {
		if r.Stage == name {
			names = append(names, regexp.QuoteMeta(r.Name()))
		}
	}
	if len(names) == 0 {
		return `^timing $` // selects nothing: no row of this stage applies on a
	}
	return "^timing (" + strings.Join(names, "|") + ")$"
}

func (g timingGroup) stage(a cuda.Arch) Stage {
	return Stage{Name: g.name, Kind: Check, Limit: g.limit, Only: stageOnly(a, g.name), What: g.what}
}

// Per-row time model of Estimate, in seconds or per unit.
const (
	// genNsPerElement: generating a case (random values, encoding, the
	// schedule) costs about 5 ns per Q/K/V element on one AMD Zen 4 core
	// (TimingDecode b4 x 32K and TimingPrefill 8K); doubled for a slower
	// host core.
	genNsPerElement = 10
	// uploadGBs: host-to-device copies of pageable memory reach at least
	// this much on PCIe 4/5 hosts.
	uploadGBs = 5
	// rowOverhead: preparing the plan, one warm-up launch, the finite
	// check and rewriting the report.
	rowOverhead = 0.5
	// Timed launches per row (cuda/gpucheck's dev.Time calls) and the
	// fractions of the H200's peaks the estimate assumes (half the targets,
	// so a slow kernel still fits the estimate's order).
	prefillReps, decodeReps = 5, 20
	peakBF16, peakFP8, hbm  = 989e12, 1979e12, 4.8e12
	flopFrac, hbmFrac       = 0.2, 0.4
	// The correlated selection (check.GenTiming; made once per length in
	// a stage's process and kept for its other dtypes), costed from
	// internal/workload's BenchmarkCorrelatedSelection on a shared 2-core
	// AMD Zen 4 host at load 3.5-4.2 (docs/results/selectgen/amd-zen4.csv,
	// 8K-128K tokens, 2 workers): the AR(1) Q and K rows on one core took
	// 4.2-8.2 ns per element, taken as 12 (a slower or busier host core);
	// the block scores, 2 T Hq D (ceil(T/blk)+1)/2 FLOP, ran at 6.9-17
	// GFLOP/s per worker, taken as 4 GFLOP/s per core on the GPU machine's
	// hostCores cores (16 on the H100 / H200 machines the runbook targets).
	ar1NsPerElement   = 12
	scoreFlopsPerCore = 4e9
	hostCores         = 16
)

// SelectSeconds estimates making the correlated selection of case c (0
// for another pattern or a decode).
func (c TimingCase) SelectSeconds() float64 {
	if !c.Prefill || c.Select != check.Correlated {
		return 0
	}
	rows := float64(c.T) * float64(check.BenchHq+check.BenchHkv) * check.BenchD * ar1NsPerElement * 1e-9
	blocks := float64((c.T+check.BenchBlk-1)/check.BenchBlk+1) / 2
	flop := 2 * float64(c.T) * check.BenchHq * check.BenchD * blocks
	return rows + flop/(scoreFlopsPerCore*hostCores)
}

// elements is the number of Q, K and V elements of case c.
func (c TimingCase) elements() float64 {
	if c.Prefill {
		return float64(c.T) * float64(check.BenchHq+2*check.BenchHkv) * check.BenchD
	}
	return float64(c.Batch) * (float64(c.Ctx)*2*check.BenchHkv + check.BenchHq) * check.BenchD
}

// GenSeconds estimates generating and uploading case c.
func (c TimingCase) GenSeconds() float64 {
	e := c.elements()
	return e*genNsPerElement*1e-9 + 2*e/(uploadGBs*1e9)
}

// Seconds estimates the row's timed launches and overhead (the case's
// generation not included).
func (r Row) Seconds() float64 {
	c := r.Case
	if c.Prefill {
		peak := peakBF16
		if c.FP8() {
			peak = peakFP8
		}
		// causal, topK blocks of blk keys per query at most
		flop := 4 * float64(check.BenchD) * check.BenchHq * float64(c.T) * float64(min(c.T, check.BenchTopK*check.BenchBlk))
		t := flop / (flopFrac * peak)
		if r.Prefill.Portable {
			t *= 20 // CUDA cores, no tensor cores
		}
		return rowOverhead + (prefillReps+1)*t
	}
	t := float64(c.Batch) * float64(c.Ctx) * 2 * check.BenchHkv * check.BenchD * 2 / (hbmFrac * hbm)
	if r.Decode.Portable {
		t *= 4
	}
	return rowOverhead + (decodeReps+1)*t
}

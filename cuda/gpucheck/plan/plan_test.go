package plan

import (
	"bytes"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/cuda/internal/check"
)

var arches = []cuda.Arch{cuda.ArchPortable, cuda.ArchSM80, cuda.ArchSM90, cuda.ArchSM100}

// TestFits holds every family's runbook under the run limit with the
// margin, even when every stage runs to its limit and is killed: a stage
// or a longer limit that would overflow it fails here.
func TestFits(t *testing.T) {
	for _, a := range arches {
		ss := Stages(a)
		if err := Fits(ss); err != nil {
			t.Errorf("%s: %v", a, err)
		}
		for _, s := range ss {
			if s.Kind == Check && (s.Budget() <= 0 || s.Budget() >= s.Limit) {
				t.Errorf("%s: stage %s: budget %d s, limit %d s: want 0 < budget < limit", a, s.Name, s.Budget(), s.Limit)
			}
		}
	}
	// the check fails a plan with one more stage of a minute
	over := append(Stages(cuda.ArchSM90), Stage{Name: "extra", Kind: Check, Limit: 60})
	if err := Fits(over); err == nil {
		t.Errorf("Fits passed %d s of stages (limit %d s less %d s)", Worst(over), RunLimit, Margin)
	}
}

// TestEachCaseOnce checks that every check case and timing row is
// selected by exactly one check stage: none runs twice, none is left out.
func TestEachCaseOnce(t *testing.T) {
	for _, a := range arches {
		if err := Coverage(a, Stages(a)); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	// the check fails a plan that drops a stage or runs one twice
	ss := Stages(cuda.ArchSM90)
	for i, s := range ss {
		if s.Name == "probes" {
			if err := Coverage(cuda.ArchSM90, append(ss[:i:i], ss[i+1:]...)); err == nil {
				t.Errorf("Coverage passed the plan without its probes stage")
			}
			if err := Coverage(cuda.ArchSM90, append(ss[:i+1:i+1], ss[i:]...)); err == nil {
				t.Errorf("Coverage passed the plan with its probes stage twice")
			}
		}
	}
}

// TestPriority checks the head of the sm90 timing order: the rows that
// decide the issues' targets come first, in the order of their value.
func TestPriority(t *testing.T) {
	want := []string{"prefill bf16 8K correlated (kv)", "prefill bf16 8K correlated (query)", "prefill bf16 8K correlated (kv2)",
		"decode bf16 b32 64K", "decode bf16 b32 64K (new)", "decode e4m3 b32 64K", "decode e4m3 b32 64K (new)",
		"decode e4m3 b32 64K (new fp8pv)", "prefill fp8 8K correlated (query)", "prefill fp8 8K correlated (query fp8pv)", "decode bf16 b1 8K (new)"}
	rows := Rows(cuda.ArchSM90)
	for i, w := range want {
		if rows[i].Name() != w {
			t.Errorf("row %d: %q, want %q", i, rows[i].Name(), w)
		}
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.Name()] {
			t.Errorf("row %q twice", r.Name())
		}
		seen[r.Name()] = true
	}
}

// TestStagesLines checks the runbook's stage lines: seven tab-separated
// fields, none empty (the shell's read folds adjacent tabs).
func TestStagesLines(t *testing.T) {
	var b bytes.Buffer
	if err := WriteStages(&b, Stages(cuda.ArchSM100)); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 7 {
			t.Fatalf("line %q: %d fields, want 7", l, len(f))
		}
		for i, x := range f {
			if x == "" {
				t.Errorf("line %q: field %d empty", l, i)
			}
		}
	}
}

// TestWrite checks that the plan names every stage and ends with the total.
func TestWrite(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, cuda.ArchSM90); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range Stages(cuda.ArchSM90) {
		if !strings.Contains(out, "\n"+s.Name+" ") {
			t.Errorf("plan has no line for stage %s", s.Name)
		}
	}
	if !strings.Contains(out, "total: worst ") {
		t.Errorf("plan has no total:\n%s", out)
	}
}

// TestSelections checks the prefill rows' selection patterns on every
// family: each row's name ends its case name with the pattern it
// generates; only t-selection times the random and local patterns, both
// at 8K beside the correlated 8K rows of t-prefill-bf16-8k in the same
// modes; the long prefills are correlated; and the correlated rows cost
// their selection once per length in a stage's estimate.
func TestSelections(t *testing.T) {
	for _, a := range arches {
		modes := map[check.Selection][]string{}
		for _, r := range Rows(a) {
			c := r.Case
			if !c.Prefill {
				continue
			}
			if !strings.HasSuffix(c.Name, " "+string(c.Select)) {
				t.Errorf("%s: row %q: case name does not end in its pattern %q", a, r.Name(), c.Select)
			}
			if (c.Select != check.Correlated) != (r.Stage == "t-selection") {
				t.Errorf("%s: row %q in stage %s: pattern %q", a, r.Name(), r.Stage, c.Select)
			}
			if c.T == 8192 && c.Q == cuda.BF16 && c.KV == cuda.BF16 && r.Stage != "t-rest" {
				modes[c.Select] = append(modes[c.Select], r.Prefill.Label())
			}
			if c.T > 8192 && c.Select != check.Correlated {
				t.Errorf("%s: long row %q: pattern %q", a, r.Name(), c.Select)
			}
		}
		for _, sel := range []check.Selection{check.Random, check.Local} {
			if (a != cuda.ArchPortable && len(modes[check.Correlated]) == 0) || !slices.Equal(modes[sel], modes[check.Correlated]) {
				t.Errorf("%s: BF16 8K modes: %s %v, correlated %v: want the same (some on a tensor-core family)", a, sel, modes[sel], modes[check.Correlated])
			}
		}
	}
	long := prefillCase("bf16", 131072, cuda.BF16, cuda.BF16, check.Correlated)
	if s := long.SelectSeconds(); s < 1 || s > 15 {
		t.Errorf("correlated 128K selection estimated at %.1f s: want the measured order (a few seconds)", s)
	}
	if s := prefillCase("bf16", 131072, cuda.BF16, cuda.BF16, check.Local).SelectSeconds(); s != 0 {
		t.Errorf("local 128K selection estimated at %.1f s: want 0", s)
	}
	// t-prefill-long's estimate: its rows, each case's generation once
	// and each length's correlated selection once
	var b bytes.Buffer
	if err := Write(&b, cuda.ArchSM90); err != nil {
		t.Fatal(err)
	}
	want := fixedSeconds[Check]
	for _, r := range Rows(cuda.ArchSM90) {
		if r.Stage == "t-prefill-long" {
			want += r.Seconds()
			if r.Prefill.Label() == " (kv)" { // the first row of each case
				want += r.Case.GenSeconds() + r.Case.SelectSeconds()
			}
		}
	}
	line := regexp.MustCompile(`(?m)^t-prefill-long .* est +([0-9.]+) s,`).FindStringSubmatch(b.String())
	if line == nil {
		t.Fatalf("plan has no t-prefill-long line:\n%s", b.String())
	}
	if got, _ := strconv.ParseFloat(line[1], 64); math.Abs(got-want) > 0.051 {
		t.Errorf("t-prefill-long estimated at %s s, want %.2f", line[1], want)
	}
}

// TestFitRows: the timing order kv, query, kv2 prints the kv fit when the
// query row arrives and the kv2 fit with the kv2 row; a KV-major row before
// any query row prints nothing.
func TestFitRows(t *testing.T) {
	for _, c := range []struct {
		i     int
		times []float64
		want  []int
	}{
		{1, []float64{0, 2, 0}, nil},         // kv first: no query time yet
		{0, []float64{1, 2, 0}, []int{1}},    // then query: the kv fit
		{2, []float64{1, 2, 3}, []int{2}},    // then kv2: its own fit only
		{0, []float64{1, 2, 3}, []int{1, 2}}, // query last: both
		{1, []float64{1, 2, 0}, []int{1}},    // query first, then kv
		{0, []float64{1, 0, 0}, nil},         // query alone
		{2, []float64{0, 0, 3}, nil},         // kv2 alone
	} {
		if got := FitRows(c.i, c.times); !slices.Equal(got, c.want) {
			t.Errorf("FitRows(%d, %v) = %v, want %v", c.i, c.times, got, c.want)
		}
	}
}

// TestPrefillModes: every tensor-core family runs kv, query and auto; sm90
// adds its A/B kernels (fp8pv for an FP8 prefill, query80, kv2,
// auto-kv2), SM100 the sm80 query-major kernel its tcgen05 one stands in
// for; the portable kernels come last, alone without tensor cores.
func TestPrefillModes(t *testing.T) {
	labels := func(a cuda.Arch, tc, fp8 bool) string {
		var s []string
		for _, m := range PrefillModes(a, tc, fp8) {
			s = append(s, m.Label())
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct {
		a       cuda.Arch
		tc, fp8 bool
		want    string
	}{
		{cuda.ArchPortable, false, false, " (portable)"},
		{cuda.ArchSM80, true, true, " (kv), (query), (auto alternate), (portable)"},
		{cuda.ArchSM90, true, false, " (kv), (query), (auto alternate), (query80), (kv2), (auto-kv2 alternate), (portable)"},
		{cuda.ArchSM90, true, true, " (kv), (query), (auto alternate), (query fp8pv), (query80), (kv2), (auto-kv2 alternate), (portable)"},
		{cuda.ArchSM100, true, false, " (kv), (query), (auto alternate), (query80), (portable)"},
	} {
		if got := labels(c.a, c.tc, c.fp8); got != c.want {
			t.Errorf("%s tc %v fp8 %v: %q, want %q", c.a, c.tc, c.fp8, got, c.want)
		}
	}
}

// TestFP8Walk: the modes whose FP8 P.V may accumulate over a whole walk
// on the FP8 tensor cores: sm90's fp8pv, SM100's query and auto paths.
func TestFP8Walk(t *testing.T) {
	for _, c := range []struct {
		a    cuda.Arch
		m    PrefillMode
		want bool
	}{
		{cuda.ArchSM90, PrefillMode{Path: cuda.PrefillQuery, FP8PV: cuda.FP8PVFP8}, true},
		{cuda.ArchSM90, PrefillMode{Path: cuda.PrefillQuery}, false},
		{cuda.ArchSM90, PrefillMode{Path: cuda.PrefillAuto}, false},
		{cuda.ArchSM100, PrefillMode{Path: cuda.PrefillQuery}, true},
		{cuda.ArchSM100, PrefillMode{Path: cuda.PrefillAuto}, true},
		{cuda.ArchSM100, PrefillMode{Path: cuda.PrefillQuery80}, false},
		{cuda.ArchSM100, PrefillMode{Path: cuda.PrefillKV}, false},
		{cuda.ArchSM100, PrefillMode{Portable: true}, false},
	} {
		if got := c.m.FP8Walk(c.a); got != c.want {
			t.Errorf("%s %s: FP8Walk %v, want %v", c.a, c.m.Label(), got, c.want)
		}
	}
}

// TestNewDecodeOwn: a new-mode decode row is checked and timed only when
// its launches differ from the old mode's: the sm_90a pipelined kernel
// always, the SM100 decode only when the schedule splits KV (the combine
// fused; without a split neither mode launches a combine), never a
// fallback to the old or the portable kernels.
func TestNewDecodeOwn(t *testing.T) {
	for _, c := range []struct {
		kern  string
		split bool
		want  bool
	}{
		{"msa_sm90_decpipe_bf16_d128", true, true},
		{"msa_sm90_decpipe_fp8pv_d128", false, true},
		{"msa_sm100_decode_bf16_d128", true, true},
		{"msa_sm100_decode_bf16_d128", false, false},
		{"msa_sm100_decode_bf16_d128+msa_combine_d128", true, false},
		{"msa_sm90_decode_bf16_d128+msa_combine_d128", true, false},
		{"msa_decode_d128", false, false},
	} {
		if got := NewDecodeOwn(c.kern, c.split); got != c.want {
			t.Errorf("NewDecodeOwn(%q, %v) = %v, want %v", c.kern, c.split, got, c.want)
		}
	}
}

// TestDecodeFP8Walk: the decode modes whose FP8 P.V accumulates over a
// work item's walk on the FP8 tensor cores: both tensor-core modes on
// SM100, none elsewhere (sm_90a fp8pv starts each span from zero).
func TestDecodeFP8Walk(t *testing.T) {
	for _, c := range []struct {
		a    cuda.Arch
		m    DecodeMode
		want bool
	}{
		{cuda.ArchSM100, DecodeMode{Kernel: cuda.DecodeOld}, true},
		{cuda.ArchSM100, DecodeMode{Kernel: cuda.DecodeNew}, true},
		{cuda.ArchSM100, DecodeMode{Portable: true}, false},
		{cuda.ArchSM90, DecodeMode{Kernel: cuda.DecodeNew, FP8PV: true}, false},
		{cuda.ArchSM90, DecodeMode{Kernel: cuda.DecodeOld}, false},
		{cuda.ArchSM80, DecodeMode{Kernel: cuda.DecodeOld}, false},
	} {
		if got := c.m.FP8Walk(c.a); got != c.want {
			t.Errorf("%s%s: FP8Walk %v, want %v", c.a, c.m.Label(), got, c.want)
		}
	}
}

package plan

import (
	"fmt"
	"io"
	"regexp"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/cuda/internal/check"
)

// checkCaseSeconds is the estimate for one case of the check matrix or
// the probes: its inputs are small (at most a few thousand tokens), so
// the float64 reference and the CPU path on the host dominate; the figure
// is an order of magnitude, not a measurement, and the stage's limit
// bounds the stage whatever it is.
const checkCaseSeconds = 1.0

// fixedSeconds estimates a stage that is not a gpucheck case list:
// starting the process and what it runs.
var fixedSeconds = map[Kind]float64{Device: 3, Check: 2, Graph: 15, Bench: 20, NCCL: 3}

// checkCases lists the names of the check matrix and probe cases in
// gpucheck's order.
func checkCases() []string {
	var out []string
	for _, c := range check.PrefillMatrix() {
		out = append(out, c.Name)
	}
	for _, c := range check.DecodeMatrix() {
		out = append(out, c.Name)
	}
	for _, c := range check.ProbePrefillMatrix() {
		out = append(out, c.Name)
	}
	for _, c := range check.ProbeDecodeMatrix() {
		out = append(out, c.Name)
	}
	return out
}

// Coverage reports a check case or timing row of family a that is not
// selected by exactly one check stage of ss, or an expression that does
// not compile.
func Coverage(a cuda.Arch, ss []Stage) error {
	for _, s := range ss {
		for _, re := range []string{s.Only, s.Skip} {
			if _, err := regexp.Compile(re); err != nil {
				return fmt.Errorf("plan: stage %s: %v", s.Name, err)
			}
		}
	}
	names := checkCases()
	for _, r := range Rows(a) {
		names = append(names, "timing "+r.Name())
	}
	for _, n := range names {
		var in []string
		for _, s := range ss {
			if s.Kind == Check && selects(s, n) {
				in = append(in, s.Name)
			}
		}
		if len(in) != 1 {
			return fmt.Errorf("plan: case %q is in stages %v, want exactly one", n, in)
		}
	}
	return nil
}

func selects(s Stage, name string) bool {
	ok := s.Only == "" || regexp.MustCompile(s.Only).MatchString(name)
	return ok && (s.Skip == "" || !regexp.MustCompile(s.Skip).MatchString(name))
}

// Write prints the plan on family a: every stage in run order with its
// limit (the watchdog of its process), gpucheck's budget and the case
// watchdog, each case or timing row with its estimate, and the totals.
func Write(w io.Writer, a cuda.Arch) error {
	ss := Stages(a)
	rows := Rows(a)
	cases := checkCases()
	var est float64
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("GPU runbook plan, kernel family %s: %d stages; case watchdog %d s; a stage's limit is its process's timeout (+%d s to SIGKILL)\n",
		a, len(ss), CaseTimeout, KillAfter)
	for _, s := range ss {
		se := fixedSeconds[s.Kind]
		var lines []string
		switch s.Kind {
		case Check:
			generated, selected := map[string]bool{}, map[int]bool{}
			for _, r := range rows {
				if !selects(s, "timing "+r.Name()) {
					continue
				}
				t := r.Seconds()
				if !generated[r.Case.Name] {
					generated[r.Case.Name] = true
					t += r.Case.GenSeconds()
				}
				if sel := r.Case.SelectSeconds(); sel > 0 && !selected[r.Case.T] { // kept for the stage's other cases of T tokens
					selected[r.Case.T] = true
					t += sel
				}
				se += t
				lines = append(lines, fmt.Sprintf("    timing %-40s est %6.1f s", r.Name(), t))
			}
			for _, n := range cases {
				if selects(s, n) {
					se += checkCaseSeconds
					lines = append(lines, fmt.Sprintf("    %-67s est %6.1f s", n, checkCaseSeconds))
				}
			}
		}
		budget := ""
		if s.Kind == Check {
			budget = fmt.Sprintf(", new cases until %d s", s.Budget())
		}
		p("%-18s %-6s limit %3d s%s; est %5.1f s, %d cases: %s\n", s.Name, s.Kind, s.Limit, budget, se, len(lines), s.What)
		for _, l := range lines {
			p("%s\n", l)
		}
		est += min(se, float64(s.Limit))
	}
	_, err := fmt.Fprintf(w, "total: worst %d s (limits + kill grace; run limit %d s less %d s margin = %d s); estimate %.0f s (each stage's estimate, at most its limit)\n",
		Worst(ss), RunLimit, Margin, RunLimit-Margin, est)
	return err
}

// Package plan is the schedule of the GPU runbook (kernels/cuda/runbook.sh):
// its stages in run order, each with the watchdog limit of its process, the
// cases each gpucheck stage selects, the A/B timing rows in the order of
// what they decide, and a time estimate. gpucheck prints it with -plan
// (no driver needed) and hands it to the runbook with -stages, so the
// runbook runs exactly what this package lists and its test holds the
// whole run under the device's limit.
package plan

import (
	"fmt"
	"io"
	"strings"

	"github.com/sparseattn/msa/cuda"
)

// Time limits of one run, in seconds.
const (
	// RunLimit is what one runbook run may take (8 minutes: a GPU machine
	// that is paid by device time also pays its own start out of it).
	RunLimit = 480
	// Margin is kept free below RunLimit for the runbook's own work (the
	// summary, nvidia-smi) and the start of each process.
	Margin = 30
	// KillAfter is the grace after a stage's limit before timeout(1)
	// sends SIGKILL (timeout --kill-after).
	KillAfter = 3
	// CaseTimeout is gpucheck's -case-timeout in every stage: the longest
	// one case's GPU work may run before the watchdog reports it HUNG.
	CaseTimeout = 20
)

// Kind is what runs a stage.
type Kind string

// Kinds of stage.
const (
	Device Kind = "device" // gpucheck -device-info
	Check  Kind = "check"  // gpucheck -stage NAME
	Graph  Kind = "graph"  // graph_test.test -test.run '^TestCUDA'
	Bench  Kind = "bench"  // bench -device cuda -quick
	NCCL   Kind = "nccl"   // kernels_comm.test -test.run NCCL
)

// Stage is one process of the runbook.
type Stage struct {
	Name  string
	Kind  Kind
	Limit int    // seconds before timeout(1) stops the process (SIGTERM)
	Only  string // gpucheck -only: the cases of a check stage ("" all)
	Skip  string // gpucheck -skip
	What  string // one line for the plan
}

// Budget is gpucheck's -budget for the stage: the time after which it
// starts no new case, so that the case in flight (bounded by the
// watchdog's CaseTimeout, usually far less) can end and the report be
// written before Limit.
func (s Stage) Budget() int { return s.Limit - min(15, s.Limit/3) }

// Worst is the longest the stage can take: its limit and the kill grace.
func (s Stage) Worst() int { return s.Limit + KillAfter }

// Case-name expressions of the check stages (the names of
// cuda/internal/check's matrices, "timing " + a timing row's name).
const (
	timingRE = `^timing `
	probeRE  = `/probe/`
	decBF16  = `^decode/bf16/d128/`
	preBF16  = `^prefill/bf16/d128/`
	fp8RE    = `^(prefill|decode)/fp8/`
	convRE   = `^(prefill|decode)/(bf16q-fp8kv|bf16q-nvfp4kv|fp8q-nvfp4kv)/`
)

// Stages lists the runbook's stages in run order for a device of kernel
// family a: correctness first (on sm100 in the first-run order: decode
// BF16 D128, prefill BF16 D128, FP8, converted, the rest), then the timing
// stages in the order of Timings, the graph test after the timings that
// decide the issues' targets, then the rest of the timings, the bench's
// GPU mode and the one-rank NCCL run.
func Stages(a cuda.Arch) []Stage {
	out := []Stage{{Name: "device", Kind: Device, Limit: 30, What: "open the GPU, load the kernels (no usable GPU: one line, exit 2)"}}
	if a == cuda.ArchSM100 {
		// the first-run stages hold their families' probes too
		out = append(out,
			Stage{Name: "decode-bf16-d128", Kind: Check, Limit: 20, Only: decBF16, What: "sm100 first run: decode BF16 D128"},
			Stage{Name: "prefill-bf16-d128", Kind: Check, Limit: 20, Only: preBF16, What: "sm100 first run: prefill BF16 D128"},
			Stage{Name: "fp8", Kind: Check, Limit: 20, Only: fp8RE, What: "sm100 first run: FP8"},
			Stage{Name: "converted", Kind: Check, Limit: 20, Only: convRE, What: "sm100 first run: BF16 Q with FP8 / NVFP4 K/V, FP8 Q with NVFP4 K/V"},
			Stage{Name: "correctness", Kind: Check, Limit: 30, Skip: join(decBF16, preBF16, fp8RE, convRE, timingRE),
				What: "the rest of the check matrix and the probes"})
	} else {
		out = append(out,
			Stage{Name: "correctness", Kind: Check, Limit: 100, Skip: join(probeRE, timingRE),
				What: "the check matrix, every kernel and mode of each case (default, query, auto alternate, query80, kv2, fp8pv, decode old/new, portable)"},
			Stage{Name: "probes", Kind: Check, Limit: 30, Only: probeRE, What: "exact probes: attended token sets, every path"})
	}
	for _, g := range timingGroups[:groupGraphAfter] {
		out = append(out, g.stage(a))
	}
	out = append(out, Stage{Name: "graph", Kind: Graph, Limit: 30, What: "graph_test.test -test.run '^TestCUDA' (CUDADo on Gorgonia's CUDA machine vs the CPU graph)"})
	for _, g := range timingGroups[groupGraphAfter:] {
		out = append(out, g.stage(a))
	}
	return append(out,
		Stage{Name: "bench", Kind: Bench, Limit: 25, What: "bench -device cuda -quick (the bench's GPU mode)"},
		Stage{Name: "nccl", Kind: NCCL, Limit: 15, What: "kernels_comm.test -test.run NCCL (one-rank collectives)"})
}

func join(res ...string) string { return strings.Join(res, "|") }

// Worst is the longest the stages can take together.
func Worst(ss []Stage) int {
	t := 0
	for _, s := range ss {
		t += s.Worst()
	}
	return t
}

// Fits reports whether stages ss end within RunLimit less Margin even
// when every stage runs to its limit and is killed.
func Fits(ss []Stage) error {
	if w := Worst(ss); w > RunLimit-Margin {
		return fmt.Errorf("plan: the stages' limits and kill grace add up to %d s: over the run limit of %d s less the %d s margin", w, RunLimit, Margin)
	}
	return nil
}

// Find returns the stage named name of Stages(a).
func Find(a cuda.Arch, name string) (Stage, error) {
	var names []string
	for _, s := range Stages(a) {
		if s.Name == name {
			return s, nil
		}
		if s.Kind == Check {
			names = append(names, s.Name)
		}
	}
	return Stage{}, fmt.Errorf("plan: stage %q: not a check stage of the %s plan (want one of %s)", name, a, strings.Join(names, ", "))
}

// ParseArch reads a kernel family's name as cuda.Arch.String writes it.
func ParseArch(s string) (cuda.Arch, error) {
	for _, a := range []cuda.Arch{cuda.ArchPortable, cuda.ArchSM80, cuda.ArchSM90, cuda.ArchSM100} {
		if a.String() == s {
			return a, nil
		}
	}
	return cuda.ArchPortable, fmt.Errorf("plan: kernel family %q: want portable, sm80, sm90 or sm100", s)
}

// WriteStages writes one line per stage for the runbook: name, kind,
// limit, budget, case timeout, -only and -skip, separated by tabs (the
// expressions hold spaces, never tabs); an empty expression is "-", since
// the shell's read folds adjacent tabs.
func WriteStages(w io.Writer, ss []Stage) error {
	for _, s := range ss {
		if _, err := fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", s.Name, s.Kind, s.Limit, s.Budget(), CaseTimeout, dash(s.Only), dash(s.Skip)); err != nil {
			return err
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteRows writes one line per timing row on family a for the runbook's
// summary: the stage and the row's name, separated by a tab.
func WriteRows(w io.Writer, a cuda.Arch) error {
	for _, r := range Rows(a) {
		if _, err := fmt.Fprintf(w, "%s\t%s\n", r.Stage, r.Name()); err != nil {
			return err
		}
	}
	return nil
}

package graphprof

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	G "gorgonia.org/gorgonia"
)

// NodeStat is one profiled node.
type NodeStat struct {
	ID    int64         // the node's Gorgonia ID
	Name  string        // the node's name (Gorgonia's default: the op and its inputs)
	Op    string        // the op's String()
	Kind  string        // the op kind the node is grouped under (the Kind option, default DefaultKind)
	Calls int64         // executions of the node summed over the runs
	Total time.Duration // summed over the runs
	Share float64       // Total / Report.Total (0 without runs)
}

// KindStat sums the nodes of one op kind.
type KindStat struct {
	Kind  string        // the kind's name, as in NodeStat.Kind
	Nodes int           // profiled nodes of this kind
	Calls int64         // executions of those nodes summed over the runs
	Total time.Duration // their summed time
	Share float64       // Total / Report.Total (0 without runs)
}

// Report is a snapshot of a profiler.
type Report struct {
	Runs  int           // machine runs recorded (Run, AddRun)
	Total time.Duration // machine run time (Run, AddRun) summed over runs
	// Nodes in the order of their first execution (nodes never executed
	// last, in graph order).
	Nodes []NodeStat
	// Kinds by decreasing time.
	Kinds []KindStat
	// Attributed is the sum of the node times; Unattributed = Total -
	// Attributed is the machine's own time plus any node not profiled.
	Attributed, Unattributed time.Duration
	// Skipped counts op nodes left unwrapped (Filter, device ops).
	Skipped int
}

// Report returns the per-node and per-kind times recorded so far.
func (p *Profiler) Report() Report {
	p.mu.Lock()
	r := Report{Runs: p.runs, Total: p.total, Skipped: p.skipped}
	order := append([]int(nil), p.order...)
	p.mu.Unlock()
	seen := make([]bool, len(p.nodes))
	for _, i := range order {
		seen[i] = true
	}
	for i := range p.nodes {
		if !seen[i] {
			order = append(order, i)
		}
	}
	byKind := map[string]*KindStat{}
	for _, i := range order {
		n := p.nodes[i]
		s := NodeStat{ID: n.node.ID(), Name: n.node.Name(), Op: fmt.Sprint(n.orig), Kind: n.kindName,
			Calls: n.calls.Load(), Total: time.Duration(n.ns.Load())}
		r.Attributed += s.Total
		r.Nodes = append(r.Nodes, s)
		k := byKind[s.Kind]
		if k == nil {
			k = &KindStat{Kind: s.Kind}
			byKind[s.Kind] = k
		}
		k.Nodes++
		k.Calls += s.Calls
		k.Total += s.Total
	}
	r.Unattributed = r.Total - r.Attributed
	for _, k := range byKind {
		r.Kinds = append(r.Kinds, *k)
	}
	sort.SliceStable(r.Kinds, func(a, b int) bool {
		if r.Kinds[a].Total != r.Kinds[b].Total {
			return r.Kinds[a].Total > r.Kinds[b].Total
		}
		return r.Kinds[a].Kind < r.Kinds[b].Kind
	})
	if r.Total > 0 {
		for i := range r.Nodes {
			r.Nodes[i].Share = float64(r.Nodes[i].Total) / float64(r.Total)
		}
		for i := range r.Kinds {
			r.Kinds[i].Share = float64(r.Kinds[i].Total) / float64(r.Total)
		}
	}
	return r
}

// perRun returns d divided by the number of runs (d itself without runs).
func (r Report) perRun(d time.Duration) time.Duration {
	if r.Runs == 0 {
		return d
	}
	return d / time.Duration(r.Runs)
}

// WriteTable writes the per-kind table, then the per-node table: time per
// run and share of the machine's run time, and the unattributed rest.
func (r Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d runs, %.3f ms per run; nodes %.1f%%, unattributed (machine) %.3f ms per run (%.1f%%)\n",
		r.Runs, ms(r.perRun(r.Total)), pct(r.Attributed, r.Total), ms(r.perRun(r.Unattributed)), pct(r.Unattributed, r.Total))
	kw := len("kind")
	for _, k := range r.Kinds {
		kw = max(kw, len([]rune(k.Kind)))
	}
	fmt.Fprintf(&b, "\n%s  %5s  %12s  %6s\n", pad("kind", kw), "nodes", "ms/run", "share")
	for _, k := range r.Kinds {
		fmt.Fprintf(&b, "%s  %5d  %12.3f  %5.1f%%\n", pad(k.Kind, kw), k.Nodes, ms(r.perRun(k.Total)), 100*k.Share)
	}
	nw := len("node")
	for _, n := range r.Nodes {
		nw = max(nw, len([]rune(nodeLabel(n))))
	}
	nw = min(nw, 60)
	fmt.Fprintf(&b, "\n%s  %12s  %6s\n", pad("node", nw), "ms/run", "share")
	for _, n := range r.Nodes {
		fmt.Fprintf(&b, "%s  %12.3f  %5.1f%%\n", pad(nodeLabel(n), nw), ms(r.perRun(n.Total)), 100*n.Share)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func nodeLabel(n NodeStat) string {
	s := fmt.Sprintf("%d %s", n.ID, n.Op)
	if r := []rune(s); len(r) > 60 {
		s = string(r[:59]) + "…"
	}
	return s
}

func pad(s string, w int) string {
	if n := len([]rune(s)); n < w {
		return s + strings.Repeat(" ", w-n)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func pct(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// EagerResult is the time of the profiled nodes' ops called eagerly.
type EagerResult struct {
	// Reps holds, per repetition, the sum over all nodes.
	Reps []time.Duration
	// Nodes holds each node's mean time per call over the repetitions, in
	// execution order (Calls is the number of repetitions).
	Nodes []NodeStat
}

// Median returns the median of Reps.
func (e EagerResult) Median() time.Duration {
	if len(e.Reps) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), e.Reps...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[len(s)/2]
}

// ErrNoCapture is returned by Eager without captured inputs.
var ErrNoCapture = errors.New("graphprof: no captured inputs (Attach with Capture and profile a run first)")

// Eager calls every profiled node's original op (its Do) reps times on the
// inputs captured in the last profiled run, node after node in execution
// order, outside any machine, and returns the times. The outputs are
// discarded; the captured values are not modified unless an op modifies its
// inputs (the ops Gorgonia runs in place do so only through UnsafeDo, which
// Eager does not call).
func (p *Profiler) Eager(reps int) (EagerResult, error) {
	p.mu.Lock()
	order := append([]int(nil), p.order...)
	inputs := make([][]G.Value, len(p.inputs))
	copy(inputs, p.inputs)
	p.mu.Unlock()
	var res EagerResult
	if len(order) == 0 {
		return res, ErrNoCapture
	}
	for _, i := range order {
		if inputs[i] == nil && p.nodes[i].orig.Arity() != 0 {
			return res, ErrNoCapture
		}
	}
	sums := make([]time.Duration, len(order))
	for rep := 0; rep < max(reps, 1); rep++ {
		var sum time.Duration
		for j, i := range order {
			t0 := time.Now()
			_, err := p.nodes[i].orig.Do(inputs[i]...)
			d := time.Since(t0)
			if err != nil {
				return res, fmt.Errorf("graphprof: eager %v: %w", p.nodes[i].orig, err)
			}
			sum += d
			sums[j] += d
		}
		res.Reps = append(res.Reps, sum)
	}
	for j, i := range order {
		n := p.nodes[i]
		res.Nodes = append(res.Nodes, NodeStat{ID: n.node.ID(), Name: n.node.Name(), Op: fmt.Sprint(n.orig),
			Kind: n.kindName, Calls: int64(len(res.Reps)), Total: sums[j] / time.Duration(len(res.Reps))})
	}
	return res, nil
}

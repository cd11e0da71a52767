// Package graphprof times every node of a Gorgonia (v0.9.18) graph as a
// machine executes it, and reports the time and share per node and per op
// kind.
//
// Attach replaces the op of every executable node of a finished graph by a
// thin wrapper that delegates all methods to the original op and, while the
// profiler is on, records how long each call that executes the node (Do,
// UsePreallocDo, UnsafeDo, IncrDo) takes. The machines take the same code
// paths with and without the wrappers. Create the machine after Attach (a
// TapeMachine compiles the ops it sees when it is created):
//
//	p, err := graphprof.Attach(g)
//	m := G.NewTapeMachine(g)
//	for i := 0; i < n; i++ {
//		G.Let(x, next())
//		err = p.Run(m) // m.RunAll(), timed
//		m.Reset()
//	}
//	p.Report().WriteTable(os.Stdout)
//
// A profiler that is off (Disable) costs one atomic load per node
// execution; Detach restores the original ops (machines created while
// attached keep the wrappers: create a new machine). Input nodes,
// constants and statements (Let, Read) are not wrapped, nor, in a build
// with the cuda tag, ops that can run on CUDA (their device placement
// depends on the op's type; without the tag every op runs on the CPU):
// their time stays in the report's Unattributed, which is the machine's
// own share of RunAll (goroutine start, register handling, binding values).
//
// Replaying: with Capture, the profiler keeps the input values of every
// node of the last profiled run, and Eager calls each node's original Do on
// them, in execution order, outside any machine: the sum is the time of
// the same ops as eager calls, and RunAll time / that sum is what the graph
// machinery costs.
//
// Attach must follow the construction of the whole graph (including
// G.Grad): graph constructors that check the op type of their inputs (for
// example op.DecodeAttention's schedule input) would not recognise a
// wrapped op, and Gorgonia's constructors look at some op types too.
package graphprof

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	G "gorgonia.org/gorgonia"
)

// Option configures Attach.
type Option func(*Profiler)

// Filter restricts profiling to the nodes for which keep returns true
// (the others keep their op and their time stays unattributed).
func Filter(keep func(*G.Node) bool) Option { return func(p *Profiler) { p.keep = keep } }

// Kind sets how nodes are grouped into op kinds (default: DefaultKind).
func Kind(kind func(G.Op) string) Option { return func(p *Profiler) { p.kind = kind } }

// Capture keeps the input values of every node of the last profiled run,
// for Eager. It holds references to those values until the next run,
// Reset or Detach.
func Capture() Option { return func(p *Profiler) { p.capture = true } }

// Profiler times the nodes of one graph. Its methods are safe for
// concurrent use, but the per-node times of two machines running the same
// graph at once add up.
type Profiler struct {
	g       *G.ExprGraph
	keep    func(*G.Node) bool
	kind    func(G.Op) string
	capture bool
	on      atomic.Bool

	nodes []*nodeRec // by wrapper index

	mu      sync.Mutex
	runs    int
	total   time.Duration // RunAll time summed over runs
	order   []int         // wrapper indices in the order of their first execution
	inputs  [][]G.Value   // captured inputs, by wrapper index
	skipped int
}

type nodeRec struct {
	node     *G.Node
	orig     G.Op
	ns       atomic.Int64
	calls    atomic.Int64
	seen     atomic.Bool
	kindName string
}

var opType = reflect.TypeOf((*G.Op)(nil)).Elem()

// opSlot returns the node's op field, settable.
func opSlot(n *G.Node) (reflect.Value, error) {
	f := reflect.ValueOf(n).Elem().FieldByName("op")
	if !f.IsValid() || f.Type() != opType {
		return reflect.Value{}, errors.New("graphprof: gorgonia.Node has no op field of type gorgonia.Op (this package supports gorgonia v0.9.18)")
	}
	return reflect.NewAt(opType, unsafe.Pointer(f.UnsafeAddr())).Elem(), nil
}

// isStmt reports whether n is a statement node (Let, Read, device
// transfer), which the machines treat by op type.
func isStmt(n *G.Node) bool {
	f := reflect.ValueOf(n).Elem().FieldByName("isStmt")
	return f.IsValid() && f.Kind() == reflect.Bool && f.Bool()
}

// wrappable reports whether op may be replaced by a wrapper.
func wrappable(n *G.Node) bool {
	op := n.Op()
	if op == nil || isStmt(n) {
		return false
	}
	if _, ok := op.(unwrapper); ok {
		return false // attached twice
	}
	switch op.(type) {
	case G.CLDoer, *G.ExternalOp:
		return false
	case G.CUDADoer:
		// Gorgonia places a CUDADoer on Device(0), which is the CPU in a
		// build without the cuda tag (some CPU ops, e.g. Reshape,
		// implement CUDADo): wrapping changes nothing there. With CUDA
		// the placement would change, so such ops stay unwrapped.
		if G.CPU != G.Device(0) {
			return false
		}
	}
	t := reflect.TypeOf(op)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() == "gorgonia.org/gorgonia" && strings.HasPrefix(t.Name(), "constant") {
		return false
	}
	return true
}

// Attach wraps the op of every executable node of g (see the package
// comment) and returns the profiler, switched on.
func Attach(g *G.ExprGraph, opts ...Option) (*Profiler, error) {
	if g == nil {
		return nil, errors.New("graphprof: nil graph")
	}
	p := &Profiler{g: g, kind: DefaultKind}
	for _, o := range opts {
		o(p)
	}
	type swap struct {
		slot reflect.Value
		op   G.Op
	}
	var swaps []swap
	for _, n := range g.AllNodes() {
		if !wrappable(n) || (p.keep != nil && !p.keep(n)) {
			if n.Op() != nil && !isStmt(n) {
				p.skipped++
			}
			continue
		}
		slot, err := opSlot(n)
		if err != nil {
			return nil, err
		}
		rec := &nodeRec{node: n, orig: n.Op(), kindName: p.kind(n.Op())}
		w := &wrapper{Op: rec.orig, p: p, idx: len(p.nodes)}
		p.nodes = append(p.nodes, rec)
		swaps = append(swaps, swap{slot, wrapOp(rec.orig, w)})
	}
	for _, s := range swaps {
		s.slot.Set(reflect.ValueOf(&s.op).Elem())
	}
	p.inputs = make([][]G.Value, len(p.nodes))
	p.on.Store(true)
	return p, nil
}

// Detach restores the original ops and switches the profiler off.
func (p *Profiler) Detach() {
	p.on.Store(false)
	for _, r := range p.nodes {
		if slot, err := opSlot(r.node); err == nil {
			op := r.orig
			slot.Set(reflect.ValueOf(&op).Elem())
		}
	}
	p.mu.Lock()
	clear(p.inputs)
	p.mu.Unlock()
}

// Enable switches timing on.
func (p *Profiler) Enable() { p.on.Store(true) }

// Disable switches timing off: the wrappers then only delegate.
func (p *Profiler) Disable() { p.on.Store(false) }

// Enabled reports whether timing is on.
func (p *Profiler) Enabled() bool { return p.on.Load() }

// Nodes returns the number of profiled (wrapped) nodes.
func (p *Profiler) Nodes() int { return len(p.nodes) }

// record adds one execution of node idx.
func (p *Profiler) record(idx int, d time.Duration, vals []G.Value) {
	r := p.nodes[idx]
	r.ns.Add(int64(d))
	r.calls.Add(1)
	if !r.seen.Load() || p.capture {
		p.mu.Lock()
		if !r.seen.Load() {
			r.seen.Store(true)
			p.order = append(p.order, idx)
		}
		if p.capture {
			p.inputs[idx] = append(p.inputs[idx][:0], vals...)
		}
		p.mu.Unlock()
	}
}

// Run runs m.RunAll and adds its wall time to the total the node times
// are compared with. It does not Reset the machine.
func (p *Profiler) Run(m G.VM) error {
	t0 := time.Now()
	err := m.RunAll()
	p.AddRun(time.Since(t0))
	return err
}

// AddRun counts one run of the machine that took d (for callers that time
// RunAll themselves).
func (p *Profiler) AddRun(d time.Duration) {
	p.mu.Lock()
	p.runs++
	p.total += d
	p.mu.Unlock()
}

// Reset clears the recorded times, runs and captured inputs (the execution
// order is kept).
func (p *Profiler) Reset() {
	for _, r := range p.nodes {
		r.ns.Store(0)
		r.calls.Store(0)
	}
	p.mu.Lock()
	p.runs, p.total = 0, 0
	clear(p.inputs)
	p.mu.Unlock()
}

// DefaultKind names an op's kind: its String() up to the first '{', '('
// or '[', without a trailing " true" or " false" (Gorgonia's element-wise
// ops print their retSame flag), e.g. "SparseAttention", "A × B",
// "Reshape", "+".
func DefaultKind(op G.Op) string {
	s := fmt.Sprint(op)
	if i := strings.IndexAny(s, "{(["); i > 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(strings.TrimSuffix(s, " false"), " true")
	if s == "" {
		s = fmt.Sprintf("%T", op)
	}
	return s
}

package graphprof

import (
	"time"

	G "gorgonia.org/gorgonia"
)

// wrapper stands in for a node's op: it delegates every method to the
// original op and, while its profiler is on, times the calls that execute
// the node (Do, UsePreallocDo, UnsafeDo, IncrDo).
//
// UsePreallocDo and UnsafeDo are always present: when the original op
// lacks one, the wrapper calls Do, which is exactly what Gorgonia's
// machines do for an op without it, so the machines take the same path
// with and without the profiler. The optional interfaces whose absence
// changes what Gorgonia does (ADOp, SDOp, IncrDoer) are added only when
// the original op has them (see wrapOp).
type wrapper struct {
	G.Op
	p   *Profiler
	idx int
}

// Unwrap returns the original op.
func (w *wrapper) Unwrap() G.Op { return w.Op }

// Do runs the original op's Do, timed while the profiler is on.
func (w *wrapper) Do(vals ...G.Value) (G.Value, error) {
	if !w.p.on.Load() {
		return w.Op.Do(vals...)
	}
	t0 := time.Now()
	v, err := w.Op.Do(vals...)
	w.p.record(w.idx, time.Since(t0), vals)
	return v, err
}

// UsePreallocDo runs the original op's UsePreallocDo (Do when it has
// none), timed while the profiler is on.
func (w *wrapper) UsePreallocDo(prealloc G.Value, vals ...G.Value) (G.Value, error) {
	pd, ok := w.Op.(G.UsePreallocDoer)
	if !ok {
		return w.Do(vals...)
	}
	if !w.p.on.Load() {
		return pd.UsePreallocDo(prealloc, vals...)
	}
	t0 := time.Now()
	v, err := pd.UsePreallocDo(prealloc, vals...)
	w.p.record(w.idx, time.Since(t0), vals)
	return v, err
}

// UnsafeDo runs the original op's UnsafeDo (Do when it has none), timed
// while the profiler is on.
func (w *wrapper) UnsafeDo(vals ...G.Value) (G.Value, error) {
	ud, ok := w.Op.(G.UnsafeDoer)
	if !ok {
		return w.Do(vals...)
	}
	if !w.p.on.Load() {
		return ud.UnsafeDo(vals...)
	}
	t0 := time.Now()
	v, err := ud.UnsafeDo(vals...)
	w.p.record(w.idx, time.Since(t0), vals)
	return v, err
}

// SetTraining forwards to the original op when it is a G.TrainModeOp
// (the machines call it at construction) and does nothing otherwise.
func (w *wrapper) SetTraining(isTraining bool) error {
	if t, ok := w.Op.(G.TrainModeOp); ok {
		return t.SetTraining(isTraining)
	}
	return nil
}

// adMixin adds G.ADOp (automatic differentiation in a LispMachine).
type adMixin struct{ w *wrapper }

func (m adMixin) DoDiff(ctx G.ExecutionContext, inputs G.Nodes, output *G.Node) error {
	return m.w.Op.(G.ADOp).DoDiff(ctx, inputs, output)
}

// sdMixin adds G.SDOp (symbolic differentiation).
type sdMixin struct{ w *wrapper }

func (m sdMixin) DiffWRT(inputs int) []bool { return m.w.Op.(G.SDOp).DiffWRT(inputs) }
func (m sdMixin) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	return m.w.Op.(G.SDOp).SymDiff(inputs, output, grad)
}

// incrMixin adds G.IncrDoer, timed like Do.
type incrMixin struct{ w *wrapper }

func (m incrMixin) IncrDo(toIncr G.Value, vals ...G.Value) error {
	id := m.w.Op.(G.IncrDoer)
	if !m.w.p.on.Load() {
		return id.IncrDo(toIncr, vals...)
	}
	t0 := time.Now()
	err := id.IncrDo(toIncr, vals...)
	m.w.p.record(m.w.idx, time.Since(t0), vals)
	return err
}

// unwrapper is implemented by every wrapped op.
type unwrapper interface{ Unwrap() G.Op }

// wrapOp returns w as a G.Op whose optional interfaces match inner's.
func wrapOp(inner G.Op, w *wrapper) G.Op {
	_, ad := inner.(G.ADOp)
	_, sd := inner.(G.SDOp)
	_, inc := inner.(G.IncrDoer)
	a, s, i := adMixin{w}, sdMixin{w}, incrMixin{w}
	switch {
	case ad && sd && inc:
		return struct {
			*wrapper
			adMixin
			sdMixin
			incrMixin
		}{w, a, s, i}
	case ad && sd:
		return struct {
			*wrapper
			adMixin
			sdMixin
		}{w, a, s}
	case ad && inc:
		return struct {
			*wrapper
			adMixin
			incrMixin
		}{w, a, i}
	case sd && inc:
		return struct {
			*wrapper
			sdMixin
			incrMixin
		}{w, s, i}
	case ad:
		return struct {
			*wrapper
			adMixin
		}{w, a}
	case sd:
		return struct {
			*wrapper
			sdMixin
		}{w, s}
	case inc:
		return struct {
			*wrapper
			incrMixin
		}{w, i}
	}
	return w
}

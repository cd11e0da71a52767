package op

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// opBase carries the Op methods every op of this package shares: no
// pointer returns, no external calls, no input overwriting, and
// forward-only differentiation: G.Grad (symbolic) and a LispMachine running
// backprop (automatic) both fail with a *ForwardOnlyError naming the op,
// instead of a panic or silently zero gradients upstream.
type opBase struct{}

func (opBase) ReturnsPtr() bool     { return false }
func (opBase) CallsExtern() bool    { return false }
func (opBase) OverwritesInput() int { return -1 }

// DiffWRT reports every input as differentiable, so that gradient analysis
// reaches SymDiff (which fails) instead of skipping the op: declaring no
// input differentiable would make Gorgonia drop the op from the backward
// pass without an error.
func (opBase) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

// SymDiff always fails: the ops of this package are forward-only.
func (opBase) SymDiff(_ G.Nodes, output, _ *G.Node) (G.Nodes, error) {
	return nil, forwardOnly(output)
}

// DoDiff always fails: a LispMachine with backprop must not run past an op
// of this package with its inputs' gradients left at zero.
func (opBase) DoDiff(_ G.ExecutionContext, _ G.Nodes, output *G.Node) error {
	return forwardOnly(output)
}

// forwardOnly builds the gradient error of the op that produced output.
func forwardOnly(output *G.Node) error {
	name := "an op of package op"
	if output != nil && output.Op() != nil {
		name = fmt.Sprint(output.Op())
	}
	return &ForwardOnlyError{Op: name}
}

// hashOf hashes an op's WriteHash output.
func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

// tt returns a fresh tensor type (Type must never return cached hm types).
func tt(dims int, dt tensor.Dtype) G.TensorType { return G.TensorType{Dims: dims, Of: dt} }

// fnType builds an hm function type from input types and the result type.
func fnType(ts ...hm.Type) hm.Type { return hm.NewFnType(ts...) }

// nodeCheck validates a graph input's dtype and rank at construction time.
func nodeCheck(fn, arg string, n *G.Node, dims int, dts ...tensor.Dtype) error {
	if n == nil {
		return validate.ArgErr(fn, arg, "a node", "nil")
	}
	ok := false
	for _, dt := range dts {
		if n.Dtype() == dt {
			ok = true
		}
	}
	if !ok {
		names := ""
		for i, dt := range dts {
			if i > 0 {
				names += " or "
			}
			names += validate.DtypeName(dt)
		}
		return validate.ArgErr(fn, arg, "dtype "+names, validate.DtypeName(n.Dtype()))
	}
	if dims > 0 && n.Shape().Dims() != dims {
		return validate.ArgErr(fn, arg, fmt.Sprintf("rank %d", dims), fmt.Sprintf("shape %v", n.Shape()))
	}
	return nil
}

// denseOf returns a Do input as a contiguous dense tensor: a view (a
// value bound with gorgonia.Let to a slice or a transpose) is materialised,
// since the ops read the storage directly.
func denseOf(fn, arg string, v G.Value) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok || d == nil {
		return nil, validate.ArgErr(fn, arg, "a *tensor.Dense value", fmt.Sprintf("%T", v))
	}
	if d.IsMaterializable() {
		if m, ok := d.Materialize().(*tensor.Dense); ok {
			return m, nil
		}
	}
	return d, nil
}

// tv returns a Do input as a tensor.Tensor (nil when it is not one; the
// checker then reports it).
func tv(v G.Value) tensor.Tensor {
	t, _ := v.(tensor.Tensor)
	return t
}

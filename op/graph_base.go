package op

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// opBase carries the Op methods every op of this package shares: no
// pointer returns, no external calls, no input overwriting, and declared
// non-differentiability (so G.Grad fails with an error, not a panic).
type opBase struct{}

func (opBase) ReturnsPtr() bool     { return false }
func (opBase) CallsExtern() bool    { return false }
func (opBase) OverwritesInput() int { return -1 }

// DiffWRT reports that no input is differentiable.
func (opBase) DiffWRT(n int) []bool { return make([]bool, n) }

// SymDiff always fails: the ops of this package are forward-only.
func (opBase) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errors.New("op: sparse attention ops are forward-only and have no gradient")
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
		return argErr(fn, arg, "a node", "nil")
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
			names += dtypeName(dt)
		}
		return argErr(fn, arg, "dtype "+names, dtypeName(n.Dtype()))
	}
	if dims > 0 && n.Shape().Dims() != dims {
		return argErr(fn, arg, fmt.Sprintf("rank %d", dims), fmt.Sprintf("shape %v", n.Shape()))
	}
	return nil
}

// denseOf returns a Do input as a dense tensor.
func denseOf(fn, arg string, v G.Value) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, argErr(fn, arg, "a *tensor.Dense value", fmt.Sprintf("%T", v))
	}
	return d, nil
}

// tv returns a Do input as a tensor.Tensor (nil when it is not one; the
// checker then reports it).
func tv(v G.Value) tensor.Tensor {
	t, _ := v.(tensor.Tensor)
	return t
}

package op

import (
	"errors"

	G "gorgonia.org/gorgonia"
)

// GradError returns the error an op of this package reported inside an
// error returned by gorgonia.Grad (or gorgonia.Backpropagate), so that
// errors.As finds our *ForwardOnlyError:
//
//	if _, err := G.Grad(cost, q); err != nil {
//		var fe *op.ForwardOnlyError
//		if errors.As(op.GradError(err), &fe) { ... fe.Op ... }
//	}
//
// Gorgonia reports a failed symbolic differentiation as a SymDiffError,
// which keeps the op's error in an unexported field (no Unwrap) but names
// the node whose SymDiff failed; GradError asks that node's op why it has
// no gradient. Errors that are not about one of this package's nodes are
// returned as MachineError returns them (err unchanged when none of this
// package's errors is inside; nil for nil).
func GradError(err error) error {
	var sd G.SymDiffError
	if errors.As(err, &sd) {
		if n := sd.Node(); n != nil {
			if r, ok := n.Op().(gradRefuser); ok {
				if e := r.gradRefusal(n); e != nil {
					return e
				}
			}
		}
	}
	return MachineError(err)
}

// gradRefuser is implemented by this package's ops: gradRefusal returns
// the error their SymDiff fails with before building anything (nil when
// SymDiff can build a gradient).
type gradRefuser interface {
	gradRefusal(output *G.Node) error
}

// gradRefusal: the ops built on opBase are forward-only.
func (opBase) gradRefusal(output *G.Node) error { return forwardOnly(output) }

// gradRefusal: SparseAttention has gradients except with NVFP4 or float8
// inputs.
func (op *sparseAttnOp) gradRefusal(output *G.Node) error { return op.gradSupported(output) }

// gradRefusal: the LSE accessors of SparseAttention pass gradients; the
// TemperatureLSE and decode ones do not.
func (op *lseOp) gradRefusal(output *G.Node) error { return op.lseDiffable(output) }

// gradRefusal: the casts are straight-through.
func (op *castOp) gradRefusal(*G.Node) error { return nil }

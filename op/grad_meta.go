package op

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Gradient behaviour of the graph ops other than SparseAttention:
//
//   - The planning ops (K2QCSR, PackK2QCSR, FwdSchedule, TopKBlocks) have
//     integer outputs: no input is differentiable (DiffWRT all false, so
//     G.Grad does not visit them), and a LispMachine's backward passes
//     through them as a no-op (their gradient is zero).
//   - BlockScores is continuous in q and k, but its only use is to feed
//     TopKBlocks, whose choice is piecewise constant: it declares no
//     differentiable input, and its DoDiff fails (naming the op) only when
//     a nonzero gradient actually reaches its output.
//   - CastToBF16 and CastFromBF16 are straight-through: the gradient is
//     cast back to the input's dtype.
//   - The LSE accessor of a SparseAttention node passes its gradient on
//     to the node's backward (grad_lse.go). TemperatureLSE accessors and
//     the LSE of decode attention are forward-only: G.Grad through them
//     fails naming the op, and a LispMachine's backward fails only when a
//     nonzero gradient reaches them.
//   - Decode attention and WritePagedKV keep opBase's forward-only errors.

// noDiff is a DiffWRT with no differentiable input.
func noDiff(n int) []bool { return make([]bool, n) }

// DiffWRT reports no differentiable input: the CSR is integer data.
func (op *csrOp) DiffWRT(n int) []bool { return noDiff(n) }

// DoDiff does nothing: the CSR's inputs are integer data.
func (op *csrOp) DoDiff(G.ExecutionContext, G.Nodes, *G.Node) error { return nil }

// DiffWRT reports no differentiable input: the CSR is integer data.
func (op *packCSROp) DiffWRT(n int) []bool { return noDiff(n) }

// DoDiff does nothing: the CSR's inputs are integer data.
func (op *packCSROp) DoDiff(G.ExecutionContext, G.Nodes, *G.Node) error { return nil }

// DiffWRT reports no differentiable input: the schedule is integer data.
func (op *schedOp) DiffWRT(n int) []bool { return noDiff(n) }

// DoDiff does nothing: the schedule's inputs are integer data.
func (op *schedOp) DoDiff(G.ExecutionContext, G.Nodes, *G.Node) error { return nil }

// DiffWRT reports no differentiable input: a top-k choice is piecewise
// constant in the scores (zero gradient almost everywhere).
func (op *topKOp) DiffWRT(n int) []bool { return noDiff(n) }

// DoDiff does nothing: the gradient of a top-k choice is zero.
func (op *topKOp) DoDiff(G.ExecutionContext, G.Nodes, *G.Node) error { return nil }

// DiffWRT reports no differentiable input: block scores feed the
// (non-differentiable) top-k selection.
func (op *blockScoresOp) DiffWRT(n int) []bool { return noDiff(n) }

// DoDiff does nothing when the scores' gradient is zero (they only fed
// TopKBlocks) and fails with a *ForwardOnlyError naming the op otherwise.
func (op *blockScoresOp) DoDiff(_ G.ExecutionContext, _ G.Nodes, output *G.Node) error {
	return zeroGradOnly(output)
}

// zeroGradOnly returns nil when output's gradient is absent or zero, else
// the forward-only error of its op.
func zeroGradOnly(output *G.Node) error {
	if output == nil {
		return nil
	}
	d, err := output.Grad()
	if err != nil || d == nil {
		return nil
	}
	t, ok := d.(*tensor.Dense)
	if !ok || t == nil {
		return forwardOnly(output)
	}
	if t.Dtype() == tensor.Float32 {
		for _, x := range validate.Backing[float32](t) {
			if x != 0 {
				return forwardOnly(output)
			}
		}
		return nil
	}
	for _, b := range t.Header.Raw {
		if b != 0 {
			return forwardOnly(output)
		}
	}
	return nil
}

// DiffWRT reports the input as differentiable (straight-through).
func (op *castOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

// SymDiff casts the gradient back to the input's dtype (straight-through:
// the rounding of CastToBF16 is treated as the identity).
func (op *castOp) SymDiff(inputs G.Nodes, output, gradNode *G.Node) (G.Nodes, error) {
	if len(inputs) != 1 || gradNode == nil {
		return nil, validate.ArgErr(op.String()+".SymDiff", "inputs", "1 input and the output gradient", len(inputs))
	}
	g, err := G.ApplyOp(&castOp{from: op.to, to: op.from, shape: op.shape.Clone()}, gradNode)
	if err != nil {
		return nil, err
	}
	return G.Nodes{g}, nil
}

// DoDiff adds the output's gradient, cast to the input's dtype, to the
// input's gradient (straight-through).
func (op *castOp) DoDiff(_ G.ExecutionContext, inputs G.Nodes, output *G.Node) error {
	fn := op.String() + ".DoDiff"
	if len(inputs) != 1 || output == nil {
		return validate.ArgErr(fn, "inputs", "1 input and the output", len(inputs))
	}
	dOut, err := output.Grad()
	if err != nil {
		return err
	}
	dIn, err := inputs[0].Grad()
	if err != nil {
		return err
	}
	od, err := denseOf(fn, "output gradient", dOut)
	if err != nil {
		return err
	}
	var g []float32
	switch od.Dtype() {
	case tensor.Float32:
		g = validate.Backing[float32](od)
	case BFloat16:
		src := validate.Backing[lowp.BFloat16](od)
		g = make([]float32, len(src))
		lowp.DecodeBF16(g, src)
	default:
		return validate.ArgErr(fn, "output gradient", "dtype float32 or bfloat16", validate.DtypeName(od.Dtype()))
	}
	return addGrad(fn, fmt.Sprint(inputs[0].Name()), dIn, g)
}

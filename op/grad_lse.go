package op

import (
	"fmt"
	"hash"
	"strings"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Gradients through the LSE accessor of a SparseAttention node.
//
// The LSE is a function of q, k and v, but in the graph its accessor node
// takes the attention node's output O as its only input (the value is the
// one the forward stored). So the accessor's gradient cannot flow to q, k
// and v through O; it is handed to the attention node's backward instead:
//
//   - Symbolically (G.Grad), the accessor's SymDiff returns, as its
//     contribution to O's gradient, an LSEGradient node whose input is
//     dLSE and whose value is zero. The attention node's SymDiff, which
//     Gorgonia runs after those of all its consumers, finds these nodes in
//     the sum that forms O's gradient and makes dLSE (their inputs, summed)
//     an input of the SparseAttentionBackward node: the dependency is in
//     the graph, so any machine that runs the graph in order is correct.
//   - A LispMachine's backward calls the accessor's DoDiff before the
//     attention node's: the accessor adds its gradient to the node's state,
//     and the attention node's DoDiff takes and clears it.
//
// TemperatureLSE accessors and the LSE of decode attention stay
// forward-only.

// lseDiffable returns nil when gradients can pass through the accessor,
// else the error naming why not.
func (op *lseOp) lseDiffable(output *G.Node) error {
	if op.temp || op.fwd == nil {
		return forwardOnly(output)
	}
	return op.fwd.gradSupported(nil)
}

// SymDiff returns O's gradient contribution from the LSE: an LSEGradient
// node carrying dLSE to the attention node's backward (value zero).
// TemperatureLSE and decode LSE accessors fail with a *ForwardOnlyError;
// the LSE of a BFloat16 node fails with an *ArgError (Gorgonia would have
// to add BFloat16 gradients of O, which it cannot; a LispMachine's backward
// passes the LSE gradient through the node's state instead).
func (op *lseOp) SymDiff(inputs G.Nodes, output, gradNode *G.Node) (G.Nodes, error) {
	if err := op.lseDiffable(output); err != nil {
		return nil, err
	}
	if len(inputs) != 1 || gradNode == nil {
		return nil, validate.ArgErr("LSE.SymDiff", "inputs", "1 input and the output gradient", len(inputs))
	}
	if gradNode.Dtype() != tensor.Float32 {
		return nil, validate.ArgErr("LSE.SymDiff", "gradient", "a float32 LSE gradient", validate.DtypeName(gradNode.Dtype()))
	}
	if op.outDt != tensor.Float32 {
		// O's gradient would be the sum of the LSE's (zero) contribution and
		// dO in O's dtype, and Gorgonia has no BFloat16 arithmetic.
		return nil, validate.ArgErr("LSE.SymDiff", "out", "a float32 SparseAttention node: G.Grad cannot pass an LSE gradient to a BFloat16 one, "+
			"since O's gradient would be a BFloat16 sum (use float32 q, k, v, or a LispMachine's backward)", validate.DtypeName(op.outDt))
	}
	c, err := G.ApplyOp(&lseGradOp{st: op.st, shape: inputs[0].Shape().Clone(), outDt: op.outDt}, gradNode)
	if err != nil {
		return nil, err
	}
	return G.Nodes{c}, nil
}

// DoDiff adds the LSE's gradient to the attention node's state for its
// DoDiff (a LispMachine runs the accessor's first). TemperatureLSE and
// decode LSE accessors fail with a *ForwardOnlyError when a nonzero
// gradient reaches them and do nothing otherwise.
func (op *lseOp) DoDiff(_ G.ExecutionContext, _ G.Nodes, output *G.Node) error {
	const fn = "LSE.DoDiff"
	if op.lseDiffable(output) != nil {
		return zeroGradOnly(output)
	}
	if output == nil {
		return validate.ArgErr(fn, "output", "the LSE node", "nil")
	}
	d, err := output.Grad()
	if err != nil || d == nil {
		return nil // no gradient reached the LSE
	}
	g, err := f32Values(fn, "LSE gradient", d, op.shape)
	if err != nil {
		return err
	}
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	if op.st.dlse == nil {
		op.st.dlse = make([]float32, len(g))
	}
	for i, x := range g {
		op.st.dlse[i] += x
	}
	return nil
}

// lseGradient returns the dLSE reaching the attention node through its
// LSE accessors: the sum of the inputs of the LSEGradient nodes of this
// node found in gradNode's sum (nil when there is none).
func (op *sparseAttnOp) lseGradient(gradNode *G.Node) (*G.Node, error) {
	var dls G.Nodes
	seen := map[*G.Node]bool{}
	var walk func(n *G.Node)
	walk = func(n *G.Node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		switch o := n.Op().(type) {
		case *lseGradOp:
			if o.st == op.st {
				dls = append(dls, children(n)...)
			}
		default:
			// Gorgonia sums the contributions to a gradient with Add
			// nodes (ReduceAdd); an LSEGradient node can only be a term
			// of that sum.
			if isAdd(n) {
				for _, c := range children(n) {
					walk(c)
				}
			}
		}
	}
	walk(gradNode)
	if len(dls) == 0 {
		return nil, nil
	}
	return G.ReduceAdd(dls)
}

// children returns n's operand nodes.
func children(n *G.Node) G.Nodes {
	var out G.Nodes
	it := n.Graph().From(n.ID())
	for it.Next() {
		if c, ok := it.Node().(*G.Node); ok {
			out = append(out, c)
		}
	}
	return out
}

// isAdd reports whether n is an elementwise addition node (Gorgonia's Add).
func isAdd(n *G.Node) bool {
	o := n.Op()
	if o == nil {
		return false
	}
	if _, ok := o.(interface{ IsBinary() bool }); !ok {
		return false
	}
	return strings.HasPrefix(fmt.Sprint(o), "+ ")
}

// lseGradOp is the LSEGradient node: its input is the gradient of an LSE
// accessor, its value a zero tensor of the attention output's shape and
// dtype (the LSE's contribution to O's gradient). The attention node's
// SymDiff takes the input as the backward's dLSE.
type lseGradOp struct {
	opBase
	st    *attnState
	shape tensor.Shape // the attention output's
	outDt tensor.Dtype // the attention output's dtype
	zero  *tensor.Dense
}

func (op *lseGradOp) Arity() int { return 1 }
func (op *lseGradOp) Type() hm.Type {
	return fnType(tt(2, tensor.Float32), tt(op.shape.Dims(), op.outDt))
}
func (op *lseGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return op.shape.Clone(), nil }
func (op *lseGradOp) WriteHash(h hash.Hash)                          { fmt.Fprintf(h, "msa.LSEGradient/%p", op) }
func (op *lseGradOp) Hashcode() uint32                               { return hashOf(op) }
func (op *lseGradOp) String() string                                 { return "LSEGradient" }

// Do returns zeros of the attention output's shape (cleared on every
// run: a machine may have added into the previous value in place).
func (op *lseGradOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 1 {
		return nil, validate.ArgErr(op.String(), "inputs", "1 value", len(vals))
	}
	if op.zero == nil {
		n := op.shape.TotalSize()
		if op.outDt == BFloat16 {
			op.zero = tensor.New(tensor.WithShape(op.shape.Clone()...), tensor.WithBacking(make([]lowp.BFloat16, n)))
		} else {
			op.zero = tensor.New(tensor.WithShape(op.shape.Clone()...), tensor.WithBacking(make([]float32, n)))
		}
	}
	clear(op.zero.Header.Raw)
	return op.zero, nil
}

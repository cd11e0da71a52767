package op

import (
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"
)

// maxGraphValue caps the elements of the metadata values the graph ops
// build (packed CSR, forward schedule, block scores): their sizes follow
// scalar construction parameters (max_seqlen_k, blk_kv), so a cap keeps a
// mistyped parameter from allocating gigabytes at every run (2^28 int32 or
// float32 elements = 1 GiB).
const maxGraphValue = 1 << 28

// valueSize returns the product of the dimensions of a graph value, or an
// ArgError naming arg when it exceeds maxGraphValue.
func valueSize(fn, arg, what string, dims ...int) (int, error) {
	n := mulCap(maxGraphValue, dims...)
	if n < 0 {
		return 0, argErr(fn, arg, fmt.Sprintf("%s of at most %d elements", what, maxGraphValue), fmt.Sprintf("%v", dims))
	}
	return n, nil
}

// nodeDesc describes a node for error messages: its op (or "input"), name,
// dtype and shape.
func nodeDesc(n *G.Node) string {
	kind := "input node"
	if n.Op() != nil {
		kind = fmt.Sprintf("%v node", n.Op())
	}
	return fmt.Sprintf("%s %q (%s %v)", kind, n.Name(), dtypeName(n.Dtype()), n.Shape())
}

// headDimCheck rejects a q node whose head dimension D = q.shape[2] is not
// supported, naming q (before any scalar rule that depends on D).
func headDimCheck(fn string, q *G.Node) error {
	if d := q.Shape()[2]; !slices.Contains(supportedHeadDims, d) {
		return argErr(fn, "q", fmt.Sprintf("head dimension D = q.shape[2] in %v", supportedHeadDims), fmt.Sprintf("shape %v", q.Shape()))
	}
	return nil
}

package op

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sparseattn/msa/op/internal/validate"
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
	n := validate.MulCap(maxGraphValue, dims...)
	if n < 0 {
		return 0, validate.ArgErr(fn, arg, fmt.Sprintf("%s of at most %d elements", what, maxGraphValue), fmt.Sprintf("%v", dims))
	}
	return n, nil
}

// nodeDesc describes a node for error messages: its op (or "input"), name,
// dtype and shape.
func nodeDesc(n *G.Node) string {
	if n.Op() == nil {
		// Gorgonia names an unnamed input node after its nil op, which
		// formats as "%!s(<nil>)()"; say it has no name instead.
		if name := n.Name(); !strings.HasPrefix(name, "%!") {
			return fmt.Sprintf("input node %q (%s %v)", name, validate.DtypeName(n.Dtype()), n.Shape())
		}
		return fmt.Sprintf("unnamed input node (%s %v; G.WithName names it in errors)", validate.DtypeName(n.Dtype()), n.Shape())
	}
	return fmt.Sprintf("%v node %q (%s %v)", n.Op(), n.Name(), validate.DtypeName(n.Dtype()), n.Shape())
}

// headDimCheck rejects a q node whose head dimension D = q.shape[2] is not
// supported, naming q (before any scalar rule that depends on D).
func headDimCheck(fn string, q *G.Node) error {
	if d := q.Shape()[2]; !slices.Contains(supportedHeadDims, d) {
		return validate.ArgErr(fn, "q", fmt.Sprintf("[total_q, Hq, D] with head dimension D = q.shape[2] in %v", supportedHeadDims), fmt.Sprintf("shape %v", q.Shape()))
	}
	return nil
}

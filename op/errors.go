package op

import "github.com/sparseattn/msa/op/internal/validate"

// The error types of this package. They are declared in op/internal/validate,
// through which every part of the package reports, and are op's types under
// these names: errors.As(err, &e) with e an *op.ArgError (and so on) matches
// them.
type (
	// ArgError reports an invalid argument: which one (Arg), of which entry
	// point (Func), what was expected (Expected) and what was received (Got).
	// Its Error formats "Func: Arg: expected Expected, got Got".
	ArgError = validate.ArgError

	// NotImplementedError reports a valid request outside what the package
	// implements (mirrors the reference's NotImplementedError): the entry
	// point (Func) and the request (What).
	NotImplementedError = validate.NotImplementedError

	// StalePlanError reports a DecodeWrapper run whose plan no longer matches
	// the metadata it was made from: the page_table or seqused_k tensor given
	// to Plan changed afterwards (WritePagedKVFunc or WritePagedKV added
	// tokens, or a page was assigned). Arg names the first changed entry,
	// Planned and Now its values at Plan and at the call. Call Plan again
	// with the current metadata.
	StalePlanError = validate.StalePlanError

	// ForwardOnlyError reports an attempt to differentiate through an op of
	// this package that has no gradient (Op names it): FP8 or NVFP4
	// attention, decode attention, the graph LSE nodes and the planning ops'
	// metadata inputs (float32 and BF16 SparseAttention are
	// differentiable). Build gradients only for the parts of a graph that do
	// not pass through such an op, or run LispMachines with
	// gorgonia.ExecuteFwdOnly().
	ForwardOnlyError = validate.ForwardOnlyError
)

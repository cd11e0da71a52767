package validate

import "fmt"

// ArgError reports an invalid argument: which one, what was expected and
// what was received.
type ArgError struct {
	Func     string // the entry point, e.g. "SparseAttentionFunc"
	Arg      string // the argument, e.g. "k2q_row_ptr"
	Expected string // what the argument must be
	Got      string // what was passed
}

// Error formats "Func: Arg: expected Expected, got Got".
func (e *ArgError) Error() string {
	return fmt.Sprintf("%s: %s: expected %s, got %s", e.Func, e.Arg, e.Expected, e.Got)
}

// NotImplementedError reports a valid request outside what the package
// implements (mirrors the reference's NotImplementedError).
type NotImplementedError struct {
	Func string // the entry point
	What string // the request that is not implemented
}

// Error names the function and what is not implemented.
func (e *NotImplementedError) Error() string {
	return fmt.Sprintf("%s: not implemented: %s", e.Func, e.What)
}

// StalePlanError reports a DecodeWrapper run whose plan no longer matches
// the metadata it was made from: the page_table or seqused_k tensor given
// to Plan changed afterwards (WritePagedKVFunc or WritePagedKV added tokens,
// or a page was assigned). Call Plan again with the current metadata.
type StalePlanError struct {
	Func    string // the entry point, e.g. "DecodeWrapper.Run"
	Arg     string // the first changed entry, e.g. "seqused_k[0]"
	Planned int32  // its value at Plan
	Now     int32  // its value at this call
}

// Error names the changed entry, both values and the remedy.
func (e *StalePlanError) Error() string {
	return fmt.Sprintf("%s: stale plan: %s was %d at Plan and is %d now (the metadata changed after Plan, e.g. by WritePagedKVFunc or WritePagedKV); call Plan again before Run",
		e.Func, e.Arg, e.Planned, e.Now)
}

// ForwardOnlyError reports an attempt to differentiate through an op of
// this package that has no gradient: FP8 or NVFP4 attention, decode
// attention, the graph LSE nodes and the planning ops' metadata inputs
// (float32 and BF16 SparseAttention are differentiable). Build gradients
// only for the parts of a graph that do not pass through such an op, or run
// LispMachines with gorgonia.ExecuteFwdOnly().
type ForwardOnlyError struct {
	Op string // the op, e.g. "DecodeAttention{sparse=false}"
}

// Error names the op and says it has no gradient.
func (e *ForwardOnlyError) Error() string {
	return fmt.Sprintf("op: %s is forward-only: it has no gradient (G.Grad and LispMachine backprop cannot pass through it; use gorgonia.ExecuteFwdOnly())", e.Op)
}

// ArgErr builds an ArgError; got is formatted with fmt.Sprint.
func ArgErr(fn, arg, expected string, got any) *ArgError {
	return &ArgError{Func: fn, Arg: arg, Expected: expected, Got: fmt.Sprint(got)}
}

// WrapArg turns a planning error into an ArgError of the entry point.
func WrapArg(fn, arg string, err error) error {
	return &ArgError{Func: fn, Arg: arg, Expected: "valid metadata", Got: err.Error()}
}

package op

import (
	"fmt"
	"reflect"
	"slices"
	"unsafe"

	"gorgonia.org/tensor"
)

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

// checker accumulates the first error of a validation sequence.
type checker struct {
	fn  string
	err error
}

func (c *checker) fail(arg, expected string, got any) {
	if c.err == nil {
		c.err = &ArgError{Func: c.fn, Arg: arg, Expected: expected, Got: fmt.Sprint(got)}
	}
}

// need records a failure unless ok.
func (c *checker) need(ok bool, arg, expected string, got any) {
	if !ok {
		c.fail(arg, expected, got)
	}
}

// dense returns t as a contiguous *tensor.Dense (materialising views), or
// records an error when t is nil or not a dense tensor.
func (c *checker) dense(t tensor.Tensor, arg string) *tensor.Dense {
	if c.err != nil {
		return nil
	}
	if t == nil {
		c.fail(arg, "a tensor", "nil")
		return nil
	}
	if !present(t) {
		c.fail(arg, "a tensor", fmt.Sprintf("a nil %T", t))
		return nil
	}
	d, ok := t.(*tensor.Dense)
	if !ok {
		c.fail(arg, "a *tensor.Dense", fmt.Sprintf("%T", t))
		return nil
	}
	if d.IsMaterializable() {
		m, ok := d.Materialize().(*tensor.Dense)
		if !ok {
			c.fail(arg, "a materialisable dense view", fmt.Sprintf("%T", d))
			return nil
		}
		d = m
	}
	return d
}

// present reports whether t holds a tensor: false for a nil interface and
// for a typed nil pointer (a nil *tensor.Dense), which optional arguments
// treat as absent and required ones reject.
func present(t tensor.Tensor) bool {
	if t == nil {
		return false
	}
	if d, ok := t.(*tensor.Dense); ok {
		return d != nil
	}
	v := reflect.ValueOf(t)
	return !(v.Kind() == reflect.Pointer && v.IsNil())
}

// dtype records an error unless t has one of the dtypes.
func (c *checker) dtype(t *tensor.Dense, arg string, dts ...tensor.Dtype) bool {
	if c.err != nil || t == nil {
		return false
	}
	for _, dt := range dts {
		if t.Dtype() == dt {
			return true
		}
	}
	exp := ""
	for i, dt := range dts {
		if i > 0 {
			exp += " or "
		}
		exp += dtypeName(dt)
	}
	c.fail(arg, "dtype "+exp, dtypeName(t.Dtype()))
	return false
}

// rank records an error unless t has rank n.
func (c *checker) rank(t *tensor.Dense, arg, shapeDesc string, n int) bool {
	if c.err != nil || t == nil {
		return false
	}
	if t.Dims() != n {
		c.fail(arg, fmt.Sprintf("rank %d (shape %s)", n, shapeDesc), fmt.Sprintf("shape %v", t.Shape()))
		return false
	}
	return true
}

// backing returns the storage of t as a []T without copying (nil for a nil
// or empty tensor). The caller has checked t's dtype. tensor.Dense.Data
// panics on empty tensors and returns scalars for rank-0 ones; this does not.
func backing[T any](t *tensor.Dense) []T {
	if t == nil || len(t.Header.Raw) == 0 {
		return nil
	}
	var z T
	n := len(t.Header.Raw) / int(unsafe.Sizeof(z))
	return unsafe.Slice((*T)(unsafe.Pointer(&t.Header.Raw[0])), n)
}

// int32s returns the int32 backing of t (nil when t is nil or empty).
func int32s(t *tensor.Dense) []int32 { return backing[int32](t) }

// shapeIs reports whether t has exactly the given dimensions (tensor.Shape's
// Eq also equates a vector [n] with [1, n] and [n, 1], another rank).
func shapeIs(t *tensor.Dense, shape ...int) bool { return slices.Equal([]int(t.Shape()), shape) }

func shapeStr(t *tensor.Dense) string { return fmt.Sprintf("%v", []int(t.Shape())) }

// argErr builds an ArgError; got is formatted with fmt.Sprint.
func argErr(fn, arg, expected string, got any) *ArgError {
	return &ArgError{Func: fn, Arg: arg, Expected: expected, Got: fmt.Sprint(got)}
}

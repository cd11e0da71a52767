package validate

import (
	"fmt"
	"reflect"
	"slices"
	"unsafe"

	"gorgonia.org/tensor"
)

// Checker accumulates the first error of a validation sequence.
type Checker struct {
	Fn  string // the entry point its errors name
	Err error  // the first failure, nil while every check passed
}

// Fail records an *ArgError of c.Fn naming arg, unless c already holds an
// error (the first error of a sequence is the one reported).
func (c *Checker) Fail(arg, expected string, got any) {
	if c.Err == nil {
		c.Err = &ArgError{Func: c.Fn, Arg: arg, Expected: expected, Got: fmt.Sprint(got)}
	}
}

// Need records a failure unless ok. Its arguments are evaluated before the
// call whether ok holds or not: a check on a path that must not allocate
// (a graph node's run) passes constant strings only, or calls Fail inside
// its own failure branch, where the message is built.
func (c *Checker) Need(ok bool, arg, expected string, got any) {
	if !ok {
		c.Fail(arg, expected, got)
	}
}

// Dense returns t as a contiguous *tensor.Dense (materialising views), or
// records an error when t is nil or not a Dense tensor.
func (c *Checker) Dense(t tensor.Tensor, arg string) *tensor.Dense {
	if c.Err != nil {
		return nil
	}
	if t == nil {
		c.Fail(arg, "a tensor", "nil")
		return nil
	}
	if !Present(t) {
		c.Fail(arg, "a tensor", fmt.Sprintf("a nil %T", t))
		return nil
	}
	d, ok := t.(*tensor.Dense)
	if !ok {
		c.Fail(arg, "a *tensor.Dense", fmt.Sprintf("%T", t))
		return nil
	}
	if d.IsMaterializable() {
		m, ok := d.Materialize().(*tensor.Dense)
		if !ok {
			c.Fail(arg, "a materialisable dense view", fmt.Sprintf("%T", d))
			return nil
		}
		d = m
	}
	return d
}

// Present reports whether t holds a tensor: false for a nil interface and
// for a typed nil pointer (a nil *tensor.Dense), which optional arguments
// treat as absent and required ones reject.
func Present(t tensor.Tensor) bool {
	if t == nil {
		return false
	}
	if d, ok := t.(*tensor.Dense); ok {
		return d != nil
	}
	v := reflect.ValueOf(t)
	return !(v.Kind() == reflect.Pointer && v.IsNil())
}

// Dtype records an error unless t has one of the dtypes.
func (c *Checker) Dtype(t *tensor.Dense, arg string, dts ...tensor.Dtype) bool {
	if c.Err != nil || t == nil {
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
		exp += DtypeName(dt)
	}
	c.Fail(arg, "dtype "+exp, DtypeName(t.Dtype()))
	return false
}

// Rank records an error unless t has Rank n.
func (c *Checker) Rank(t *tensor.Dense, arg, shapeDesc string, n int) bool {
	if c.Err != nil || t == nil {
		return false
	}
	if t.Dims() != n {
		c.Fail(arg, fmt.Sprintf("rank %d (shape %s)", n, shapeDesc), fmt.Sprintf("shape %v", t.Shape()))
		return false
	}
	return true
}

// Backing returns the storage of t as a []T without copying (nil for a nil
// or empty tensor). The caller has checked t's dtype. tensor.Dense.Data
// panics on empty tensors and returns scalars for rank-0 ones; this does not.
func Backing[T any](t *tensor.Dense) []T {
	if t == nil || len(t.Header.Raw) == 0 {
		return nil
	}
	var z T
	n := len(t.Header.Raw) / int(unsafe.Sizeof(z))
	return unsafe.Slice((*T)(unsafe.Pointer(&t.Header.Raw[0])), n)
}

// Int32s returns the int32 backing of t (nil when t is nil or empty).
func Int32s(t *tensor.Dense) []int32 { return Backing[int32](t) }

// ShapeIs reports whether t has exactly the given dimensions (tensor.Shape's
// Eq also equates a vector [n] with [1, n] and [n, 1], another rank).
func ShapeIs(t *tensor.Dense, shape ...int) bool { return slices.Equal([]int(t.Shape()), shape) }

// ShapeStr formats t's shape for error messages, e.g. "[16 128 64]".
func ShapeStr(t *tensor.Dense) string { return fmt.Sprintf("%v", []int(t.Shape())) }

package validate

import (
	"fmt"
	"math"
)

// Scalar rules shared by every entry point (eager functions, graph
// constructors, graph ops at run time, DecodeWrapper.Plan and Run), so that
// one value gets one answer everywhere.
//
// The kernels compute in float32 with scores in base 2: they use
// float32(softmax_scale * log2(e)) and float32(1 / T). A scalar is accepted
// only when the value the kernels will use is finite and nonzero, so a value
// that passes validation can never turn into ±Inf or 0 inside a kernel.

// ScaleRule is the expected-value text of a softmax_scale error.
const ScaleRule = "a nonzero value whose float32 softmax_scale*log2(e) is finite and nonzero (|softmax_scale| in about [1e-45, 2.3e38])"

// TemperatureRule is the expected-value text of a temperature error.
const TemperatureRule = "a value > 0 whose float32 value and float32 1/T are finite and nonzero (T in about [3e-39, 3.4e38])"

// DefaultScale is op.DefaultSoftmaxScale: 1/sqrt(headDim).
func DefaultScale(headDim int) float64 { return 1 / math.Sqrt(float64(headDim)) }

// ResolveScale applies the default (0 means 1/sqrt(d)) and the scale rule:
// the result is any nonzero float64 whose kernel value float32(x*log2(e))
// is finite and nonzero. Negative scales are accepted (the softmax is
// defined for any real logits).
func ResolveScale(c *Checker, x float64, d int) float64 {
	if x == 0 {
		if d <= 0 {
			return 0 // the caller reports the head dimension
		}
		x = DefaultScale(d)
	}
	k := float32(x * math.Log2E)
	if x == 0 || math.IsNaN(x) || math.IsInf(float64(k), 0) || k == 0 || float32(x) == 0 {
		c.Fail("softmax_scale", ScaleRule, x)
	}
	return x
}

// ResolveTemperature applies the default (0 means 1) and the temperature
// rule: T > 0 with float32(T) and float32(1/T) finite and nonzero.
func ResolveTemperature(c *Checker, t float64) float64 {
	if t == 0 {
		t = 1
	}
	if !(t > 0) || math.IsInf(t, 0) || !finiteNonzero32(t) || !finiteNonzero32(1/t) {
		c.Fail("lse_temperature_scale", TemperatureRule, t)
	}
	return t
}

// finiteNonzero32 reports whether float32(x) is finite and nonzero.
func finiteNonzero32(x float64) bool {
	f := float64(float32(x))
	return f != 0 && !math.IsInf(f, 0) && !math.IsNaN(f)
}

// CheckScalars runs the scale and temperature rules for a graph
// constructor, where D is known from the q node (an error names fn).
func CheckScalars(fn string, scale, temperature float64, d int) error {
	c := &Checker{Fn: fn}
	ResolveScale(c, scale, d)
	ResolveTemperature(c, temperature)
	return c.Err
}

// MaxInt32 is the largest value of the int32 metadata (sequence lengths,
// row pointers, page ids).
const MaxInt32 = math.MaxInt32

// MulCap returns the product of non-negative factors, or -1 when it exceeds
// limit (without overflowing).
func MulCap(limit int, factors ...int) int {
	p := 1
	for _, f := range factors {
		if f < 0 {
			return -1
		}
		if f != 0 && p > limit/f {
			return -1
		}
		p *= f
	}
	if p > limit {
		return -1
	}
	return p
}

// CeilDiv returns ceil(a / b) for a >= 0, b >= 1 without overflow.
func CeilDiv(a, b int) int {
	if a == 0 {
		return 0
	}
	return (a-1)/b + 1
}

// SizeErr builds the error of a size limit.
func SizeErr(fn, arg, what string, limit int, got string) *ArgError {
	return ArgErr(fn, arg, fmt.Sprintf("%s <= %d", what, limit), got)
}

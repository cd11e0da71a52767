package op

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Constructors and converters for the tensors the ops take and return, so
// that the common path needs only this package and gorgonia.org/tensor:
// float32 data in, low-precision storage tensors for the ops, float32 data
// back out.

// maxTensorElems caps the element count of a tensor built here (2^40): a
// shape whose product overflows or exceeds it is rejected before anything
// is allocated.
const maxTensorElems = 1 << 40

// checkData validates shape against len(data) (len(data) elements of one
// value each) and returns the element count.
func checkData(fn string, n int, shape []int) (int, error) {
	if len(shape) == 0 {
		return 0, validate.ArgErr(fn, "shape", "at least one dimension", "none")
	}
	for i, s := range shape {
		if s < 0 {
			return 0, validate.ArgErr(fn, fmt.Sprintf("shape[%d]", i), ">= 0", s)
		}
	}
	total := validate.MulCap(maxTensorElems, shape...)
	if total < 0 {
		return 0, validate.ArgErr(fn, "shape", fmt.Sprintf("at most %d elements", maxTensorElems), shape)
	}
	if total != n {
		return 0, validate.ArgErr(fn, "data", fmt.Sprintf("%d elements (the product of shape %v)", total, shape), n)
	}
	return total, nil
}

// NewBF16 returns a BFloat16 tensor of the given shape holding data rounded
// to the nearest bfloat16 (ties to even; NaN stays NaN, overflow rounds to
// infinity, as every bfloat16 conversion does). data is copied. It returns an
// *ArgError when len(data) is not the product of shape.
func NewBF16(data []float32, shape ...int) (*tensor.Dense, error) {
	n, err := checkData("NewBF16", len(data), shape)
	if err != nil {
		return nil, err
	}
	out := make([]lowp.BFloat16, n)
	lowp.EncodeBF16(out, data)
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(out)), nil
}

// NewE4M3 returns a Float8E4M3FN tensor of the given shape holding data
// rounded to the nearest e4m3fn value (ties to even) with the non-saturating
// rule: magnitudes that round above 448 become NaN (e4m3fn has no infinity),
// like torch's and ml_dtypes' casts. Use NewE4M3Sat to clamp them to +-448
// instead. data is copied.
func NewE4M3(data []float32, shape ...int) (*tensor.Dense, error) {
	n, err := checkData("NewE4M3", len(data), shape)
	if err != nil {
		return nil, err
	}
	out := make([]lowp.Float8E4M3FN, n)
	lowp.EncodeE4M3(out, data)
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(out)), nil
}

// NewE4M3Sat is NewE4M3 with the saturating rule: finite magnitudes above
// 448 and infinities become +-448 (NaN stays NaN), the rule FP8 KV caches
// usually quantise with.
func NewE4M3Sat(data []float32, shape ...int) (*tensor.Dense, error) {
	n, err := checkData("NewE4M3Sat", len(data), shape)
	if err != nil {
		return nil, err
	}
	out := make([]lowp.Float8E4M3FN, n)
	lowp.EncodeE4M3Sat(out, data)
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(out)), nil
}

// NVFP4 is one NVFP4-quantised K or V tensor in the form
// SparseAttentionNVFP4KVFunc takes: Data (uint8, the given shape with the last
// dimension halved: two e2m1 values per byte, even element in the low
// nibble), Scale (uint8 [round_up(rows, 128), round_up(D/16, 4)], the e4m3
// block scales of every 16 elements in the 128x4 tiled layout, rows = the
// product of all but the last dimension) and Global (a float32 [1] tensor,
// the per-tensor global scale, passed as k_global_scale / v_global_scale).
type NVFP4 struct {
	Data   *tensor.Dense // packed e2m1 pairs, uint8
	Scale  *tensor.Dense // 128x4 tiled e4m3 block scales, uint8 rank 2
	Global *tensor.Dense // float32 [1] global scale
}

// NewNVFP4 quantises data of the given shape (dense K/V [total_k, Hkv, D]
// or paged [num_pages, Hkv, page_size, D]) to NVFP4 with the given global
// scale: each 16-element block gets the saturated e4m3 scale
// e4m3(amax / 6 / globalScale) and elements e2m1(x / (scale *
// globalScale)). Dequantised, an element is e2m1 * scale * globalScale. A
// globalScale of amax(|data|) / (448 * 6) uses the full range of both
// formats. It returns an *ArgError for a bad shape (D must be a positive
// multiple of 16) or a globalScale that is not finite and positive.
func NewNVFP4(data []float32, globalScale float32, shape ...int) (*NVFP4, error) {
	const fn = "NewNVFP4"
	if _, err := checkData(fn, len(data), shape); err != nil {
		return nil, err
	}
	d := shape[len(shape)-1]
	if d <= 0 || d%lowp.NVFP4BlockSize != 0 {
		return nil, validate.ArgErr(fn, "shape", fmt.Sprintf("a last dimension (D) that is a positive multiple of %d", lowp.NVFP4BlockSize), shape)
	}
	if !(globalScale > 0) || math.IsInf(float64(globalScale), 1) {
		return nil, validate.ArgErr(fn, "globalScale", "a finite number > 0", globalScale)
	}
	rows := len(data) / d
	packed, scales, err := lowp.QuantizeNVFP4(data, rows, d, globalScale)
	if err != nil {
		return nil, validate.ArgErr(fn, "data", "quantisable values", err)
	}
	ps := append([]int(nil), shape...)
	ps[len(ps)-1] = d / 2
	pr, pc := lowp.Scale128x4Shape(rows, d/lowp.NVFP4BlockSize)
	return &NVFP4{
		Data:   tensor.New(tensor.WithShape(ps...), tensor.WithBacking(packed)),
		Scale:  tensor.New(tensor.WithShape(pr, pc), tensor.WithBacking(scales)),
		Global: tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{globalScale})),
	}, nil
}

// Float32s returns the elements of a tensor or of a Gorgonia value (a
// node's Value(): a *tensor.Dense or a scalar) as float32, in row-major
// order of its shape (views are read through their strides): BFloat16,
// Float8E4M3FN, Float16 and float32 values are widened exactly; float64 is
// rounded to nearest. It returns an *ArgError for a nil value or another
// dtype.
func Float32s(v G.Value) ([]float32, error) {
	c := &validate.Checker{Fn: "Float32s"}
	if _, ok := v.(tensor.Tensor); !ok && v != nil {
		switch x := v.Data().(type) {
		case float32:
			return []float32{x}, nil
		case float64:
			return []float32{float32(x)}, nil
		}
		return nil, validate.ArgErr(c.Fn, "t", "a tensor or a float32 or float64 scalar value", fmt.Sprintf("%T", v))
	}
	t, _ := v.(tensor.Tensor)
	d := c.Dense(t, "t")
	c.Dtype(d, "t", BFloat16, Float8E4M3FN, Float16, tensor.Float32, tensor.Float64)
	if c.Err != nil {
		return nil, c.Err
	}
	n := d.Shape().TotalSize()
	if d.IsScalar() {
		n = 1
	}
	out := make([]float32, n)
	switch d.Dtype() {
	case BFloat16:
		lowp.DecodeBF16(out, validate.Backing[lowp.BFloat16](d)[:n])
	case Float8E4M3FN:
		lowp.DecodeE4M3(out, validate.Backing[lowp.Float8E4M3FN](d)[:n])
	case Float16:
		lowp.DecodeF16(out, validate.Backing[lowp.Float16](d)[:n])
	case tensor.Float32:
		copy(out, validate.Backing[float32](d)[:n])
	default:
		for i, x := range validate.Backing[float64](d)[:n] {
			out[i] = float32(x)
		}
	}
	return out, nil
}

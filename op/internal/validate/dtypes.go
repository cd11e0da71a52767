package validate

import (
	"reflect"

	"github.com/sparseattn/msa/kernels/lowp"
	"gorgonia.org/tensor"
)

// Tensor dtypes of the low-precision formats, registered with the tensor
// package at init. Gorgonia's built-in arithmetic does not support them;
// the ops of this package do their own.
var (
	// BFloat16 is the tensor dtype of lowp.BFloat16.
	BFloat16 = tensor.Dtype{Type: reflect.TypeOf(lowp.BFloat16(0))}
	// Float8E4M3FN is the tensor dtype of lowp.Float8E4M3FN.
	Float8E4M3FN = tensor.Dtype{Type: reflect.TypeOf(lowp.Float8E4M3FN(0))}
	// Float16 is the tensor dtype of lowp.Float16 (used for partials).
	Float16 = tensor.Dtype{Type: reflect.TypeOf(lowp.Float16(0))}
)

func init() {
	tensor.Register(BFloat16)
	tensor.Register(Float8E4M3FN)
	tensor.Register(Float16)
}

// DtypeName returns the reference's name of a dtype for error messages.
func DtypeName(dt tensor.Dtype) string {
	if dt.Type == nil {
		return "unset"
	}
	switch dt {
	case BFloat16:
		return "bfloat16"
	case Float8E4M3FN:
		return "float8_e4m3fn"
	case Float16:
		return "float16"
	case tensor.Float32:
		return "float32"
	case tensor.Int32:
		return "int32"
	case tensor.Uint8:
		return "uint8"
	}
	return dt.String()
}

package op

import "github.com/sparseattn/msa/op/internal/validate"

// Tensor dtypes of the low-precision formats, registered with the tensor
// package at init. Gorgonia's built-in arithmetic does not support them;
// the ops of this package do their own.
var (
	// BFloat16 is the tensor dtype of lowp.BFloat16.
	BFloat16 = validate.BFloat16
	// Float8E4M3FN is the tensor dtype of lowp.Float8E4M3FN.
	Float8E4M3FN = validate.Float8E4M3FN
	// Float16 is the tensor dtype of lowp.Float16 (used for partials).
	Float16 = validate.Float16
)

package op

import "github.com/sparseattn/msa/op/internal/validate"

// DefaultSoftmaxScale is the softmax scale every entry point uses when its
// SoftmaxScale is 0 (or the option is absent): 1/sqrt(headDim), the
// scaled dot-product attention's. Passing its value explicitly gives the
// same result bit for bit.
func DefaultSoftmaxScale(headDim int) float64 { return validate.DefaultScale(headDim) }

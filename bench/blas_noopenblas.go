//go:build !openblas || !cgo

package main

import (
	"errors"

	G "gorgonia.org/gorgonia"
)

// openBLAS reports that this binary has no OpenBLAS binding.
func openBLAS() (G.BLAS, error) {
	return nil, errors.New("-graph-blas openblas: this binary is built without it; build with -tags openblas " +
		"(needs cgo and libopenblas-dev)")
}

//go:build !openblas || !cgo

package blas

import (
	"errors"

	"gorgonia.org/tensor"
)

// ErrNoOpenBLAS is OpenBLAS's error in a build without the binding.
var ErrNoOpenBLAS = errors.New("blas: OpenBLAS is not in this build: build with -tags openblas and cgo enabled, " +
	"with OpenBLAS's development files installed (Debian and Ubuntu: libopenblas-dev)")

// OpenBLAS returns gonum's cgo binding to the system's OpenBLAS in a build
// with -tags openblas and cgo; this build has neither, so it returns
// ErrNoOpenBLAS.
func OpenBLAS() (tensor.BLAS, error) { return nil, ErrNoOpenBLAS }

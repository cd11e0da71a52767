//go:build openblas && cgo

package blas

// The system's OpenBLAS provides the CBLAS symbols that gonum's netlib
// binding calls (Debian and Ubuntu: libopenblas-dev).

// #cgo LDFLAGS: -lopenblas
import "C"

import (
	"errors"

	"gonum.org/v1/netlib/blas/netlib"
	"gorgonia.org/tensor"
)

// ErrNoOpenBLAS is OpenBLAS's error in a build without the binding (never
// returned by this one).
var ErrNoOpenBLAS = errors.New("blas: OpenBLAS is not in this build: build with -tags openblas and cgo enabled, " +
	"with OpenBLAS's development files installed (Debian and Ubuntu: libopenblas-dev)")

// OpenBLAS returns gonum's cgo binding to the system's OpenBLAS
// (netlib.Implementation): every routine on OpenBLAS, its Sgemm on
// OpenBLAS's own threads (OPENBLAS_NUM_THREADS of them, default one per
// CPU). This build has it (-tags openblas with cgo), so the error is
// nil; without the tag OpenBLAS returns ErrNoOpenBLAS. Select it with
// gorgonia.Use(b).
func OpenBLAS() (tensor.BLAS, error) { return netlib.Implementation{}, nil }

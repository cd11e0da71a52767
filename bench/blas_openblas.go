//go:build openblas && cgo

package main

// The system's OpenBLAS provides the CBLAS symbols that gonum's netlib
// binding calls (Debian and Ubuntu: libopenblas-dev).

// #cgo LDFLAGS: -lopenblas
import "C"

import (
	G "gorgonia.org/gorgonia"

	"gonum.org/v1/netlib/blas/netlib"
)

// openBLAS returns gonum's cgo binding to OpenBLAS (netlib.Implementation:
// every routine, Sgemm on OpenBLAS's own threads, OPENBLAS_NUM_THREADS of
// them).
func openBLAS() (G.BLAS, error) { return netlib.Implementation{}, nil }

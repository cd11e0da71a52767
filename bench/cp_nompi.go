//go:build !mpi

package main

import (
	"errors"

	"github.com/sparseattn/msa/kernels/comm"
)

// cpWorld reports that this binary has no MPI.
func cpWorld() (comm.Comm, error) {
	return nil, errors.New("this binary was built without MPI: build it with go build -tags mpi ./bench (needs libopenmpi-dev) and start it with mpirun, or use -cp-ranks P for P in-process ranks")
}

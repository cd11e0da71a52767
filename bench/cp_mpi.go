//go:build mpi

package main

import (
	"time"

	"github.com/sparseattn/msa/kernels/comm"
)

// cpWorld is the MPI job's communicator (a binary built with -tags mpi).
func cpWorld() (comm.Comm, error) { return comm.MPIWorld(time.Minute) }

//go:build mpi

package comm

import (
	"os"
	"testing"
	"time"
)

// TestMPICollectives runs the in-process tests' checks on the ranks of an
// MPI job: go test -c -tags mpi, then mpirun -np N comm.test -test.run MPI
// (.ci/dist.sh). Without mpirun it is skipped.
func TestMPICollectives(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" && os.Getenv("PMI_SIZE") == "" {
		t.Skip("not started by mpirun")
	}
	c, err := MPIWorld(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkCollectives(c); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("rank %d of %d: collectives pass", c.Rank(), c.Size())
}

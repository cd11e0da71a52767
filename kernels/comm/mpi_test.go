//go:build mpi

package comm

import (
	"errors"
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
	// A late rank: rank 1 joins an exchange 1 s late; rank 0, with a
	// 300 ms timeout, returns ErrTimeout instead of waiting, the others
	// (10 s) complete once rank 1 arrives. Rank 0's Comm is unusable
	// afterwards; its Close waits for the exchange to complete.
	m := c.(*mpiComm)
	m.timeout = 10 * time.Second
	if c.Rank() == 0 {
		m.timeout = 300 * time.Millisecond
	}
	if c.Rank() == 1 {
		time.Sleep(time.Second)
	}
	s, r := make([][]byte, c.Size()), make([][]byte, c.Size())
	for j := range s {
		s[j], r[j] = make([]byte, 8), make([]byte, 8)
	}
	start := time.Now()
	err = c.AllToAllV(s, r)
	switch {
	case c.Rank() == 0 && !errors.Is(err, ErrTimeout):
		t.Fatalf("rank 0 beside a late rank: got %v, want ErrTimeout", err)
	case c.Rank() == 0 && time.Since(start) > 5*time.Second:
		t.Fatalf("rank 0 returned after %v", time.Since(start))
	case c.Rank() != 0 && err != nil:
		t.Fatalf("rank %d: %v", c.Rank(), err)
	}
	if c.Rank() == 0 && !errors.Is(c.AllGather(nil, nil), ErrTimeout) {
		t.Fatal("rank 0 after a timeout: the Comm still accepts calls")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("rank %d of %d: collectives pass; a rank 1 s late gives ErrTimeout to a rank waiting 300 ms", c.Rank(), c.Size())
}

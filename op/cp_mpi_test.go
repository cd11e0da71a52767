//go:build mpi

package op

import (
	"os"
	"testing"
	"time"

	"github.com/sparseattn/msa/kernels/comm"
)

// The context-parallel tests on the ranks of an MPI job: go test -c -tags
// mpi ./op, then mpirun -np N op.test -test.run MPI (.ci/dist.sh). Each
// process is one rank; the problems are built from fixed seeds, so every
// rank holds the same global data and uses its share. Without mpirun they
// are skipped.

var mpiComm comm.Comm

func TestMain(m *testing.M) {
	code := m.Run()
	if mpiComm != nil {
		if err := mpiComm.Close(); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// mpiWorld returns the job's Comm, or skips outside mpirun.
func mpiWorld(t *testing.T) comm.Comm {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" && os.Getenv("PMI_SIZE") == "" {
		t.Skip("not started by mpirun")
	}
	if mpiComm == nil {
		c, err := comm.MPIWorld(60 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		mpiComm = c
	}
	return mpiComm
}

func TestCPDecodeMPI(t *testing.T) {
	c := mpiWorld(t)
	for _, s := range cpDecodeSpecs() {
		if err := checkCPDecode(c, s); err != nil {
			t.Fatal(err)
		}
		pr := buildDecode(s)
		o, lse, err := cpDecodeGraph(c, s, pr)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := cpRef(s, pr)
		if err != nil {
			t.Fatal(err)
		}
		if err := compareDecode(s, pr.maxV, o, lse, ref.Out, ref.LSE); err != nil {
			t.Fatalf("graph: %v", err)
		}
	}
	for _, s := range cpDecodeMultiSpecs() {
		if err := checkCPDecode(c, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("rank %d of %d: context-parallel decode (wrapper and graph; seqlen_q 1, 3 and 4) equals single-process decode", c.Rank(), c.Size())
}

func TestCPPrefillMPI(t *testing.T) {
	c := mpiWorld(t)
	for _, s := range cpPrefillSpecs() {
		for _, strat := range []CPStrategy{CPAuto, CPFetchKV, CPSendQueries} {
			if err := checkCPPrefill(c, s, strat); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range cpPrefillSpecs() {
		if err := checkCPPrefillGraph(c, s, CPAuto); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("rank %d of %d: context-parallel sparse prefill (auto, fetch-kv, send-queries; eager and graph) equals single-process prefill", c.Rank(), c.Size())
}

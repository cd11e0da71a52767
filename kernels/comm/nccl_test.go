//go:build cuda

package comm

import (
	"strings"
	"testing"
)

// TestNCCLOneRank runs the collectives on a one-rank NCCL group (one GPU).
// Where the CUDA driver or libnccl.so.2 is missing it checks instead that
// NewNCCL says so in one line naming the library, and skips.
func TestNCCLOneRank(t *testing.T) {
	id, err := NCCLUniqueID()
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "\n") || !(strings.Contains(msg, NCCLLibrary) || strings.Contains(msg, "libcuda.so.1")) {
			t.Fatalf("missing library: got %q, want one line naming %s or libcuda.so.1", msg, NCCLLibrary)
		}
		if _, err2 := NewNCCL(id, 1, 0, 0, 0); err2 == nil || err2.Error() != msg {
			t.Fatalf("NewNCCL without the library: got %v, want %q", err2, msg)
		}
		t.Skipf("no NCCL here: %v", err)
	}
	c, err := NewNCCL(id, 1, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkCollectives(c); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNCCLArgs(t *testing.T) {
	var id [128]byte
	if _, err := NewNCCL(id, 2, 2, 0, 0); err == nil || !strings.Contains(err.Error(), "rank") {
		t.Errorf("rank 2 of 2: got %v", err)
	}
	if _, err := NewNCCL(id, 1, 0, 0, -1); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("negative timeout: got %v", err)
	}
}

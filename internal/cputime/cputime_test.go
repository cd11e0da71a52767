package cputime

import (
	"runtime"
	"testing"
)

// TestProcessGrows: where the OS reports it, CPU time does not go back and
// grows across a busy loop.
func TestProcessGrows(t *testing.T) {
	c0, ok := Process()
	if !ok {
		t.Skipf("no process CPU time on %s", runtime.GOOS)
	}
	x := 0
	for i := 0; i < 200_000_000; i++ {
		x += i & 3
	}
	c1, _ := Process()
	if c1 <= c0 {
		t.Fatalf("CPU time %v then %v after a busy loop (x=%d)", c0, c1, x)
	}
}

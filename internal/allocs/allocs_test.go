package allocs

import "testing"

// TestBytesIgnoresOtherGoroutines: the measure counts f's bytes, exactly,
// while another goroutine allocates without pause; a single process-wide
// TotalAlloc difference (what the tests used before) counted that
// goroutine's blocks too.
func TestBytesIgnoresOtherGoroutines(t *testing.T) {
	stop := Churn()
	defer stop()
	var keep []byte
	for _, n := range []int{0, 4096, 1 << 20} {
		got := Bytes(5, func() {
			if n > 0 {
				keep = make([]byte, n)
			}
		})
		if got != uint64(n) {
			t.Errorf("Bytes(make %d bytes) = %d", n, got)
		}
	}
	_ = keep
}

// TestWithin: a count within the bound is f's count after one run; a
// count above it is measured again (f runs twice) and a call that
// allocates above the bound every time still exceeds it.
func TestWithin(t *testing.T) {
	var keep []byte
	runs := 0
	small := func() { runs++; keep = make([]byte, 4096) }
	if got := Within(1<<20, small); got != 4096 || runs != 1 {
		t.Errorf("within the bound: %d bytes in %d runs, want 4096 in 1", got, runs)
	}
	runs = 0
	if got := Within(1024, small); got != 4096 || runs != 2 {
		t.Errorf("above the bound: %d bytes in %d runs, want 4096 in 2", got, runs)
	}
	_ = keep
}

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

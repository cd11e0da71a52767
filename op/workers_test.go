package op

import (
	"runtime"
	"testing"
	"time"
)

// TestWorkerSpinAndFree checks the process-wide worker controls: eager
// calls are correct with any spin time (0: goroutines block at once;
// DefaultSpin; a spin longer than the test), and FreeWorkspaces stops the
// idle goroutines the eager calls kept, so the goroutine count returns to
// what it was before the calls (that pools are kept and reused is
// kernels/attn's TestSharedPools).
func TestWorkerSpinAndFree(t *testing.T) {
	FreeWorkspaces()
	base := runtime.NumGoroutine()
	defer SetWorkerSpin(5 * time.Millisecond)
	for i, spin := range []time.Duration{0, 5 * time.Millisecond, time.Hour} {
		SetWorkerSpin(spin)
		s := decodeSpec{seed: uint64(40 + i), seqused: []int{300, 1, 0, 129}, seqlenQ: 1, hq: 8, hkv: 2, d: 64,
			pageSize: 16, dt: []string{"bf16", "e4m3"}[i%2], workers: 3}
		pr := buildDecode(s)
		for range 3 {
			checkDecode(t, s, pr, runDecodeSpec(t, s, pr))
		}
	}
	FreeWorkspaces()
	for end := time.Now().Add(time.Second); runtime.NumGoroutine() > base; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d goroutines after FreeWorkspaces, want %d", runtime.NumGoroutine(), base)
		}
	}
}

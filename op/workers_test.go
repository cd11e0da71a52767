package op

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sparseattn/msa/kernels/attn"
	"gorgonia.org/tensor"
)

// TestWorkerSpinAndFree checks the process-wide worker controls: eager
// calls are correct with any spin time (0: goroutines block at once;
// BackToBackSpin; a spin longer than the test), and FreeWorkspaces stops the
// idle goroutines the eager calls kept, so the goroutine count returns to
// what it was before the calls (that pools are kept and reused is
// kernels/attn's TestSharedPools).
func TestWorkerSpinAndFree(t *testing.T) {
	FreeWorkspaces()
	base := runtime.NumGoroutine()
	defer SetWorkerSpin(0) // the default
	for i, spin := range []time.Duration{0, attn.BackToBackSpin, time.Hour} {
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

// BenchmarkDecodeBackToBack times back-to-back decode steps (a
// DecodeWrapper, 8 requests of 4096 tokens, GQA 16, D = 128, FP8, 2
// workers) with the workers blocking between calls (spin=0) and polling
// for the next one (attn.BackToBackSpin, 5 ms): the difference is the
// wake-up of the blocked goroutines, which on small virtual machines costs
// 10-160 us a call (attn BenchmarkPoolWake).
func BenchmarkDecodeBackToBack(b *testing.B) {
	used := make([]int, 8)
	for i := range used {
		used[i] = 4096
	}
	s := decodeSpec{seed: 3, seqused: used, seqlenQ: 1, hq: 16, hkv: 1, d: 128, pageSize: 64, dt: "e4m3", workers: 2}
	pr := buildDecode(s)
	w := plannedWrapper(b, s, pr)
	defer w.Close()
	out := tensor.New(tensor.WithShape(len(used), 16, 128), tensor.Of(BFloat16))
	defer SetWorkerSpin(0) // the default
	for _, spin := range []time.Duration{0, attn.BackToBackSpin} {
		b.Run(fmt.Sprintf("spin=%v", spin), func(b *testing.B) {
			SetWorkerSpin(spin)
			if err := w.RunInto(pr.q, pr.k, pr.v, 0, out, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := w.RunInto(pr.q, pr.k, pr.v, 0, out, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

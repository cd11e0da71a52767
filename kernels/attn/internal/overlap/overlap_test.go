package overlap

import (
	"fmt"
	"math"
	"testing"
	"time"
	"unsafe"
)

// aligned returns n bytes aligned to 4 KiB.
func aligned(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))%4096)) % 4096
	return b[off : off+n]
}

// run times one loop (best of 5 calls of n iterations), in ns per unrolled
// step.
func run(fn func(q, k *float32, src *byte, dst *float32, n int), n int) float64 {
	q, k, src, dst := aligned(4096), aligned(1024+128), aligned(2048), aligned(8192)
	best := time.Duration(math.MaxInt64)
	for r := 0; r < 5; r++ {
		t0 := time.Now()
		fn((*float32)(unsafe.Pointer(&q[0])), (*float32)(unsafe.Pointer(&k[0])), &src[0], (*float32)(unsafe.Pointer(&dst[0])), n)
		best = min(best, time.Since(t0))
	}
	return float64(best.Nanoseconds()) / float64(4*n)
}

// TestLoopsRun checks that the loops run and take time (the benchmark's
// numbers are only meaningful if each does its work).
func TestLoopsRun(t *testing.T) {
	for isa, l := range map[string]map[string]func(q, k *float32, src *byte, dst *float32, n int){"avx2": loops(), "avx512": loops512()} {
		if l == nil {
			t.Logf("%s: the CPU lacks the loops' instructions", isa)
			continue
		}
		for name, fn := range l {
			if ns := run(fn, 1000); !(ns > 0) {
				t.Errorf("%s %s: %g ns per step", isa, name, ns)
			}
		}
	}
	for name, fn := range loopsDec() {
		if ns := runDec(fn, 1000, 200); !(ns > 0) {
			t.Errorf("decode-ratio %s: %g ns per step", name, ns)
		}
	}
}

// BenchmarkOverlap reports ns per step of each loop and the overlap ratio
// (see the package comment).
func BenchmarkOverlap(b *testing.B) {
	l := loops()
	if l == nil {
		b.Skip("CPU lacks AVX2, FMA or F16C")
	}
	report(b, l)
}

// BenchmarkOverlap512 is BenchmarkOverlap for the AVX-512 lane kernel's
// multiply-adds and the VBMI e4m3 conversion; a step is one loop iteration
// (192 K elements converted, 192 multiply-adds).
func BenchmarkOverlap512(b *testing.B) {
	l := loops512()
	if l == nil {
		b.Skip("CPU lacks AVX512F/BW or AVX512_VBMI")
	}
	report(b, l)
}

// report times the three loops b.N times and reports the last timings and
// the overlap ratio.
func report(b *testing.B, l map[string]func(q, k *float32, src *byte, dst *float32, n int)) {
	const n = 1 << 20
	var f, c, both float64
	for i := 0; i < b.N; i++ {
		f, c, both = run(l["fma"], n), run(l["conv"], n), run(l["both"], n)
	}
	b.ReportMetric(f, "fma-ns")
	b.ReportMetric(c, "conv-ns")
	b.ReportMetric(both, "both-ns")
	b.ReportMetric((f+c-both)/min(f, c), "overlap")
}

// runDec times one decode-ratio loop like run, with the conversion's
// source and destination off bytes (4*off) past a 4 KiB boundary.
func runDec(fn func(q, k *float32, src *byte, dst *float32, n int), n, off int) float64 {
	q, k := aligned(4096), aligned(4096)
	src, dst := aligned(4096)[off:], aligned(3 * 4096)[4*off:]
	best := time.Duration(math.MaxInt64)
	for r := 0; r < 5; r++ {
		t0 := time.Now()
		fn((*float32)(unsafe.Pointer(&q[0])), (*float32)(unsafe.Pointer(&k[0])), &src[0], (*float32)(unsafe.Pointer(&dst[0])), n)
		best = min(best, time.Since(t0))
	}
	return float64(best.Nanoseconds()) / float64(n)
}

// BenchmarkOverlapDecode is BenchmarkOverlap at decode's ratio: a step is
// 48 AVX2 multiply-adds and the staging of 24 e4m3 values (see
// overlap_amd64.s), the conversion's buffers at offset off from a 4 KiB
// boundary (off=0 shares address bits with the key rows).
func BenchmarkOverlapDecode(b *testing.B) {
	l := loopsDec()
	if l == nil {
		b.Skip("CPU lacks AVX2, FMA or F16C")
	}
	for _, off := range []int{0, 200} {
		b.Run(fmt.Sprintf("off=%d", off), func(b *testing.B) {
			const n = 1 << 20
			var f, c, both, cn, bn float64
			for i := 0; i < b.N; i++ {
				f, c, both = runDec(l["fma"], n, off), runDec(l["conv"], n, off), runDec(l["both"], n, off)
				cn, bn = runDec(l["conv-nomul"], n, off), runDec(l["both-nomul"], n, off)
			}
			b.ReportMetric(f, "fma-ns")
			b.ReportMetric(c, "conv-ns")
			b.ReportMetric(both, "both-ns")
			b.ReportMetric((f+c-both)/min(f, c), "overlap")
			b.ReportMetric(100*f/both, "fma%")
			b.ReportMetric(100*f/(f+c), "staged%")
			b.ReportMetric(100*f/bn, "fma%-nomul")
			b.ReportMetric(100*f/(f+cn), "staged%-nomul")
		})
	}
}

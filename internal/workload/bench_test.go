package workload

import (
	"fmt"
	"testing"
	"time"

	"github.com/sparseattn/msa/op/causalselect"
)

// BenchmarkCorrelatedSelection times the GPU check's correlated selection
// at the bench's shape (Hq 16, Hkv 1, D 128, topK 16, blk 128) on 2
// workers, in its two parts: the AR(1) Q and K rows (one goroutine; ns per
// element of Q and K) and op's block scoring and top-k (GFLOP/s per
// worker of the scores' 2 T Hq D (ceil(T/blk)+1)/2 FLOP). The GPU
// runbook's plan (cuda/gpucheck/plan, SelectSeconds) is costed from these.
func BenchmarkCorrelatedSelection(b *testing.B) {
	const workers = 2
	for _, T := range []int{8192, 32768, 131072} {
		b.Run(fmt.Sprintf("tokens=%d", T), func(b *testing.B) {
			s := causalselect.Shape{T: T, Hq: 16, Hkv: 1, D: 128, TopK: 16, Blk: 128}
			var rows, sel time.Duration
			for range b.N {
				t0 := time.Now()
				q, k := CorrelatedBF16(T, s.Hq*s.D, Seed(T)), CorrelatedBF16(T, s.Hkv*s.D, Seed(T)+1)
				t1 := time.Now()
				if _, err := causalselect.Select(s, q, k, workers); err != nil {
					b.Fatal(err)
				}
				rows, sel = rows+t1.Sub(t0), sel+time.Since(t1)
			}
			n := float64(b.N)
			elements := float64(T * (s.Hq + s.Hkv) * s.D)
			flop := 2 * float64(T*s.Hq*s.D) * float64((T+s.Blk-1)/s.Blk+1) / 2
			b.ReportMetric(rows.Seconds()/n*1e3, "rows-ms")
			b.ReportMetric(sel.Seconds()/n*1e3, "select-ms")
			b.ReportMetric(rows.Seconds()/n/elements*1e9, "rows-ns/element")
			b.ReportMetric(flop/(sel.Seconds()/n)/workers/1e9, "select-GFLOP/s/worker")
		})
	}
}

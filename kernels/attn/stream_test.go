package attn

import (
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// decodeStream is one goroutine's share of BenchmarkDecodeStream: its own
// worker, accumulator (16 query rows, D = 128, as a KV head at GQA 16) and
// streamBytes of K/V in one dense sequence, far beyond the caches.
type decodeStream struct {
	la     *lanesAcc
	st     kvStager
	k, v   Operand
	layout *KVLayout
	blocks int
	valid  []int32
}

// streamBytes is the K+V storage of one decodeStream (128 MiB).
const streamBytes = 128 << 20

// newDecodeStream builds a stream of dt ("e4m3" or "bf16") K/V; nil when
// the tier has no lane kernels at D = 128.
func newDecodeStream(seed int64, dt string, lv vec) *decodeStream {
	const m, n, d = 16, tile.BlockN, 128
	rng := rand.New(rand.NewSource(seed))
	wk := newWorker(d, 1).buffers()
	la, ok := wk.decodeAcc(tile.LanesSIMD(d)).(*lanesAcc)
	if !ok {
		return nil
	}
	s := &decodeStream{la: la, valid: make([]int32, m)}
	for r := range s.valid {
		s.valid[r] = n
	}
	resetRandomQ(la, m, d, rng)
	switch dt {
	case "e4m3":
		big := make([]lowp.Float8E4M3FN, streamBytes)
		for i := range big {
			big[i] = lowp.E4M3(float32(rng.NormFloat64()))
		}
		s.k = Operand{Dtype: E4M3, D: d, E4M3: big[:len(big)/2], vec: lv}
		s.v = Operand{Dtype: E4M3, D: d, E4M3: big[len(big)/2:], vec: lv}
	default:
		big := make([]lowp.BFloat16, streamBytes/2)
		for i := range big {
			big[i] = lowp.BF16(float32(rng.NormFloat64()))
		}
		s.k = Operand{Dtype: BF16, D: d, BF16: big[:len(big)/2], vec: lv}
		s.v = Operand{Dtype: BF16, D: d, BF16: big[len(big)/2:], vec: lv}
	}
	s.blocks = s.k.Rows() / n
	s.layout = &KVLayout{Hkv: 1, CuK: []int32{0, int32(s.blocks * n)}}
	var vs vScale
	s.st = *benchStager(&s.k, &s.v, s.layout, wk.kbuf, wk.vbuf, &vs, la)
	return s
}

// run streams over blocks i0 .. i0+count-1 (modulo the stream's length),
// hinting the next block before each update as decodeTile does when pf.
func (s *decodeStream) run(i0, count int, pf bool) {
	const n = tile.BlockN
	for i := i0; i < i0+count; i++ {
		j := i % s.blocks
		if pf {
			prefetchNext(s.la, &s.k, &s.v, s.layout, 0, 0, (j+1)%s.blocks*n, n, s.st.foldK)
		}
		s.st.t0 = j * n
		s.la.updateStaged(&s.st, n, s.valid)
	}
}

// BenchmarkDecodeStream measures the memory side of decode with one and
// with GOMAXPROCS goroutines at once: each streams staged updates (16 query
// rows, 128-key blocks, D = 128, the next-block hint on) over its own
// 128 MiB of K/V, one thread each, for b.N blocks. It reports the mean rate
// per goroutine as GFLOP/s and as %peak of the tier's one-goroutine FMA
// peak (the in-cache kernels run at the same rate on every core at once,
// BenchmarkDecodeBlock and bench's paired peak): the ceiling of decode's
// %roof when K/V comes from DRAM, so the difference between the two
// goroutine counts is what running the cores together costs.
func BenchmarkDecodeStream(b *testing.B) {
	const flopsPerBlock = 4 * 16 * tile.BlockN * 128
	benchVecLevels(b, func(b *testing.B, tn string, lv vec) {
		peak := calib.PeakGFLOPS(tile.PeakLoop(tn), 50*time.Millisecond)
		procs := []int{1}
		if g := runtime.GOMAXPROCS(0); g > 1 {
			procs = append(procs, g)
		}
		for _, dt := range []string{"e4m3", "bf16"} {
			var ss []*decodeStream
			for _, g := range procs {
				for len(ss) < g {
					s := newDecodeStream(int64(len(ss)+1), dt, lv)
					if s == nil {
						b.Skip("no lane kernels for this tier at D = 128")
					}
					ss = append(ss, s)
				}
				b.Run(fmt.Sprintf("dt=%s/goroutines=%d", dt, g), func(b *testing.B) {
					secs := make([]float64, g)
					var start, done sync.WaitGroup
					start.Add(1)
					for w := range g {
						done.Add(1)
						go func() {
							defer done.Done()
							runtime.LockOSThread()
							defer runtime.UnlockOSThread()
							ss[w].run(0, min(b.N, 64), true) // warm the thread's caches and TLB
							start.Wait()
							t0 := time.Now()
							ss[w].run(64, b.N, true)
							secs[w] = time.Since(t0).Seconds()
						}()
					}
					start.Done()
					done.Wait()
					gf := 0.0
					for _, s := range secs {
						gf += flopsPerBlock * float64(b.N) / s / 1e9
					}
					gf /= float64(g)
					b.ReportMetric(gf, "GFLOP/s")
					if peak > 0 {
						b.ReportMetric(100*gf/peak, "%peak")
					}
				})
			}
		}
	})
}

//go:build amd64 && !purego

package tile

import (
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/sparseattn/msa/internal/calib"
)

// BenchmarkBF16LanesPhases times the phases of one update of the
// VDPBF16PS lane path (SetBF16Products on avx512bf16; 16 rows, 128 keys,
// d = 128, every operand in L1/L2) as the query-major prefill runs them on
// bf16 K/V read in place: the scores (qk), the softmax, P to key pairs
// (probs), the bf16 values to pairs with the V guard's finite-maximum scan
// (vpairs), P.V (pv), the five in a row (all), and UpdateStaged on a
// stager offering the bf16 rows (staged: the real call, with its 64-row
// chunks). best-ns is the fastest batch of 16 calls per call, which a
// shared host's load inflates least; %peak-dp is the 2*16*128*128
// VDPBF16PS products of an update (qk and pv have half of them) at
// the tier's peak over best-ns, the rate an update would reach if only its
// products took time.
func BenchmarkBF16LanesPhases(b *testing.B) {
	useTier(b, "avx512bf16")
	const d, n, batch = 128, 128, 16
	l := NewLanes(d)
	l.SetBF16Products(true)
	l.Reset(16, 1, RoundNone, 0)
	a := l.amxState()
	kv := make([]byte, 4*n*d)
	for i := 0; i < len(kv); i += 2 {
		*(*uint16)(unsafe.Pointer(&kv[i])) = 0x3c00 + uint16(i*7)&0x3ff // bf16 in [2^-7, 2^-6)
	}
	src := &rawStager{f: RawBF16, k: kv[:2*n*d], v: kv[2*n*d:], d: d, kb: make([]float32, n*d), vb: make([]float32, n*d), scan: true, l: l}
	valid := make([]int32, 16)
	for r := range 16 {
		l.st.valid[r] = n
		valid[r] = n
	}
	l.amxQueries(a)
	var mx [32]uint16
	steps := map[string]func(){
		"qk": func() {
			lanesQKBF16(&a.qb[0], unsafe.Pointer(&kv[0]), uintptr(2*d), d/2, &l.s[0], n)
		},
		"softmax": func() { lanesSoftmax512(&l.s[0], n, &l.st) },
		"probs":   func() { l.bf16Probs(a, n) },
		"vpairs": func() {
			bf16PairsMax(unsafe.Pointer(&a.vb[0]), uintptr(4*d), unsafe.Pointer(&kv[2*n*d]), uintptr(2*d), n/2, d, &mx, &testPrefetch)
		},
		"pv": func() { l.bf16PV(a, 0, n, false) },
	}
	order := []string{"qk", "softmax", "probs", "vpairs", "pv"}
	steps["all"] = func() {
		for _, s := range order {
			steps[s]()
		}
	}
	steps["staged"] = func() {
		src.guards = src.guards[:0]
		l.UpdateStaged(n, valid, src)
	}
	peak := calib.PeakGFLOPS(PeakLoop("avx512bf16"), 50*time.Millisecond)
	for _, s := range append(order, "all", "staged") {
		b.Run(s, func(b *testing.B) {
			best := time.Duration(math.MaxInt64)
			for i := 0; i < b.N; i += batch {
				t0 := time.Now()
				for range batch {
					steps[s]()
				}
				best = min(best, time.Since(t0))
			}
			ns := float64(best.Nanoseconds()) / batch
			b.ReportMetric(ns, "best-ns")
			if peak > 0 {
				b.ReportMetric(100*4*16*n*d/(ns*peak), "%peak-dp")
			}
		})
	}
}

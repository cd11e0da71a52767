//go:build amd64 && !purego

package tile

import (
	"fmt"
	"testing"
	"unsafe"
)

// BenchmarkAMXLanesPhases times the phases of one update of the AMX lane
// path (16 rows, 128 keys, d = 128, every operand in cache) alone, in
// pairs, and all but one: e4m3fn keys to bf16 rows (e4rows), the scores
// on AMX (qk), the softmax, P to key pairs (probs), e4m3fn values to pairs
// (e4pairs) and P.V on AMX (pv). A pair costs more than its two phases
// alone when the second is an AMX phase after more than about 250 ns
// without AMX work (BenchmarkAMXWake).
func BenchmarkAMXLanesPhases(b *testing.B) {
	useTier(b, "amxbf16")
	const d, n = 128, 128
	l := NewLanes(d)
	l.Reset(16, 1, RoundNone, 0)
	a := l.amxState()
	e8 := make([]byte, 2*n*d)
	for i := range e8 {
		e8[i] = byte(i*13) & 0x3f
	}
	for r := range 16 {
		l.st.valid[r] = n
	}
	l.amxQueries(a)
	steps := map[string]func(){
		"e4rows": func() {
			e4m3Rows(unsafe.Pointer(&a.kb[0]), unsafe.Pointer(&e8[0]), n*d, &E4M3Tab, &testAMXConfig, &testPrefetch)
		},
		"qk": func() {
			amxLanesQK(&a.cfg, unsafe.Pointer(&a.kb[0]), uintptr(2*d), unsafe.Pointer(&a.qb[0]), &l.s[0], n/16, d/32)
		},
		"softmax": func() { lanesSoftmax512(&l.s[0], n, &l.st) },
		"probs":   func() { l.amxProbs(a, n) },
		"e4pairs": func() {
			e4m3Pairs(unsafe.Pointer(&a.vb[0]), uintptr(4*d), unsafe.Pointer(&e8[n*d]), uintptr(d), n/2, d, &E4M3Tab, &testAMXConfig, &testPrefetch)
		},
		"pv": func() { l.amxPV(a, 0, n, false) },
	}
	order := []string{"e4rows", "qk", "softmax", "probs", "e4pairs", "pv"}
	for _, s := range order {
		b.Run("alone="+s, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				steps[s]()
			}
		})
	}
	for _, pair := range [][2]string{{"e4rows", "qk"}, {"qk", "qk"}, {"softmax", "qk"}, {"e4pairs", "pv"}, {"pv", "pv"}} {
		b.Run("pair="+pair[0]+"+"+pair[1], func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				steps[pair[0]]()
				steps[pair[1]]()
			}
		})
	}
	for skip := -1; skip < len(order); skip++ {
		name := "all"
		if skip >= 0 {
			name = "without=" + order[skip]
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				for j, s := range order {
					if j != skip {
						steps[s]()
					}
				}
			}
		})
	}
}

// BenchmarkAMXWake measures what an AMX kernel (the scores of 128 keys,
// 32 TDPBF16PS) costs after spin iterations of scalar work, against the
// spin alone. On Emerald Rapids the difference is about 230 ns after up
// to ~120 ns of other work and about 500 ns after ~280 ns or more: the
// AMX unit takes about 300 ns to wake once it has idled for a few hundred
// nanoseconds, which is why the AMX conversion loops keep it busy
// (AWAKE in lanes_amx_amd64.s).
func BenchmarkAMXWake(b *testing.B) {
	useTier(b, "amxbf16")
	const d = 128
	l := NewLanes(d)
	l.Reset(16, 1, RoundNone, 0)
	a := l.amxState()
	spin := func(k int) {
		x := 1
		for j := 0; j < k; j++ {
			x = x*3 + j
		}
		spinSink = x
	}
	for _, k := range []int{0, 100, 200, 400, 800, 1600} {
		b.Run(fmt.Sprintf("spin=%d", k), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				spin(k)
			}
		})
		b.Run(fmt.Sprintf("spin=%d+qk", k), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				spin(k)
				amxLanesQK(&a.cfg, unsafe.Pointer(&a.kb[0]), uintptr(2*d), unsafe.Pointer(&a.qb[0]), &l.s[0], 8, d/32)
			}
		})
	}
}

// spinSink keeps BenchmarkAMXWake's scalar loop from being optimised away.
var spinSink int

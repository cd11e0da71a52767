package main

import (
	"math"
	"testing"
	"time"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// The reference's own decoders must agree with the format definitions the
// kernels use (they are written independently, from SPEC.md).
func TestDecoders(t *testing.T) {
	for b := 0; b < 256; b++ {
		x := lowp.Float8E4M3FN(b)
		got, want := e4m3Val(x), float64(x.Float32())
		if !(got == want || math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("e4m3 %#x: %v, want %v", b, got, want)
		}
	}
	for b := 0; b < 1<<16; b += 7 {
		x := lowp.BFloat16(b)
		got, want := bf16Val(x), float64(x.Float32())
		if !(got == want || math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("bf16 %#x: %v, want %v", b, got, want)
		}
	}
	rows, d := 300, 64
	x := normals(rows*d, 1)
	packed, scales, err := lowp.QuantizeNVFP4(x, rows, d, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	src := nvfp4Rows{packed: packed, scales: scales, global: 0.5}
	want := make([]float32, d)
	for r := 0; r < rows; r++ {
		lowp.DequantizeNVFP4Row(want, packed, scales, r, d, 0.5)
		for c, g := range src.row(r, d) {
			if g != float64(want[c]) {
				t.Fatalf("nvfp4 row %d col %d: %v, want %v", r, c, g, want[c])
			}
		}
	}
}

// causalQ2K must pick distinct visible blocks, the diagonal first, and
// count visible pairs exactly.
func TestCausalQ2K(t *testing.T) {
	for _, tc := range []struct{ T, topK, blk int }{{1000, 4, 128}, {512, 16, 128}, {2048, 8, 64}} {
		q2k, pairs := causalQ2K(tc.T, 2, tc.topK, tc.blk, 3)
		var brute int64
		for h := 0; h < 2; h++ {
			for q := 0; q < tc.T; q++ {
				list := q2k[(h*tc.T+q)*tc.topK : (h*tc.T+q+1)*tc.topK]
				if int(list[0]) != q/tc.blk {
					t.Fatalf("q %d: first block %d, want diagonal %d", q, list[0], q/tc.blk)
				}
				seen := map[int32]bool{}
				n := 0
				for _, j := range list {
					if j < 0 {
						continue
					}
					n++
					if seen[j] || int(j) > q/tc.blk {
						t.Fatalf("q %d: bad list %v", q, list)
					}
					seen[j] = true
					for k := int(j) * tc.blk; k < (int(j)+1)*tc.blk; k++ {
						if k <= q && k < tc.T {
							brute++
						}
					}
				}
				if n != min(tc.topK, q/tc.blk+1) {
					t.Fatalf("q %d: %d blocks, want %d", q, n, min(tc.topK, q/tc.blk+1))
				}
			}
		}
		if brute != pairs {
			t.Fatalf("%+v: pairs %d, brute force %d", tc, pairs, brute)
		}
	}
}

// The checker must flag an output that is off by more than the tolerance.
func TestCheckerDetects(t *testing.T) {
	keys := [][]float64{{1, 0}, {0, 1}, {1, 1}}
	vals := [][]float64{{1, 2}, {3, 4}, {-1, 0.5}}
	want := refAttention([]float64{0.3, -0.2}, keys, vals, 0.7)
	ck := &checker{tol: makeTolerance(true, false, false)}
	good := []float32{float32(want[0]), float32(want[1])}
	ck.row("good", good, want, maxAbs(vals))
	if v, _ := ck.verdict(); v != "ok" {
		t.Fatalf("exact output rejected")
	}
	bad := []float32{float32(want[0] + 0.1), float32(want[1])}
	ck.row("bad", bad, want, maxAbs(vals))
	if v, _ := ck.verdict(); v != "FAIL" {
		t.Fatalf("output off by 0.1 accepted")
	}
}

// The paired reference windows must measure something and the medians be
// the middle element.
func TestRefMeter(t *testing.T) {
	m := newRefMeter(peakTier(tile.Tier()), 2, 4<<20)
	if pk := m.peak(10 * time.Millisecond); !(pk > 0) {
		t.Fatalf("peak window: %v GFLOP/s", pk)
	}
	if bw := m.bandwidth(10 * time.Millisecond); !(bw > 0) {
		t.Fatalf("bandwidth window: %v GB/s", bw)
	}
	if got := refWindow(time.Millisecond); got != 20*time.Millisecond {
		t.Fatalf("refWindow(1ms) = %v", got)
	}
	if got := refWindow(time.Minute); got != 250*time.Millisecond {
		t.Fatalf("refWindow(1m) = %v", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Fatalf("median = %v", got)
	}
	if got := median(nil); got != 0 {
		t.Fatalf("median(nil) = %v", got)
	}
	r := &result{flops: 1e9}
	p := &paired{m: m, r: r}
	p.after(10 * time.Millisecond)
	p.finish()
	if !(r.pctPeak > 0) || r.pctBW != 0 {
		t.Fatalf("paired: %%peak %v, %%BW %v (want > 0, 0 without bandwidth)", r.pctPeak, r.pctBW)
	}
}

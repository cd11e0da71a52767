package attn

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
)

// TestWindowQueries checks the window of long calls: one window's partials
// fit in MaxPartialBytes, or in 4x that when the window was raised to at
// most minWindow queries; a window has at least one query and never more
// than the call.
func TestWindowQueries(t *testing.T) {
	for _, c := range []struct {
		totalQ, topK, hq, d int
		dt                  PartialDtype
	}{
		{32768, 16, 16, 128, PartialBF16}, {131072, 16, 64, 128, PartialF32}, {4096, 64, 64, 256, PartialF32},
		{500, 64, 64, 256, PartialF32}, {1 << 20, 8, 8, 64, PartialE4M3}, {0, 4, 4, 64, PartialBF16},
		{100000, 64, 2048, 256, PartialF32}, {100000, 64, 1 << 16, 256, PartialF32},
	} {
		p := &Prefill{TotalQ: c.totalQ, TopK: c.topK, HQ: c.hq, D: c.d, Partial: c.dt}
		w := windowQueries(p, p.TopK)
		bytes := w * c.topK * c.hq * c.d * c.dt.Size()
		over := bytes > MaxPartialBytes && (w > minWindow || bytes > 4*MaxPartialBytes) && w > 1
		if w < 1 || w > max(c.totalQ, 1) || over || (w < minWindow && w < c.totalQ && 2*bytes <= MaxPartialBytes) {
			t.Errorf("%+v: window %d (%d partial bytes)", c, w, bytes)
		}
	}
}

// TestPrefillWindows checks that the query-window size changes no result:
// every window size, from one query to the whole call, gives bit-identical
// O, LSE and temperature LSE (ragged batch with an empty sequence, causal
// and not, GQA 4, BF16, FP32 and E4M3 partials, 1 and 3 workers).
func TestPrefillWindows(t *testing.T) {
	const (
		hkv, qpk, d, blk, topK = 2, 4, 64, 32, 5
	)
	hq := hkv * qpk
	rng := rand.New(rand.NewPCG(7, 8))
	seqQ := []int{130, 0, 77, 201}
	cuQ := []int32{0}
	for _, n := range seqQ {
		cuQ = append(cuQ, cuQ[len(cuQ)-1]+int32(n))
	}
	cuK := slices.Clone(cuQ)
	totalQ := int(cuQ[len(cuQ)-1])
	rows, err := plan.NewRows(cuK, blk)
	if err != nil {
		t.Fatal(err)
	}
	// Random distinct blocks per (head, query), -1 padded.
	q2k := randomLists(rng, hkv, topK, cuQ, rows, func(int) bool { return false })
	csr, sched := planCall(t, q2k, hkv, qpk, topK, blk, cuQ, cuK, rows)
	q := Operand{Dtype: BF16, D: d, BF16: randBF16(rng, totalQ*hq*d)}
	k := Operand{Dtype: BF16, D: d, BF16: randBF16(rng, totalQ*hkv*d)}
	v := Operand{Dtype: BF16, D: d, BF16: randBF16(rng, totalQ*hkv*d)}
	seqK := make([]int32, len(seqQ))
	for b := range seqQ {
		seqK[b] = cuK[b+1] - cuK[b]
	}
	type result struct {
		o         []lowp.BFloat16
		lse, tlse []float32
	}
	run := func(causal bool, workers, win int, partial PartialDtype) result {
		p := &Prefill{Q: q, K: k, V: v, KV: KVLayout{Hkv: hkv, CuK: cuK}, TotalQ: totalQ, HQ: hq, Hkv: hkv, D: d,
			CuQ: cuQ, SeqK: seqK, BlkKV: blk, Causal: causal, Scale: 0.125, InvT: 1 / 1.7, TopK: topK,
			CSR: csr, Sched: sched, Partial: partial, OutputScale: 1}
		pool := NewPool(workers)
		defer pool.Close()
		ws := NewWorkspace(workers, d)
		ws.fixedWin = win
		out := &Output{O: make([]lowp.BFloat16, totalQ*hq*d), LSE: make([]float32, totalQ*hq), TLSE: make([]float32, totalQ*hq)}
		RunPrefill(p, ws, pool, out)
		return result{out.O, out.LSE, out.TLSE}
	}
	same := func(a, b []float32) bool {
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				return false
			}
		}
		return true
	}
	for _, c := range []struct {
		causal  bool
		partial PartialDtype
	}{{false, PartialBF16}, {true, PartialBF16}, {true, PartialF32}, {false, PartialE4M3}} {
		causal := c.causal
		want := run(causal, 1, totalQ, c.partial)
		if w := windowQueries(&Prefill{HQ: hq, Hkv: hkv, TopK: topK, TotalQ: totalQ, D: d, Partial: PartialBF16}, topK); w != totalQ {
			t.Fatalf("windowQueries = %d, want all %d queries (small call)", w, totalQ)
		}
		for _, win := range []int{0, 1, 7, 64, 129, totalQ + 5} {
			for _, workers := range []int{1, 3} {
				got := run(causal, workers, win, c.partial)
				if !slices.Equal(got.o, want.o) || !same(got.lse, want.lse) || !same(got.tlse, want.tlse) {
					t.Fatalf("causal=%v partials %v, window %d, %d workers: result differs from a single window", causal, c.partial, win, workers)
				}
			}
		}
		// The output must not be trivially zero.
		nz := 0
		for _, x := range want.o {
			if x != 0 {
				nz++
			}
		}
		if nz < len(want.o)/2 {
			t.Fatalf("causal=%v: only %d of %d outputs non-zero", causal, nz, len(want.o))
		}
	}
}

// randomLists returns q2k lists ([hkv][TotalQ][topK]) of random distinct
// blocks of each query's sequence, each entry -1 with probability 1/6,
// and all -1 for the queries (global index) that empty selects.
func randomLists(rng *rand.Rand, hkv, topK int, cuQ []int32, rows *plan.Rows, empty func(q int) bool) []int32 {
	totalQ := int(cuQ[len(cuQ)-1])
	q2k := make([]int32, hkv*totalQ*topK)
	for h := range hkv {
		for b := 0; b < len(cuQ)-1; b++ {
			nb := int(rows.Count[b])
			for q := int(cuQ[b]); q < int(cuQ[b+1]); q++ {
				list := q2k[(h*totalQ+q)*topK : (h*totalQ+q+1)*topK]
				perm := rng.Perm(nb)
				for k := range list {
					list[k] = -1
					if k < len(perm) && !empty(q) && rng.IntN(6) != 0 {
						list[k] = int32(perm[k])
					}
				}
			}
		}
	}
	return q2k
}

// planCall builds the k2q CSR and the forward schedule of q2k.
func planCall(t testing.TB, q2k []int32, hkv, qpk, topK, blk int, cuQ, cuK []int32, rows *plan.Rows) (*plan.CSR, *plan.FwdSchedule) {
	t.Helper()
	totalQ := int(cuQ[len(cuQ)-1])
	csr, err := plan.BuildK2QCSR(nil, q2k, hkv, totalQ, topK, cuQ, cuK, blk)
	if err != nil {
		t.Fatal(err)
	}
	fp := plan.FwdParams{TotalQ: totalQ, Hkv: hkv, QheadPerKV: qpk, TopK: topK, BlkKV: blk, Workers: 2}
	sched, err := plan.BuildFwdSchedule(nil, csr, rows, cuQ, fp)
	if err != nil {
		t.Fatal(err)
	}
	return csr, sched
}

// randBF16 returns n standard normal values as BF16.
func randBF16(rng *rand.Rand, n int) []lowp.BFloat16 {
	s := make([]lowp.BFloat16, n)
	for i := range s {
		s[i] = lowp.BF16(float32(rng.NormFloat64()))
	}
	return s
}

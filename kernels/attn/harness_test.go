package attn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
)

// useTier runs the rest of a (sub)test under a tile tier, skipping it when
// the CPU or build lacks it.
func useTier(t testing.TB, name string) {
	t.Helper()
	prev := tile.TierSetting()
	if err := tile.SetTier(name); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = tile.SetTier(prev) })
}

// forVecLevels runs f under each tier with SIMD epilogue kernels (avx2,
// avx512) with that tier's vec level, skipping the tiers this CPU or build
// lacks.
func forVecLevels(t *testing.T, f func(t *testing.T, lv vec)) {
	for _, tier := range []string{"avx2", "avx512"} {
		t.Run(tier, func(t *testing.T) {
			useTier(t, tier)
			lv := vecLevel()
			if lv == vecGo {
				t.Skip("no SIMD epilogue kernels for this tier on this CPU/build")
			}
			f(t, lv)
		})
	}
}

// testTiers are the tiers the numeric tests run under (skipped where absent).
var testTiers = []string{"generic", "avx2", "avx512", "avx512bf16"}

// prefillCase is a small dense prefill problem: BF16 Q, K, V with random
// block selections.
type prefillCase struct {
	hkv, qpk, d, blk, topK int
	seqQ, seqK             []int
	causal                 bool
}

// build returns the call and its q2k; vgen gives V element i (nil: random
// normal).
func (c prefillCase) build(t testing.TB, rng *rand.Rand, workers int, vgen func(i int) float32) (*Prefill, []int32) {
	t.Helper()
	cuQ, cuK := []int32{0}, []int32{0}
	for b := range c.seqQ {
		cuQ = append(cuQ, cuQ[b]+int32(c.seqQ[b]))
		cuK = append(cuK, cuK[b]+int32(c.seqK[b]))
	}
	totalQ, totalK := int(cuQ[len(c.seqQ)]), int(cuK[len(c.seqK)])
	hq := c.hkv * c.qpk
	rows, err := plan.NewRows(cuK, c.blk)
	if err != nil {
		t.Fatal(err)
	}
	q2k := make([]int32, c.hkv*totalQ*c.topK)
	for h := 0; h < c.hkv; h++ {
		for b := range c.seqQ {
			for q := int(cuQ[b]); q < int(cuQ[b+1]); q++ {
				list := q2k[(h*totalQ+q)*c.topK:][:c.topK]
				perm := rng.Perm(int(rows.Count[b]))
				for k := range list {
					list[k] = -1
					if k < len(perm) && rng.IntN(5) != 0 {
						list[k] = int32(perm[k])
					}
				}
			}
		}
	}
	csr, err := plan.BuildK2QCSR(nil, q2k, c.hkv, totalQ, c.topK, cuQ, cuK, c.blk)
	if err != nil {
		t.Fatal(err)
	}
	fp := plan.FwdParams{TotalQ: totalQ, Hkv: c.hkv, QheadPerKV: c.qpk, TopK: c.topK, BlkKV: c.blk, Workers: workers}
	sched, err := plan.BuildFwdSchedule(nil, csr, rows, cuQ, fp)
	if err != nil {
		t.Fatal(err)
	}
	seqK := make([]int32, len(c.seqK))
	for b, n := range c.seqK {
		seqK[b] = int32(n)
	}
	p := &Prefill{
		Q: randOperand(rng, totalQ*hq*c.d, c.d, nil), K: randOperand(rng, totalK*c.hkv*c.d, c.d, nil),
		V: randOperand(rng, totalK*c.hkv*c.d, c.d, vgen), KV: KVLayout{Hkv: c.hkv, CuK: cuK},
		TotalQ: totalQ, HQ: hq, Hkv: c.hkv, D: c.d, CuQ: cuQ, SeqK: seqK, BlkKV: c.blk, Causal: c.causal,
		Scale: float32(1 / math.Sqrt(float64(c.d))), TopK: c.topK, CSR: csr, Sched: sched, Partial: PartialF32, OutputScale: 1,
	}
	return p, q2k
}

func randOperand(rng *rand.Rand, n, d int, gen func(i int) float32) Operand {
	s := make([]lowp.BFloat16, n)
	for i := range s {
		x := float32(rng.NormFloat64())
		if gen != nil {
			x = gen(i)
		}
		s[i] = lowp.BF16(x)
	}
	return Operand{Dtype: BF16, D: d, BF16: s}
}

func newOutput(rows, d int) *Output {
	return &Output{O: make([]lowp.BFloat16, rows*d), LSE: make([]float32, rows)}
}

// refAttention is the float64 softmax attention of one (query, head) row
// over the keys for which visible(t) holds, tokens [0, seqK) of sequence b.
func refAttention(q []float64, k, v *Operand, l *KVLayout, b, h, seqK int, scale float64, visible func(t int) bool) (o []float64, lse, vmax float64) {
	d := len(q)
	row := make([]float32, d)
	var ts []int
	var ss []float64
	mx := math.Inf(-1)
	for t := 0; t < seqK; t++ {
		if !visible(t) {
			continue
		}
		k.DecodeRow(row, l.Row(b, h, t))
		s := 0.0
		for c := range q {
			s += q[c] * float64(row[c])
		}
		s *= scale
		ts, ss = append(ts, t), append(ss, s)
		mx = math.Max(mx, s)
	}
	o = make([]float64, d)
	if len(ts) == 0 {
		return o, math.Inf(-1), 0
	}
	sum := 0.0
	for i, t := range ts {
		w := math.Exp(ss[i] - mx)
		sum += w
		v.DecodeRow(row, l.Row(b, h, t))
		for c := range o {
			o[c] += w * float64(row[c])
			vmax = math.Max(vmax, math.Abs(float64(row[c])))
		}
	}
	for c := range o {
		o[c] /= sum
	}
	return o, mx + math.Log(sum), vmax
}

// refPrefill checks out against the float64 reference of p: O within tol
// times the row's largest |v| (plus BF16 rounding), LSE within 1e-3.
func refPrefill(t testing.TB, p *Prefill, q2k []int32, out *Output, tol float64) {
	t.Helper()
	qpk := p.HQ / p.Hkv
	qrow := make([]float32, p.D)
	q := make([]float64, p.D)
	for b := 0; b+1 < len(p.CuQ); b++ {
		seqQ, seqK := int(p.CuQ[b+1]-p.CuQ[b]), int(p.SeqK[b])
		for lq := 0; lq < seqQ; lq++ {
			gq := int(p.CuQ[b]) + lq
			for hq := 0; hq < p.HQ; hq++ {
				h := hq / qpk
				p.Q.DecodeRow(qrow, gq*p.HQ+hq)
				for c := range q {
					q[c] = float64(qrow[c])
				}
				sel := q2k[(h*p.TotalQ+gq)*p.TopK:][:p.TopK]
				o, lse, vmax := refAttention(q, &p.K, &p.V, &p.KV, b, h, seqK, float64(p.Scale), func(tk int) bool {
					blk := int32(tk / p.BlkKV)
					if p.Causal && tk > lq+seqK-seqQ {
						return false
					}
					for _, j := range sel {
						if j == blk {
							return true
						}
					}
					return false
				})
				checkRow(t, out, gq*p.HQ+hq, p.D, o, lse, vmax, tol, BF16Products(p.Q.Dtype, p.K.Dtype, p.V.Dtype))
			}
		}
	}
}

// checkRow compares output row r with the reference: each element within
// tol relative to it (the BF16 output rounding) plus a multiple of vmax, the
// largest |v| the row saw: 2^-16 for float32 products (float32
// accumulation), 2^-8 for a call with bf16 products (bf16: prefill on the
// bf16 twin, BF16Products; decode on a bf16 tier made active), which
// round P to bf16 (relative error 2^-9 per probability) before P.V, so
// the sum is off by at most 2^-9 * sum_j p_j |v_j| <= 2^-9 vmax, doubled
// for the accumulation.
func checkRow(t testing.TB, out *Output, r, d int, o []float64, lse, vmax, tol float64, bf16 bool) {
	t.Helper()
	abs := 0x1p-16
	if bf16 {
		abs = 0x1p-8
	}
	for c, x := range o {
		got := float64(out.O[r*d+c].Float32())
		if math.IsInf(got, 0) || math.IsNaN(got) || math.Abs(got-x) > tol*math.Abs(x)+abs*vmax {
			t.Fatalf("row %d col %d: O = %g, want %g", r, c, got, x)
		}
	}
	got := float64(out.LSE[r])
	if math.IsInf(lse, -1) != math.IsInf(got, -1) || !math.IsInf(lse, -1) && math.Abs(got-lse) > 1e-3*math.Max(1, math.Abs(lse)) {
		t.Fatalf("row %d: LSE = %g, want %g", r, got, lse)
	}
}

// decodeCase is a small paged dense decode problem with BF16 Q, K, V.
type decodeCase struct {
	batch, seqlenQ, hkv, qpk, d, pageSize, workers, fixedSplit int
	used                                                       []int32
}

// build returns the call; pages are assigned to requests in a shuffled
// order, vgen gives V element i (nil: random normal).
func (c decodeCase) build(t testing.TB, rng *rand.Rand, vgen func(i int) float32) *Decode {
	t.Helper()
	maxPages := 1
	for _, u := range c.used {
		maxPages = max(maxPages, (int(u)+c.pageSize-1)/c.pageSize)
	}
	nPages := c.batch * maxPages
	perm := rng.Perm(nPages)
	pt := make([]int32, nPages)
	for i := range pt {
		pt[i] = int32(perm[i])
	}
	hq := c.hkv * c.qpk
	dp := plan.DecodeParams{Batch: c.batch, SeqlenQ: c.seqlenQ, HQ: hq, Hkv: c.hkv, PageSize: c.pageSize,
		Workers: c.workers, FixedSplitPages: c.fixedSplit, MaxPagesPerSeq: maxPages}
	s, err := plan.BuildDecodeSchedule(nil, c.used, dp)
	if err != nil {
		t.Fatal(err)
	}
	kvN := nPages * c.hkv * c.pageSize * c.d
	return &Decode{
		Q: randOperand(rng, c.batch*c.seqlenQ*hq*c.d, c.d, nil), K: randOperand(rng, kvN, c.d, nil),
		V:     randOperand(rng, kvN, c.d, vgen),
		KV:    KVLayout{Hkv: c.hkv, Paged: true, PageTable: pt, PTCols: maxPages, PageSize: c.pageSize},
		Batch: c.batch, SeqlenQ: c.seqlenQ, HQ: hq, Hkv: c.hkv, D: c.d, SeqUsed: c.used,
		Scale: float32(1 / math.Sqrt(float64(c.d))), Sched: s,
	}
}

// refDecode checks out against the float64 reference of p (see checkRow).
func refDecode(t testing.TB, p *Decode, out *Output, tol float64) {
	t.Helper()
	qpk := p.HQ / p.Hkv
	qrow := make([]float32, p.D)
	q := make([]float64, p.D)
	for b := 0; b < p.Batch; b++ {
		used := int(p.SeqUsed[b])
		for i := 0; i < p.SeqlenQ; i++ {
			for hq := 0; hq < p.HQ; hq++ {
				r := (b*p.SeqlenQ+i)*p.HQ + hq
				p.Q.DecodeRow(qrow, r)
				for c := range q {
					q[c] = float64(qrow[c])
				}
				o, lse, vmax := refAttention(q, &p.K, &p.V, &p.KV, b, hq/qpk, used, float64(p.Scale), func(tk int) bool {
					return tk < used-p.SeqlenQ+i+1
				})
				checkRow(t, out, r, p.D, o, lse, vmax, tol, tile.BF16Products())
			}
		}
	}
}

// rebuild replaces p's schedule with one built for params sp.
func rebuild(p *Decode, sp plan.DecodeParams) error {
	s, err := plan.BuildDecodeSchedule(nil, p.SeqUsed, sp)
	if err == nil {
		p.Sched = s
	}
	return err
}

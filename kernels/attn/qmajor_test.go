package attn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
)

// qmCase is one sparse prefill problem for the query-major tests: a
// ragged batch (empty sequences and seqK < seqQ included), dense or paged
// K/V (pages shuffled), a storage dtype combination and a selection
// pattern.
type qmCase struct {
	seqQ, seqK      []int
	hkv, qpk, d     int
	blk, topK       int
	causal, paged   bool
	nhd             bool  // paged: token-major pages [num_pages, blk, Hkv, D]
	qDtype, kvDtype Dtype // Q: BF16 or E4M3; K/V: BF16, E4M3 or NVFP4
	pattern         string
	invT            float32 // 1/T of the temperature LSE, 0: none
	full            bool    // every list holds min(topK, blocks) blocks (benchmarks)
}

func (c qmCase) String() string {
	return fmt.Sprintf("%s/q%s-kv%s/hkv%d-qpk%d-d%d-blk%d-top%d/causal=%v-paged=%v-nhd=%v-invT=%g/%v-%v",
		c.pattern, c.qDtype, c.kvDtype, c.hkv, c.qpk, c.d, c.blk, c.topK, c.causal, c.paged, c.nhd, c.invT, c.seqQ, c.seqK)
}

// qmProblem is a built case: the call (its CSR and schedule from the
// planner) and, for the reference, the q2k lists and the decoded values.
type qmProblem struct {
	c      qmCase
	p      *Prefill
	q2k    []int32 // [Hkv][TotalQ][TopK]
	kvRows int     // K/V storage rows
}

// qmSelect returns the q2k list of batch-local query q of a sequence with
// seqQ queries, seqK keys and nb blocks under pattern; shared is the
// sequence's common random set of the "uniform" pattern. full lists hold
// min(topK, visible blocks) blocks, the visible ones (causal) only.
func qmSelect(rng *rand.Rand, pattern string, full, causal bool, q, seqQ, seqK, nb, blk, topK int, shared []int32) []int32 {
	list := make([]int32, 0, topK)
	add := func(j int) {
		if j >= 0 && j < nb && len(list) < topK && !slices.Contains(list, int32(j)) {
			list = append(list, int32(j))
		}
	}
	diag := min(nb-1, (q+seqK-seqQ)/blk)
	if q+seqK-seqQ < 0 {
		diag = -1
	}
	switch pattern {
	case "sink":
		add(0)
		if nb > 0 {
			add(rng.IntN(nb))
		}
	case "local":
		add(diag)
		add(diag - 1)
	case "uniform":
		for _, j := range shared {
			add(int(j))
		}
	}
	// Fill up with random blocks (future ones included: causal masking
	// hides them), leaving some entries -1; full lists take min(topK, nb)
	// blocks.
	if full {
		// Among the blocks the query sees (all of them when not causal),
		// as a model's selection would pick them.
		vis := nb
		if causal {
			vis = diag + 1
		}
		for len(list) < min(topK, vis) {
			add(rng.IntN(vis))
		}
	}
	for n := rng.IntN(topK + 1); len(list) < n && nb > 0; {
		add(rng.IntN(nb))
		if rng.IntN(4) == 0 {
			break
		}
	}
	rng.Shuffle(len(list), func(a, b int) { list[a], list[b] = list[b], list[a] })
	for len(list) < topK {
		// -1 padding anywhere in the list.
		at := rng.IntN(len(list) + 1)
		list = slices.Insert(list, at, -1)
	}
	if !full && rng.IntN(16) == 0 {
		for i := range list {
			list[i] = -1 // a query with no block: fully masked rows
		}
	}
	return list
}

// build makes the problem: random values quantised to the case's dtypes,
// the q2k lists of the pattern, the planner's CSR and schedule.
func (c qmCase) build(t testing.TB, seed uint64) *qmProblem {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	nb := len(c.seqQ)
	cuQ, cuK := []int32{0}, []int32{0}
	for b := range nb {
		cuQ = append(cuQ, cuQ[b]+int32(c.seqQ[b]))
		cuK = append(cuK, cuK[b]+int32(c.seqK[b]))
	}
	totalQ, totalK := int(cuQ[nb]), int(cuK[nb])
	hq, d := c.hkv*c.qpk, c.d
	pr := &qmProblem{c: c}

	// Selections.
	q2k := make([]int32, c.hkv*totalQ*c.topK)
	for h := range c.hkv {
		for b := range nb {
			blocks := (c.seqK[b] + c.blk - 1) / c.blk
			var shared []int32
			for _, j := range rng.Perm(max(blocks, 1))[:min(c.topK, max(blocks, 1))] {
				shared = append(shared, int32(j))
			}
			for q := range c.seqQ[b] {
				list := qmSelect(rng, c.pattern, c.full, c.causal, q, c.seqQ[b], c.seqK[b], blocks, c.blk, c.topK, shared)
				copy(q2k[(h*totalQ+int(cuQ[b])+q)*c.topK:], list)
			}
		}
	}
	pr.q2k = q2k
	rows, err := plan.NewRows(cuK, c.blk)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := plan.BuildK2QCSR(nil, q2k, c.hkv, totalQ, c.topK, cuQ, cuK, c.blk)
	if err != nil {
		t.Fatal(err)
	}
	fp := plan.FwdParams{TotalQ: totalQ, Hkv: c.hkv, QheadPerKV: c.qpk, TopK: c.topK, BlkKV: c.blk, Workers: 2}
	sched, err := plan.BuildFwdSchedule(nil, csr, rows, cuQ, fp)
	if err != nil {
		t.Fatal(err)
	}

	// K/V layout: dense, or pages of blk tokens in shuffled order.
	kv := KVLayout{Hkv: c.hkv, CuK: cuK}
	kvRows := totalK * c.hkv
	if c.paged {
		cols := 1
		for _, n := range c.seqK {
			cols = max(cols, (n+c.blk-1)/c.blk)
		}
		perm := rng.Perm(nb * cols)
		pt := make([]int32, nb*cols)
		for i := range pt {
			pt[i] = int32(perm[i])
		}
		kv = KVLayout{Hkv: c.hkv, Paged: true, PageTable: pt, PTCols: cols, PageSize: c.blk, NHD: c.nhd}
		kvRows = nb * cols * c.hkv * c.blk
	}

	// Values: Q rows, then K and V rows in storage order.
	gen := func(n int, scale float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * scale)
		}
		return x
	}
	kGlobal := float32(0.75) // NVFP4: exact in bf16 products with the e2m1 and e4m3 factors
	vGlobal := float32(1.5)
	qop := qmOperand(t, c.qDtype, gen(totalQ*hq*d, 1), totalQ*hq, d, 1)
	kop := qmOperand(t, c.kvDtype, gen(kvRows*d, 1), kvRows, d, kGlobal)
	vop := qmOperand(t, c.kvDtype, gen(kvRows*d, 1), kvRows, d, vGlobal)
	outScale := float32(1)
	if c.kvDtype == NVFP4 {
		vop.Global, outScale = 1, vGlobal
	}
	pr.kvRows = kvRows
	seqK := make([]int32, nb)
	for b, n := range c.seqK {
		seqK[b] = int32(n)
	}
	pv := tile.RoundNone
	if c.qDtype == E4M3 {
		pv = tile.RoundE4M3 // FP8 Q: pv dtype FP8 (also with NVFP4 K/V)
	}
	pr.p = &Prefill{
		Q: qop, K: kop, V: vop, KV: kv, TotalQ: totalQ, HQ: hq, Hkv: c.hkv, D: d, CuQ: cuQ, SeqK: seqK,
		BlkKV: c.blk, Causal: c.causal, Scale: float32(1 / math.Sqrt(float64(d))), InvT: c.invT, PV: pv,
		TopK: c.topK, CSR: csr, Sched: sched, Partial: PartialBF16, OutputScale: outScale,
	}
	return pr
}

// qmOperand stores x ([rows][d]) in dtype (NVFP4 with global scale
// global).
func qmOperand(t testing.TB, dt Dtype, x []float32, rows, d int, global float32) Operand {
	t.Helper()
	o := Operand{Dtype: dt, D: d, Global: 1}
	switch dt {
	case BF16:
		o.BF16 = make([]lowp.BFloat16, len(x))
		for i, v := range x {
			o.BF16[i] = lowp.BF16(v)
		}
	case E4M3:
		o.E4M3 = make([]lowp.Float8E4M3FN, len(x))
		for i, v := range x {
			o.E4M3[i] = lowp.E4M3(v)
		}
	case NVFP4:
		var err error
		o.Packed, o.Scales, err = lowp.QuantizeNVFP4(x, rows, d, global)
		if err != nil {
			t.Fatal(err)
		}
		o.Global = global
	}
	return o
}

// qmDecode decodes o's rows with lowp's scalar conversions.
func qmDecode(o Operand, rows, d int) [][]float64 {
	out := make([][]float64, rows)
	row := make([]float32, d)
	for r := range out {
		out[r] = make([]float64, d)
		for c := range d {
			switch o.Dtype {
			case BF16:
				row[c] = o.BF16[r*d+c].Float32()
			case E4M3:
				row[c] = o.E4M3[r*d+c].Float32()
			}
		}
		if o.Dtype == NVFP4 {
			lowp.DequantizeNVFP4Row(row, o.Packed, o.Scales, r, d, o.Global)
		}
		for c := range d {
			out[r][c] = float64(row[c])
		}
	}
	return out
}

// qmRef is the float64 reference of one (query, head) row: O (output
// scale applied), LSE, temperature LSE and the largest |v| it saw.
type qmRef struct {
	o               []float64
	lse, tlse, vmax float64
}

// reference computes every row the plain way: the keys of the blocks the
// query's q2k list names (-1 skipped), below the sequence's key count and,
// when causal, at most q + seqK - seqQ; no CSR, schedule or kernel.
func (pr *qmProblem) reference() []qmRef {
	p, c := pr.p, pr.c
	// Q, K and V as stored, decoded by lowp's scalar conversions: K times
	// its NVFP4 global scale, V without it (OutputScale applies it).
	qv := qmDecode(p.Q, p.TotalQ*p.HQ, p.D)
	kdec, vdec := qmDecode(p.K, pr.kvRows, p.D), qmDecode(p.V, pr.kvRows, p.D)
	kb, vb := make([][][][]float64, len(c.seqK)), make([][][][]float64, len(c.seqK))
	for b := range c.seqK {
		kb[b], vb[b] = make([][][]float64, c.hkv), make([][][]float64, c.hkv)
		for h := range c.hkv {
			for tk := range c.seqK[b] {
				r := p.KV.Row(b, h, tk)
				kb[b][h] = append(kb[b][h], kdec[r])
				vb[b][h] = append(vb[b][h], vdec[r])
			}
		}
	}
	refs := make([]qmRef, p.TotalQ*p.HQ)
	for b := range c.seqQ {
		seqQ, seqK := c.seqQ[b], c.seqK[b]
		for qi := range seqQ {
			gq := int(p.CuQ[b]) + qi
			for hq := range p.HQ {
				h := hq / c.qpk
				var keys []int
				for _, j := range pr.q2k[(h*p.TotalQ+gq)*c.topK:][:c.topK] {
					for tk := int(j) * c.blk; j >= 0 && tk < (int(j)+1)*c.blk && tk < seqK; tk++ {
						if !c.causal || tk <= qi+seqK-seqQ {
							keys = append(keys, tk)
						}
					}
				}
				refs[gq*p.HQ+hq] = qmRow(qv[gq*p.HQ+hq], kb[b][h], vb[b][h], keys, float64(p.Scale), float64(p.InvT), float64(p.OutputScale))
			}
		}
	}
	return refs
}

// qmRow is softmax attention of q over keys, in float64.
func qmRow(q []float64, k, v [][]float64, keys []int, scale, invT, outScale float64) qmRef {
	r := qmRef{o: make([]float64, len(q)), lse: math.Inf(-1), tlse: math.Inf(-1)}
	if len(keys) == 0 {
		return r
	}
	s := make([]float64, len(keys))
	m := math.Inf(-1)
	for i, t := range keys {
		for c := range q {
			s[i] += q[c] * k[t][c]
		}
		s[i] *= scale
		m = math.Max(m, s[i])
	}
	if invT == 0 {
		invT = 1
	}
	sum, tsum := 0.0, 0.0
	for i, t := range keys {
		w := math.Exp(s[i] - m)
		sum += w
		tsum += math.Exp((s[i] - m) * invT)
		for c := range r.o {
			r.o[c] += w * v[t][c]
			r.vmax = math.Max(r.vmax, math.Abs(v[t][c]*outScale))
		}
	}
	for c := range r.o {
		r.o[c] *= outScale / sum
	}
	r.lse = m + math.Log(sum)
	r.tlse = m*invT + math.Log(tsum)
	return r
}

// qmTol is the allowed |O - reference| of a row: rel*|x| + abs*vmax.
//
//   - rel = 2^-8: the BF16 output rounding (half an ulp is 2^-9 relative;
//     doubled for the float32 arithmetic before it).
//   - abs: 2^-16 for float32 products (float32 accumulation over at most
//     a few hundred keys, far below 2^-16 relative to vmax); 2^-8 for a
//     call with bf16 products (BF16Products: the bf16 twin, or a bf16 tier
//     made active), which round P to bf16 (2^-9 relative per probability,
//     so at most 2^-9 * sum p|v| / sum p <= 2^-9 vmax, doubled).
//   - FP8 P rounding (pv dtype e4m3) adds 2^-4 + 2^-6: an e4m3 value has 3
//     mantissa bits, so each normal-range p is rounded within 2^-4 of
//     itself, at most 2^-4 vmax over the row; p below 2^-6 is subnormal in
//     e4m3 and rounded within 2^-10 absolute, errors of either sign whose
//     sum over the at most topK*blk (<= 512) keys of these cases stays
//     within 2^-6 of the row sum (which is >= 1: the maximum has p = 1).
//   - partials (KV-major path only): a BF16 partial is rounded to 2^-9
//     relative of its row, and the combine's weights sum to 1: 2^-8 vmax.
func qmTol(p *Prefill, partials bool) (rel, abs float64) {
	rel, abs = 0x1p-8, 0x1p-16
	if BF16Products(p.Q.Dtype, p.K.Dtype, p.V.Dtype) {
		abs = 0x1p-8
	}
	if p.PV == tile.RoundE4M3 {
		abs += 0x1p-4 + 0x1p-6
	}
	if partials {
		abs += 0x1p-8
	}
	return rel, abs
}

// lseTol is the allowed LSE error: 1e-3 relative to max(1, |lse|), as the
// other prefill tests (float32 scores; bf16 tiers round Q and K to bf16,
// which moves a score by at most 2^-8 of |q||k| scale).
const lseTol = 1e-3

// checkQM compares out with the reference rows; partials says that the
// KV-major path computed it (its partial rounding is allowed for).
func checkQM(t *testing.T, pr *qmProblem, refs []qmRef, out *Output, partials bool) {
	t.Helper()
	p := pr.p
	rel, abs := qmTol(p, partials)
	for r, ref := range refs {
		for c, x := range ref.o {
			got := float64(out.O[r*p.D+c].Float32())
			if math.IsNaN(got) || math.IsInf(got, 0) || math.Abs(got-x) > rel*math.Abs(x)+abs*ref.vmax {
				t.Fatalf("%v: row %d (query %d, head %d) col %d: O = %g, want %g (vmax %g)", pr.c, r, r/p.HQ, r%p.HQ, c, got, x, ref.vmax)
			}
		}
		checkLSE(t, pr, r, "LSE", float64(out.LSE[r]), ref.lse)
		if out.TLSE != nil {
			want := ref.tlse
			if p.InvT == 0 {
				want = ref.lse
			}
			checkLSE(t, pr, r, "TLSE", float64(out.TLSE[r]), want)
		}
	}
}

func checkLSE(t *testing.T, pr *qmProblem, r int, what string, got, want float64) {
	t.Helper()
	if math.IsInf(want, -1) != math.IsInf(got, -1) || !math.IsInf(want, -1) && math.Abs(got-want) > lseTol*math.Max(1, math.Abs(want)) {
		t.Fatalf("%v: row %d: %s = %g, want %g", pr.c, r, what, got, want)
	}
}

// runPath runs p on path with the given workers into a new output.
func runPath(p *Prefill, path PrefillPath, workers int, tlse bool) *Output {
	pool := NewPool(workers)
	defer pool.Close()
	out := newOutput(p.TotalQ*p.HQ, p.D)
	if tlse {
		out.TLSE = make([]float32, p.TotalQ*p.HQ)
	}
	p.Path = path
	RunPrefill(p, NewWorkspace(workers, p.D), pool, out)
	return out
}

// qmCases returns the shape matrix: every pattern, dtype combination and
// GQA ratio 1..16, blk 64 and 128, causal or not, dense or paged (HND and
// NHD pages), with and without temperature, on ragged batches with empty
// sequences.
func qmCases() []qmCase {
	patterns := []string{"sink", "local", "uniform", "random"}
	dtypes := [][2]Dtype{{BF16, BF16}, {E4M3, E4M3}, {BF16, E4M3}, {BF16, NVFP4}, {E4M3, NVFP4}}
	qpks := []int{1, 2, 3, 4, 8, 16}
	batches := [][2][]int{
		{{37, 0, 70}, {150, 40, 70}},
		{{130}, {130}},
		{{20, 9}, {5, 300}}, // seqK < seqQ: the first rows see nothing under causal
		{{0, 64, 1}, {64, 200, 129}},
	}
	var cs []qmCase
	for i := range 40 {
		dt := dtypes[i%len(dtypes)]
		qpk := qpks[i%len(qpks)]
		bt := batches[i%len(batches)]
		c := qmCase{
			seqQ: bt[0], seqK: bt[1], hkv: 1 + i%2, qpk: qpk, d: 64 << (i / 3 % 2),
			blk: 64 << (i / 2 % 2), topK: 2 + i%3, causal: i%4 != 1, paged: i%5 >= 2, nhd: i%5 == 4,
			qDtype: dt[0], kvDtype: dt[1], pattern: patterns[i/5%len(patterns)],
		}
		if i%3 == 0 {
			c.invT = 0.5
		}
		cs = append(cs, c)
	}
	return cs
}

// TestQueryMajorReference checks the query-major path against the float64
// reference on the shape matrix, on every tier this CPU has: bit-identical
// on 1 and 2 workers, and within the summed tolerances of the KV-major
// path on the same call.
func TestQueryMajorReference(t *testing.T) {
	cases := qmCases()
	if testing.Short() {
		cases = cases[:10]
	}
	for i, c := range cases {
		pr := c.build(t, uint64(i))
		refs := pr.reference()
		tlse := i%2 == 0
		for _, tier := range testTiers {
			t.Run(fmt.Sprintf("%d/%s", i, tier), func(t *testing.T) {
				useTier(t, tier)
				if tile.Tier() != tier {
					t.Fatalf("tier %s not active: %s", tier, tile.Tier())
				}
				before := PrefillRuns(PathQuery)
				got2 := runPath(pr.p, PathQuery, 2, tlse)
				if PrefillRuns(PathQuery) != before+1 {
					t.Fatal("the query-major path did not run")
				}
				checkQM(t, pr, refs, got2, false)
				got1 := runPath(pr.p, PathQuery, 1, tlse)
				if !slices.Equal(got1.O, got2.O) || !slices.EqualFunc(got1.LSE, got2.LSE, sameBits) || !slices.EqualFunc(got1.TLSE, got2.TLSE, sameBits) {
					t.Fatalf("%v: 1 and 2 workers differ", c)
				}
				kv := runPath(pr.p, PathKV, 2, tlse)
				checkQM(t, pr, refs, kv, true)
				compareQMKV(t, pr, refs, got2, kv)
			})
		}
	}
}

func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

// compareQMKV checks that the two paths agree directly: within the sum of
// their tolerances against the reference, with the row's largest |v| taken
// from the reference.
func compareQMKV(t *testing.T, pr *qmProblem, refs []qmRef, qm, kv *Output) {
	t.Helper()
	p := pr.p
	r1, a1 := qmTol(p, false)
	r2, a2 := qmTol(p, true)
	for r, ref := range refs {
		for c := range p.D {
			x, y := float64(qm.O[r*p.D+c].Float32()), float64(kv.O[r*p.D+c].Float32())
			if math.Abs(x-y) > (r1+r2)*math.Abs(y)+(a1+a2)*ref.vmax {
				t.Fatalf("%v: row %d col %d: query-major %g, KV-major %g", pr.c, r, c, x, y)
			}
		}
		if a, b := qm.LSE[r], kv.LSE[r]; math.IsInf(float64(a), -1) != math.IsInf(float64(b), -1) {
			t.Fatalf("%v: row %d: LSE %g (query-major) vs %g (KV-major)", pr.c, r, a, b)
		}
	}
}

// TestQueryMajorNoAllocs: once a workspace has run a call, further runs of
// the query-major path allocate nothing, and the path keeps no partials:
// its only buffer beyond the workers' scratch is the block table, bounded
// by qmSelBytes whatever total_q*topK is. Auto calls split between both
// paths allocate nothing either.
func TestQueryMajorNoAllocs(t *testing.T) {
	c := qmCase{seqQ: []int{300, 0, 200}, seqK: []int{300, 50, 400}, hkv: 2, qpk: 4, d: 64, blk: 64, topK: 4,
		causal: true, qDtype: BF16, kvDtype: E4M3, pattern: "random", invT: 0.5}
	pr := c.build(t, 5)
	p := pr.p
	p.Path = PathQuery
	pool := NewPool(2)
	defer pool.Close()
	ws := NewWorkspace(2, p.D)
	out := newOutput(p.TotalQ*p.HQ, p.D)
	out.TLSE = make([]float32, p.TotalQ*p.HQ)
	for range 3 {
		RunPrefill(p, ws, pool, out)
	}
	if a := warmAllocs(10, func() { RunPrefill(p, ws, pool, out) }); a != 0 {
		t.Fatalf("%v allocations per run", a)
	}
	pt := &ws.Partials
	if len(pt.F32)+len(pt.BF16)+len(pt.F16)+len(pt.E4M3)+len(pt.LSE) != 0 {
		t.Fatal("the query-major path allocated partials")
	}
	if 4*len(ws.sel) > qmSelBytes {
		t.Fatalf("block table of %d entries exceeds %d bytes", len(ws.sel), qmSelBytes)
	}
	// Auto, split between both paths (every tile with a future or
	// out-of-range entry query-major, the others KV-major, under lane
	// kernels slightly dearer than the block kernel and free partial rows).
	prev := costsOverride
	costsOverride = &slowLanes
	defer func() { costsOverride = prev }()
	useTier(t, "avx512")
	p.Path = PathAuto
	kv0, q0 := PrefillRuns(PathKV), PrefillRuns(PathQuery)
	for range 3 {
		RunPrefill(p, ws, pool, out)
	}
	if PrefillRuns(PathKV) != kv0+3 || PrefillRuns(PathQuery) != q0+3 {
		t.Fatal("auto did not run both paths")
	}
	if a := warmAllocs(10, func() { RunPrefill(p, ws, pool, out) }); a != 0 {
		t.Fatalf("auto: %v allocations per run", a)
	}
}

// TestQMWindow: the block table's window shrinks as Hkv*slots grows, so
// the table (with room for a window rounded up to a tile end) and the
// task list stay within qmSelBytes, and it never goes below one tile.
func TestQMWindow(t *testing.T) {
	for _, tc := range []struct{ totalQ, hkv, qpk, slots int }{
		{1 << 20, 1, 16, 16}, {1 << 20, 8, 4, 64}, {100, 1, 1, 2}, {1 << 20, 64, 1, 127}, {1 << 22, 1, 16, 1},
	} {
		p := &Prefill{TotalQ: tc.totalQ, Hkv: tc.hkv, HQ: tc.hkv * tc.qpk}
		w := qmWindow(p, tc.slots)
		one := qmTileTokens(tc.qpk) // tokens of one tile
		rows := w + one - 1         // the table's rows: windows end at tile ends
		if w < one || w > max(tc.totalQ, one) || 4*tc.hkv*rows*tc.slots > max(qmSelBytes, 4*tc.hkv*tc.slots*(2*one-1)) || 16*tc.hkv*rows > max(qmSelBytes, 16*tc.hkv*(2*one-1)) {
			t.Errorf("%+v: window %d", tc, w)
		}
	}
}

// TestQueryMajorWindows: a call spanning several block-table windows
// (sequences cut at window boundaries) gives the same bits as one window.
func TestQueryMajorWindows(t *testing.T) {
	c := qmCase{seqQ: []int{700, 333}, seqK: []int{900, 333}, hkv: 1, qpk: 2, d: 64, blk: 64, topK: 3,
		causal: true, qDtype: BF16, kvDtype: BF16, pattern: "local"}
	pr := c.build(t, 9)
	want := runPath(pr.p, PathQuery, 2, false)
	prev := qmWindowOverride
	qmWindowOverride = 100
	defer func() { qmWindowOverride = prev }()
	got := runPath(pr.p, PathQuery, 2, false)
	if !slices.Equal(got.O, want.O) || !slices.EqualFunc(got.LSE, want.LSE, sameBits) {
		t.Fatal("windows of 100 queries changed the result")
	}
	checkQM(t, pr, pr.reference(), got, false)
}

// TestPrefillPathParse covers the MSA_PREFILL_PATH values.
func TestPrefillPathParse(t *testing.T) {
	for s, want := range map[string]PrefillPath{"": PathAuto, "auto": PathAuto, "query": PathQuery, "kv": PathKV, "bogus": PathAuto, "KV": PathAuto} {
		if got := pathFromEnv(s); got != want {
			t.Errorf("pathFromEnv(%q) = %v, want %v", s, got, want)
		}
	}
	if _, err := ParsePrefillPath("bogus"); err == nil {
		t.Error("ParsePrefillPath(bogus) succeeded")
	}
}

// TestPrefillPathEnv runs a child test process per tier this CPU has with
// MSA_CPU_TIER and MSA_PREFILL_PATH set: the child must come up on that
// tier and path (read once at start-up), run a call that leaves
// Prefill.Path at PathDefault on the query-major path, and match the
// reference.
func TestPrefillPathEnv(t *testing.T) {
	if os.Getenv("MSA_ATTN_CHILD") == "1" {
		c := qmCase{seqQ: []int{40, 9}, seqK: []int{100, 200}, hkv: 2, qpk: 3, d: 64, blk: 64, topK: 3,
			causal: true, qDtype: E4M3, kvDtype: E4M3, pattern: "sink"}
		pr := c.build(t, 3)
		before := PrefillRuns(PathQuery)
		pool := NewPool(2)
		defer pool.Close()
		out := newOutput(pr.p.TotalQ*pr.p.HQ, pr.p.D)
		RunPrefill(pr.p, NewWorkspace(2, pr.p.D), pool, out)
		checkQM(t, pr, pr.reference(), out, false)
		fmt.Printf("TIER=%s PATH=%s QUERY_RUNS=%d\n", tile.Tier(), ProcessPrefillPath(), PrefillRuns(PathQuery)-before)
		return
	}
	prev := tile.TierSetting()
	defer func() { _ = tile.SetTier(prev) }()
	ran := 0
	for _, tier := range testTiers {
		if err := tile.SetTier(tier); err != nil {
			continue // not on this CPU
		}
		ran++
		cmd := exec.Command(os.Args[0], "-test.run=^TestPrefillPathEnv$", "-test.v")
		cmd.Env = append(os.Environ(), "MSA_ATTN_CHILD=1", tile.EnvTier+"="+tier, EnvPrefillPath+"=query")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child (%s): %v\n%s", tier, err, out)
		}
		if want := fmt.Sprintf("TIER=%s PATH=query QUERY_RUNS=1\n", tier); !strings.Contains(string(out), want) {
			t.Errorf("child (%s): want %q in\n%s", tier, want, out)
		}
	}
	t.Logf("%d tiers checked in child processes", ran)
}

// slowLanes are costs for tests whose expectations must not move with the
// measured constants: lane kernels 5% dearer than the block kernel per
// (row, key) and no cost but keys on either path (rate 1.05), so a
// one-token tile takes the query-major path only where some of its
// entries are blocks its token does not see.
var slowLanes = pathCosts{QMKey: 1.05, KVKey: 1, Staged: 2}

// TestTileChoiceVerdict checks the model's verdict on single tiles and
// the factor its debug string names: lanes wasted on blocks only some
// tokens selected, the kernels' rates, K/V decoded per tile, and entries
// no token sees; and the verdicts the measured constants give one-token
// tiles with no lane wasted (16 query heads per KV head), which follow
// from their rates (cost.go): at 64-key blocks the partial rows the
// KV-major path writes outweigh the lane kernels' extra time on every
// measured tier; at 128-key blocks avx512bf16's bf16 block kernel wins
// (rate 1.05).
func TestTileChoiceVerdict(t *testing.T) {
	dear := pathCosts{QMKey: 1, KVKey: 1, KVSlot: 16, Staged: 2} // rate 0.8 at n 64
	// Faster lane kernels whose per-block work per lane row is dear: rate
	// 0.9 + 16/64 = 1.15 at n 64, 0.9 without the per-block term.
	blockDear := pathCosts{QMKey: 0.9, QMSlot: 16, KVKey: 1, Staged: 2}
	for _, tc := range []struct {
		name                        string
		m                           pathCosts
		entries, union, tokens, qpk int
		n                           float64
		staged                      bool
		want                        PrefillPath
		by                          string
	}{
		{"slow lanes", slowLanes, 16, 16, 1, 16, 64, false, PathKV, "decided by rate"}, // no lane wasted, lane kernels 1.05
		{"dear", dear, 16, 16, 1, 16, 64, false, PathQuery, "decided by rate"},         // partial rows dear
		{"dear", dear, 16, 16, 1, 16, 64, true, PathKV, "decided by rate (K/V decoded per tile)"},
		{"block dear", blockDear, 16, 16, 1, 16, 64, false, PathKV, "decided by rate"},
		{"block dear", blockDear, 16, 16, 1, 16, 1024, false, PathQuery, "decided by rate"},           // 0.916 at n 1024
		{"dear", dear, 64, 40, 16, 1, 64, false, PathKV, "decided by lanes"},                          // 16-token tile, unshared blocks: 10x
		{"dear", dear, 64, 3, 16, 1, 64, false, PathQuery, "decided by lanes"},                        // shared blocks: 0.75 x 0.8
		{"slow lanes", slowLanes, 16, 4, 1, 16, 64, false, PathQuery, "decided by lanes"},             // most entries unseen
		{"slow lanes", slowLanes, 3, 0, 1, 16, 64, false, PathQuery, "decided by lanes"},              // nothing visible
		{"avx2", avx2Costs, 16, 16, 1, 16, 64, false, PathQuery, "decided by rate"},                   // rate 0.93
		{"avx512", avx512Costs, 16, 16, 1, 16, 64, false, PathQuery, "decided by rate"},               // rate 0.95
		{"avx512", avx512Costs, 16, 16, 1, 16, 128, false, PathKV, "decided by rate"},                 // rate 1.04
		{"avx512 scores", avx512ScoresCosts, 16, 16, 1, 16, 128, false, PathQuery, "decided by rate"}, // rate 0.92
		{"avx512 scores", avx512ScoresCosts, 16, 16, 1, 16, 64, false, PathQuery, "decided by rate"},  // rate 0.82
		{"avx512bf16", avx512bf16Costs, 16, 16, 1, 16, 64, false, PathQuery, "decided by rate"},       // rate 0.96
		{"avx512bf16", avx512bf16Costs, 16, 16, 1, 16, 128, false, PathKV, "decided by rate"},         // rate 1.05
		{"avx512bf16", avx512bf16Costs, 16, 16, 1, 16, 128, true, PathKV, "decided by rate (K/V decoded per tile)"},
		{"amxbf16", amxbf16Costs, 16, 16, 1, 16, 64, false, PathKV, "decided by rate"}, // unmeasured: rate 2.1
	} {
		c := choose(&tc.m, tc.entries, tc.union, tc.tokens, tc.qpk, tc.n, tc.staged)
		s := c.String()
		if pathOf(c) != tc.want || !strings.HasSuffix(s, tc.by) || !strings.HasPrefix(s, tc.want.String()+":") {
			t.Errorf("%s %+v: %s, want %v %s", tc.name, tc, s, tc.want, tc.by)
		}
	}
}

// TestTierCosts: each tier this CPU has weighs the paths with its own
// constants (the emulated bf16 tier with avx512bf16's), and the tiers'
// constants differ where their kernels do.
func TestTierCosts(t *testing.T) {
	want := map[string]*pathCosts{"avx2": &avx2Costs, "avx512": &avx512Costs, "avx512bf16": &avx512bf16Costs,
		"avx512bf16-emulated": &avx512bf16Costs, "amxbf16": &amxbf16Costs}
	for tier, w := range want {
		t.Run(tier, func(t *testing.T) {
			useTier(t, tier) // skips the tiers this CPU lacks
			if got := tierCostsOf(tile.Tier()); got != w {
				t.Errorf("costs %+v, want %+v", *got, *w)
			}
		})
	}
	if avx2Costs == avx512Costs || avx512Costs == avx512bf16Costs {
		t.Error("tiers share constants")
	}
}

// TestCallCosts: on the avx512 tier, where the lane kernels take
// VDPBF16PS scores (tile.LanesBF16Scores), a call with BF16 Q and K weighs
// its tiles with avx512ScoresCosts and runs them (the query-major result
// differs in some bit from the float32 Q.K kernels'); other dtypes and
// the benchmarks' switch keep avx512's constants and kernels.
func TestCallCosts(t *testing.T) {
	useTier(t, "avx512")
	if !tile.LanesBF16Scores(64) {
		t.Skip("no VDPBF16PS scores on this CPU's avx512 lane kernels")
	}
	c := qmCase{seqQ: []int{100}, seqK: []int{100}, hkv: 1, qpk: 16, d: 64, blk: 64, topK: 2,
		causal: true, qDtype: BF16, kvDtype: BF16, pattern: "local", full: true}
	pr := c.build(t, 5)
	if got := callCosts(pr.p); got != &avx512ScoresCosts {
		t.Errorf("BF16 Q and K: costs %+v, want avx512ScoresCosts", *got)
	}
	got := runPath(pr.p, PathQuery, 2, true)
	checkQM(t, pr, pr.reference(), got, false)
	defer func(f bool) { qmNoBF16Scores = f }(qmNoBF16Scores)
	qmNoBF16Scores = true
	if got := callCosts(pr.p); got != &avx512Costs {
		t.Errorf("qmNoBF16Scores: costs %+v, want avx512Costs", *got)
	}
	if f32 := runPath(pr.p, PathQuery, 2, true); slices.Equal(f32.O, got.O) {
		t.Error("VDPBF16PS scores gave the float32 kernels' bits: not taken")
	}
	qmNoBF16Scores = false
	c.kvDtype = E4M3
	if got := callCosts(c.build(t, 5).p); got != &avx512Costs {
		t.Errorf("E4M3 K: costs %+v, want avx512Costs", *got)
	}
}

// tileStats returns, for every tile (KV head h, sequence b, tile i cut
// from the sequence's first token) of a built problem, its entries and its
// union of visible blocks, computed from the q2k lists the plain way.
func tileStats(pr *qmProblem) map[[3]int][2]int {
	p, c := pr.p, pr.c
	tok := qmTileTokens(c.qpk)
	st := map[[3]int][2]int{}
	for h := range c.hkv {
		for b := range c.seqQ {
			seqQ, seqK := c.seqQ[b], c.seqK[b]
			for t0 := 0; t0 < seqQ; t0 += tok {
				n := min(tok, seqQ-t0)
				lim := seqK
				if c.causal {
					lim = min(lim, t0+n-1+seqK-seqQ+1)
				}
				entries, seen := 0, map[int32]bool{}
				for q := t0; q < t0+n; q++ {
					for _, j := range pr.q2k[(h*p.TotalQ+int(p.CuQ[b])+q)*c.topK:][:c.topK] {
						if j >= 0 {
							entries++
							if int(j)*c.blk < lim {
								seen[j] = true
							}
						}
					}
				}
				st[[3]int{h, b, t0 / tok}] = [2]int{entries, len(seen)}
			}
		}
	}
	return st
}

// autoChoices runs p with PathAuto on 2 workers under costs m and returns
// the recorded choice of every tile (true: KV-major) and the output.
func autoChoices(t *testing.T, pr *qmProblem, m *pathCosts) (map[[3]int]bool, *Output) {
	t.Helper()
	p := pr.p
	prev := costsOverride
	costsOverride = m
	defer func() { costsOverride = prev }()
	pool := NewPool(2)
	defer pool.Close()
	ws := NewWorkspace(2, p.D)
	out := newOutput(p.TotalQ*p.HQ, p.D)
	out.TLSE = make([]float32, p.TotalQ*p.HQ)
	p.Path = PathAuto
	RunPrefill(p, ws, pool, out)
	got := map[[3]int]bool{}
	tok := qmTileTokens(pr.c.qpk)
	for h := range pr.c.hkv {
		for b := range pr.c.seqQ {
			for q := 0; q < pr.c.seqQ[b]; q += tok {
				got[[3]int{h, b, q / tok}] = ws.tileKV[ws.tileIndex(h, b, q)]
			}
		}
	}
	return got, out
}

// TestAutoPerTile checks auto's choice per query tile on the sink, local,
// uniform and random selection patterns at GQA 16, 4 and 1 (tiles of 1, 4
// and 16 tokens), against the model applied to each tile's lists counted
// the plain way (tileStats): with lane kernels slightly dearer than the
// block kernel and free partial rows (slowLanes), with the measured avx512
// constants, with partial rows made dear, and with a threshold at the
// median tile, which splits a call between both paths. Whole-pattern
// expectations: one-token tiles keep the KV-major path under slowLanes
// where their token sees every block it selected (the lists of early
// tokens also select future blocks, which cost the KV-major path rows and
// the query-major path nothing) and take the query-major one when partial
// rows are dear, and under the measured avx512 constants, whose rate at
// these 64-key blocks is 0.95 (the partial rows outweigh the lane
// kernels' extra time); most 16-token tiles of random lists waste lanes and stay
// KV-major even then, while most local ones (neighbouring tokens select
// the same blocks) go query-major.
func TestAutoPerTile(t *testing.T) {
	useTier(t, "avx512")
	dear := pathCosts{QMKey: 1, KVKey: 1, KVSlot: 16, Staged: 2}
	for _, g := range []struct{ hkv, qpk int }{{1, 16}, {2, 4}, {2, 1}} {
		for _, pattern := range []string{"sink", "local", "uniform", "random"} {
			// topK 2: a local list is the diagonal block and the one before.
			c := qmCase{seqQ: []int{1000, 0, 77}, seqK: []int{1000, 20, 500}, hkv: g.hkv, qpk: g.qpk, d: 64, blk: 64, topK: 2,
				causal: true, qDtype: BF16, kvDtype: BF16, pattern: pattern, full: true}
			pr := c.build(t, 3)
			st := tileStats(pr)
			var wastes []float64
			for _, x := range st {
				wastes = append(wastes, choose(&dear, x[0], x[1], qmTileTokens(g.qpk), g.qpk, 64, false).Waste)
			}
			slices.Sort(wastes)
			median := pathCosts{QMKey: 1 / wastes[len(wastes)/2], KVKey: 1, Staged: 2}
			for name, m := range map[string]*pathCosts{"slowlanes": &slowLanes, "measured": &avx512Costs, "dear": &dear, "median": &median} {
				t.Run(fmt.Sprintf("qpk%d/%s/%s", g.qpk, pattern, name), func(t *testing.T) {
					got, _ := autoChoices(t, pr, m)
					kvTiles, seenAll, seenAllKV := 0, 0, 0
					for k, x := range st {
						want := choose(m, x[0], x[1], qmTileTokens(g.qpk), g.qpk, 64, false)
						if got[k] != !want.Query() {
							t.Fatalf("tile %v: KV-major %v, want %s", k, got[k], want)
						}
						if got[k] {
							kvTiles++
						}
						if x[0] == x[1] {
							seenAll++
							if got[k] {
								seenAllKV++
							}
						}
					}
					switch {
					case g.qpk == 16 && name == "slowlanes" && (seenAllKV != seenAll || seenAll == 0):
						t.Errorf("%d of %d one-token tiles that see all their blocks query-major under slow lanes", seenAll-seenAllKV, seenAll)
					case g.qpk == 16 && (name == "dear" || name == "measured") && kvTiles != 0:
						t.Errorf("%d of %d one-token tiles KV-major with %s partial rows", kvTiles, len(st), name)
					case g.qpk == 1 && name == "dear" && pattern == "random" && 2*kvTiles < len(st):
						t.Errorf("only %d of %d random 16-token tiles KV-major", kvTiles, len(st))
					case g.qpk == 1 && name == "dear" && pattern == "local" && 2*kvTiles > len(st):
						t.Errorf("%d of %d local 16-token tiles KV-major", kvTiles, len(st))
					}
				})
			}
		}
	}
}

// TestAutoGeneric: where the lane kernels have no SIMD code auto does not
// weigh the paths: every call runs the KV-major path alone, even under
// costs that would give every tile to the query-major path.
func TestAutoGeneric(t *testing.T) {
	useTier(t, "generic")
	c := qmCase{seqQ: []int{100}, seqK: []int{100}, hkv: 1, qpk: 16, d: 64, blk: 64, topK: 2,
		causal: true, qDtype: BF16, kvDtype: BF16, pattern: "local", full: true}
	pr := c.build(t, 2)
	prev := costsOverride
	costsOverride = &pathCosts{QMKey: 1e-3, KVKey: 1, Staged: 1}
	defer func() { costsOverride = prev }()
	kv0, q0 := PrefillRuns(PathKV), PrefillRuns(PathQuery)
	out := runAuto(pr.p, 2, 0)
	if PrefillRuns(PathKV) != kv0+1 || PrefillRuns(PathQuery) != q0 {
		t.Fatal("auto on the generic tier did not run the KV-major path alone")
	}
	checkQM(t, pr, pr.reference(), out, true)
}

// runAuto runs p with PathAuto on the given workers into a new output
// (with TLSE), the KV-major part in query windows of fixedWin (0: its
// own).
func runAuto(p *Prefill, workers, fixedWin int) *Output {
	pool := NewPool(workers)
	defer pool.Close()
	ws := NewWorkspace(workers, p.D)
	ws.fixedWin = fixedWin
	out := newOutput(p.TotalQ*p.HQ, p.D)
	out.TLSE = make([]float32, p.TotalQ*p.HQ)
	p.Path = PathAuto
	RunPrefill(p, ws, pool, out)
	return out
}

// TestAutoMixed runs calls that auto splits between the paths (the model's
// threshold at the median tile) on the shape matrix, on every tier with
// SIMD lane kernels this CPU has: each row has the bits of the path that
// its tile took (the same call run on that path alone), on 1 and 2
// workers and with small query windows on both parts, and the call counts
// as a run of both paths.
func TestAutoMixed(t *testing.T) {
	cases := qmCases()
	if testing.Short() {
		cases = cases[:10]
	}
	mixedCalls, weighed := 0, 0
	defer func() {
		// Where no tier has SIMD lane kernels (-tags purego, other
		// architectures) every subtest skips: nothing was weighed.
		if weighed > 0 && mixedCalls == 0 {
			t.Error("no call ran both paths")
		}
	}()
	for i, c := range cases {
		pr := c.build(t, uint64(100+i))
		st := tileStats(pr)
		var wastes []float64
		for _, x := range st {
			wastes = append(wastes, choose(&slowLanes, x[0], x[1], qmTileTokens(c.qpk), c.qpk, float64(c.blk), false).Waste)
		}
		slices.Sort(wastes)
		m := &pathCosts{QMKey: 1 / wastes[len(wastes)/2], KVKey: 1, Staged: 1}
		if stagedCall(pr.p) {
			continue // the threshold above assumes no Staged factor
		}
		refs := pr.reference()
		for _, tier := range testTiers[1:] {
			t.Run(fmt.Sprintf("%d/%s", i, tier), func(t *testing.T) {
				useTier(t, tier)
				if !weighs(pr.p) {
					t.Skip("no SIMD lane kernels: auto does not weigh")
				}
				weighed++
				qm := runPath(pr.p, PathQuery, 2, true)
				kv := runPath(pr.p, PathKV, 2, true)
				kv0, q0 := PrefillRuns(PathKV), PrefillRuns(PathQuery)
				choice, got := autoChoices(t, pr, m)
				mixed := PrefillRuns(PathKV) == kv0+1 && PrefillRuns(PathQuery) == q0+1
				prev, prevOverride := costsOverride, qmWindowOverride
				costsOverride, qmWindowOverride = m, 7
				defer func() { costsOverride, qmWindowOverride = prev, prevOverride }()
				small := runAuto(pr.p, 1, 0)
				if s2 := runAuto(pr.p, 1, 5); !slices.Equal(s2.O, small.O) || !slices.EqualFunc(s2.LSE, small.LSE, sameBits) {
					t.Fatalf("%v: a KV-major window of 5 queries changed the result", c)
				}
				p := pr.p
				kvTiles := 0
				for k, isKV := range choice {
					if isKV {
						kvTiles++
					}
					h, b, i := k[0], k[1], k[2]
					tok := qmTileTokens(c.qpk)
					for q := i * tok; q < min((i+1)*tok, c.seqQ[b]); q++ {
						for g := range c.qpk {
							r := (int(p.CuQ[b])+q)*p.HQ + h*c.qpk + g
							want := qm
							if isKV {
								want = kv
							}
							for _, o := range []*Output{got, small} {
								if !slices.Equal(o.O[r*p.D:(r+1)*p.D], want.O[r*p.D:(r+1)*p.D]) || !sameBits(o.LSE[r], want.LSE[r]) || !sameBits(o.TLSE[r], want.TLSE[r]) {
									t.Fatalf("%v: row %d (tile %v, KV-major %v) differs from its path's", c, r, k, isKV)
								}
							}
						}
					}
				}
				checkQM(t, pr, refs, got, true)
				if mixed {
					mixedCalls++
				}
				if kvTiles > 0 && kvTiles < len(choice) && !mixed {
					t.Errorf("%v: %d of %d tiles KV-major, but the call did not count as both paths", c, kvTiles, len(choice))
				}
			})
		}
	}
}

// TestQueryMajorCache runs calls whose K/V go through the block cache
// (qmcache.go: rows one KV head apart, NVFP4) with the cache's capacity
// at its default, at a few blocks (KV heads in groups) and at one block
// (every head too large: decoded per tile), on every tier this CPU has.
// Every run matches the reference; BF16 and E4M3 rows, copied into the
// cache, give the same bits at every capacity, and so do NVFP4 rows with
// power-of-two global scales, which fold into the score scale (K) and the
// output factor (V) exactly.
func TestQueryMajorCache(t *testing.T) {
	cases := []qmCase{
		{seqQ: []int{150, 0, 90}, seqK: []int{300, 40, 90}, hkv: 3, qpk: 2, d: 64, blk: 64, topK: 3,
			causal: true, qDtype: BF16, kvDtype: BF16, pattern: "random", invT: 0.5},
		{seqQ: []int{200}, seqK: []int{260}, hkv: 2, qpk: 16, d: 64, blk: 64, topK: 4,
			causal: true, paged: true, nhd: true, qDtype: E4M3, kvDtype: E4M3, pattern: "uniform"},
		{seqQ: []int{130, 70}, seqK: []int{130, 300}, hkv: 2, qpk: 4, d: 128, blk: 64, topK: 3,
			causal: true, qDtype: BF16, kvDtype: NVFP4, pattern: "local"},
		{seqQ: []int{96}, seqK: []int{200}, hkv: 1, qpk: 8, d: 64, blk: 128, topK: 2,
			causal: false, qDtype: E4M3, kvDtype: NVFP4, pattern: "sink"},
	}
	prev := qmCacheSlotsOverride
	defer func() { qmCacheSlotsOverride = prev }()
	for i, c := range cases {
		pr := c.build(t, uint64(40+i))
		if !needsCache(pr.p) {
			t.Fatalf("%v: does not use the cache", c)
		}
		exact := c.kvDtype != NVFP4
		if !exact && i == 3 {
			// Requantise K with global 0.5 and V with global 2 (OutputScale
			// stays 1.5): both folds are exact.
			pr.p.K = qmOperand(t, NVFP4, qmFloats(pr.p.K, pr.kvRows), pr.kvRows, c.d, 0.5)
			pr.p.V = qmOperand(t, NVFP4, qmFloats(pr.p.V, pr.kvRows), pr.kvRows, c.d, 2)
			exact = true
		}
		refs := pr.reference()
		for _, tier := range testTiers {
			t.Run(fmt.Sprintf("%d/%s", i, tier), func(t *testing.T) {
				useTier(t, tier)
				var want *Output
				for _, slots := range []int{0, 3, 1} {
					qmCacheSlotsOverride = slots
					got := runPath(pr.p, PathQuery, 2, true)
					checkQM(t, pr, refs, got, false)
					if want == nil {
						want = got
					} else if exact && (!slices.Equal(got.O, want.O) || !slices.EqualFunc(got.LSE, want.LSE, sameBits)) {
						t.Fatalf("%v: a cache of %d blocks changed the result", c, slots)
					}
				}
			})
		}
	}
}

// qmFloats returns o's rows decoded to float32 (rows x D).
func qmFloats(o Operand, rows int) []float32 {
	x := make([]float32, 0, rows*o.D)
	for _, r := range qmDecode(o, rows, o.D) {
		for _, v := range r {
			x = append(x, float32(v))
		}
	}
	return x
}

// TestQMCacheGroups checks how the cache groups KV heads: from the first
// head on, as many as fit its capacity together, at least one, and a
// head whose blocks alone exceed it runs without the cache; the slots of
// a group are dense and every listed block is one the slot table names.
func TestQMCacheGroups(t *testing.T) {
	c := qmCase{seqQ: []int{256}, seqK: []int{256}, hkv: 4, qpk: 1, d: 64, blk: 64, topK: 4,
		causal: false, paged: true, nhd: true, qDtype: BF16, kvDtype: BF16, pattern: "random", full: true}
	p := c.build(t, 7).p
	ws := NewWorkspace(1, p.D)
	ws.sel = grow(ws.sel, p.Hkv*p.TotalQ*p.TopK)
	ws.win, ws.slots, ws.w0, ws.w1 = p.TotalQ, p.TopK, 0, p.TotalQ
	ws.scatterWindow(p)
	cc := &ws.cache
	cc.start(p, 1)
	ws.markWindow(p)
	for h, n := range cc.counts {
		if n != 4 {
			t.Fatalf("head %d: %d blocks marked, want all 4", h, n)
		}
	}
	for _, tc := range []struct {
		slots  int
		groups [][2]int
		on     []bool
	}{
		{16, [][2]int{{0, 4}}, []bool{true}},
		{9, [][2]int{{0, 2}, {2, 4}}, []bool{true, true}},
		{4, [][2]int{{0, 1}, {1, 2}, {2, 3}, {3, 4}}, []bool{true, true, true, true}},
		{3, [][2]int{{0, 1}, {1, 2}, {2, 3}, {3, 4}}, []bool{false, false, false, false}},
	} {
		cc.slots = tc.slots
		var groups [][2]int
		var on []bool
		for h0 := 0; h0 < p.Hkv; h0 = cc.h1 {
			ws.markWindow(p)
			cc.group(p, h0)
			groups = append(groups, [2]int{cc.h0, cc.h1})
			on = append(on, cc.on)
			for i, x := range cc.todo {
				if x.s != int32(i) || cc.pt[(int(x.h)*1+int(x.b))*cc.cols+int(x.j)] != x.s {
					t.Fatalf("slots %d: block %d: %+v", tc.slots, i, x)
				}
			}
			if cc.on && len(cc.todo) != 4*(cc.h1-cc.h0) {
				t.Fatalf("slots %d: %d blocks listed for heads [%d, %d)", tc.slots, len(cc.todo), cc.h0, cc.h1)
			}
		}
		if !slices.Equal(groups, tc.groups) || !slices.Equal(on, tc.on) {
			t.Errorf("slots %d: groups %v on %v, want %v %v", tc.slots, groups, on, tc.groups, tc.on)
		}
	}
}

// TestQueryMajorCacheNaN: a NaN among NVFP4 K's block scales (e4m3fn
// 0x7f) reaches the tiles through the block cache as it does decoded per
// tile: the rows that see it are masked the same way, bit for bit.
func TestQueryMajorCacheNaN(t *testing.T) {
	c := qmCase{seqQ: []int{96}, seqK: []int{200}, hkv: 1, qpk: 8, d: 64, blk: 64, topK: 2,
		causal: true, qDtype: BF16, kvDtype: NVFP4, pattern: "local"}
	pr := c.build(t, 8)
	p := pr.p
	p.K = qmOperand(t, NVFP4, qmFloats(p.K, pr.kvRows), pr.kvRows, c.d, 0.5)
	p.K.Scales[lowp.Scale128x4Offset(90, 1, c.d/16)] = 0x7f // key 90: a NaN block scale
	prev := qmCacheSlotsOverride
	defer func() { qmCacheSlotsOverride = prev }()
	for _, tier := range testTiers {
		t.Run(tier, func(t *testing.T) {
			useTier(t, tier)
			qmCacheSlotsOverride = 0
			cached := runPath(p, PathQuery, 2, false)
			qmCacheSlotsOverride = 1
			decoded := runPath(p, PathQuery, 2, false)
			masked := 0
			for r, l := range cached.LSE {
				if math.IsInf(float64(l), -1) {
					masked++
				}
				if !sameBits(l, decoded.LSE[r]) {
					t.Fatalf("row %d: LSE %g cached, %g decoded per tile", r, l, decoded.LSE[r])
				}
			}
			if !slices.Equal(cached.O, decoded.O) || masked == 0 {
				t.Fatalf("outputs differ or no row masked (%d)", masked)
			}
		})
	}
}

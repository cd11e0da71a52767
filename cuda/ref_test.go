package cuda

// Host-side test data and a float64 reference of contract §4, 5 and 7, shared by
// the GPU tests (build tag cuda). No cgo: this file is built and vetted in the
// default build too, and TestReferenceSelfCheck exercises it on the CPU.

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
)

// kvStore holds K or V (or Q) both encoded (what the GPU reads) and decoded
// (float32 rows, what the reference reads). Row r is the flattened leading
// index: dense (token*H + h), paged ((page*H + h)*pageSize + i).
type kvStore struct {
	dtype  Dtype
	rows   int
	d      int
	enc    []byte    // bf16 LE / e4m3 / packed nvfp4
	scales []byte    // nvfp4 block scales (128x4 layout)
	gscale float32   // nvfp4 global scale (1 otherwise)
	dec    []float32 // [rows][d]
}

func newStore(rng *rand.Rand, dtype Dtype, rows, d int, amp float32) *kvStore {
	s := &kvStore{dtype: dtype, rows: rows, d: d, gscale: 1, dec: make([]float32, rows*d)}
	x := make([]float32, rows*d)
	for i := range x {
		x[i] = (rng.Float32()*2 - 1) * amp
	}
	switch dtype {
	case BF16:
		s.enc = make([]byte, 2*len(x))
		for i, f := range x {
			b := lowp.BF16(f)
			binary.LittleEndian.PutUint16(s.enc[2*i:], uint16(b))
			s.dec[i] = b.Float32()
		}
	case E4M3:
		s.enc = make([]byte, len(x))
		for i, f := range x {
			b := lowp.E4M3Sat(f)
			s.enc[i] = uint8(b)
			s.dec[i] = b.Float32()
		}
	case NVFP4:
		s.gscale = 0.75
		packed, scales, err := lowp.QuantizeNVFP4(x, rows, d, s.gscale)
		if err != nil {
			panic(err)
		}
		s.enc, s.scales = packed, scales
		for r := 0; r < rows; r++ {
			lowp.DequantizeNVFP4Row(s.dec[r*d:(r+1)*d], packed, scales, r, d, s.gscale)
		}
	default:
		panic("newStore: dtype")
	}
	return s
}

func (s *kvStore) row(r int) []float32 { return s.dec[r*s.d : (r+1)*s.d] }

// prefillCase is one sparse prefill problem.
type prefillCase struct {
	name               string
	cuQ, cuK           []int32
	hkv, qhpk, d, topK int
	blk                int
	causal             bool
	paged              bool
	pageSize, maxPages int
	pageTable          []int32 // [B][maxPages]
	numPages           int
	qd, kvd, pd        Dtype
	round              Round
	temp               float32 // 0: no temperature LSE
	q, k, v            *kvStore
	q2k                []int32 // [hkv][totalQ][topK]
	csr                *plan.CSR
	sched              *plan.FwdSchedule
	totalQ, hq         int
	scale              float32
	tolO, tolLSE       float64
}

func (c *prefillCase) seqK(b int) int { return int(c.cuK[b+1] - c.cuK[b]) }
func (c *prefillCase) seqQ(b int) int { return int(c.cuQ[b+1] - c.cuQ[b]) }

// kRow is the store row of (sequence b, local token t, kv head h).
func (c *prefillCase) kRow(b, t, h int) int {
	if c.paged {
		page := int(c.pageTable[b*c.maxPages+t/c.pageSize])
		return (page*c.hkv+h)*c.pageSize + t%c.pageSize
	}
	return (int(c.cuK[0])+int(c.cuK[b]-c.cuK[0])+t)*c.hkv + h
}

func genPrefill(t testing.TB, c *prefillCase, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	B := len(c.cuQ) - 1
	c.totalQ = int(c.cuQ[B])
	c.hq = c.hkv * c.qhpk
	c.scale = float32(1 / math.Sqrt(float64(c.d)))
	c.q = newStore(rng, c.qd, c.totalQ*c.hq, c.d, 1.5)
	kvRows := int(c.cuK[B]) * c.hkv
	if c.paged {
		c.maxPages = 0
		for b := 0; b < B; b++ {
			c.maxPages = max(c.maxPages, (c.seqK(b)+c.pageSize-1)/c.pageSize)
		}
		c.numPages = B*c.maxPages + 3
		perm := rng.Perm(c.numPages)
		c.pageTable = make([]int32, B*c.maxPages)
		for i := range c.pageTable {
			c.pageTable[i] = int32(perm[i])
		}
		kvRows = c.numPages * c.hkv * c.pageSize
	}
	c.k = newStore(rng, c.kvd, kvRows, c.d, 1.5)
	c.v = newStore(rng, c.kvd, kvRows, c.d, 1)
	// q2k: each (head, query) picks up to topK distinct blocks of its sequence
	c.q2k = make([]int32, c.hkv*c.totalQ*c.topK)
	for i := range c.q2k {
		c.q2k[i] = -1
	}
	for h := 0; h < c.hkv; h++ {
		for b := 0; b < B; b++ {
			nb := (c.seqK(b) + c.blk - 1) / c.blk
			for q := int(c.cuQ[b]); q < int(c.cuQ[b+1]); q++ {
				n := min(nb, 1+rng.IntN(c.topK))
				for j, blk := range rng.Perm(nb)[:n] {
					c.q2k[(h*c.totalQ+q)*c.topK+j] = int32(blk)
				}
			}
		}
	}
	rebuildSchedule(t, c)
}

// rebuildSchedule builds the CSR and forward schedule of c's selection q2k.
func rebuildSchedule(t testing.TB, c *prefillCase) {
	var err error
	c.csr, err = plan.BuildK2QCSR(nil, c.q2k, c.hkv, c.totalQ, c.topK, c.cuQ, c.cuK, c.blk)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := plan.NewRows(c.cuK, c.blk)
	if err != nil {
		t.Fatal(err)
	}
	c.sched, err = plan.BuildFwdSchedule(nil, c.csr, rows, c.cuQ, plan.FwdParams{
		TotalQ: c.totalQ, Hkv: c.hkv, QheadPerKV: c.qhpk, TopK: c.topK, BlkKV: c.blk, Workers: 132})
	if err != nil {
		t.Fatal(err)
	}
}

// attendRef computes softmax attention of query row qv against keys (store
// rows) in float64: natural-log LSE, normalised output, temperature LSE.
func attendRef(qv []float32, keys []int, k, v *kvStore, scale float64, temp float64) (o []float64, lse, tlse float64) {
	d := len(qv)
	o = make([]float64, d)
	if len(keys) == 0 {
		return o, math.Inf(-1), math.Inf(-1)
	}
	s := make([]float64, len(keys))
	m := math.Inf(-1)
	for i, r := range keys {
		kr := k.row(r)
		var acc float64
		for c := 0; c < d; c++ {
			acc += float64(qv[c]) * float64(kr[c])
		}
		s[i] = acc * scale
		m = math.Max(m, s[i])
	}
	var sum, tsum float64
	for i, r := range keys {
		p := math.Exp(s[i] - m)
		sum += p
		if temp > 0 {
			tsum += math.Exp((s[i] - m) / temp)
		}
		vr := v.row(r)
		for c := 0; c < d; c++ {
			o[c] += p * float64(vr[c])
		}
	}
	for c := range o {
		o[c] /= sum
	}
	lse = m + math.Log(sum)
	tlse = lse
	if temp > 0 {
		tlse = m/temp + math.Log(tsum)
	}
	return
}

// visibleKeys lists the store rows of the keys of block blk that query q
// (global row) of head h sees, and the batch of q.
func (c *prefillCase) visibleKeys(q, h, blk int) []int {
	b := 0
	for int(c.cuQ[b+1]) <= q {
		b++
	}
	ql := q - int(c.cuQ[b])
	lim := c.seqK(b)
	if c.causal {
		lim = min(lim, ql+c.seqK(b)-c.seqQ(b)+1)
	}
	var keys []int
	for t := blk * c.blk; t < min((blk+1)*c.blk, lim); t++ {
		keys = append(keys, c.kRow(b, t, h))
	}
	return keys
}

// refPrefill returns the combined output [totalQ][Hq][D], LSE and
// temperature LSE [totalQ][Hq] (V global scale included in v's decoding).
func (c *prefillCase) refPrefill() (o, lse, tlse []float64) {
	o = make([]float64, c.totalQ*c.hq*c.d)
	lse = make([]float64, c.totalQ*c.hq)
	tlse = make([]float64, c.totalQ*c.hq)
	for q := 0; q < c.totalQ; q++ {
		for hq := 0; hq < c.hq; hq++ {
			h := hq / c.qhpk
			var keys []int
			for j := 0; j < c.topK; j++ {
				if blk := c.q2k[(h*c.totalQ+q)*c.topK+j]; blk >= 0 {
					keys = append(keys, c.visibleKeys(q, h, int(blk))...)
				}
			}
			r := q*c.hq + hq
			ov, l, tl := attendRef(c.q.row(r), keys, c.k, c.v, float64(c.scale), float64(c.temp))
			copy(o[r*c.d:], ov)
			lse[r], tlse[r] = l, tl
		}
	}
	return
}

// decodeCase is one paged decode problem.
type decodeCase struct {
	name                      string
	batch, seqlenQ, hkv, qhpk int
	d, pageSize, maxPages     int
	seqused                   []int32
	pageTable                 []int32
	numPages                  int
	qd, kvd                   Dtype
	round                     Round
	fixedSplit                int
	topK, blk                 int     // sparse decode when topK > 0: q2k over blocks of blk tokens
	q2k                       []int32 // [hkv][batch*seqlenQ][topK], -1 = unused
	q, k, v                   *kvStore
	sched                     *plan.DecodeSchedule
	hq                        int
	scale                     float32
	tolO, tolLSE              float64
}

func genDecode(t testing.TB, c *decodeCase, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	c.hq = c.hkv * c.qhpk
	c.scale = float32(1 / math.Sqrt(float64(c.d)))
	c.maxPages = 1
	for _, s := range c.seqused {
		c.maxPages = max(c.maxPages, (int(s)+c.pageSize-1)/c.pageSize)
	}
	c.numPages = c.batch*c.maxPages + 1
	perm := rng.Perm(c.numPages)
	c.pageTable = make([]int32, c.batch*c.maxPages)
	for i := range c.pageTable {
		c.pageTable[i] = int32(perm[i])
	}
	c.q = newStore(rng, c.qd, c.batch*c.seqlenQ*c.hq, c.d, 1.5)
	c.k = newStore(rng, c.kvd, c.numPages*c.hkv*c.pageSize, c.d, 1.5)
	c.v = newStore(rng, c.kvd, c.numPages*c.hkv*c.pageSize, c.d, 1)
	var err error
	c.sched, err = plan.BuildDecodeSchedule(nil, c.seqused, plan.DecodeParams{
		Batch: c.batch, SeqlenQ: c.seqlenQ, HQ: c.hq, Hkv: c.hkv, PageSize: c.pageSize,
		Workers: 132, FixedSplitPages: c.fixedSplit, MaxPagesPerSeq: c.maxPages, Executor: plan.CUDAExecutor})
	if err != nil {
		t.Fatal(err)
	}
	if c.topK > 0 {
		// Sparse decode: each (KV head, query row) selects 0..topK distinct
		// blocks of its request in random slot order, -1 elsewhere (rows with
		// no block at all give O = 0, LSE = -inf).
		rows := c.batch * c.seqlenQ
		c.q2k = make([]int32, c.hkv*rows*c.topK)
		for i := range c.q2k {
			c.q2k[i] = -1
		}
		for h := 0; h < c.hkv; h++ {
			for r := 0; r < rows; r++ {
				nb := (int(c.seqused[r/c.seqlenQ]) + c.blk - 1) / c.blk
				n := min(nb, rng.IntN(c.topK+1))
				slots := rng.Perm(c.topK)
				for j, blk := range rng.Perm(nb)[:n] {
					c.q2k[(h*rows+r)*c.topK+slots[j]] = int32(blk)
				}
			}
		}
	}
}

// selectedBlocks returns the blocks q2k row (h, qrow) selected, ascending
// (nil for dense decode).
func (c *decodeCase) selectedBlocks(h, qrow int) []int {
	var out []int
	rows := c.batch * c.seqlenQ
	for _, j := range c.q2k[(h*rows+qrow)*c.topK : (h*rows+qrow+1)*c.topK] {
		if j >= 0 {
			out = append(out, int(j))
		}
	}
	sort.Ints(out)
	return out
}

func (c *decodeCase) refDecode() (o, lse []float64) {
	rows := c.batch * c.seqlenQ
	o = make([]float64, rows*c.hq*c.d)
	lse = make([]float64, rows*c.hq)
	for b := 0; b < c.batch; b++ {
		su := int(c.seqused[b])
		for i := 0; i < c.seqlenQ; i++ {
			lim := min(su, su-c.seqlenQ+i+1)
			for hq := 0; hq < c.hq; hq++ {
				h := hq / c.qhpk
				var keys []int
				add := func(t int) {
					page := int(c.pageTable[b*c.maxPages+t/c.pageSize])
					keys = append(keys, (page*c.hkv+h)*c.pageSize+t%c.pageSize)
				}
				if c.q2k == nil {
					for t := 0; t < lim; t++ {
						add(t)
					}
				} else {
					for _, j := range c.selectedBlocks(h, b*c.seqlenQ+i) {
						for t := j * c.blk; t < min((j+1)*c.blk, lim); t++ {
							add(t)
						}
					}
				}
				r := (b*c.seqlenQ+i)*c.hq + hq
				ov, l, _ := attendRef(c.q.row(r), keys, c.k, c.v, float64(c.scale), 0)
				copy(o[r*c.d:], ov)
				lse[r] = l
			}
		}
	}
	return
}

// compare reports the worst errors of got against want (|got-want| <=
// tol*(1+|want|)); -inf must match exactly.
func compare(t testing.TB, what string, got []float32, want []float64, tol float64) (maxErr float64) {
	t.Helper()
	bad := 0
	for i, w := range want {
		g := float64(got[i])
		if math.IsInf(w, -1) || math.IsInf(g, -1) {
			if !(math.IsInf(w, -1) && math.IsInf(g, -1)) {
				if bad < 5 {
					t.Errorf("%s[%d] = %v, want %v", what, i, g, w)
				}
				bad++
			}
			continue
		}
		e := math.Abs(g-w) / (1 + math.Abs(w))
		if !(e <= tol) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, want %v (err %.3g > %.3g)", what, i, g, w, e, tol)
			}
			bad++
		}
		if e > maxErr || math.IsNaN(e) {
			maxErr = e
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values out of tolerance", what, bad, len(want))
	}
	return maxErr
}

func bf16Floats(b []byte) []float32 {
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = lowp.BFloat16(binary.LittleEndian.Uint16(b[2*i:])).Float32()
	}
	return out
}

// prefillCases and decodeCases are the GPU test matrix (sizes chosen so the
// whole gpucheck run stays well under a minute of GPU time).
func prefillCases() []*prefillCase {
	return []*prefillCase{
		{name: "bf16/dense/causal/f32part/d256", cuQ: []int32{0, 100, 190}, cuK: []int32{0, 400, 700}, hkv: 2, qhpk: 4, d: 256, topK: 4, blk: 128,
			causal: true, qd: BF16, kvd: BF16, pd: F32, round: RoundBF16, tolO: 2e-2, tolLSE: 2e-3},
		{name: "bf16/dense/causal/f32part", cuQ: []int32{0, 300, 437}, cuK: []int32{0, 700, 829}, hkv: 2, qhpk: 4, d: 128, topK: 8, blk: 128,
			causal: true, qd: BF16, kvd: BF16, pd: F32, round: RoundBF16, tolO: 2e-2, tolLSE: 2e-3},
		{name: "bf16/dense/temp/bf16part/d64", cuQ: []int32{0, 200}, cuK: []int32{0, 1000}, hkv: 1, qhpk: 16, d: 64, topK: 4, blk: 128,
			qd: BF16, kvd: BF16, pd: BF16, round: RoundBF16, temp: 0.7, tolO: 3e-2, tolLSE: 2e-3},
		{name: "fp8/paged64/causal/fp8part", cuQ: []int32{0, 129, 300}, cuK: []int32{0, 500, 1200}, hkv: 2, qhpk: 8, d: 128, topK: 16, blk: 128,
			causal: true, paged: true, pageSize: 64, qd: E4M3, kvd: E4M3, pd: E4M3, round: RoundE4M3, tolO: 1.2e-1, tolLSE: 3e-3},
		{name: "bf16q-nvfp4kv/dense/f16part", cuQ: []int32{0, 256}, cuK: []int32{0, 2048}, hkv: 4, qhpk: 2, d: 128, topK: 32, blk: 64,
			causal: true, qd: BF16, kvd: NVFP4, pd: F16, round: RoundBF16, tolO: 3e-2, tolLSE: 3e-3},
	}
}

func decodeCases() []*decodeCase {
	return []*decodeCase{
		{name: "fp8/q16/auto-split", batch: 4, seqlenQ: 1, hkv: 8, qhpk: 16, d: 128, pageSize: 128,
			seqused: []int32{9000, 128, 3000, 17}, qd: E4M3, kvd: E4M3, round: RoundE4M3, tolO: 8e-2, tolLSE: 3e-3},
		{name: "bf16/q4/seqlenq3/fixed-split", batch: 3, seqlenQ: 3, hkv: 2, qhpk: 4, d: 128, pageSize: 32, fixedSplit: 4,
			seqused: []int32{1000, 65, 2}, qd: BF16, kvd: BF16, round: RoundBF16, tolO: 2e-2, tolLSE: 2e-3},
		{name: "bf16/nvfp4/no-split/d64", batch: 64, seqlenQ: 2, hkv: 4, qhpk: 4, d: 64, pageSize: 64,
			seqused: func() []int32 {
				s := make([]int32, 64)
				for i := range s {
					s[i] = int32(64 + 37*i)
				}
				return s
			}(), qd: BF16, kvd: NVFP4, round: RoundBF16, tolO: 3e-2, tolLSE: 3e-3},
		{name: "bf16/d256/q8/fixed-split", batch: 2, seqlenQ: 1, hkv: 2, qhpk: 8, d: 256, pageSize: 64, fixedSplit: 8,
			seqused: []int32{3000, 70}, qd: BF16, kvd: BF16, round: RoundBF16, tolO: 2e-2, tolLSE: 2e-3},
		// sparse decode (q2k): blocks straddling KV chunks (blk 48, chunk 3 pages of 32)
		{name: "bf16/q2k/q4/seqlenq2/blk48/fixed-split", batch: 3, seqlenQ: 2, hkv: 2, qhpk: 4, d: 128, pageSize: 32, fixedSplit: 3,
			topK: 4, blk: 48, seqused: []int32{700, 130, 5}, qd: BF16, kvd: BF16, round: RoundBF16, tolO: 2e-2, tolLSE: 2e-3},
		{name: "fp8/q2k/q16/topk8/auto-split", batch: 2, seqlenQ: 1, hkv: 4, qhpk: 16, d: 128, pageSize: 64,
			topK: 8, blk: 128, seqused: []int32{6000, 300}, qd: E4M3, kvd: E4M3, round: RoundE4M3, tolO: 8e-2, tolLSE: 3e-3},
		// D = 256: 16-row tiles, so a q tile of 4 queries x 8 heads is two row tiles with their own block unions;
		// blk 256 > 128 splits each block into two softmax spans.
		{name: "bf16/q2k/d256/q8/seqlenq4/blk256/fixed-split", batch: 2, seqlenQ: 4, hkv: 2, qhpk: 8, d: 256, pageSize: 128, fixedSplit: 3,
			topK: 4, blk: 256, seqused: []int32{1500, 900}, qd: BF16, kvd: BF16, round: RoundBF16, tolO: 2e-2, tolLSE: 2e-3},
		{name: "bf16/q2k/nvfp4/d64/no-split", batch: 8, seqlenQ: 3, hkv: 2, qhpk: 2, d: 64, pageSize: 64,
			topK: 16, blk: 64, seqused: []int32{64, 200, 1000, 3, 700, 128, 129, 900}, qd: BF16, kvd: NVFP4, round: RoundBF16,
			tolO: 3e-2, tolLSE: 3e-3},
	}
}

// TestReferenceSelfCheck builds every case's plan and checks the reference
// on a few rows against a direct softmax (no GPU needed).
func TestReferenceSelfCheck(t *testing.T) {
	for i, c := range prefillCases() {
		genPrefill(t, c, uint64(i+1))
		if c.sched.WorkCount == 0 {
			t.Fatalf("%s: empty schedule", c.name)
		}
		if _, err := newFwdKernelParams(&FwdArgs{TotalQ: c.totalQ, Hq: c.hq, Hkv: c.hkv, D: c.d, BlkKV: c.blk, TopK: c.topK,
			NumBatch: len(c.cuQ) - 1, QDtype: c.qd, KVDtype: c.kvd, PartialDtype: c.pd, PVRound: c.round,
			KScale: 256, VScale: 256, PageTable: map[bool]uint64{true: 256}[c.paged], PageSize: c.pageSize, PageTableStride: max(c.maxPages, 1),
			TLSEPartial: map[bool]uint64{true: 256}[c.temp > 0], Temperature: c.temp}, c.csr, c.sched, FwdPlanPtrs{}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	for i, c := range decodeCases() {
		genDecode(t, c, uint64(i+1))
		if _, _, err := newDecodeKernelParams(&DecodeArgs{Batch: c.batch, SeqlenQ: c.seqlenQ, Hq: c.hq, Hkv: c.hkv, D: c.d,
			PageSize: c.pageSize, PageTableStride: c.maxPages, PageTable: 256, SequsedK: 256, OPartial: 256, LSEPartial: 256,
			QDtype: c.qd, KVDtype: c.kvd, PVRound: c.round, KScale: 256, VScale: 256,
			Q2K: map[bool]uint64{true: 256}[c.topK > 0], TopK: c.topK, BlkKV: c.blk}, c.sched, DecodePlanPtrs{}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
}

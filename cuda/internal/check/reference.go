package check

import (
	"encoding/binary"
	"math"
	"runtime"
	"sync"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/kernels/lowp"
)

// The reference: attention computed in float64 straight from the contract
// (docs/contract.md), sharing no code with the planner, the CSR builder, the
// forward schedule or the CPU kernels. For each (query row, query head) it
// lists the attended key tokens from q2k (or the decode page table), the
// causal rule and the sequence lengths, reads their K and V rows through the
// page table, decodes them from the storage encoding (only the scalar
// BF16 / E4M3 decoders of kernels/lowp are used) and computes the softmax,
// O and the LSEs exactly (float64), with the tolerance of every element
// (tolerance.go).

// Reference is the float64 result of a problem and the tolerance of every
// element.
type Reference struct {
	D      int       // head dim
	O      []float64 // [rows][Hq][D], output scale applied
	LSE    []float64 // [rows][Hq]; -inf on fully masked rows
	TLSE   []float64 // [rows][Hq] temperature LSE; nil without temperature
	TolO   []float64 // absolute tolerance of each O element
	TolLSE []float64 // absolute tolerance of each LSE
	TolTLS []float64 // absolute tolerance of each temperature LSE; nil without temperature
	// The statistical model of each element (stat.go): standard deviation
	// and coherent part of its error before the final rounding.
	sigO, biasO     []float64     // [rows][Hq][D]
	preO            []float64     // [rows][Hq][D] the bound's pre-rounding part (caps the model's deviation)
	sigLSE, biasLSE []float64     // [rows][Hq]
	sigTLS, biasTLS []float64     // [rows][Hq]; nil without temperature
	rndLSE, rndTLS  []lseRounding // [rows][Hq] the LSEs' own roundings
	keys            []int32       // [rows][Hq] attended keys
}

// e2m1 are the magnitudes of the NVFP4 element codes 0..7 (contract §6).
var e2m1 = [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// values decodes every element of s to float64 (contract §1 and §6; an
// NVFP4 value is e2m1 * block scale * global scale, the block scale read
// from the 128x4 layout).
func (s *Store) values() []float64 {
	out := make([]float64, s.Rows*s.D)
	switch s.Dtype {
	case cuda.BF16:
		for i := range out {
			out[i] = float64(lowp.BFloat16(binary.LittleEndian.Uint16(s.Enc[2*i:])).Float32())
		}
	case cuda.E4M3:
		for i := range out {
			out[i] = float64(lowp.Float8E4M3FN(s.Enc[i]).Float32())
		}
	case cuda.NVFP4:
		cols := s.D / 16
		g := float64(s.Global)
		for r := 0; r < s.Rows; r++ {
			for e := 0; e < s.D; e++ {
				nib := s.Enc[(r*s.D+e)/2]
				if e%2 == 1 {
					nib >>= 4
				}
				c := e / 16
				off := (r/128*((cols+3)/4)+c/4)*512 + (r%32)*16 + (r%128/32)*4 + c%4
				v := e2m1[nib&7] * float64(lowp.Float8E4M3FN(s.Scales[off]).Float32()) * g
				if nib&8 != 0 {
					v = -v
				}
				out[r*s.D+e] = v
			}
		}
	}
	return out
}

// fault makes the reference compute what a kernel with one specific bug
// would: the mutation tests feed such results to the check, which must
// fail them. A nil *fault is the contract.
type fault struct {
	causalShift  int     // the causal limit moved by this many keys
	drop         bool    // (dropHead, dropRow) loses its first selected block
	dropHead     int     // KV head of the (head, query row) that loses it
	dropRow      int     // query row that loses it
	swap         bool    // sequence swapSeq reads its first and last pages swapped
	swapSeq      int     // the sequence (or decode request) of the swap
	scale        float64 // factor on the softmax scale (0: none)
	seqUsedShift int     // decode: seqused_k read as seqused_k + this
	expBias      float64 // P = exp((s - max)(1 + expBias)): an exponential biased with its argument
	pE4M3        bool    // P rounded to E4M3 before P.V (the row sum unrounded)
	kNear        float64 // the first 16 keys of sequence swapSeq read from a near copy: K (1 +- kNear)
	// fp8Acc is not a fault but the hardware that uFP8MMA models (FP8
	// tensor cores: products exact, the running sum truncated toward
	// zero to 14 significant bits after every k-group of 32 products), so
	// that the tests can hold the bounds against what such a GPU would
	// return: Q.K sums its D products that way, P.V its keys in the
	// row's order, from zero every fp8Span keys with each span's result
	// added to O exactly (the sm_90a fp8pv decode's spans), or over the
	// whole row when fp8Span is 0 (a walk kept in the FP8 accumulator).
	fp8Acc  bool
	fp8Span int
}

// fp8Group is the k-group of the FP8 tensor cores' accumulator: 32
// products between truncations (uFP8MMA's model).
const fp8Group = 32

// trunc14 truncates x toward zero to 14 significant bits.
func trunc14(x float64) float64 {
	m, e := math.Frexp(x)
	return math.Ldexp(math.Trunc(m*0x1p14)/0x1p14, e)
}

func (f *fault) fp8() bool { return f != nil && f.fp8Acc }

// pvKey ends key j of a row's P.V under fp8Acc: the accumulator acc is
// truncated at the end of each k-group, and at the end of each span added
// to o and cleared.
func (f *fault) pvKey(j int, acc, o []float64) {
	if (j+1)%fp8Group == 0 {
		for e := range acc {
			acc[e] = trunc14(acc[e])
		}
	}
	if f.fp8Span > 0 && (j+1)%f.fp8Span == 0 {
		for e := range acc {
			o[e] += acc[e]
			acc[e] = 0
		}
	}
}

// pvEnd ends a row's P.V of n keys under fp8Acc: the last partial
// k-group's truncation, then the accumulator added to o.
func (f *fault) pvEnd(n int, acc, o []float64) {
	for e := range acc {
		if n%fp8Group != 0 {
			acc[e] = trunc14(acc[e])
		}
		o[e] += acc[e]
	}
}

// nearRows applies fault f's near-copy K to k: rows of the first 16
// tokens of sequence b (row(t, h) locates them) get every element scaled
// by 1 +- kNear, the sign alternating with the element.
func (f *fault) nearRows(k []float64, d, hkv, n, b int, row func(t, h int) int) {
	if f == nil || f.kNear == 0 {
		return
	}
	for h := 0; h < hkv; h++ {
		for t := 0; t < min(16, n); t++ {
			r := row(t, h)
			for e := 0; e < d; e++ {
				k[r*d+e] *= 1 + f.kNear*float64(1-2*((e+t)%2))
			}
		}
	}
}

func (f *fault) causal() int {
	if f == nil {
		return 0
	}
	return f.causalShift
}

func (f *fault) drops(h, row int) bool {
	return f != nil && f.drop && f.dropRow == row && f.dropHead == h
}

func (f *fault) swaps(b int) bool { return f != nil && f.swap && f.swapSeq == b }

// exp is the exponent the faulty kernel exponentiates for x = s - max.
func (f *fault) exp(x float64) float64 {
	if f == nil {
		return x
	}
	return x * (1 + f.expBias)
}

// round is the P the faulty kernel multiplies V with.
func (f *fault) round(p float64) float64 {
	if f == nil || !f.pE4M3 {
		return p
	}
	return float64(lowp.E4M3Sat(float32(p)).Float32())
}

func (f *fault) scaled(s float64) float64 {
	if f == nil || f.scale == 0 {
		return s
	}
	return s * f.scale
}

// pageCol is the page-table column holding token t of a sequence of
// seqLen tokens, with fault f: its swap exchanges the first and the last
// page of the sequence (two pages that are both fully attended or both
// not hold the same set of (k, v) pairs either way, and attention does not
// depend on their order, so such a swap would not change the result).
func pageCol(t, pageSize, seqLen, b int, f *fault) int {
	col := t / pageSize
	if last := (seqLen+pageSize-1)/pageSize - 1; f.swaps(b) && last > 0 && (col == 0 || col == last) {
		col = last - col
	}
	return col
}

// seqOf returns the sequence that owns query row q (cu prefix sums).
func seqOf(cu []int32, q int) int {
	b := 0
	for int(cu[b+1]) <= q {
		b++
	}
	return b
}

// keys lists the sequence-local key tokens that query row q attends
// through KV head h (contract §2, §4): the tokens of its selected blocks
// below seqlen_k and, causal, at most i + seqlen_k - seqlen_q for
// sequence-local query i.
func (c *Prefill) keys(h, q int, f *fault) []int {
	b := seqOf(c.CuQ, q)
	seqQ, seqK := int(c.CuQ[b+1]-c.CuQ[b]), int(c.SeqK[b])
	lim := seqK
	if c.Causal {
		lim = min(lim, q-int(c.CuQ[b])+seqK-seqQ+1+f.causal())
	}
	var out []int
	dropped := false
	for j := 0; j < c.TopK; j++ {
		blk := int(c.Q2K[(h*c.TotalQ+q)*c.TopK+j])
		if blk < 0 {
			continue
		}
		if !dropped && f.drops(h, q) {
			dropped = true
			continue
		}
		for t := blk * c.Blk; t < min((blk+1)*c.Blk, lim); t++ {
			out = append(out, t)
		}
	}
	return out
}

// kvRow is the K/V row of token t of sequence b at KV head h (contract §4:
// dense [total_k, Hkv, D], paged [num_pages, Hkv, page_size, D]).
func (c *Prefill) kvRow(b, t, h int, f *fault) int {
	if !c.Paged {
		return (int(c.CuK[b])+t)*c.Hkv + h
	}
	page := int(c.PageTable[b*c.MaxPages+pageCol(t, c.PageSize, int(c.SeqK[b]), b, f)])
	return (page*c.Hkv+h)*c.PageSize + t%c.PageSize
}

// Reference computes the problem in float64 from its inputs and q2k.
func (c *Prefill) Reference() *Reference { return c.reference(nil) }

// WalkReference is Reference under the bounds of the kernels that keep
// FP8 P.V over a whole walk (PV8Walk set while it runs, then restored).
func (c *Prefill) WalkReference() *Reference {
	was := c.PV8Walk
	c.PV8Walk = true
	defer func() { c.PV8Walk = was }()
	return c.reference(nil)
}

func (c *Prefill) reference(f *fault) *Reference {
	ar := c.arith()
	k, v := c.K.values(), c.V.values()
	q := c.Q.values()
	if f != nil {
		b := f.swapSeq
		f.nearRows(k, c.D, c.Hkv, int(c.SeqK[b]), b, func(t, h int) int { return c.kvRow(b, t, h, nil) })
	}
	ref := newReference(c.TotalQ*c.Hq, c.D, c.Temp > 0)
	scale := f.scaled(c.softmaxScale())
	parallel(c.TotalQ, func(row int) {
		b := seqOf(c.CuQ, row)
		for h := 0; h < c.Hkv; h++ {
			toks := c.keys(h, row, f)
			rows := make([]int, len(toks))
			for i, t := range toks {
				rows[i] = c.kvRow(b, t, h, f)
			}
			slots := slotsOf(toks, c.Blk) // one partial per selected block
			tiles := ar.acc.tilesOf(toks)
			a := ar
			a.exactP = a.acc.oneVisit(toks) && onePartial(slots)
			a.visits = a.acc.visits(toks, slots)
			for g := 0; g < c.QHPK; g++ {
				idx := row*c.Hq + h*c.QHPK + g
				a.row(ref, idx, q[idx*c.D:(idx+1)*c.D], rows, slots, tiles, k, v, scale, float64(c.Temp), f)
			}
		}
	})
	return ref
}

// keys lists the request-local key tokens that decode query row r
// (request b = r / seqlen_q, i = r % seqlen_q) attends through KV head h
// (contract §7): the tokens at or before its position
// seqused_k - seqlen_q + i, below seqused_k, and with q2k only those of
// its selected blocks.
func (c *Decode) keys(h, r int, f *fault) []int {
	b, i := r/c.SeqlenQ, r%c.SeqlenQ
	used := int(c.SeqUsed[b])
	if f != nil {
		used += f.seqUsedShift
	}
	lim := min(used, used-c.SeqlenQ+i+1+f.causal())
	var out []int
	if c.TopK == 0 {
		for t := 0; t < lim; t++ {
			out = append(out, t)
		}
		return out
	}
	rows := c.Batch * c.SeqlenQ
	dropped := false
	for j := 0; j < c.TopK; j++ {
		blk := int(c.Q2K[(h*rows+r)*c.TopK+j])
		if blk < 0 {
			continue
		}
		if !dropped && f.drops(h, r) {
			dropped = true
			continue
		}
		for t := blk * c.Blk; t < min((blk+1)*c.Blk, lim); t++ {
			out = append(out, t)
		}
	}
	return out
}

// kvRow is the paged K/V row of token t of request b at KV head h.
func (c *Decode) kvRow(b, t, h int, f *fault) int {
	page := int(c.PageTable[b*c.MaxPages+pageCol(t, c.PageSize, int(c.SeqUsed[b]), b, f)])
	return (page*c.Hkv+h)*c.PageSize + t%c.PageSize
}

// Reference computes the decode problem in float64.
func (c *Decode) Reference() *Reference { return c.reference(nil) }

// WalkReference is Reference under the bounds of the kernels that keep
// FP8 P.V over a work item's whole walk (PV8Walk set while it runs, then
// restored).
func (c *Decode) WalkReference() *Reference {
	was := c.PV8Walk
	c.PV8Walk = true
	defer func() { c.PV8Walk = was }()
	return c.reference(nil)
}

func (c *Decode) reference(f *fault) *Reference {
	ar := c.arith()
	k, v := c.K.values(), c.V.values()
	q := c.Q.values()
	if f != nil {
		b := f.swapSeq
		f.nearRows(k, c.D, c.Hkv, int(c.SeqUsed[b]), b, func(t, h int) int { return c.kvRow(b, t, h, nil) })
	}
	rows := c.Batch * c.SeqlenQ
	ref := newReference(rows*c.Hq, c.D, false)
	scale := f.scaled(1 / math.Sqrt(float64(c.D)))
	parallel(rows, func(r int) {
		for h := 0; h < c.Hkv; h++ {
			toks := c.keys(h, r, f)
			kr := make([]int, len(toks))
			for i, t := range toks {
				kr[i] = c.kvRow(r/c.SeqlenQ, t, h, f)
			}
			slots := slotsOf(toks, c.PageSize) // a split never divides a page
			tiles := ar.acc.tilesOf(toks)
			a := ar
			a.exactP = a.acc.oneVisit(toks) && onePartial(slots)
			a.visits = a.acc.visits(toks, slots)
			for g := 0; g < c.QHPK; g++ {
				idx := r*c.Hq + h*c.QHPK + g
				a.row(ref, idx, q[idx*c.D:(idx+1)*c.D], kr, slots, tiles, k, v, scale, 0, f)
			}
		}
	})
	return ref
}

// onePartial reports whether every token is in slot 0.
func onePartial(slot []int) bool {
	for _, x := range slot {
		if x != 0 {
			return false
		}
	}
	return true
}

// slotsOf numbers the partials the tokens fall in: tokens of one block of
// size blk share a slot, numbered in order of first appearance.
func slotsOf(toks []int, blk int) []int { return numberBy(toks, func(t int) int { return t / blk }) }

// numberBy numbers the groups key puts the tokens in, in order of first
// appearance.
func numberBy(toks []int, key func(t int) int) []int {
	out := make([]int, len(toks))
	id := map[int]int{}
	for i, t := range toks {
		s, ok := id[key(t)]
		if !ok {
			s = len(id)
			id[key(t)] = s
		}
		out[i] = s
	}
	return out
}

func newReference(rows, d int, temp bool) *Reference {
	r := &Reference{D: d, O: make([]float64, rows*d), LSE: make([]float64, rows), TolO: make([]float64, rows*d), TolLSE: make([]float64, rows),
		sigO: make([]float64, rows*d), biasO: make([]float64, rows*d), preO: make([]float64, rows*d), sigLSE: make([]float64, rows), biasLSE: make([]float64, rows), rndLSE: make([]lseRounding, rows), keys: make([]int32, rows)}
	if temp {
		r.TLSE, r.TolTLS = make([]float64, rows), make([]float64, rows)
		r.sigTLS, r.biasTLS, r.rndTLS = make([]float64, rows), make([]float64, rows), make([]lseRounding, rows)
	}
	return r
}

// parallel calls fn(i) for i in [0, n) on every CPU.
func parallel(n int, fn func(i int)) {
	workers := min(runtime.NumCPU(), n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// row computes one (query row, query head), index idx, attending the K/V
// rows kv (in partial slot[j] and row-sum tile tile[j]), into ref: s = scale * q.k, P = exp(s -
// max), O = sum P v / sum P, LSE = max + ln sum P, the temperature LSE
// logsumexp(s / temp), the tolerances of tolerance.go and the statistical
// model of stat.go; with fault f's exponential and P rounding (nil: none).
func (a arith) row(ref *Reference, idx int, q []float64, kv, slot, tile []int, k, v []float64, scale, temp float64, f *fault) {
	d := len(q)
	a = a.forRow(len(kv))
	o, tol := ref.O[idx*d:(idx+1)*d], ref.TolO[idx*d:(idx+1)*d]
	ref.keys[idx] = int32(len(kv))
	if len(kv) == 0 {
		ref.LSE[idx] = math.Inf(-1)
		if ref.TLSE != nil {
			ref.TLSE[idx] = math.Inf(-1)
		}
		return
	}
	s := make([]float64, len(kv))
	sa := make([]float64, len(kv))  // scale * sum_d |q_d k_d|
	ssq := make([]float64, len(kv)) // sum_d (scale q_d k_d)^2
	maxS, maxSA, maxAbsS := math.Inf(-1), 0.0, 0.0
	for j, r := range kv {
		kr := k[r*d : (r+1)*d]
		var dot, abs, sq float64
		for e, x := range q {
			dot += x * kr[e]
			abs += math.Abs(x * kr[e])
			sq += x * kr[e] * x * kr[e]
			if f.fp8() && ((e+1)%fp8Group == 0 || e == d-1) {
				dot = trunc14(dot)
			}
		}
		s[j], sa[j], ssq[j] = scale*dot, scale*abs, scale*scale*sq
		maxS = math.Max(maxS, s[j])
		maxSA = math.Max(maxSA, sa[j])
		maxAbsS = math.Max(maxAbsS, math.Abs(s[j]))
	}
	var l float64
	p := make([]float64, len(kv))
	absV := make([]float64, d) // sum P |v|
	sumV := make([]float64, d) // sum |v|
	acc := o                   // where P.V accumulates (fp8Acc: the FP8 accumulator)
	if f.fp8() {
		acc = make([]float64, d)
	}
	for j, r := range kv {
		p[j] = math.Exp(f.exp(s[j] - maxS))
		l += p[j]
		pv := f.round(p[j])
		vr := v[r*d : (r+1)*d]
		for e, x := range vr {
			acc[e] += pv * x
			absV[e] += p[j] * math.Abs(x)
			sumV[e] += math.Abs(x)
		}
		if f.fp8() {
			f.pvKey(j, acc, o)
		}
	}
	if f.fp8() {
		f.pvEnd(len(kv), acc, o)
	}
	lse := maxS + math.Log(l)
	ref.LSE[idx] = lse
	errS := a.scoreError(maxSA, maxAbsS)
	// The keys that may hold the row max in a kernel's arithmetic: their
	// least P |v| and |v| per channel leave the P rounding's terms (oSums).
	maxPV, maxV := make([]float64, d), make([]float64, d)
	for e := range maxPV {
		maxPV[e], maxV[e] = math.Inf(1), math.Inf(1)
	}
	for j, r := range kv {
		if s[j] < maxS-2*errS {
			continue
		}
		for e, x := range v[r*d : (r+1)*d] {
			maxPV[e], maxV[e] = math.Min(maxPV[e], p[j]*math.Abs(x)), math.Min(maxV[e], math.Abs(x))
		}
	}
	// A row in one partial of BF16 (V without a global scale): the combine
	// passes that partial through with weight exp(0) * (1 / exp(0)) = 1
	// (within float32 ulps, far below half a BF16 spacing), so its BF16
	// rounding is the output's: one rounding, which tolO and the max
	// criterion take exactly, not two.
	if a.pPart == 8 && a.gV == 1 && onePartial(slot) {
		a.uPart, a.fPart, a.onePart = 0, 0, true
	}
	for e := range o {
		o[e] /= l
		w := oSums{absSum: absV[e] / l, sumAbs: sumV[e] / l, maxPV: maxPV[e] / l, maxV: maxV[e] / l}
		tol[e] = a.tolO(o[e], w, errS)
		ref.preO[idx*d+e] = a.preO(w, errS)
	}
	ref.TolLSE[idx] = a.tolLSE(lse, errS)
	st := stats{sigO: ref.sigO[idx*d : (idx+1)*d], biasO: ref.biasO[idx*d : (idx+1)*d]}
	a.rowStats(&st, s, sa, ssq, p, slot, tile, v, kv, o, l, maxS, temp)
	ref.sigLSE[idx], ref.biasLSE[idx], ref.rndLSE[idx] = st.sigLSE, st.biasLSE, st.rndLSE
	if ref.TLSE != nil {
		mt := maxS / temp
		var lt float64
		for _, x := range s {
			lt += math.Exp(x/temp - mt)
		}
		ref.TLSE[idx] = mt + math.Log(lt)
		ref.TolTLS[idx] = a.tolLSE(ref.TLSE[idx], errS/temp)
		ref.sigTLS[idx], ref.biasTLS[idx], ref.rndTLS[idx] = st.sigTLS, st.biasTLS, st.rndTLS
	}
}

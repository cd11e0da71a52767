// Package check holds the GPU check's problems and everything about them
// that needs no GPU: input generation, the CPU path (package kernels/attn,
// the same code the ops run on the CPU) on the same inputs, the comparison
// with per-dtype tolerances, and the FLOP / byte counts of the timing table.
// The GPU side is cuda/gpucheck (build tag cuda).
package check

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"unsafe"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
)

// Store is a Q, K or V tensor in its storage encoding (what the GPU reads).
type Store struct {
	Dtype  cuda.Dtype // BF16, E4M3 or NVFP4
	Rows   int        // rows of D elements
	D      int        // elements per row (the head dim)
	Enc    []byte     // bf16 little endian / e4m3 / packed nvfp4
	Scales []byte     // nvfp4 block scales (128x4 layout)
	Global float32    // nvfp4 global scale (1 otherwise)
}

// tileElems bounds the random values NewStore draws: larger BF16 / E4M3
// tensors repeat a random tile of this many elements (a multiple of every
// head dim).
const tileElems = 1 << 22

// NewStore returns rows x d random values in [-amp, amp] encoded as dt.
func NewStore(rng *rand.Rand, dt cuda.Dtype, rows, d int, amp float32) (*Store, error) {
	s := &Store{Dtype: dt, Rows: rows, D: d, Global: 1}
	n := rows * d
	if dt != cuda.NVFP4 && n > tileElems {
		// Large (timing) tensors: one random tile of whole rows, repeated.
		t, err := NewStore(rng, dt, tileElems/d, d, amp)
		if err != nil {
			return nil, err
		}
		s.Enc = make([]byte, n*len(t.Enc)/tileElems)
		for off := 0; off < len(s.Enc); off += len(t.Enc) {
			copy(s.Enc[off:], t.Enc)
		}
		return s, nil
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = (rng.Float32()*2 - 1) * amp
	}
	switch dt {
	case cuda.BF16:
		s.Enc = make([]byte, 2*len(x))
		for i, f := range x {
			binary.LittleEndian.PutUint16(s.Enc[2*i:], uint16(lowp.BF16(f)))
		}
	case cuda.E4M3:
		s.Enc = make([]byte, len(x))
		for i, f := range x {
			s.Enc[i] = uint8(lowp.E4M3Sat(f))
		}
	case cuda.NVFP4:
		s.Global = 0.75
		var err error
		if s.Enc, s.Scales, err = lowp.QuantizeNVFP4(x, rows, d, s.Global); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("check: store dtype %s", dt)
	}
	return s, nil
}

// Operand is the CPU path's view of s (global scale as given).
func (s *Store) Operand(global float32) attn.Operand {
	switch s.Dtype {
	case cuda.BF16:
		return attn.Operand{Dtype: attn.BF16, D: s.D, BF16: unsafe.Slice((*lowp.BFloat16)(unsafe.Pointer(&s.Enc[0])), len(s.Enc)/2), Global: 1}
	case cuda.E4M3:
		return attn.Operand{Dtype: attn.E4M3, D: s.D, E4M3: unsafe.Slice((*lowp.Float8E4M3FN)(unsafe.Pointer(&s.Enc[0])), len(s.Enc)), Global: 1}
	}
	return attn.Operand{Dtype: attn.NVFP4, D: s.D, Packed: s.Enc, Scales: s.Scales, Global: global}
}

// Tolerances is the accepted error |got - want| <= tol * (1 + |want|) of O
// and of the LSEs.
type Tolerances struct {
	O   float64 // relative tolerance of the output elements
	LSE float64 // relative tolerance of the LSE and temperature LSE
}

// Tol returns the tolerances for a problem's dtypes: the GPU tests' values
// (cuda/ref_test.go), which the CPU tests of the same dtypes also meet.
//
// E4M3 partials come first: each slot's block-normalised O is rounded to
// E4M3 (half an ulp is up to 2^-4 = 6.25% of the value) before the combine,
// whatever the K/V dtype, so NVFP4 K/V with E4M3 partials gets the E4M3
// tolerance, not the NVFP4 one (on the H200, 2026-12-04, both the sm_90a and
// the portable kernels differed from the CPU path by 4.6-4.8e-2 there,
// against 3e-2 for NVFP4 with wider partials).
func Tol(q, kv, partial cuda.Dtype, decode bool) Tolerances {
	switch {
	case partial == cuda.E4M3:
		return Tolerances{1.2e-1, 3e-3}
	case kv == cuda.NVFP4:
		return Tolerances{3e-2, 3e-3}
	case q == cuda.E4M3 && kv == cuda.E4M3 && decode:
		return Tolerances{8e-2, 3e-3}
	case q == cuda.E4M3 && kv == cuda.E4M3:
		return Tolerances{1.2e-1, 3e-3}
	case kv == cuda.E4M3:
		return Tolerances{4e-2, 3e-3}
	}
	return Tolerances{2e-2, 2e-3}
}

// Prefill is one sparse prefill problem.
type Prefill struct {
	Name     string     // label of the problem in the report
	CuQ      []int32    // [B+1] query prefix sums
	CuK      []int32    // [B+1] key prefix sums (the sequence lengths also in paged mode)
	Hkv      int        // KV heads
	QHPK     int        // query heads per KV head
	D        int        // head dim
	TopK     int        // most blocks a (KV head, query) selects
	Blk      int        // keys per block (blk_kv)
	Causal   bool       // bottom-right aligned causal mask
	Paged    bool       // K/V in pages of PageSize tokens instead of dense rows
	PageSize int        // tokens per page (paged only)
	QD       cuda.Dtype // Q storage dtype
	KVD      cuda.Dtype // K/V storage dtype
	PD       cuda.Dtype // partial dtype
	Temp     float32    // 0: no temperature LSE
	// Generated by Gen.
	TotalQ    int               // CuQ[B]
	Hq        int               // Hkv * QHPK
	MaxPages  int               // page-table columns: pages of the longest sequence (paged only)
	NumPages  int               // pages in the pool, a few more than the table uses (paged only)
	PageTable []int32           // [B][MaxPages] page ids, a random permutation (paged only)
	SeqK      []int32           // [B] key length of each sequence
	Q, K, V   *Store            // the inputs: Q [TotalQ*Hq] rows, K/V dense or paged rows
	Q2K       []int32           // [Hkv][TotalQ][TopK] batch-local block ids, -1 = unused slot
	CSR       *plan.CSR         // k2q CSR of Q2K
	Sched     *plan.FwdSchedule // forward schedule of CSR
	Tol       Tolerances        // the tolerances of the dtypes (Tol)
}

// Round is the P rounding the op layer uses for the problem's dtypes
// (E4M3 P.V for FP8 Q/K/V, else none: P stays float32 on the CPU).
func (c *Prefill) Round() cuda.Round {
	if c.QD == cuda.E4M3 && c.KVD == cuda.E4M3 {
		return cuda.RoundE4M3
	}
	return cuda.RoundNone
}

// KVRows is the leading extent of K and V: total_k or the page count.
func (c *Prefill) KVRows() int {
	if c.Paged {
		return c.NumPages
	}
	return int(c.CuK[len(c.CuK)-1])
}

// Gen generates inputs, the block selection and the plan. Each (head,
// query) selects up to TopK distinct blocks of its sequence; a query that
// selects none, or whose causal limit hides all its keys, is a fully
// masked row (O = 0, LSE = -inf).
func (c *Prefill) Gen(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	B := len(c.CuQ) - 1
	c.TotalQ = int(c.CuQ[B])
	c.Hq = c.Hkv * c.QHPK
	c.Tol = Tol(c.QD, c.KVD, c.PD, false)
	c.SeqK = make([]int32, B)
	for b := range c.SeqK {
		c.SeqK[b] = c.CuK[b+1] - c.CuK[b]
	}
	var err error
	if c.Q, err = NewStore(rng, c.QD, c.TotalQ*c.Hq, c.D, 1.5); err != nil {
		return err
	}
	kvRows := int(c.CuK[B]) * c.Hkv
	if c.Paged {
		c.MaxPages = 1
		for b := 0; b < B; b++ {
			c.MaxPages = max(c.MaxPages, (int(c.SeqK[b])+c.PageSize-1)/c.PageSize)
		}
		c.NumPages = B*c.MaxPages + 3
		perm := rng.Perm(c.NumPages)
		c.PageTable = make([]int32, B*c.MaxPages)
		for i := range c.PageTable {
			c.PageTable[i] = int32(perm[i])
		}
		kvRows = c.NumPages * c.Hkv * c.PageSize
	}
	if c.K, err = NewStore(rng, c.KVD, kvRows, c.D, 1.5); err != nil {
		return err
	}
	if c.V, err = NewStore(rng, c.KVD, kvRows, c.D, 1); err != nil {
		return err
	}
	c.Q2K = make([]int32, c.Hkv*c.TotalQ*c.TopK)
	for i := range c.Q2K {
		c.Q2K[i] = -1
	}
	for h := 0; h < c.Hkv; h++ {
		for b := 0; b < B; b++ {
			nb := (int(c.SeqK[b]) + c.Blk - 1) / c.Blk
			for q := int(c.CuQ[b]); q < int(c.CuQ[b+1]); q++ {
				n := min(nb, rng.IntN(c.TopK+1)) // 0 blocks: a fully masked row
				for j, blk := range rng.Perm(nb)[:n] {
					c.Q2K[(h*c.TotalQ+q)*c.TopK+j] = int32(blk)
				}
			}
		}
	}
	return c.replan()
}

// replan builds the CSR and the forward schedule of the selection.
func (c *Prefill) replan() error {
	var err error
	if c.CSR, err = plan.BuildK2QCSR(nil, c.Q2K, c.Hkv, c.TotalQ, c.TopK, c.CuQ, c.CuK, c.Blk); err != nil {
		return err
	}
	rows, err := plan.NewRows(c.CuK, c.Blk)
	if err != nil {
		return err
	}
	c.Sched, err = plan.BuildFwdSchedule(nil, c.CSR, rows, c.CuQ, plan.FwdParams{
		TotalQ: c.TotalQ, Hkv: c.Hkv, QheadPerKV: c.QHPK, TopK: c.TopK, BlkKV: c.Blk, Workers: 132})
	return err
}

// Result is what a run produced: O [rows][Hq][D] as float32, LSE and
// temperature LSE [rows][Hq] (TLSE nil when not computed).
type Result struct {
	O, LSE, TLSE []float32 // O [rows][Hq][D]; LSE, TLSE [rows][Hq]
}

func bf16s(o []lowp.BFloat16) []float32 {
	out := make([]float32, len(o))
	lowp.DecodeBF16(out, o)
	return out
}

func partialOf(d cuda.Dtype) attn.PartialDtype {
	switch d {
	case cuda.F32:
		return attn.PartialF32
	case cuda.F16:
		return attn.PartialF16
	case cuda.E4M3:
		return attn.PartialE4M3
	}
	return attn.PartialBF16
}

// CPU runs the CPU path (attn.RunPrefill) on the problem's inputs.
func (c *Prefill) CPU(workers int) Result {
	kv := attn.KVLayout{Hkv: c.Hkv, Paged: c.Paged, CuK: c.CuK, PageTable: c.PageTable, PTCols: c.MaxPages, PageSize: c.PageSize}
	invT := float32(0)
	if c.Temp > 0 {
		invT = 1 / c.Temp
	}
	p := &attn.Prefill{
		Q: c.Q.Operand(1), K: c.K.Operand(c.K.Global), V: c.V.Operand(1), KV: kv,
		TotalQ: c.TotalQ, HQ: c.Hq, Hkv: c.Hkv, D: c.D, CuQ: c.CuQ, SeqK: c.SeqK, BlkKV: c.Blk, Causal: c.Causal,
		Scale: float32(1 / math.Sqrt(float64(c.D))), InvT: invT, PV: tileRound(c.Round()), TopK: c.TopK,
		CSR: c.CSR, Sched: c.Sched, Partial: partialOf(c.PD), OutputScale: c.V.Global,
	}
	out := &attn.Output{O: make([]lowp.BFloat16, c.TotalQ*c.Hq*c.D), LSE: make([]float32, c.TotalQ*c.Hq)}
	if c.Temp > 0 {
		out.TLSE = make([]float32, c.TotalQ*c.Hq)
	}
	pool := attn.NewPool(workers)
	defer pool.Close()
	attn.RunPrefill(p, attn.NewWorkspace(workers, c.D), pool, out)
	return Result{O: bf16s(out.O), LSE: out.LSE, TLSE: out.TLSE}
}

func tileRound(r cuda.Round) tile.Round {
	switch r {
	case cuda.RoundE4M3:
		return tile.RoundE4M3
	case cuda.RoundBF16:
		return tile.RoundBF16
	}
	return tile.RoundNone
}

// Decode is one paged decode problem (sparse when TopK > 0).
type Decode struct {
	Name       string     // label of the problem in the report
	Batch      int        // requests
	SeqlenQ    int        // query tokens per request
	Hkv        int        // KV heads
	QHPK       int        // query heads per KV head
	D          int        // head dim
	PageSize   int        // tokens per page
	SeqUsed    []int32    // [Batch] key length of each request
	QD         cuda.Dtype // Q storage dtype
	KVD        cuda.Dtype // K/V storage dtype
	FixedSplit int        // > 0: KV chunk size in pages (plan.DecodeParams.FixedSplitPages)
	TopK       int        // sparse decode: blocks per query row; 0: dense decode
	Blk        int        // sparse decode: keys per block
	// Generated by Gen.
	Hq        int                  // Hkv * QHPK
	MaxPages  int                  // page-table columns: pages of the longest request
	NumPages  int                  // pages in the pool: Batch*MaxPages + 1
	PageTable []int32              // [Batch][MaxPages] page ids, a random permutation
	Q2K       []int32              // [Hkv][Batch*SeqlenQ][TopK] block ids, -1 = unused slot (sparse only)
	Q, K, V   *Store               // the inputs: Q [Batch*SeqlenQ*Hq] rows, K/V paged rows
	Sched     *plan.DecodeSchedule // the decode schedule of SeqUsed
	Tol       Tolerances           // the tolerances of the dtypes (Tol)
}

// Round is the P rounding of the op layer for the dtypes.
func (c *Decode) Round() cuda.Round {
	if c.QD == cuda.E4M3 && c.KVD == cuda.E4M3 {
		return cuda.RoundE4M3
	}
	return cuda.RoundNone
}

// Gen generates inputs, the page table, the selection and the schedule.
func (c *Decode) Gen(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 11))
	c.Hq = c.Hkv * c.QHPK
	c.Tol = Tol(c.QD, c.KVD, cuda.F32, true)
	c.MaxPages = 1
	for _, s := range c.SeqUsed {
		c.MaxPages = max(c.MaxPages, (int(s)+c.PageSize-1)/c.PageSize)
	}
	c.NumPages = c.Batch*c.MaxPages + 1
	perm := rng.Perm(c.NumPages)
	c.PageTable = make([]int32, c.Batch*c.MaxPages)
	for i := range c.PageTable {
		c.PageTable[i] = int32(perm[i])
	}
	var err error
	if c.Q, err = NewStore(rng, c.QD, c.Batch*c.SeqlenQ*c.Hq, c.D, 1.5); err != nil {
		return err
	}
	if c.K, err = NewStore(rng, c.KVD, c.NumPages*c.Hkv*c.PageSize, c.D, 1.5); err != nil {
		return err
	}
	if c.V, err = NewStore(rng, c.KVD, c.NumPages*c.Hkv*c.PageSize, c.D, 1); err != nil {
		return err
	}
	if c.Sched, err = plan.BuildDecodeSchedule(nil, c.SeqUsed, plan.DecodeParams{
		Batch: c.Batch, SeqlenQ: c.SeqlenQ, HQ: c.Hq, Hkv: c.Hkv, PageSize: c.PageSize,
		Workers: 132, FixedSplitPages: c.FixedSplit, MaxPagesPerSeq: c.MaxPages}); err != nil {
		return err
	}
	if c.TopK > 0 {
		rows := c.Batch * c.SeqlenQ
		c.Q2K = make([]int32, c.Hkv*rows*c.TopK)
		for i := range c.Q2K {
			c.Q2K[i] = -1
		}
		for h := 0; h < c.Hkv; h++ {
			for r := 0; r < rows; r++ {
				nb := (int(c.SeqUsed[r/c.SeqlenQ]) + c.Blk - 1) / c.Blk
				n := min(nb, rng.IntN(c.TopK+1))
				slots := rng.Perm(c.TopK)
				for j, blk := range rng.Perm(nb)[:n] {
					c.Q2K[(h*rows+r)*c.TopK+slots[j]] = int32(blk)
				}
			}
		}
	}
	return nil
}

// CPU runs the CPU path (attn.RunDecode).
func (c *Decode) CPU(workers int) Result {
	rows := c.Batch * c.SeqlenQ
	p := &attn.Decode{
		Q: c.Q.Operand(1), K: c.K.Operand(c.K.Global), V: c.V.Operand(c.V.Global),
		KV:    attn.KVLayout{Hkv: c.Hkv, Paged: true, PageTable: c.PageTable, PTCols: c.MaxPages, PageSize: c.PageSize},
		Batch: c.Batch, SeqlenQ: c.SeqlenQ, HQ: c.Hq, Hkv: c.Hkv, D: c.D, SeqUsed: c.SeqUsed,
		Scale: float32(1 / math.Sqrt(float64(c.D))), PV: tileRound(c.Round()), Sched: c.Sched,
		Q2K: c.Q2K, TopK: c.TopK, BlkKV: c.Blk,
	}
	out := &attn.Output{O: make([]lowp.BFloat16, rows*c.Hq*c.D), LSE: make([]float32, rows*c.Hq)}
	pool := attn.NewPool(workers)
	defer pool.Close()
	attn.RunDecode(p, attn.NewWorkspace(workers, c.D), pool, out)
	return Result{O: bf16s(out.O), LSE: out.LSE}
}

// Diff is the comparison of a GPU result with the CPU path's.
type Diff struct {
	MaxAbsO, MaxRelO     float64 // worst |got-want| and |got-want|/(1+|want|) of O
	MaxAbsLSE, MaxRelLSE float64 // the same for the LSE and temperature LSE
	BadO, BadLSE         int     // elements beyond tolerance
	Masked               int     // fully masked rows (LSE -inf on the CPU path)
	BadMasked            int     // masked rows where the GPU has O != 0 or LSE != -inf
	NaN                  int     // NaN or +-Inf where the CPU path is finite
}

// OK reports whether every element is within tolerance and every masked
// row is O = 0, LSE = -inf.
func (d Diff) OK() bool { return d.BadO == 0 && d.BadLSE == 0 && d.BadMasked == 0 && d.NaN == 0 }

// Compare compares got with want (the CPU path) for rows of dim d.
func Compare(got, want Result, d int, tol Tolerances) Diff {
	var r Diff
	lse := func(g, w []float32) {
		for i := range w {
			if math.IsInf(float64(w[i]), -1) {
				continue
			}
			gi, wi := float64(g[i]), float64(w[i])
			if math.IsNaN(gi) || math.IsInf(gi, 0) {
				r.NaN++
				continue
			}
			e := math.Abs(gi - wi)
			rel := e / (1 + math.Abs(wi))
			r.MaxAbsLSE, r.MaxRelLSE = math.Max(r.MaxAbsLSE, e), math.Max(r.MaxRelLSE, rel)
			if rel > tol.LSE {
				r.BadLSE++
			}
		}
	}
	lse(got.LSE, want.LSE)
	if want.TLSE != nil && got.TLSE != nil {
		lse(got.TLSE, want.TLSE)
	}
	for row := range want.LSE {
		masked := math.IsInf(float64(want.LSE[row]), -1)
		if masked {
			r.Masked++
			bad := !math.IsInf(float64(got.LSE[row]), -1)
			for _, x := range got.O[row*d : (row+1)*d] {
				bad = bad || x != 0
			}
			if bad {
				r.BadMasked++
			}
			continue
		}
		for i := row * d; i < (row+1)*d; i++ {
			gi, wi := float64(got.O[i]), float64(want.O[i])
			if math.IsNaN(gi) || math.IsInf(gi, 0) {
				r.NaN++
				continue
			}
			e := math.Abs(gi - wi)
			rel := e / (1 + math.Abs(wi))
			r.MaxAbsO, r.MaxRelO = math.Max(r.MaxAbsO, e), math.Max(r.MaxRelO, rel)
			if rel > tol.O {
				r.BadO++
			}
		}
	}
	return r
}

// Identical reports whether two results have the same bits (determinism).
func Identical(a, b Result) bool {
	eq := func(x, y []float32) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				return false
			}
		}
		return true
	}
	return eq(a.O, b.O) && eq(a.LSE, b.LSE) && eq(a.TLSE, b.TLSE)
}

// PrefillPairs counts the visible (query, key) pairs per KV head of a
// problem's selection: the work of the prefill is 4 * D * QHPK * pairs
// FLOP (Q.K^T and P.V, 2 FLOP per multiply-add).
func (c *Prefill) PrefillPairs() int64 {
	var pairs int64
	for h := 0; h < c.Hkv; h++ {
		for b := 0; b+1 < len(c.CuQ); b++ {
			seqQ, seqK := int(c.CuQ[b+1]-c.CuQ[b]), int(c.SeqK[b])
			for q := int(c.CuQ[b]); q < int(c.CuQ[b+1]); q++ {
				lim := seqK
				if c.Causal {
					lim = min(lim, q-int(c.CuQ[b])+seqK-seqQ+1)
				}
				for j := 0; j < c.TopK; j++ {
					if blk := int(c.Q2K[(h*c.TotalQ+q)*c.TopK+j]); blk >= 0 {
						pairs += int64(max(0, min(lim, (blk+1)*c.Blk)-blk*c.Blk))
					}
				}
			}
		}
	}
	return pairs
}

// FLOP is the prefill's FLOP count (per KV head pairs x heads per KV head).
func (c *Prefill) FLOP() float64 {
	return 4 * float64(c.D) * float64(c.QHPK) * float64(c.PrefillPairs())
}

// Bytes is the decode's minimum HBM traffic: K and V of every used page,
// Q and O once.
func (c *Decode) Bytes() float64 {
	es := map[cuda.Dtype]float64{cuda.BF16: 2, cuda.E4M3: 1, cuda.NVFP4: 0.5 + 1.0/16}
	var kv float64
	for _, s := range c.SeqUsed {
		pages := (int(s) + c.PageSize - 1) / c.PageSize
		kv += 2 * float64(pages*c.PageSize*c.Hkv*c.D) * es[c.KVD]
	}
	rows := float64(c.Batch * c.SeqlenQ * c.Hq * c.D)
	return kv + rows*es[c.QD] + rows*2
}

// FLOP is the dense decode's FLOP count.
func (c *Decode) FLOP() float64 {
	var keys float64
	for _, s := range c.SeqUsed {
		keys += float64(s)
	}
	return 4 * float64(c.D) * float64(c.Hq*c.SeqlenQ) * keys
}

// SlotRows is the number of (query, KV head, selected block) partial rows:
// the prefill writes and the combine reads QHPK rows of D elements (plus an
// LSE) for each.
func SlotRows(c *Prefill) int64 {
	var n int64
	for _, b := range c.Q2K {
		if b >= 0 {
			n++
		}
	}
	return n
}

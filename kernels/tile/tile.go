package tile

import (
	"math"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
)

// BlockN is the largest number of keys one Block holds.
const BlockN = 128

// Round selects how the unnormalised probabilities P are rounded before the
// P.V product, mirroring the MMA operand dtype of the GPU kernels.
type Round uint8

const (
	// RoundNone keeps P in float32.
	RoundNone Round = iota
	// RoundBF16 rounds P to bfloat16 (round to nearest even).
	RoundBF16
	// RoundE4M3 rounds P to float8 e4m3fn (round to nearest even, saturating).
	RoundE4M3
)

// Block is one block of keys and values packed for the kernels. Load packs
// it once; every Acc.Update that reads it afterwards reuses the packing.
//
// The float32 layouts read V in place: V is already row-major, so Load
// keeps the caller's slice instead of copying it (a 64 KiB copy per block at
// d = 128, which decode, with one small Update per block, would pay on
// every block). The caller must therefore leave v unchanged until the block
// is loaded again or no longer updated from.
type Block struct {
	n, d int
	kt   []float32 // [d][BlockN]: kt[c*BlockN+i] = K[i][c]
	v    []float32 // [n][d] row-major: the v of the last Load, or vnil
	vnil []float32 // [d] zeros: v while no key is loaded

	// wantBF16 asks the next Load for the bf16 twin (SetBF16Products);
	// tier is the tier of the last Load.
	wantBF16 bool
	tier     *tier

	// bf16 layout (the bf16 tiers only, allocated on first use).
	bf16 bool     // true when kb and vb hold the block instead of kt and v
	kb   []uint32 // [roundup(d/2,16)][BlockN] bf16 pairs (K[i][2c], K[i][2c+1])
	vb   []uint32 // [BlockN/2][d] bf16 pairs (V[2i][c], V[2i+1][c])
	kp   []uint32 // scratch: K rows as bf16 pairs before the transpose
	zero []float32
	pad  []float32 // scratch: last partial 16-key tile of K
}

// NewBlock returns an empty block for head dimension d.
func NewBlock(d int) *Block {
	z := make([]float32, d)
	return &Block{d: d, kt: make([]float32, d*BlockN), v: z, vnil: z, tier: active}
}

// SetBF16Products chooses the tier of the loads after it: the active tier
// (off, the default) or its bf16 twin (on, BF16InputTier), which rounds K
// and V to bf16 where it is a bf16 tier. A caller turns it on for the
// blocks of a call whose K and V are values bf16 holds exactly, and
// pairs the block with an accumulator that asks for the same
// (Acc.SetBF16Products). It changes nothing global: blocks of both kinds
// may be loaded concurrently.
func (b *Block) SetBF16Products(on bool) { b.wantBF16 = on }

// pick returns the tier a Load or Reset runs under: the bf16 twin when
// asked for, else the active tier.
func pick(bf16 bool) *tier {
	if bf16 {
		return twin
	}
	return active
}

// setV keeps the n rows of v as the block's values (float32 layouts).
func (b *Block) setV(n int, v []float32) {
	if n == 0 {
		b.v = b.vnil // kernels take &v[0] even when they read no key
		return
	}
	b.v = v[: n*b.d : n*b.d]
}

// N returns the number of keys loaded.
func (b *Block) N() int { return b.n }

// Load packs n <= BlockN keys and values; k and v are [n][d] row-major
// float32, under the active tier or its bf16 twin (SetBF16Products). The
// float32 tiers keep v itself (see Block): leave it unchanged while the
// block is in use.
func (b *Block) Load(n int, k, v []float32) {
	if n < 0 || n > BlockN {
		panic("tile: Block.Load: n out of range")
	}
	if len(k) < n*b.d || len(v) < n*b.d {
		panic("tile: Block.Load: k or v shorter than n*d")
	}
	b.n = n
	b.bf16 = false
	b.tier = pick(b.wantBF16)
	b.tier.load(b, n, k, v)
}

// Acc is the running state of an online softmax over up to maxM query rows.
type Acc struct {
	m, d, maxM int
	q          []float32 // [maxM][d], scaled to base 2
	o          []float32 // [maxM][d], unnormalised until Finish
	mx         []float32 // running max of base-2 scores
	sum        []float32 // running sum of exp2(s - mx)
	tsum       []float32 // running sum of exp2((s - mx) * invT)
	scale      float32   // softmax_scale * log2(e)
	invT       float32
	temp       bool
	round      Round
	s          []float32 // scratch scores [maxM][BlockN]
	alpha      []float32 // scratch: per-row rescale factor of one Update
	q2         []uint32  // bf16 tier: q as bf16 pairs [maxM][d/2]
	q2Set      bool      // q2 was filled by SetQBF16 (no conversion of q)
	fresh      bool      // Reset since the last update: o[:m*d] not yet zeroed (settle)
	l2         []float64 // scratch: log2 of the row sums (finish)
	pf         hints     // ranges the next Update prefetches (Prefetch)
	wantBF16   bool      // the next Reset takes the bf16 twin (SetBF16Products)
	tier       *tier     // the tier of the current accumulation, set by Reset
}

// NewAcc returns an accumulator for up to maxM rows of head dimension d.
func NewAcc(maxM, d int) *Acc {
	return &Acc{
		d: d, maxM: maxM,
		q: make([]float32, maxM*d), o: make([]float32, maxM*d),
		mx: make([]float32, maxM), sum: make([]float32, maxM), tsum: make([]float32, maxM),
		s: make([]float32, maxM*BlockN), alpha: make([]float32, maxM),
		l2: make([]float64, 2*maxM), tier: active,
	}
}

// SetBF16Products chooses the tier of the accumulations that start after
// it (Reset): the active tier (off, the default) or its bf16 twin (on,
// BF16InputTier), which rounds Q, K, V and P to bf16 before the products
// where it is a bf16 tier. Update takes blocks loaded under a tier of the
// same layout (Block.SetBF16Products with the same setting). It changes
// nothing global: accumulations of both kinds may run concurrently.
func (a *Acc) SetBF16Products(on bool) { a.wantBF16 = on }

// Reset starts a new accumulation over m rows, under the active tier or its
// bf16 twin (SetBF16Products). scale is softmax_scale*log2(e):
// scores are s = scale * (q . k), in base 2. round selects the P rounding;
// invT > 0 additionally tracks the temperature sum (logits divided by T,
// invT = 1/T); invT == 0 disables it.
func (a *Acc) Reset(m int, scale float32, round Round, invT float32) {
	if m < 0 || m > a.maxM {
		panic("tile: Acc.Reset: m out of range")
	}
	a.m, a.scale, a.round, a.invT, a.temp = m, scale, round, invT, invT > 0
	a.tier = pick(a.wantBF16)
	a.q2Set = false
	a.fresh = true // O is zeroed lazily: settle, or the first SIMD update writes it
	for r := 0; r < m; r++ {
		a.mx[r] = float32(math.Inf(-1))
		a.sum[r] = 0
		a.tsum[r] = 0
	}
}

// M returns the number of rows of the current accumulation.
func (a *Acc) M() int { return a.m }

// Q returns row r of the query buffer, to be filled by the caller with the
// decoded (unscaled) query row.
func (a *Acc) Q(r int) []float32 { return a.q[r*a.d : (r+1)*a.d] }

// QRows returns rows r .. r+n-1 of the query buffer ([n][d], contiguous),
// to be filled by the caller like Q.
func (a *Acc) QRows(r, n int) []float32 { return a.q[r*a.d : (r+n)*a.d] }

// SetQBF16 fills query rows r, r+1, ... from bfloat16 bit patterns (bits
// holds whole rows of d values) in place of Q and QRows, and reports
// whether it did. Only an accumulation of a bf16 tier (Reset under it)
// with d a multiple of 16 keeps the queries as bf16; there the bits go
// into its bf16 buffer as they are,
// which is exactly what the update's own rounding of the float32 rows
// would give for values that came from bf16, and saves both conversions.
// When it reports false (any other tier or d) nothing is written: fill
// QRows instead. Either every row of an accumulation is set this way or
// none (Reset starts over).
func (a *Acc) SetQBF16(r int, bits []lowp.BFloat16) bool {
	d := a.d
	if !a.bf16Layout() {
		return false
	}
	n := len(bits) / d
	if len(bits)%d != 0 || r < 0 || r+n > a.maxM {
		panic("tile: Acc.SetQBF16: rows out of range")
	}
	d2 := d / 2
	// A pair holds value 2c in its low half and 2c+1 in its high half: on
	// a little-endian machine (the bf16 tier is amd64 only) that is the
	// bits' own order in memory.
	dst := a.qPairs()[r*d2 : (r+n)*d2]
	copy(unsafe.Slice((*lowp.BFloat16)(unsafe.Pointer(unsafe.SliceData(dst))), 2*len(dst)), bits)
	a.q2Set = true
	return true
}

// qPairs returns the bf16 tier's query buffer (bf16 pairs, [maxM][d/2]),
// allocated on first use.
func (a *Acc) qPairs() []uint32 {
	if n := a.maxM * a.d / 2; len(a.q2) < n {
		a.q2 = make([]uint32, n)
	}
	return a.q2
}

// bf16Layout reports whether the accumulation's blocks and queries are
// kept as bf16 pairs: its tier packs bf16 and d is a multiple of 16.
func (a *Acc) bf16Layout() bool { return a.tier.bf16 && a.d%16 == 0 }

// O returns row r of the output; it is normalised after Finish.
func (a *Acc) O(r int) []float32 {
	a.settle()
	return a.o[r*a.d : (r+1)*a.d]
}

// ORows returns rows r .. r+n-1 of the unnormalised output ([n][d],
// contiguous), like O for several rows at once.
func (a *Acc) ORows(r, n int) []float32 {
	a.settle()
	return a.o[r*a.d : (r+n)*a.d]
}

// settle zeroes the output rows of an accumulation that no update has
// written yet. Reset leaves them as they were so that the SIMD tiers'
// first update can write O instead of clearing it and then rescaling the
// zeros; every other reader of o goes through O, ORows or settle.
func (a *Acc) settle() {
	if a.fresh {
		clear(a.o[:a.m*a.d])
		a.fresh = false
	}
}

// Update folds one block into the accumulation. valid[r] (0..b.N()) is the
// number of leading keys row r may see; rows with valid[r] == 0 are untouched.
func (a *Acc) Update(b *Block, valid []int32) {
	if len(valid) < a.m {
		panic("tile: Acc.Update: valid shorter than m")
	}
	if a.m == 0 {
		return
	}
	if b.d != a.d {
		panic("tile: Acc.Update: block and accumulator head dims differ")
	}
	if b.bf16 != a.bf16Layout() {
		panic("tile: Acc.Update: block was loaded under a tier with another layout than the accumulation's (SetTier or SetBF16Products); reload it")
	}
	a.tier.update(a, b, valid)
	a.pf.set(nil)
}

// Prefetch hints memory the caller will read after the next Update (in
// sparse prefill, the next tile's query rows): the SIMD update prefetches
// the ranges into L2 line by line, in equal shares between its row groups,
// so that their DRAM reads overlap the arithmetic. At most 16 ranges are
// kept; the hint is consumed by the next Update, and the portable tier
// ignores it. Prefetching never faults, but the ranges should lie in
// memory the caller keeps alive. On Zen 4 a tile gathering its query rows
// from a large Q runs at 70% of the FMA peak without the hint and 74-77%
// with it; prefetching the partial rows the tile writes afterwards (for
// ownership) is 2 points slower and is not done (`go test ./kernels/attn
// -run '^$' -bench PrefillTile`, its stream cases).
func (a *Acc) Prefetch(h []Hint) { a.pf.set(h) }

// Finish normalises every row. lse[r] receives the natural-log log-sum-exp of
// the scaled scores (-inf and a zero row when no key was visible); tlse, when
// temperature tracking is on and tlse is non-nil, the same for logits / T.
func (a *Acc) Finish(lse, tlse []float32) {
	a.finish(lse, tlse, nil)
}

// FinishLSE is Finish without the normalisation of O: it writes the LSEs
// and inv[r], the factor that normalises row r (1/sum, or 0 for a row that
// saw no key; such a row of O is all zero). Callers that convert O anyway
// fold inv into the conversion and save one pass over O.
func (a *Acc) FinishLSE(lse, tlse, inv []float32) {
	a.finish(lse, tlse, inv[:a.m])
}

// finish implements Finish (inv == nil: normalise O in place) and FinishLSE.
func (a *Acc) finish(lse, tlse, inv []float32) {
	normalise := inv == nil
	if normalise {
		inv = a.alpha[:a.m] // scratch: alpha only lives within an Update
	}
	rowLSEs(a.mx[:a.m], a.sum[:a.m], a.tsum[:a.m], a.invT, a.temp && tlse != nil, lse, tlse, inv, a.l2)
	if !normalise {
		return
	}
	for r := 0; r < a.m; r++ {
		o := a.O(r)
		if sawNoKey(a.sum[r], a.mx[r]) {
			clear(o)
			continue
		}
		f := inv[r]
		for c := range o {
			o[c] *= f
		}
	}
}

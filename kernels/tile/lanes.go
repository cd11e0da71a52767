package tile

import (
	"math"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
)

// LanesMaxM is the largest number of query rows of a Lanes accumulator: one
// AVX-512 vector of float32.
const LanesMaxM = 16

// Lanes is an online-softmax accumulator for at most 16 query rows with the
// semantics of Acc (base-2 scores s = scale*(q.k), prefix masks valid[r],
// P = exp2(s - rowmax) with the row sum taken from the unrounded P, optional
// P rounding, temperature sums, natural-log LSE). It is meant for decode,
// where m = seqlen_q * qhead_per_kv is small: instead of transposing every
// key block (Block.Load) for a few rows of work, it keeps the rows in the
// SIMD lanes. K and V are read row-major straight from the caller's memory,
// so a block needs no packing. Scores and P are kept transposed (s[16*i+r]
// = key i, row r), and the online softmax runs vertically over the key
// vectors (one running max, sum and alpha per lane).
//
// Q and O are stored transposed, one 16-float vector per column (q[r][c]
// at 16c+r): a column of Q, or a key's P^T (which the softmax writes lane
// = row), is one zmm (AVX-512 kernels, lanes_avx512_amd64.s; tiers avx512,
// avx512bf16, avx512bf16-emulated, all of which use the float32 lane
// kernels unless the caller asks for bf16 products, SetBF16Products) or two ymm halves (AVX2 kernels, lanes_avx2_amd64.s; avx2 tier)
// shared by the broadcast K or V scalars of several keys or columns. Each
// lane sums its row's dot product in column order and its P.V sums in key
// order, one FMA per product. The portable code uses the same layout.
//
// Where the bf16 twin (BF16InputTier) is avx512bf16, for d a multiple of
// 32, a Lanes whose caller asks for bf16 products (SetBF16Products: the
// query-major prefill, not decode) runs both products on VDPBF16PS with
// the same lane layout (lanes_bf16_amd64.go), with the rounding of that
// tier's Acc.
//
// On the amxbf16 tier (active, or the twin of a Lanes asking for bf16
// products), for d a multiple of 32, both products run on AMX tiles
// instead (the AMX lane path, lanes_amx_amd64.go): the same softmax
// kernel and lane state, O kept row-major in o, the bf16 operands exact
// for the values decode stores, the additions in TDPBF16PS's order.
//
// Both SIMD kernel sets need d to be a multiple of 8; otherwise, on the
// generic tier and on other platforms, the portable code of
// lanes_generic.go runs, which computes exactly what the generic Acc tier
// computes. The kernels differ from it by FMA contraction and the
// vectorised exp2 (< 1 ulp); dot products, row sums and P.V sums are
// accumulated in the same order.
//
// A Lanes is not safe for concurrent use.
type Lanes struct {
	d, m  int
	kern  lanesKern // kernels of this accumulation, set by Reset
	qT    []float32 // Q transposed (q[r][c] at 16c+r), unscaled
	oT    []float32 // unnormalised output, transposed like qT
	o     []float32 // [16][d]: O row-major, filled by FinishLSE
	s     []float32 // [BlockN][16]: scores, then P (transposed)
	st    lanesState
	temp  bool
	round Round
	// pfK and pfV are the prefetch cursors of the Q.K and P.V kernels
	// (PrefetchNext); idle, they point at s with step 0.
	pfK, pfV lanesPrefetch
	// kst and vst are the double buffers of the pipelined staging
	// (WideningStager), cv the side conversion of the next kernel call.
	kst, vst [2][]float32
	cv       lanesConv
	// kNext is the WidenNext hint for the next update; kPre the key rows
	// the last update widened ahead into kst[0] for the one after it.
	kNext, kPre lanesAhead
	// amx holds the bf16 operands of the AMX lane path (amxbf16 tier),
	// allocated by its first update; amxQ says that its query pairs are
	// those of the current queries (cleared by Reset and SetQ).
	amx  *amxLanes
	amxQ bool
	// vStaged: a value chunk of this accumulation was staged, so the
	// stager's overflow guard may scale the later ones (the paths that
	// read bf16 values in place, AMX, AVX2 and AVX-512 on the in-place
	// route, then stage them too; see amxRawValues and rawValues).
	vStaged bool
	// bf16 asks for the bf16-product lane kernels (SetBF16Products).
	bf16 bool
	// bf16QK asks for VDPBF16PS scores on exact bf16 operands
	// (SetBF16Scores); qkBF16 says that the current accumulation may run
	// them (Reset), qExact that its queries are bf16 values (checked with
	// their pairs, amxQ).
	bf16QK, qkBF16, qExact bool
}

// lanesAhead names rows rows of narrow keys at src whose side conversion
// has kind kind (rows 0: none). src is an address the caller keeps alive.
type lanesAhead struct {
	src        uintptr
	kind, rows int
}

// lanesConv is a side conversion of the AVX-512 lane kernels: units blocks
// of 64 values at src widened to float32 at dst (kind: e4m3fn bytes, bf16,
// or bf16 whose largest finite |x| bits are also folded into max), one
// block every per loop iterations (cd counts down to the next). Its layout
// (offsets 0-64) is fixed by asmgen/lanes/gen.go. src and dst are
// addresses, not pointers: the kernels advance them past the end of their
// buffers, which the caller keeps alive.
type lanesConv struct {
	src, dst uintptr
	units    int
	cd, per  int
	tab      *E4M3Tables
	kind     int
	_        int
	max      [16]uint32
}

// The lanesConv kinds (asmgen/lanes/gen.go: kindE4M3, kindBF16, kindBF16M).
const (
	convE4M3 = iota
	convBF16
	convBF16Max
)

// lanesPrefetch is a prefetch cursor of the lane kernels: every loop
// iteration prefetches the line at addr, then advances addr by step, up to
// last. Its layout (offsets 0, 8, 16) is fixed by asmgen/lanes/gen.go.
type lanesPrefetch struct{ addr, step, last uintptr }

// lanesKern is the kernel set of a Lanes accumulation. It is fixed by
// Reset from the active tier, its bf16 twin (SetBF16Products) and d
// (lanesKernFor, lanesBF16Kern), so an accumulation keeps its kernels even
// if the tier changes before it finishes.
type lanesKern uint8

const (
	lanesGeneric lanesKern = iota // lanes_generic.go
	lanesAVX2                     // lanes_avx2_amd64.s
	lanesAVX512                   // lanes_avx512_amd64.s
	lanesAMX                      // lanes_amx_amd64.go: AMX tiles (amxbf16 tier)
	lanesBF16                     // lanes_bf16_amd64.go: VDPBF16PS (avx512bf16 twin, SetBF16Products)
)

// lanesState is the per-lane state read and written by the softmax kernel;
// its layout (offsets 0, 64, ..., 320, 324, 328) is fixed by
// asmgen/lanes/gen.go.
type lanesState struct {
	valid                [16]int32   // keys visible to each lane in this Update (0 for lanes >= m)
	mx, sum, tsum, alpha [16]float32 // running max, sum, temperature sum; alpha of this Update
	scale, invT          float32     // invT is 0 when temperature tracking is off
	round                int32
	_                    int32
}

// LanesSIMD reports whether Lanes runs SIMD kernels for head dimension d
// under the active tier (AVX-512 or AVX2, d a multiple of 8); otherwise its
// portable code runs, and Acc over a Block is the faster accumulator.
func LanesSIMD(d int) bool { return lanesKernFor(d) != lanesGeneric }

// NewLanes returns an accumulator for up to 16 rows of head dimension d.
func NewLanes(d int) *Lanes {
	if d <= 0 {
		panic("tile: NewLanes: d must be positive")
	}
	return &Lanes{
		d:  d,
		qT: make([]float32, d*16), oT: make([]float32, d*16),
		o: make([]float32, 16*d), s: make([]float32, BlockN*16),
	}
}

// SetBF16Products chooses, for the accumulations that start after it
// (Reset), between the lane kernels of the active tier (off, the default)
// and the bf16-product ones of its bf16 twin (on, BF16InputTier) where the
// twin has them, for d a multiple of 32: Q, K and V are rounded to bf16
// (nearest even), P is rounded as the accumulation's Round and then to
// bf16, and both products run with float32 accumulation, on VDPBF16PS
// (avx512bf16, lanes_bf16_amd64.go) or AMX tiles (amxbf16, the AMX lane
// path), the rounding of that tier's Acc. Other head dimensions, and a
// twin without bf16 products, keep the active tier's kernels (the amxbf16
// tier, when active, its AMX lane path either way). It changes nothing
// global: lane groups of both kinds may run concurrently.
func (l *Lanes) SetBF16Products(on bool) { l.bf16 = on }

// SetBF16Scores chooses, for the accumulations that start after it
// (Reset), whether the AVX-512 lane kernels compute Q.K with VDPBF16PS
// where that changes no operand. The caller turns it on only where every
// key is a bf16 value (bf16 or e4m3fn storage): the keys are read in
// place as bf16 rows or staged and converted to bf16, which is then
// exact. It applies on a CPU with AVX512_BF16 (whatever the active tier)
// whose AVX-512 lane kernels read in place (the AMD route,
// EnvInPlace512), for d a multiple of 32, while every query set by SetQ
// is a bf16 value (checked once per accumulation). The products of two bf16 values are exact
// in float32, so only the order of the float32 additions differs from
// the float32 kernels (VDPBF16PS adds the odd element of each pair first)
// and subnormal inputs and sums are flushed to zero; P and P.V are those
// of the float32 kernels. The result is not bit for bit that of the
// float32 kernels but carries the same float32 accumulation error; it
// is the same for every worker count, like them.
func (l *Lanes) SetBF16Scores(on bool) { l.bf16QK = on }

// LanesBF16Scores reports whether SetBF16Scores takes effect for head
// dimension d under the active tier: the AVX-512 lane kernels on a CPU
// with AVX512_BF16 whose kernels read bf16 rows in place.
func LanesBF16Scores(d int) bool { return lanesKernFor(d) == lanesAVX512 && lanesBF16ScoresOK(d) }

// BF16Lanes reports whether the current accumulation runs the
// bf16-product lane kernels (SetBF16Products).
func (l *Lanes) BF16Lanes() bool { return l.kern == lanesBF16 }

// D returns the head dimension.
func (l *Lanes) D() int { return l.d }

// M returns the number of rows of the current accumulation.
func (l *Lanes) M() int { return l.m }

// Reset starts a new accumulation over m <= 16 rows, with the parameters of
// Acc.Reset: scale is softmax_scale*log2(e), round the P rounding, invT > 0
// tracks the temperature sum (invT = 1/T). The queries of rows >= m are
// zeroed; SetQ sets rows < m. The accumulation runs the lane kernels of the
// tier active at Reset.
func (l *Lanes) Reset(m int, scale float32, round Round, invT float32) {
	if m < 0 || m > LanesMaxM {
		panic("tile: Lanes.Reset: m out of range [0, 16]")
	}
	l.m, l.round, l.temp = m, round, invT > 0
	l.kern = lanesKernFor(l.d)
	if l.bf16 && l.kern == lanesAVX512 {
		if k, ok := lanesBF16Kern(l.d); ok {
			l.kern = k
		}
	}
	l.qkBF16 = l.bf16QK && l.kern == lanesAVX512 && lanesBF16ScoresOK(l.d)
	l.st.scale, l.st.round = scale, int32(round)
	l.st.invT = 0
	if l.temp {
		l.st.invT = invT
	}
	clear(l.qT)
	clear(l.oT)
	if l.kern == lanesAMX {
		clear(l.o) // the AMX path accumulates O in place, row-major
	}
	l.amxQ, l.vStaged = false, false
	l.kNext, l.kPre = lanesAhead{}, lanesAhead{}
	ninf := float32(math.Inf(-1))
	for r := range 16 {
		l.st.mx[r], l.st.sum[r], l.st.tsum[r], l.st.alpha[r], l.st.valid[r] = ninf, 0, 0, 1, 0
	}
}

// SetQ sets row r's query (len d, unscaled), stored transposed.
func (l *Lanes) SetQ(r int, q []float32) {
	if r < 0 || r >= l.m {
		panic("tile: Lanes.SetQ: row out of range")
	}
	q = q[:l.d]
	for c, x := range q {
		l.qT[c<<4|r] = x
	}
	l.amxQ = false
}

// Update folds one block of n <= BlockN keys into the accumulation. k and v
// are [n][d] row-major float32 (read in place, not packed); valid[r] in
// [0, n] is the number of leading keys row r may see (rows with valid[r] ==
// 0 are untouched).
func (l *Lanes) Update(k, v []float32, n int, valid []int32) {
	if n < 0 || n > BlockN {
		panic("tile: Lanes.Update: n out of range")
	}
	if len(k) < n*l.d || len(v) < n*l.d {
		panic("tile: Lanes.Update: k or v shorter than n*d")
	}
	l.kNext, l.kPre = lanesAhead{}, lanesAhead{} // consumed: nothing to widen ahead here
	nmax := l.setValid(n, valid)
	if nmax == 0 {
		return
	}
	if l.kern != lanesGeneric {
		lanesUpdateSIMD(l, k, v, nmax)
	} else {
		lanesUpdateGeneric(l, k, v, nmax)
	}
}

// Stager supplies a block's keys and values to Lanes.UpdateStaged a few
// rows at a time, converted to float32 on demand.
type Stager interface {
	// StageK returns key rows [i0, i1) of the block as [i1-i0][d]
	// row-major float32 (0 <= i0 < i1 <= BlockN). The slice must stay
	// valid until the next StageK call.
	StageK(i0, i1 int) []float32
	// StageV is StageK for the value rows (its slice must stay valid until
	// the next StageV call).
	StageV(i0, i1 int) []float32
}

// RawFormat is the storage format of K/V rows a WideningStager offers to
// the lane kernels.
type RawFormat uint8

// EnvInPlace512 is the environment variable that forces how the AVX-512
// lane kernels take the e4m3fn and bf16 rows a WideningStager offers:
// MSA_AVX512_IN_PLACE=1 reads them in place (e4m3fn through a float32
// table, bf16 widened in registers), 0 widens them chunk by chunk between
// the multiply-adds (e4m3fn with AVX512_VBMI, staged where the CPU lacks
// it). Unset, AMD cores read in place and the others widen. The results
// are the same bits either way; it exists to measure both routes on a new
// CPU (BenchmarkDecodeBlock in attn).
const EnvInPlace512 = "MSA_AVX512_IN_PLACE"

// The formats the lane kernels widen (RawNone: the rows are staged).
const (
	RawNone RawFormat = iota
	RawE4M3           // float8 e4m3fn, one byte per value
	RawBF16           // bfloat16, two bytes per value
	// RawE4M3Div256 is e4m3fn bytes whose staged rows hold value / 256
	// (exact), as attn's AVX2 decode stages them (it puts the factor back
	// in its score scale and output normalisation): the AVX2 lane kernels
	// read such chunks in place, each byte through a table of value / 256.
	RawE4M3Div256
)

// WideningStager is a Stager whose rows can also be read in the narrow
// format they are decoded from (e4m3fn or bf16). UpdateStaged then has the
// lane kernels read them instead of calling StageK / StageV, with
// bit-identical results: the AVX2 kernels read bf16 and RawE4M3Div256
// chunks in place (any d), widening each value in registers or through a
// table; the AVX-512 kernels read bf16 and e4m3fn chunks in place the same
// way on AMD cores (any d), and otherwise widen each bf16 chunk, and
// e4m3fn chunks where the CPU has AVX512_VBMI, inside the kernels of the
// chunk before it (d a multiple of 64), where the conversion overlaps
// their multiply-adds.
type WideningStager interface {
	Stager
	// RawK returns the storage of key rows [i0, i1) and its format when
	// they are one contiguous run of (i1-i0)*d values whose plain widening
	// to float32 is what StageK returns, else nil (StageK is then called).
	// The storage must stay valid until the update returns.
	RawK(i0, i1 int) (unsafe.Pointer, RawFormat)
	// RawV is RawK for the value rows and StageV. It may be asked for a
	// chunk's rows before the scores of the same rows as well as before
	// its values (the VDPBF16PS path interleaves them early); the answer
	// before the values is the one that counts. scan says that StageV
	// also guards the widened values: the kernels then find the largest
	// finite |v| of the chunk while widening it (bf16 only) and
	// UpdateStaged hands both to GuardV after the previous chunk's P.V
	// and before the chunk's own, where StageV would have run. nil also
	// when StageV transforms the values in any other way.
	RawV(i0, i1 int) (p unsafe.Pointer, f RawFormat, scan bool)
	// GuardV does to a widened value chunk v what StageV does after
	// widening (it may scale v in place); maxBits is the largest finite
	// |x| float32 bit pattern among v's values (0 when there is none).
	// The AMX lane path (amxbf16 tier) relies on the guard being attn's
	// power-of-two shift: a chunk whose maxBits is at most GuardLimitBits
	// is left as it is unless the shift was raised before (by a larger
	// maximum, or in StageV), and it calls GuardV with no values for such
	// chunks of bf16 rows it reads in place.
	GuardV(v []float32, maxBits uint32)
}

// GuardLimitBits is the float32 bit pattern of 2^96, the largest finite
// value magnitude that decode's V overflow guard leaves unscaled (attn's
// vScale; see WideningStager.GuardV).
const GuardLimitBits = (127 + 96) << 23

// lanesChunks are the rows UpdateStaged asks for per StageK (a multiple of
// the 12- and 6-key Q.K groups) and per StageV, per kernel set, chosen with
// `go test ./kernels/attn -run '^$' -bench DecodeBlock -benchtime 4000x`
// (% of the FMA peak of one 128-key block, in cache and streaming from
// DRAM):
//
//   - AVX-512: 64 K rows and 64 V rows. Where the kernels widen each next
//     chunk (WideningStager), 64/64 beats 48/64 and 128/64 on Zen 4 with
//     the route forced (in cache e4m3 87.4-87.9% against 83.5-86.8% and
//     86.2-87.4%, bf16 85.4-86.2% against 81.4-84.3%): with 64 K rows the
//     last Q.K chunk has enough loop iterations to widen the whole first V
//     chunk. The double buffers hold 2 x 2 x 32 KiB of float32 at d = 128,
//     in L2. Read in place (lanesInPlace512), 48/48 to 128/128 are within
//     a point of each other.
//   - AVX2: 64 K rows and 64 V rows. Read in place, 48/48 to 128/128 are
//     within the noise of each other (in cache 85.8-86.9%, streaming
//     76.2-79.1% on Zen 4); staged by the caller, 24/16-row chunks are
//     5-8% slower than 48/64 on Zen 3 (staged=e4m3): the transposed
//     kernels stream their operands well from L2, and fewer chunks mean
//     fewer conversion and kernel calls.
//
// The AMX lane path takes 64 and 64 rows (multiples of its 16-key groups
// and 32-key steps; a chunk of bf16 operands then fills 16 KiB at d =
// 128). The portable code takes whole blocks (UpdateStaged's generic
// branch); its entry only keeps the table total.
var lanesChunks = [...]struct{ k, v int }{
	lanesGeneric: {BlockN, BlockN},
	lanesAVX2:    {64, 64},
	lanesAVX512:  {64, 64},
	lanesAMX:     {64, 64},
	lanesBF16:    {64, 64},
}

// UpdateStaged is Update with the block's n keys and values taken from src
// instead of whole float32 arrays: the lane kernels ask for a few key rows
// and value rows at a time (lanesChunks), so a caller that converts K and V
// from a narrow format (FP8, BF16) converts into a small buffer that stays
// in cache, instead of writing the whole block (128 KiB of float32 at d =
// 128) out and reading it back. Only the first max(valid) rows are
// requested. The result is bit-identical to Update on the same values:
// every kernel call computes what it computes in Update, and the P.V
// kernels of later value chunks continue the same sums without rescaling.
func (l *Lanes) UpdateStaged(n int, valid []int32, src Stager) {
	if n < 0 || n > BlockN {
		panic("tile: Lanes.UpdateStaged: n out of range")
	}
	// A WidenNext hint and keys widened ahead serve this update only.
	ahead, pre := l.kNext, l.kPre
	l.kNext, l.kPre = lanesAhead{}, lanesAhead{}
	nmax := l.setValid(n, valid)
	if nmax == 0 {
		return
	}
	if l.kern != lanesGeneric {
		lanesUpdateStagedSIMD(l, src, nmax, ahead, pre)
		return
	}
	k := src.StageK(0, nmax)
	v := src.StageV(0, nmax)
	if len(k) < nmax*l.d || len(v) < nmax*l.d {
		panic("tile: Lanes.UpdateStaged: staged rows shorter than requested")
	}
	lanesUpdateGeneric(l, k, v, nmax)
}

// setValid checks valid against n and the rows, copies it into the lane
// state and returns the largest prefix (0: no row sees a key).
func (l *Lanes) setValid(n int, valid []int32) int {
	if len(valid) < l.m {
		panic("tile: Lanes.Update: valid shorter than m")
	}
	nmax := 0
	for r := 0; r < l.m; r++ {
		x := valid[r]
		if x < 0 || int(x) > n {
			panic("tile: Lanes.Update: valid out of range [0, n]")
		}
		l.st.valid[r] = x
		nmax = max(nmax, int(x))
	}
	return nmax
}

// FinishLSE writes, like Acc.FinishLSE, the natural-log LSE of every row
// (-inf for a row that saw no key), the temperature LSE when temperature
// tracking is on and tlse is non-nil, and inv[r], the factor that normalises
// row r (1/sum, or 0 for a row that saw no key, whose O is zero). It also
// transposes the unnormalised output once: O(r) is valid afterwards.
func (l *Lanes) FinishLSE(lse, tlse, inv []float32) {
	m, d := l.m, l.d
	var l2 [2 * LanesMaxM]float64
	rowLSEs(l.st.mx[:m], l.st.sum[:m], l.st.tsum[:m], l.st.invT, l.temp && tlse != nil, lse, tlse, inv[:m], l2[:])
	if l.kern == lanesAMX {
		return // O is accumulated row-major
	}
	for r := 0; r < m; r++ {
		o := l.o[r*d : (r+1)*d]
		for c := range o {
			o[c] = l.oT[c<<4|r]
		}
	}
}

// ScaleO multiplies the unnormalised output accumulated so far (every row)
// by f. Callers rescale by powers of two, which is exact.
func (l *Lanes) ScaleO(f float32) {
	o := l.oT
	if l.kern == lanesAMX {
		o = l.o
	}
	for i := range o {
		o[i] *= f
	}
}

// PrefetchNext hints the storage of the block that will be read after the
// next Update or UpdateStaged: kBytes at k and vBytes at v (typically the
// following K/V block, still in its narrow format). The SIMD kernels of the
// next update prefetch it into L2 line by line (PREFETCHT1), spread over
// their loop iterations (K during the Q.K kernels, V during the P.V
// kernels), so that the following block's DRAM reads overlap this block's
// arithmetic instead of stalling its conversion: PREFETCHT1 spread over
// the iterations, rather than PREFETCHT0 or one burst per block between
// kernels, which are slower end to end. BenchmarkDecodeBlock (attn)
// shows the hint's gain as dram=<format>/prefetch=on against
// prefetch=off. The hint is consumed by the
// next update; the portable code ignores it. Prefetching
// never faults, but the ranges should lie in memory the caller keeps alive.
func (l *Lanes) PrefetchNext(k unsafe.Pointer, kBytes int, v unsafe.Pointer, vBytes int) {
	l.pfK, l.pfV = prefetchRange(k, kBytes), prefetchRange(v, vBytes)
}

// WidenNext hints that the next UpdateStaged's first key rows are the
// rows rows of format f at k (one contiguous run, as the stager's RawK
// would return them): the lane kernels of this update's last value chunk
// widen them ahead, and the next update uses them when its stager's RawK
// returns the same storage and format for at most that many rows; the
// result is the same either way. The rows must stay unchanged until the
// next update returns. The hint is consumed by the next update (staged or
// not) and dropped by Reset; the AVX-512 kernels off the in-place route
// act on bf16 rows, and on e4m3fn rows where the CPU has AVX512_VBMI;
// kernels that read the rows in place ignore it.
func (l *Lanes) WidenNext(k unsafe.Pointer, f RawFormat, rows int) {
	l.kNext = lanesAhead{}
	if kind, ok := l.convKind(f, false); ok && k != nil && rows > 0 {
		l.kNext = lanesAhead{src: uintptr(k), kind: kind, rows: rows}
	}
}

// widensRaw reports whether l's kernels widen the narrow rows a
// WideningStager offers ahead, between their multiply-adds, rather than
// read them in place: the AVX-512 ones off the in-place route
// (lanesInPlace512).
func (l *Lanes) widensRaw() bool { return l.kern == lanesAVX512 && !lanesInPlace512 }

// convKind returns the side conversion kind for rows of format f (scan:
// with the finite-maximum scan of a guarded V chunk), false where l's
// kernels do not widen them ahead: off the in-place route
// (lanesInPlace512, which reads both formats in place), the AVX-512
// kernels widen e4m3fn rows without a scan (AVX512_VBMI needed) and bf16
// rows; the others none.
func (l *Lanes) convKind(f RawFormat, scan bool) (int, bool) {
	if !l.widensRaw() {
		return 0, false
	}
	switch {
	case f == RawE4M3 && haveVBMI && !scan:
		return convE4M3, true
	case f == RawBF16 && scan:
		return convBF16Max, true
	case f == RawBF16:
		return convBF16, true
	}
	return 0, false
}

// WidenE4M3x64 widens src (a multiple of 64 values) into dst, bit-identical
// to lowp.DecodeE4M3: with the lane kernels' AVX512_VBMI conversion where
// the CPU has AVX512_VBMI and AVX512BW (amd64 assembly), else with
// lowp.DecodeE4M3.
func WidenE4M3x64(dst []float32, src []lowp.Float8E4M3FN) {
	n := len(src)
	if n%64 != 0 || len(dst) < n {
		panic("tile: WidenE4M3x64: want a multiple of 64 values and room for them")
	}
	if !haveVBMI || n == 0 {
		lowp.DecodeE4M3(dst[:n], src)
		return
	}
	widenE4M3VBMI(dst[:n], src)
}

// prefetchRange is a cursor over n bytes at p, its step still to be set
// (prefetchSteps); the zero cursor when the range is empty.
func prefetchRange(p unsafe.Pointer, n int) lanesPrefetch {
	if p == nil || n <= 0 {
		return lanesPrefetch{}
	}
	return lanesPrefetch{addr: uintptr(p), last: uintptr(p) + uintptr(n-1)}
}

// O returns row r of the unnormalised output (scale it by inv[r]); valid
// after FinishLSE.
func (l *Lanes) O(r int) []float32 { return l.o[r*l.d : (r+1)*l.d] }

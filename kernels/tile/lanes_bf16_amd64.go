//go:build amd64 && !purego

package tile

import (
	"math"
	"unsafe"
)

// The bf16-product lane kernels: Lanes on the avx512bf16 tier when its
// caller asks for them (SetBF16Products; head dimensions that are a
// multiple of 32). The lane layout and softmax are those of the float32
// lane kernels (scores and P transposed in Lanes.s, O transposed in
// Lanes.oT), and the operands those of the AMX lane path, in the
// buffers of amxLanes (cfg and pa unused):
//
//   - S^T = Q.K^T (lanesQKBF16): the query pairs qb ([d/2][16]: pair p of
//     lane r = Q[r][2p], Q[r][2p+1]) times each key's pairs broadcast,
//     the keys as bf16 rows (converted into kb, or read in place where the
//     stager offers bf16 rows);
//   - O^T = alpha*O^T + P.V (lanesPVBF16): P's key pairs pt ([n/2][16]:
//     pair j of lane r = P[r][2j], P[r][2j+1], bf16Pairs of the transposed
//     P) times the value pairs vb broadcast ([n/2][d]: rows 2j and 2j+1
//     interleaved column by column), value chunk by value chunk like the
//     float32 P.V kernels.
//
// Every conversion rounds to nearest even (VCVTNE2PS2BF16): Q, K and V
// to bf16, P as the accumulation's Round (softmax) and then to bf16, the
// row sums taken from the unrounded P; the products of two bf16 values
// are exact and VDPBF16PS accumulates them in float32, odd element first.
// That is what the avx512bf16 tier's Acc computes per product (the
// KV-major prefill's rounding), so both paths carry the same bf16 error.
// The reference of both kernels is lanesQKBF16Go and lanesPVBF16Go
// (lanes_bf16_amd64_test.go), which they match bit for bit.

//go:noescape
func lanesQKBF16(qb *uint32, k unsafe.Pointer, ldk uintptr, pairs int, s *float32, n int)

//go:noescape
func lanesQKBF16Pairs(qb *uint32, k unsafe.Pointer, ldk uintptr, pairs int, s *float32, n int, job *pairsJob)

//go:noescape
func lanesPVBF16(pp *uint32, vb unsafe.Pointer, ldv uintptr, pairs int, o *float32, alpha *float32, d int)

// lanesBF16Kern returns the lane kernels a Lanes asking for bf16 products
// (SetBF16Products) runs for head dimension d: those of the bf16 twin
// (BF16InputTier), the AMX lane path on amxbf16 (tier.amxLanes), the
// VDPBF16PS kernels on avx512bf16 (tier.bf16Lanes), for d a multiple of
// 32; false where the twin has none.
func lanesBF16Kern(d int) (lanesKern, bool) {
	switch {
	case d%32 != 0:
		return lanesGeneric, false
	case twin.amxLanes:
		return lanesAMX, true
	case twin.bf16Lanes:
		return lanesBF16, true
	}
	return lanesGeneric, false
}

// lanesBF16ScoresOK reports whether d runs VDPBF16PS scores on exact
// bf16 operands when asked for (SetBF16Scores): the CPU has AVX512_BF16,
// whatever the active tier, and the AVX-512 lane kernels read bf16 rows
// in place (lanesInPlace512, the route measured with them; the widening
// route keeps its float32 kernels).
func lanesBF16ScoresOK(d int) bool { return d%32 == 0 && haveBF16 && lanesInPlace512 }

// haveBF16 reports whether the CPU has AVX-512 with AVX512_BF16.
var haveBF16 = missingBF16() == ""

// exactQueries converts the queries to their pairs (amxQueries) once per
// accumulation and reports whether each of them is a bf16 value, so that
// the pairs hold them unrounded.
func (l *Lanes) exactQueries() bool {
	if !l.amxQ {
		l.qExact = bf16Exact(l.qT[:l.d*16])
		l.amxQueries(l.amxState())
	}
	return l.qExact
}

// bf16Exact reports whether every value of x is a bf16 value (its low 16
// bits are zero), two values per 64-bit word (it runs once per query
// tile).
func bf16Exact(x []float32) bool {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(x))), len(x)/2)
	var or uint64
	for _, v := range w {
		or |= v
	}
	for _, v := range x[2*len(w):] {
		or |= uint64(math.Float32bits(v))
	}
	return or&0x0000ffff0000ffff == 0
}

// bf16Scores converts key rows [i0, i1) (k, [i1-i0][d] float32) to bf16
// and computes their transposed scores into l.s.
func (l *Lanes) bf16Scores(a *amxLanes, k []float32, i0, i1 int) {
	d := l.d
	bf16Rows(unsafe.Pointer(&a.kb[i0*d]), &k[0], (i1-i0)*d)
	a.scoresBF16(unsafe.Pointer(&a.kb[i0*d]), d, &l.s[i0*16], i1-i0)
}

// bf16RawScores computes the transposed scores of key rows [i0, i1) from
// their storage when src offers them as bf16 rows (the kernel reads them
// in place); false: the rows must be staged.
func (l *Lanes) bf16RawScores(a *amxLanes, src WideningStager, i0, i1 int) bool {
	if src == nil {
		return false
	}
	p, f := src.RawK(i0, i1)
	if p == nil || f != RawBF16 {
		return false
	}
	l.amxPrefetchNow(&l.pfK)
	a.scoresBF16(p, l.d, &l.s[i0*16], i1-i0)
	return true
}

// bf16Probs turns the softmax's transposed P (l.s, n key vectors) into
// P's key pairs (pt), an odd last key paired with P = 0.
func (l *Lanes) bf16Probs(a *amxLanes, n int) {
	if n%2 != 0 {
		clear(l.s[n*16 : (n+1)*16])
	}
	bf16Pairs(unsafe.Pointer(&a.pt[0]), 64, &l.s[0], 64, (n+1)/2, 16)
}

// bf16Values converts value rows [i0, i1) (v, [i1-i0][d] float32; i0
// even) to pairs, an odd last row with a zero partner (a finite value for
// its P = 0), and adds their P.V to O (bf16PV).
func (l *Lanes) bf16Values(a *amxLanes, v []float32, i0, i1 int, first bool) {
	a.valuePairs(v, i0, i1, l.d)
	l.bf16PV(a, i0, i1, first)
}

// bf16PV adds the P.V of keys [i0, i1) (i0 even), whose value pairs are
// in vb, to O^T, scaling O^T by the update's alpha first when first (the
// block's first value chunk).
func (l *Lanes) bf16PV(a *amxLanes, i0, i1 int, first bool) {
	d := l.d
	lanesPVBF16(&a.pt[i0/2*16], unsafe.Pointer(&a.vb[i0/2*d]), uintptr(4*d), (i1-i0+1)/2, &l.oT[0], l.pvAlpha(first), d)
}

// scoresBF16 computes the transposed scores of n bf16 key rows at k (d
// values each, contiguous) into s, running the pending pairs job (job)
// alongside when there is one.
func (a *amxLanes) scoresBF16(k unsafe.Pointer, d int, s *float32, n int) {
	if j := a.job; j != nil {
		a.job = nil
		lanesQKBF16Pairs(&a.qb[0], k, uintptr(2*d), d/2, s, n, j)
		return
	}
	lanesQKBF16(&a.qb[0], k, uintptr(2*d), d/2, s, n)
}

// pairsJob is the work lanesQKBF16Pairs interleaves with the scores: the
// bf16Pairs of left/cols row pairs of a bf16 value chunk (cols units of 32
// columns each, rows lds bytes apart, the pairs written contiguously from
// dst) with bf16PairsMax's finite-maximum scan into max and its two
// prefetches per unit (pf, the accumulation's V cursor). The generator
// (asmgen/lanes, jobSrc...) hard-codes the offsets.
type pairsJob struct {
	src  uintptr    // the even row's next 32 columns
	dst  uintptr    // the next unit's 32 pairs (128 bytes)
	lds  uintptr    // bytes from an even row to its odd row
	skip uintptr    // added to src after a row pair's last unit
	col  int        // units left in the current row pair
	cols int        // units per row pair (d/32)
	left int        // units left in the job
	max  [32]uint16 // the finite magnitudes' maximum, word by word
	pf   lanesPrefetch
}

// pairsAhead is a value chunk interleaved during the scores: ok, the first
// pairs row pairs of the chunk at src are in vb with their maxima in job.
type pairsAhead struct {
	ok    bool
	src   unsafe.Pointer
	pairs int
	job   pairsJob
}

// bf16PairsAhead, on the VDPBF16PS path, sets the scores of key rows [i0,
// i1) to interleave the value rows [i0, i1) into vb alongside (the value
// chunk of the same rows, ch.k = ch.v) when they are bf16 rows the values
// step would read in place: the VDPBF16PS kernels leave the load, store
// and shuffle ports that the interleaving needs mostly idle. The values
// step (amxRawValues) then takes the pairs and their maximum as they are,
// when it reads the same rows in place; it interleaves them itself
// otherwise, as for an odd last row.
// It returns the job (nil: none), whose prefetch cursor the caller puts
// back into l.pfV after the scores.
func (l *Lanes) bf16PairsAhead(a *amxLanes, src WideningStager, i0, i1 int, ch struct{ k, v int }) *pairsJob {
	c, d := i1-i0, l.d
	if src == nil || l.kern != lanesBF16 || ch.k != ch.v || c < 2 || i0%ch.v != 0 || i0/ch.v >= len(a.ahead) {
		return nil
	}
	p, f, scan := src.RawV(i0, i1)
	if p == nil || f != RawBF16 || scan && l.vStaged {
		return nil
	}
	x := &a.ahead[i0/ch.v]
	*x = pairsAhead{ok: true, src: p, pairs: c / 2}
	x.job = pairsJob{src: uintptr(p), dst: uintptr(unsafe.Pointer(&a.vb[i0/2*d])), lds: uintptr(2 * d),
		skip: uintptr(2 * d), col: d / 32, cols: d / 32, left: c / 2 * (d / 32), pf: l.pfV}
	a.job = &x.job
	return &x.job
}

// pairedAhead returns the job that interleaved the pairs row pairs of the
// value chunk from row i0 at p during the scores, nil if none did, and
// forgets it.
func (a *amxLanes) pairedAhead(i0 int, p unsafe.Pointer, pairs int) *pairsJob {
	k := i0 / lanesChunks[lanesBF16].v
	if i0%lanesChunks[lanesBF16].v != 0 || k >= len(a.ahead) {
		return nil
	}
	x := &a.ahead[k]
	if !x.ok || x.src != p || x.pairs != pairs {
		return nil
	}
	x.ok = false
	return &x.job
}

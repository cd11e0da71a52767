//go:build amd64 && !purego

package tile

import (
	"slices"
	"unsafe"
)

// The AMX lane path: Lanes on the amxbf16 tier (head dimensions that are a
// multiple of 32). Decode's few rows (m <= 16) keep the lane semantics
// (the same softmax kernel over transposed scores, the same row state) but
// both products run on AMX tiles with bf16 operands and float32
// accumulators:
//
//   - S^T = K . Q^T: A = 16 key rows in bf16 as they are laid out (row
//     major, no transpose: the keys are A's rows), B = the query pairs
//     (amxLanes.qb, [d/2][16]: pair i of column 16i+r = Q[r][2i], Q[r][2i+1]),
//     C = 16 keys x 16 rows, which is exactly the transposed score layout
//     of Lanes.s (lane = row), so lanesSoftmax512 runs on it unchanged;
//   - O = alpha*O + P.V: A = P's rows as bf16 pairs over the keys
//     (amxLanes.pa, [16][BlockN/2]: the softmax's transposed P converted
//     to key pairs, then 16x16 pair tiles transposed), B = the value pairs
//     (amxLanes.vb, [BlockN/2][d]: rows 2i and 2i+1 interleaved column by
//     column), C = O row-major in Lanes.o (16 rows x d), rescaled by alpha
//     before the block's first value chunk like the lane kernels' P.V.
//
// The transposes that the products need fall on the small operands: Q once
// per accumulation, P (16 rows) once per block; K and V are converted to
// bf16 in the order they arrive. The bf16 conversions round to nearest
// even (VCVTNE2PS2BF16): exact for the e4m3 and bf16 values decode
// stores, and for P rounded to e4m3 or bf16 (the contract's P.V dtypes);
// P that is not rounded (RoundNone) is rounded to bf16 here, which is the
// amxbf16 tier's data path. Products are exact in float32 then; only the
// accumulation differs from the float32 lane kernels (TDPBF16PS adds in
// an order of its own and flushes subnormal inputs and outputs), so the
// path is held to the bf16 tiers' tolerances, not bit for bit.

//go:noescape
func bf16Rows(dst unsafe.Pointer, src *float32, n int)

//go:noescape
func bf16Pairs(dst unsafe.Pointer, ldd uintptr, src *float32, lds uintptr, pairs, n int)

//go:noescape
func amxLanesQK(cfg *amxConfig, k unsafe.Pointer, ldk uintptr, qb unsafe.Pointer, s *float32, groups, kt int)

// amxLanes holds the bf16 operands of the AMX lane path of one Lanes.
type amxLanes struct {
	cfg    amxConfig
	qb     []uint32  // [d/2][16]: query pairs (B of S^T)
	kb     []uint16  // [BlockN][d]: key rows in bf16 (A of S^T)
	pt     []uint32  // [BlockN/2][16]: P^T key pairs, transposed into pa
	pa     []uint32  // [16][BlockN/2]: P rows as key pairs (A of P.V)
	vb     []uint32  // [BlockN/2][d]: value pairs (B of P.V)
	tail   []float32 // [2][d]: an odd chunk's last value row and a zero row
	tail8  []byte    // [2][d]: the same for e4m3fn value rows
	tail16 []uint16  // [2][d]: the same for bf16 value rows
	// ahead are the bf16 value chunks the VDPBF16PS path interleaved into
	// vb during the scores of the same rows (bf16PairsAhead), by chunk;
	// job is the one the next scores kernel call runs (none: left 0).
	ahead [BlockN / 64]pairsAhead
	job   *pairsJob
}

// lanesAMXOK reports whether d runs the AMX lane path under the active
// tier (amxbf16, tier.amxLanes).
func lanesAMXOK(d int) bool { return d%32 == 0 && active.amxLanes }

// amxState returns l's AMX operands, allocating them on first use.
func (l *Lanes) amxState() *amxLanes {
	if l.amx == nil {
		d := l.d
		a := &amxLanes{
			qb: make([]uint32, d/2*16), kb: make([]uint16, BlockN*d),
			pt: make([]uint32, BlockN/2*16), pa: make([]uint32, 16*BlockN/2),
			vb: make([]uint32, BlockN/2*d), tail: make([]float32, 2*d), tail8: make([]byte, 2*d), tail16: make([]uint16, 2*d),
		}
		a.cfg.set(amxRows)
		l.amx = a
	}
	return l.amx
}

// amxQueries converts the queries (l.qT, one 16-float vector per column)
// to the pairs of qb, once per accumulation.
func (l *Lanes) amxQueries(a *amxLanes) {
	if !l.amxQ {
		bf16Pairs(unsafe.Pointer(&a.qb[0]), 64, &l.qT[0], 64, l.d/2, 16)
		l.amxQ = true
	}
}

// amxScores converts key rows [i0, i1) (k, [i1-i0][d] float32) to bf16 and
// computes their transposed scores into l.s.
func (l *Lanes) amxScores(a *amxLanes, k []float32, i0, i1 int) {
	d := l.d
	bf16Rows(unsafe.Pointer(&a.kb[i0*d]), &k[0], (i1-i0)*d)
	amxLanesQK(&a.cfg, unsafe.Pointer(&a.kb[i0*d]), uintptr(2*d), unsafe.Pointer(&a.qb[0]), &l.s[i0*16], (i1-i0+15)/16, d/32)
}

// amxProbs turns the softmax's transposed P (l.s, n key vectors) into the
// key pairs of P's rows (pa), up to the next multiple of 32 keys with
// zeros, and rescales O by the update's alpha.
func (l *Lanes) amxProbs(a *amxLanes, n int) {
	n32 := (n + 31) &^ 31
	clear(l.s[n*16 : n32*16])
	bf16Pairs(unsafe.Pointer(&a.pt[0]), 64, &l.s[0], 64, n32/2, 16)
	for t := 0; t < n32/32; t++ {
		transpose16(unsafe.Pointer(&a.pa[16*t]), BlockN/2*4, unsafe.Pointer(&a.pt[256*t]), 64, 1)
	}
	amxScaleRows(&l.o[0], uintptr(l.d*4), &l.st.alpha[0], amxRows, l.d)
}

// amxValues converts value rows [i0, i1) (v, [i1-i0][d] float32; i0 a
// multiple of 32) to pairs and adds their P.V to O (amxPV).
func (l *Lanes) amxValues(a *amxLanes, v []float32, i0, i1 int, last bool) {
	a.valuePairs(v, i0, i1, l.d)
	l.amxPV(a, i0, i1, last)
}

// amxRawScores computes the transposed scores of key rows [i0, i1) from
// their storage when src offers it (WideningStager.RawK) in a format the
// AMX path reads: bf16 rows are A operands as they are (the rows after the
// last whole group of 16, which the tile would read past the storage, go
// through a copy); e4m3fn rows are converted to bf16 rows (e4m3Rows, d a
// multiple of 64). false: the rows must be staged.
func (l *Lanes) amxRawScores(a *amxLanes, src WideningStager, i0, i1 int) bool {
	if src == nil {
		return false
	}
	d, c := l.d, i1-i0
	p, f := src.RawK(i0, i1)
	switch {
	case p == nil:
		return false
	case f == RawBF16:
		l.amxPrefetchNow(&l.pfK)
		full := c &^ 15
		if full > 0 {
			amxLanesQK(&a.cfg, p, uintptr(2*d), unsafe.Pointer(&a.qb[0]), &l.s[i0*16], full/16, d/32)
		}
		if c > full {
			rows := unsafe.Slice((*uint16)(unsafe.Add(p, 2*full*d)), (c-full)*d)
			copy(a.kb[(i0+full)*d:], rows)
			amxLanesQK(&a.cfg, unsafe.Pointer(&a.kb[(i0+full)*d]), uintptr(2*d), unsafe.Pointer(&a.qb[0]), &l.s[(i0+full)*16], 1, d/32)
		}
		return true
	case f == RawE4M3 && haveVBMI && d%64 == 0:
		e4m3Rows(unsafe.Pointer(&a.kb[i0*d]), p, c*d, &E4M3Tab, &a.cfg, &l.pfK)
		amxLanesQK(&a.cfg, unsafe.Pointer(&a.kb[i0*d]), uintptr(2*d), unsafe.Pointer(&a.qb[0]), &l.s[i0*16], (c+15)/16, d/32)
		return true
	}
	return false
}

// amxRawValues converts value rows [i0, i1) to pairs from their storage
// when src offers it (an odd last row goes through a copy with a zero
// partner) and adds their P.V to O (amxPV; bf16PV for the bf16-product
// kernels, which share these operands); false: the rows must be staged.
//
//   - e4m3fn rows (AMX lane path, d a multiple of 64, AVX512_VBMI) need no
//     overflow guard: e4m3Pairs converts them (it keeps the AMX unit
//     awake, so the bf16-product kernels stage them instead);
//   - bf16 rows are interleaved as they are (bf16PairsMax), which also
//     finds the chunk's largest finite magnitude. A guarded chunk (scan)
//     whose maximum is at most GuardLimitBits is handed to GuardV with no
//     values (it leaves such a chunk as it is); a larger one is staged
//     instead, so that the stager scales it and rescales O, and so are the
//     accumulation's later guarded chunks (l.vStaged: the shift may
//     have risen), as they are after any value chunk the stager staged.
func (l *Lanes) amxRawValues(a *amxLanes, src WideningStager, i0, i1 int, last bool) bool {
	if src == nil {
		return false
	}
	d, c := l.d, i1-i0
	p, f, scan := src.RawV(i0, i1)
	dst := a.vb[i0/2*d:]
	switch {
	case p == nil:
		l.vStaged = true
		return false
	case f == RawE4M3 && !scan && haveVBMI && d%64 == 0 && l.kern == lanesAMX:
		e4m3Pairs(unsafe.Pointer(&dst[0]), uintptr(4*d), p, uintptr(d), c/2, d, &E4M3Tab, &a.cfg, &l.pfV)
		if c%2 != 0 {
			t := a.tail8[:2*d]
			copy(t, unsafe.Slice((*byte)(unsafe.Add(p, (c-1)*d)), d))
			e4m3Pairs(unsafe.Pointer(&dst[c/2*d]), uintptr(4*d), unsafe.Pointer(&t[0]), uintptr(d), 1, d, &E4M3Tab, &a.cfg, &l.pfV)
		}
	case f == RawBF16 && !(scan && l.vStaged):
		var mx [32]uint16
		if j := a.pairedAhead(i0, p, c/2); j != nil {
			mx = j.max
		} else {
			bf16PairsMax(unsafe.Pointer(&dst[0]), uintptr(4*d), p, uintptr(2*d), c/2, d, &mx, &l.pfV)
		}
		if c%2 != 0 {
			t := a.tail16[:2*d]
			copy(t, unsafe.Slice((*uint16)(unsafe.Add(p, 2*(c-1)*d)), d))
			bf16PairsMax(unsafe.Pointer(&dst[c/2*d]), uintptr(4*d), unsafe.Pointer(&t[0]), uintptr(2*d), 1, d, &mx, &l.pfV)
		}
		if scan {
			m := uint32(slices.Max(mx[:])) << 16
			if m > GuardLimitBits {
				l.vStaged = true
				return false
			}
			src.GuardV(nil, m)
		}
	default:
		l.vStaged = true
		return false
	}
	if l.kern == lanesBF16 {
		l.bf16PV(a, i0, i1, i0 == 0)
	} else {
		l.amxPV(a, i0, i1, last)
	}
	return true
}

// amxPV adds the P.V of keys [i0, i1), whose value pairs are in vb, to O;
// when they are the update's last it first zeroes the pairs after them up
// to a multiple of 32 keys (the products read whole 32-key steps, and a
// stale infinity times P = 0 would be NaN).
func (l *Lanes) amxPV(a *amxLanes, i0, i1 int, last bool) {
	d := l.d
	if last {
		clear(a.vb[(i1+1)/2*d : (i1+31)&^31/2*d])
	}
	amxMatmul(&a.cfg, unsafe.Pointer(&a.pa[i0/2]), BlockN/2*4, unsafe.Pointer(&a.vb[i0/2*d]), uintptr(4*d),
		unsafe.Pointer(&l.o[0]), uintptr(4*d), d/16, (i1-i0+31)/32, 1)
}

// amxPrefetchNow prefetches what is left of a cursor's range into L2 at
// once and leaves it idle: for the next keys when this update reads bf16
// keys in place, without a conversion loop to spread them over.
func (l *Lanes) amxPrefetchNow(pf *lanesPrefetch) {
	if pf.step != 0 && pf.last >= pf.addr {
		prefetchLines(pf.addr, int((pf.last-pf.addr)/64+1))
	}
	*pf = l.idleCursor()
}

//go:noescape
func e4m3Rows(dst unsafe.Pointer, src unsafe.Pointer, n int, tab *E4M3Tables, cfg *amxConfig, pf *lanesPrefetch)

//go:noescape
func e4m3Pairs(dst unsafe.Pointer, ldd uintptr, src unsafe.Pointer, lds uintptr, pairs, n int, tab *E4M3Tables, cfg *amxConfig, pf *lanesPrefetch)

//go:noescape
func bf16PairsMax(dst unsafe.Pointer, ldd uintptr, src unsafe.Pointer, lds uintptr, pairs, n int, max *[32]uint16, pf *lanesPrefetch)

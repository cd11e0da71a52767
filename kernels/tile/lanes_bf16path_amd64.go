//go:build amd64 && !purego

package tile

import "unsafe"

// bf16Path is a lane path whose products take bf16 operands: the AMX tiles
// (amxbf16 tier) or the VDPBF16PS kernels (avx512bf16, SetBF16Products).
// Both share the query conversion, the softmax, the chunking and the raw
// bf16 V route (amxRawValues with its V guard); they differ only in their
// four product steps, so Update and UpdateStaged are written once here.
type bf16Path struct {
	kern      lanesKern // lanesChunks entry
	scores    func(l *Lanes, a *amxLanes, k []float32, i0, i1 int)
	rawScores func(l *Lanes, a *amxLanes, src WideningStager, i0, i1 int) bool
	probs     func(l *Lanes, a *amxLanes, n int)
	// values adds P.V of keys i0..i1-1 of the n to O.
	values func(l *Lanes, a *amxLanes, v []float32, i0, i1, n int)
}

// amxPath and bf16LanesPath: the AMX values step is told the last chunk
// (it stores O from its accumulator tiles then), the VDPBF16PS one the
// first (it starts O instead of rescaling it).
var (
	amxPath = bf16Path{lanesAMX, (*Lanes).amxScores, (*Lanes).amxRawScores, (*Lanes).amxProbs,
		func(l *Lanes, a *amxLanes, v []float32, i0, i1, n int) { l.amxValues(a, v, i0, i1, i1 == n) }}
	bf16LanesPath = bf16Path{lanesBF16, (*Lanes).bf16Scores, (*Lanes).bf16RawScores, (*Lanes).bf16Probs,
		func(l *Lanes, a *amxLanes, v []float32, i0, i1, n int) { l.bf16Values(a, v, i0, i1, i0 == 0) }}
)

// valuePairs converts value rows [i0, i1) (v, [i1-i0][d] float32; i0
// even) to bf16 key pairs in vb, the B operand both paths' P.V reads; an
// odd last row gets a zero partner (a finite value for its P = 0).
func (a *amxLanes) valuePairs(v []float32, i0, i1, d int) {
	c := i1 - i0
	dst := a.vb[i0/2*d:]
	bf16Pairs(unsafe.Pointer(&dst[0]), uintptr(4*d), &v[0], uintptr(4*d), c/2, d)
	if c%2 != 0 {
		copy(a.tail[:d], v[(c-1)*d:c*d])
		bf16Pairs(unsafe.Pointer(&dst[c/2*d]), uintptr(4*d), &a.tail[0], uintptr(4*d), 1, d)
	}
}

// update is Lanes.Update on the path over the first n keys.
func (p *bf16Path) update(l *Lanes, k, v []float32, n int) {
	a := l.amxState()
	l.amxQueries(a)
	p.scores(l, a, k, 0, n)
	lanesSoftmax512(&l.s[0], n, &l.st)
	p.probs(l, a, n)
	p.values(l, a, v, 0, n, n)
}

// updateStaged is Lanes.UpdateStaged on the path (the caller has spread
// the prefetch hints over the conversion kernels, prefetchSteps): the key
// and value rows taken in chunks of lanesChunks[p.kern] rows, bf16 rows
// from their storage where the stager offers them (rawScores,
// amxRawValues), the others staged to float32 and converted while in
// cache. On the VDPBF16PS path the bf16 value rows a chunk will read in
// place are interleaved into pairs during the scores of the same rows
// (bf16PairsAhead), whose kernel leaves the ports that work needs idle.
// Value chunks are added to O one after the other, like the lane
// kernels', so that a V overflow guard raised by a later chunk
// (Stager.StageV, ScaleO) rescales what the earlier ones added.
func (p *bf16Path) updateStaged(l *Lanes, src Stager, n int) {
	a := l.amxState()
	l.amxQueries(a)
	d, ch := l.d, lanesChunks[p.kern]
	ws, _ := src.(WideningStager)
	a.ahead = [len(a.ahead)]pairsAhead{}
	for i0 := 0; i0 < n; i0 += ch.k {
		i1 := min(n, i0+ch.k)
		j := l.bf16PairsAhead(a, ws, i0, i1, ch)
		if !p.rawScores(l, a, ws, i0, i1) {
			p.scores(l, a, stageRows(src, false, i0, i1, d), i0, i1)
		}
		if j != nil {
			l.pfV = j.pf
		}
	}
	lanesSoftmax512(&l.s[0], n, &l.st)
	p.probs(l, a, n)
	for i0 := 0; i0 < n; i0 += ch.v {
		i1 := min(n, i0+ch.v)
		if !l.amxRawValues(a, ws, i0, i1, i1 == n) {
			p.values(l, a, stageRows(src, true, i0, i1, d), i0, i1, n)
		}
	}
}

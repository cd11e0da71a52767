//go:build amd64 && !purego

package tile

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate go run asmgen/gen.go

// Kernel signatures of the generated assembly (kernels_amd64.go).
//
// qkFunc computes S[r][j] = sum over steps of q[r][step] * kt[step][j] for a
// register tile of R query rows and C vectors of keys; S rows are BlockN
// floats apart. In the bf16 kernels one step is one bf16 pair.
type qkFunc func(q unsafe.Pointer, ldq uintptr, kt unsafe.Pointer, steps int, s *float32)

// pvFunc computes O[r][:] = alpha[r]*O[r][:] + sum over steps of
// P[r][step] * V[step][:] for R rows and C vectors of output columns.
type pvFunc func(p *float32, v unsafe.Pointer, ldv uintptr, steps int, o *float32, ldo uintptr, alpha *float32)

// softmaxGroupFunc is the online softmax of rows consecutive score rows
// (BlockN floats apart) of nv vectors each (16 keys, 8 for softmax256), with the row state
// updated in place (nv even): for row r, n = min(valid[r], nlim); if n == 0 then
// alpha[r] = 1 and the row is zeroed; otherwise s = scale*s with keys >= n
// masked to -inf, m = max(mx[r], max s), alpha[r] = exp2(mx[r] - m),
// sum[r] = sum[r]*alpha[r] + sum p, tsum[r] likewise with exp2(x*invT) when
// invT != 0, mx[r] = m, where p = exp2(s - m) is rounded as round and stored
// back (softmax512p, with VCVTNE2PS2BF16, and softmax512pe, its AVX-512F
// twin: as bf16 pairs packed at the start of the row).
type softmaxGroupFunc func(s *float32, nv int, valid *int32, rows int, nlim int, scale float32, invT float32, round int, mx, sum, tsum, alpha *float32)

// simd is one SIMD tier's kernel set.
type simd struct {
	qk      [6][]qkFunc
	pv      [6][]pvFunc
	pvInit  [6][]pvFunc // pv for the first update after Reset: O starts from zero
	vk      int         // keys (and output columns) per vector
	softmax softmaxGroupFunc
	bf16    bool
}

func tab4[T any](t [6][4]T) (s [6][]T) {
	for i := range t {
		s[i] = t[i][:]
	}
	return
}

func tab2[T any](t [6][2]T) (s [6][]T) {
	for i := range t {
		s[i] = t[i][:]
	}
	return
}

var (
	k512   = &simd{qk: tab4(qk512Tab), pv: tab4(pv512Tab), pvInit: tab4(pv512iTab), vk: 16, softmax: softmax512}
	kbf16  = &simd{qk: tab4(qkbfTab), pv: tab4(pvbfTab), pvInit: tab4(pvbfiTab), vk: 16, softmax: softmax512p, bf16: true}
	kbfEmu = &simd{qk: tab4(qkbfeTab), pv: tab4(pvbfeTab), pvInit: tab4(pvbfeiTab), vk: 16, softmax: softmax512pe, bf16: true}
	k256   = &simd{qk: tab2(qk256Tab), pv: tab2(pv256Tab), pvInit: tab2(pv256iTab), vk: 8, softmax: softmax256}
)

func missingAVX512() string {
	switch {
	case !cpu.X86.HasAVX512F:
		return "AVX-512F"
	case !cpu.X86.HasAVX512VL:
		return "AVX-512VL"
	case !cpu.X86.HasAVX512DQ:
		return "AVX-512DQ"
	case !cpu.X86.HasAVX512BW:
		return "AVX-512BW" // the epilogue kernels' byte and word instructions
	}
	return ""
}

func missingAVX2() string {
	switch {
	case !cpu.X86.HasAVX2:
		return "AVX2"
	case !cpu.X86.HasFMA:
		return "FMA"
	}
	return ""
}

func missingBF16() string {
	if m := missingAVX512(); m != "" {
		return m
	}
	if !cpu.X86.HasAVX512BF16 {
		return "AVX512_BF16"
	}
	return ""
}

// slowVDPBF16PS reports whether VDPBF16PS is slower on this core than the
// float32 multiply-adds of the avx512 tier for the same products, so that
// the automatic choice keeps low-precision calls on avx512: on Intel cores
// with two 512-bit FMA units VDPBF16PS issues at half their rate (the
// avx512bf16 tier measured 1.4x slower than avx512 at prefill), on AMD
// Zen 4 at twice it (0.53-0.58x avx512's wall time). Only AMD cores are
// known to be fast (isAMD); Intel CPUs with AVX512_BF16 get their bf16
// products from AMX (amxbf16) where they have it.
func slowVDPBF16PS() bool { return !isAMD() }

func simdTiers() []*tier {
	return []*tier{
		{name: "amxbf16", missing: missingAMX, bf16: true, load: loadBF16, update: amxUpdate, peak: amxPeakFlops, isa: ISAAVX512, amxLanes: true},
		{name: "avx512bf16", missing: missingBF16, bf16: true, load: loadBF16, update: kbf16.update,
			peak: func(n int) float64 { peakbf16(n); return float64(n) * 12 * 64 }, isa: ISAAVX512, bf16Lanes: true,
			slowTwin: slowVDPBF16PS},
		{name: "avx512", missing: missingAVX512, load: load512, update: k512.update,
			peak: func(n int) float64 { peak512(n); return float64(n) * 12 * 32 }, isa: ISAAVX512},
		{name: "avx2", missing: missingAVX2, load: load256, update: k256.update,
			peak: func(n int) float64 { peak256(n); return float64(n) * 12 * 16 }, isa: ISAAVX2},
		{name: "avx512bf16-emulated", missing: missingAVX512, bf16: true, load: loadBF16, update: kbfEmu.update, isa: ISAAVX512},
	}
}

// load512 packs K transposed with 16x16 AVX-512 tile transposes.
func load512(b *Block, n int, k, v []float32) { loadTransposed(b, n, k, v, 16, transpose16) }

// load256 packs K transposed with 8x8 AVX2 tile transposes.
func load256(b *Block, n int, k, v []float32) { loadTransposed(b, n, k, v, 8, transpose8) }

// loadTransposed is loadBlockGeneric with K transposed by t x t tiles.
func loadTransposed(b *Block, n int, k, v []float32, t int, tr func(dst unsafe.Pointer, ldd uintptr, src unsafe.Pointer, lds uintptr, tiles int)) {
	d := b.d
	if d%16 != 0 {
		loadBlockGeneric(b, n, k, v)
		return
	}
	ld := uintptr(d * 4)
	full := n - n%t
	for i0 := 0; i0 < full; i0 += t {
		tr(unsafe.Pointer(&b.kt[i0]), BlockN*4, unsafe.Pointer(&k[i0*d]), ld, d/t)
	}
	if rem := n - full; rem > 0 {
		// The last partial tile goes through a zero-padded copy.
		if len(b.pad) < t*d {
			b.pad = make([]float32, t*d)
		}
		pad := b.pad[:t*d]
		copy(pad, k[full*d:n*d])
		clear(pad[rem*d:])
		tr(unsafe.Pointer(&b.kt[full]), BlockN*4, unsafe.Pointer(&pad[0]), ld, d/t)
	}
	// Zero the unused key columns (the generic tier's invariant).
	if nt := full + t*min(1, n-full); nt < BlockN {
		for c := 0; c < d; c++ {
			clear(b.kt[c*BlockN+nt : (c+1)*BlockN])
		}
	}
	b.setV(n, v)
}

// loadBF16 packs K as bf16 pairs [d/2][BlockN] (pair = K[i][2c], K[i][2c+1])
// and V as bf16 pairs [BlockN/2][d] (pair = V[2i][c], V[2i+1][c]), both
// rounded to nearest even.
func loadBF16(b *Block, n int, k, v []float32) {
	d := b.d
	if d%16 != 0 {
		b.bf16 = false
		loadBlockGeneric(b, n, k, v)
		return
	}
	d2 := d / 2
	d2p := (d2 + 15) &^ 15
	if b.kb == nil {
		b.kb = make([]uint32, d2p*BlockN)
		b.vb = make([]uint32, BlockN/2*d)
		b.kp = make([]uint32, BlockN*d2p) // columns d2..d2p stay zero
		b.zero = make([]float32, d)
	}
	n16 := (n + 15) &^ 15
	for i := 0; i < n; i++ {
		cvtPairs(unsafe.Pointer(&b.kp[i*d2p]), &k[i*d], d)
	}
	clear(b.kp[n*d2p : n16*d2p])
	for i0 := 0; i0 < n16; i0 += 16 {
		transpose16(unsafe.Pointer(&b.kb[i0]), BlockN*4, unsafe.Pointer(&b.kp[i0*d2p]), uintptr(d2p*4), d2p/16)
	}
	for i2 := 0; i2 < (n+1)/2; i2++ {
		odd := b.zero
		if 2*i2+1 < n {
			odd = v[(2*i2+1)*d:]
		}
		vPairs(unsafe.Pointer(&b.vb[i2*d]), &v[2*i2*d], &odd[0], d)
	}
	// Zero the value pairs after the last key up to a multiple of 16 pairs:
	// the amxbf16 tier's P.V reads whole 16-pair steps (with P = 0 there),
	// and a stale infinity would turn 0*V into NaN.
	h := (n + 1) / 2
	clear(b.vb[h*d : min((h+15)&^15, BlockN/2)*d])
	b.bf16 = true
}

// rowGroup is the number of query rows of one register tile.
const rowGroup = 6

// update is Acc.Update for a SIMD tier: per group of up to 6 query rows,
// S = Q.K^T (register-tiled), the vectorised online softmax per row, then
// O = alpha*O + P.V (register-tiled).
func (k *simd) update(a *Acc, b *Block, valid []int32) {
	d := a.d
	if d%16 != 0 {
		updateGeneric(a, b, valid)
		return
	}
	vk := k.vk
	steps, ldq := d, uintptr(d*4)
	qp, kt := unsafe.Pointer(&a.q[0]), unsafe.Pointer(&b.kt[0])
	vp, ldv := unsafe.Pointer(&b.v[0]), uintptr(d*4)
	if k.bf16 {
		d2 := d / 2
		q2 := a.pairedQ()
		steps, ldq = d2, uintptr(d2*4)
		qp, kt = unsafe.Pointer(&q2[0]), unsafe.Pointer(&b.kb[0])
		vp = unsafe.Pointer(&b.vb[0])
	}
	invT := a.tempInvT()
	// The first update after Reset writes O instead of rescaling it (Reset
	// leaves O as it was); the row groups it skips are zeroed here.
	pv, first := k.pv, a.fresh
	if first {
		pv = k.pvInit
		a.fresh = false
	}
	for r0 := 0; r0 < a.m; r0 += rowGroup {
		a.pf.issue((a.m - r0 + rowGroup - 1) / rowGroup)
		R := min(rowGroup, a.m-r0)
		nmax := a.groupKeys(b, valid, r0, R, first)
		if nmax <= 0 {
			continue
		}
		nv := (nmax + vk - 1) / vk
		s := a.s[r0*BlockN:]
		k.scores(R, nv, unsafe.Add(qp, uintptr(r0)*ldq), ldq, kt, steps, s)
		// The softmax kernels are unrolled by two vectors: round nv up
		// (lanes beyond nmax are masked, rows hold BlockN floats).
		k.softmax(&s[0], (nv+1)&^1, &valid[r0], R, b.n, a.scale, invT, int(a.round), &a.mx[r0], &a.sum[r0], &a.tsum[r0], &a.alpha[r0])
		pvSteps := nmax
		if k.bf16 {
			pvSteps = (nmax + 1) / 2
		}
		k.values(pv, R, d, s, vp, ldv, pvSteps, a.o[r0*d:], &a.alpha[r0])
	}
}

// pairedQ returns the query rows as bf16 pairs (qPairs), converted from
// the float32 rows unless the caller gave them as bf16 (SetQBF16). Rows
// are contiguous in both layouts: one call converts all.
func (a *Acc) pairedQ() []uint32 {
	q2 := a.qPairs()
	if !a.q2Set {
		cvtPairs(unsafe.Pointer(&q2[0]), &a.q[0], a.m*a.d)
	}
	return q2
}

// tempInvT returns the softmax kernels' invT argument: 1/T while the
// temperature sum is tracked, 0 (off) otherwise.
func (a *Acc) tempInvT() float32 {
	if a.temp {
		return a.invT
	}
	return 0
}

// groupKeys returns the longest visible key prefix of rows r0..r0+R-1 in
// block b. When it is empty and first is set it zeroes those rows of O:
// the first update after Reset writes O instead of rescaling it, so a row
// group it skips must start from zero.
func (a *Acc) groupKeys(b *Block, valid []int32, r0, R int, first bool) int {
	nmax := 0
	for r := r0; r < r0+R; r++ {
		nmax = max(nmax, min(int(valid[r]), b.n))
	}
	if nmax <= 0 && first {
		clear(a.o[r0*a.d : (r0+R)*a.d])
	}
	return nmax
}

// scores runs the Q.K kernels of one register tile: S rows (BlockN floats
// apart, from s) of R query rows at q (ldq bytes apart) against nv vectors
// of keys of the packed block kt, steps steps each.
func (k *simd) scores(R, nv int, q unsafe.Pointer, ldq uintptr, kt unsafe.Pointer, steps int, s []float32) {
	vk, maxC := k.vk, len(k.qk[0])
	for j := 0; j < nv; j += maxC {
		C := min(maxC, nv-j)
		k.qk[R-1][C-1](q, ldq, unsafe.Add(kt, j*vk*4), steps, &s[j*vk])
	}
}

// values runs the P.V kernels of one register tile: the d columns of the R
// output rows at o (d floats apart) become alpha*O + P.V, with P the rows
// of s and steps rows of V at v (ldv bytes apart).
func (k *simd) values(pv [6][]pvFunc, R, d int, s []float32, v unsafe.Pointer, ldv uintptr, steps int, o []float32, alpha *float32) {
	vk, maxC := k.vk, len(pv[0])
	for c0 := 0; c0 < d; c0 += maxC * vk {
		C := min(maxC, (d-c0)/vk)
		pv[R-1][C-1](&s[0], unsafe.Add(v, c0*4), ldv, steps, &o[c0], uintptr(d*4), alpha)
	}
}

// log2SumsSIMD computes the leading values of log2Sums with the active
// tier's kernel (8 per step on the AVX-512 tiers, 4 on avx2) and returns how
// many it did.
func log2SumsSIMD(dst []float64, src []float32) int {
	var n int
	switch VectorISA() {
	case ISAAVX512:
		if n = len(src) &^ 7; n > 0 {
			log2Sums512(&dst[0], &src[0], n, unsafe.Pointer(&log2Tab))
		}
	case ISAAVX2:
		if n = len(src) &^ 3; n > 0 {
			log2Sums256(&dst[0], &src[0], n, unsafe.Pointer(&log2Tab))
		}
	}
	return n
}

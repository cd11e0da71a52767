package grad

//go:generate go run gemmgen/gen.go

// The GEMM building blocks of the SIMD tiers: the products of the
// backward and the float32 forward as register-blocked GEMM tiles that
// keep a block of C in vector accumulators over the whole reduction
// (gemm_amd64.s): 8 rows x 32 columns in 16 zmm registers on the avx512
// tiers, 4 rows x 24 columns in 12 ymm registers on the avx2 tier (four
// rows fit every power-of-two query group; 16-column tiles take the rest
// of the columns on both). The score products need the key-side operand
// transposed: Forward and Backward transpose every K (and V) block once
// per call (blockT), and the passes read the transposed blocks. Each C
// element is one FMA chain in reduction order, so results depend only on
// the inputs and the tier, never on the worker count.

// padCols returns n rounded up to a multiple of 16: the leading dimension
// of score rows and transposed blocks.
func padCols(n int) int { return (n + 15) &^ 15 }

// gemmRows returns the rows of the worker's GEMM tiles: 8 on the avx512
// tiers, 4 on the avx2 tier.
func (wk *worker) gemmRows() int {
	if wk.simd512 {
		return 8
	}
	return 4
}

// gemmPanel returns the columns of the next GEMM tile when rem columns
// (a multiple of 16) are left: 32 or 16 on the avx512 tiers; on the avx2
// tier 24, or 16 where a 24-column tile would leave 8 columns (rem 16 or
// 32).
func (wk *worker) gemmPanel(rem int) int {
	switch {
	case wk.simd512 && rem >= 32:
		return 32
	case !wk.simd512 && (rem >= 40 || rem == 24):
		return 24
	}
	return 16
}

// gemmRow sets (load false) or adds to (load true) C the product A.B
// over m rows and ncols columns (ncols % 16 == 0):
//
//	c[r*ldc+j] (+)= sum_{t<k} a[r*lda+t] * b[t*ldb+j]
//
// on the tiles of the worker's tier; rows past m of the last group go to
// wk.scr.
func (wk *worker) gemmRow(c []float32, ldc int, a []float32, lda int, b []float32, ldb, m, ncols, k int, load bool) {
	if m <= 0 || ncols <= 0 || (k <= 0 && load) {
		return
	}
	checkGemm(c, ldc, b, ldb, m, ncols, k)
	if k > 0 {
		_ = a[(m-1)*lda+k-1]
	}
	var ap [8]*float32
	a4 := (*[4]*float32)(ap[:4])
	ld := boolInt(load)
	wk.gemmTiles(c, ldc, m, ncols, func(cp *[8]*float32, r0, j0, w int) {
		for i := range wk.gemmRows() {
			ap[i] = &a[min(r0+i, m-1)*lda] // rows past m: any valid row
		}
		c4 := (*[4]*float32)(cp[:4])
		switch {
		case w == 32:
			gemm8x32RowAVX512(cp, &ap, &b[j0], ldb, k, ld)
		case w == 24:
			gemm4x24RowAVX2(c4, a4, &b[j0], ldb, k, ld)
		case wk.simd512:
			gemm8x16RowAVX512(cp, &ap, &b[j0], ldb, k, ld)
		default:
			gemm4x16RowAVX2(c4, a4, &b[j0], ldb, k, ld)
		}
	})
}

// gemmCol is gemmRow with A stored transposed, A(r,t) = a[r+t*csA]:
//
//	c[r*ldc+j] (+)= sum_{t<k} a[r+t*csA] * b[t*ldb+j]
//
// The tiles read A rows in whole groups (gemmRows), so a must hold
// a[(k-1)*csA + m rounded up to the group - 1] (the rows past m are read
// and discarded; m <= csA with csA % 8 == 0 always suffices).
func (wk *worker) gemmCol(c []float32, ldc int, a []float32, csA int, b []float32, ldb, m, ncols, k int, load bool) {
	if m <= 0 || ncols <= 0 || (k <= 0 && load) {
		return
	}
	checkGemm(c, ldc, b, ldb, m, ncols, k)
	if rows := wk.gemmRows(); k > 0 {
		_ = a[(k-1)*csA+(m+rows-1)/rows*rows-1]
	}
	ld := boolInt(load)
	wk.gemmTiles(c, ldc, m, ncols, func(cp *[8]*float32, r0, j0, w int) {
		c4 := (*[4]*float32)(cp[:4])
		switch {
		case w == 32:
			gemm8x32ColAVX512(cp, &a[r0], csA, &b[j0], ldb, k, ld)
		case w == 24:
			gemm4x24ColAVX2(c4, &a[r0], csA, &b[j0], ldb, k, ld)
		case wk.simd512:
			gemm8x16ColAVX512(cp, &a[r0], csA, &b[j0], ldb, k, ld)
		default:
			gemm4x16ColAVX2(c4, &a[r0], csA, &b[j0], ldb, k, ld)
		}
	})
}

// gemmTiles calls tile once per GEMM tile of an m x ncols block of C
// (ldc elements per row), with the tile's C row pointers (rows past m
// point at wk.scr), its first row r0, first column j0 and width w. Column
// panels are outer: a panel of B (k rows of 128, 96 or 64 bytes) stays in
// L1 while every row group passes over it.
func (wk *worker) gemmTiles(c []float32, ldc, m, ncols int, tile func(cp *[8]*float32, r0, j0, w int)) {
	rows := wk.gemmRows()
	cp := &wk.tileC // in the worker: a local would escape through tile
	for j0, w := 0, 0; j0 < ncols; j0 += w {
		w = wk.gemmPanel(ncols - j0)
		for r0 := 0; r0 < m; r0 += rows {
			for i := range rows {
				if r := r0 + i; r < m {
					cp[i] = &c[r*ldc+j0]
				} else {
					cp[i] = &wk.scr[i][0]
				}
			}
			tile(cp, r0, j0, w)
		}
	}
}

// checkGemm bounds-checks the B and C extremes a GEMM reads and writes
// and its column count.
func checkGemm(c []float32, ldc int, b []float32, ldb, m, ncols, k int) {
	if ncols%16 != 0 || ldc < ncols {
		panic("grad: GEMM columns not a multiple of 16")
	}
	if k > 0 {
		_ = b[(k-1)*ldb+ncols-1]
	}
	_ = c[(m-1)*ldc+ncols-1]
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// blockT writes the transpose of the [n][d] block x into dst as [d][ld]
// (ld = padCols(n) or more), zero in columns n..ld-1.
func blockT(dst []float32, ld int, x []float32, n, d int) {
	dst = dst[:d*ld]
	for c := range d {
		row := dst[c*ld : (c+1)*ld]
		for i := range n {
			row[i] = x[i*d+c]
		}
		clear(row[n:])
	}
}

// scoresT sets s[r*ld+i] = a_r . b_i for rows r < m and keys i <
// padCols(n) from bt, the transposed [d][ldt] key block (n keys, zero
// columns after them): the SIMD tiers' scoresNT, unscaled (the callers
// apply the softmax scale). Entries of masked keys (i >= cnt[r]) are
// computed too; the callers clear or ignore them.
func (wk *worker) scoresT(s []float32, ld int, a []float32, m int, bt []float32, ldt, n, d int) {
	wk.gemmRow(s, ld, a, d, bt, ldt, m, padCols(n), d, false)
}

// maxCount returns the largest of cnt[:m].
func maxCount(cnt []int32, m int) int {
	k := 0
	for _, c := range cnt[:m] {
		k = max(k, int(c))
	}
	return k
}

// transposeBlocks transposes, on the SIMD tiers, every K block (and V
// block when v is not nil) of the call into ws.kt (ws.vt) for the score
// products: block h*TotalRows+r at offset (h*TotalRows+r)*sz, [D][ld] with
// ld = padCols(BlkKV). On the generic tier it does nothing and returns
// nils.
func (ws *Workspace) transposeBlocks(p *Problem, dv *derived, k, v []float32) (kt, vt []float32, sz int) {
	if !ws.workers[0].simd {
		return nil, nil, 0
	}
	tr := p.CSR.TotalRows
	ld := padCols(p.BlkKV)
	sz = p.D * ld
	nb := p.Hkv * tr
	ws.kt = growF32(ws.kt, nb*sz)
	kt = ws.kt
	if v != nil {
		ws.vt = growF32(ws.vt, nb*sz)
		vt = ws.vt
	}
	ws.tb = transposeCall{p: p, dv: dv, k: k, v: v, kt: kt, vt: vt, sz: sz, ld: ld}
	ws.parallel(nb, &ws.tb)
	ws.tb = transposeCall{} // keep no reference to the caller's tensors
	return kt, vt, sz
}

// transposeCall holds the arguments of one transposeBlocks run.
type transposeCall struct {
	p            *Problem
	dv           *derived
	k, v, kt, vt []float32
	sz, ld       int
}

// item transposes block i = h*TotalRows + r of K (and V when given).
func (tc *transposeCall) item(wk *worker, i int) {
	p, dv, sz := tc.p, tc.dv, tc.sz
	tr := p.CSR.TotalRows
	h, r := i/tr, i%tr
	b := int(dv.rows.Batch[r])
	t0 := int(dv.rows.Block[r]) * p.BlkKV
	n := max(0, min(p.BlkKV, int(dv.seqK[b])-t0))
	blockT(tc.kt[i*sz:(i+1)*sz], tc.ld, dv.blockKV(tc.k, p.D, b, h, t0, n, wk.kb), n, p.D)
	if tc.v != nil {
		blockT(tc.vt[i*sz:(i+1)*sz], tc.ld, dv.blockKV(tc.v, p.D, b, h, t0, n, wk.vb), n, p.D)
	}
}

// blockTOf returns transposed block (h, r) of x (transposeBlocks), nil
// when x is nil.
func blockTOf(x []float32, sz int, p *Problem, h, r int) []float32 {
	if x == nil {
		return nil
	}
	i := (h*p.CSR.TotalRows + r) * sz
	return x[i : i+sz]
}

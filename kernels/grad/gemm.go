package grad

//go:generate go run gemmgen/gen.go

// The AVX-512 building blocks (tiers avx512 and avx512bf16): the three
// products of the backward as register-blocked GEMM tiles, 8 rows x 32
// columns of C kept in 16 zmm accumulators over the whole reduction
// (gemm_amd64.s), instead of the AVX2 tier's dot products and row axpys.
// The score products need the key-side operand transposed: Backward
// transposes every K and V block once per call (blockT), and both passes
// read the transposed blocks. Each C element is one FMA chain in reduction
// order, so results depend only on the inputs and the tier, never on the
// worker count.

// padCols returns n rounded up to a multiple of 16: the leading dimension
// of score rows and transposed blocks.
func padCols(n int) int { return (n + 15) &^ 15 }

// gemmRow sets (load false) or adds to (load true) C the product A.B
// over m rows and ncols columns (ncols % 16 == 0):
//
//	c[r*ldc+j] (+)= sum_{t<k} a[r*lda+t] * b[t*ldb+j]
//
// on the AVX-512 tiles; rows past m of the last group go to scr.
func gemmRow(scr *[8][32]float32, c []float32, ldc int, a []float32, lda int, b []float32, ldb, m, ncols, k int, load bool) {
	if m <= 0 || ncols <= 0 || (k <= 0 && load) {
		return
	}
	checkGemm(c, ldc, b, ldb, m, ncols, k)
	if k > 0 {
		_ = a[(m-1)*lda+k-1]
	}
	var cp, ap [8]*float32
	ld := boolInt(load)
	// Column panels outer: a 32-column panel of B (k x 128 bytes) stays in
	// L1 while every row group passes over it.
	for j0 := 0; j0 < ncols; j0 += 32 {
		for r0 := 0; r0 < m; r0 += 8 {
			for i := range 8 {
				if r := r0 + i; r < m {
					cp[i], ap[i] = &c[r*ldc+j0], &a[r*lda]
				} else {
					cp[i], ap[i] = &scr[i][0], &a[0]
				}
			}
			if ncols-j0 >= 32 {
				gemm8x32RowAVX512(&cp, &ap, &b[j0], ldb, k, ld)
			} else {
				gemm8x16RowAVX512(&cp, &ap, &b[j0], ldb, k, ld)
			}
		}
	}
}

// gemmCol is gemmRow with A stored transposed, A(r,t) = a[r+t*csA]:
//
//	c[r*ldc+j] (+)= sum_{t<k} a[r+t*csA] * b[t*ldb+j]
//
// The tiles read A rows in groups of eight, so a must hold
// a[(k-1)*csA + m rounded up to 8 - 1] (the rows past m are read and
// discarded).
func gemmCol(scr *[8][32]float32, c []float32, ldc int, a []float32, csA int, b []float32, ldb, m, ncols, k int, load bool) {
	if m <= 0 || ncols <= 0 || (k <= 0 && load) {
		return
	}
	checkGemm(c, ldc, b, ldb, m, ncols, k)
	if k > 0 {
		_ = a[(k-1)*csA+(m+7)&^7-1]
	}
	var cp [8]*float32
	ld := boolInt(load)
	for j0 := 0; j0 < ncols; j0 += 32 {
		for r0 := 0; r0 < m; r0 += 8 {
			for i := range 8 {
				if r := r0 + i; r < m {
					cp[i] = &c[r*ldc+j0]
				} else {
					cp[i] = &scr[i][0]
				}
			}
			if ncols-j0 >= 32 {
				gemm8x32ColAVX512(&cp, &a[r0], csA, &b[j0], ldb, k, ld)
			} else {
				gemm8x16ColAVX512(&cp, &a[r0], csA, &b[j0], ldb, k, ld)
			}
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
// columns after them): the AVX-512 scoresNT, unscaled (gradProbs applies
// the softmax scale inside the exponential). Entries of masked keys
// (i >= cnt[r]) are computed too; the callers clear or ignore them.
func (wk *worker) scoresT(s []float32, ld int, a []float32, m int, bt []float32, ldt, n, d int) {
	gemmRow(&wk.scr, s, ld, a, d, bt, ldt, m, padCols(n), d, false)
}

// maxCount returns the largest of cnt[:m].
func maxCount(cnt []int32, m int) int {
	k := 0
	for _, c := range cnt[:m] {
		k = max(k, int(c))
	}
	return k
}

// transposeBlocks transposes, on the AVX-512 tier, every K block (and V
// block when v is not nil) of the call into ws.kt (ws.vt) for the score
// products: block h*TotalRows+r at offset (h*TotalRows+r)*sz, [D][ld] with
// ld = padCols(BlkKV). Off that tier it does nothing and returns nils.
func (ws *Workspace) transposeBlocks(p *Problem, dv *derived, k, v []float32) (kt, vt []float32, sz int) {
	if !ws.workers[0].simd512 {
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
	ws.parallel(nb, func(wk *worker, i int) {
		h, r := i/tr, i%tr
		b := int(dv.rows.Batch[r])
		t0 := int(dv.rows.Block[r]) * p.BlkKV
		n := max(0, min(p.BlkKV, int(dv.seqK[b])-t0))
		blockT(kt[i*sz:(i+1)*sz], ld, dv.blockKV(k, p.D, b, h, t0, n, wk.kb), n, p.D)
		if v != nil {
			blockT(vt[i*sz:(i+1)*sz], ld, dv.blockKV(v, p.D, b, h, t0, n, wk.vb), n, p.D)
		}
	})
	return kt, vt, sz
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

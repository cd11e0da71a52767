package blas

// panelCols is the width of a packed panel of B: one 8x32 AVX-512 tile
// (two 16-column tiles on AVX2).
const panelCols = 32

// aPad is the padding of a packed row of A: rows k+16 elements apart do
// not all map to one cache set when k is a power of two, as the eight
// rows a tile reads at once would.
const aPad = 16

// packPanel writes panel p of alpha*op(B) (columns [32p, 32p+w), w = 32
// or the last panel's 16) to bp[32p*k:], its k rows of w elements stored
// contiguously: the tiles then read B sequentially. Row-major B with a
// leading dimension of a power-of-two size maps a panel's rows to a few
// cache sets, which the packing avoids.
func packPanel(bp, b []float32, ldb int, bT bool, k, n16, p int, alpha float32) {
	j0 := p * panelCols
	w := min(panelCols, n16-j0)
	dst := bp[j0*k : j0*k+k*w]
	for t := range k {
		row := dst[t*w : (t+1)*w]
		if bT {
			for j := range row {
				row[j] = alpha * b[(j0+j)*ldb+t]
			}
			continue
		}
		src := b[t*ldb+j0 : t*ldb+j0+w]
		if alpha == 1 {
			copy(row, src)
			continue
		}
		for j, v := range src {
			row[j] = alpha * v
		}
	}
}

// packA copies rows [r0, r1) of op(A) (k columns) to ap, lap elements per
// row.
func packA(ap []float32, lap int, a []float32, lda int, aT bool, r0, r1, k int) {
	for r := r0; r < r1; r++ {
		dst := ap[(r-r0)*lap : (r-r0)*lap+k]
		if !aT {
			copy(dst, a[r*lda:r*lda+k])
			continue
		}
		for t := range dst {
			dst[t] = a[t*lda+r]
		}
	}
}

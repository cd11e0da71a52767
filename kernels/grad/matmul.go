package grad

// The float32 building blocks of the generic tier (and of TemperatureLSE's
// scores on every tier): three small matrix products over row-major
// [rows][d] operands, built on two primitives, dot4 (four dot products
// sharing one operand) and axpy4 (one row plus a combination of four
// rows). dot4 has a portable Go version and, on amd64, an AVX2+FMA
// version (vec_amd64.s) used when simd is set (useAsm); with simd, pairs
// of rows run through the two-row version dot2x4, which loads each key
// chunk once for both rows. The SIMD tiers run the forward and backward
// products on the GEMM tiles instead (gemm.go). Results depend only on
// the inputs and simd (fixed summation orders), never on the worker count.

// dot returns sum_c a[c]*b[c] over len(a) elements, summed in four
// interleaved partial sums.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	c := 0
	for ; c+4 <= len(a); c += 4 {
		s0 += a[c] * b[c]
		s1 += a[c+1] * b[c+1]
		s2 += a[c+2] * b[c+2]
		s3 += a[c+3] * b[c+3]
	}
	for ; c < len(a); c++ {
		s0 += a[c] * b[c]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot4 sets out[j] = a . bj (len(a) elements each).
func dot4(simd bool, a, b0, b1, b2, b3 []float32, out *[4]float32) {
	if simd {
		n := len(a)
		_, _, _, _ = b0[n-1], b1[n-1], b2[n-1], b3[n-1]
		dot4AVX2(&a[0], &b0[0], &b1[0], &b2[0], &b3[0], n, out)
		return
	}
	out[0], out[1], out[2], out[3] = dot(a, b0), dot(a, b1), dot(a, b2), dot(a, b3)
}

// axpy4 adds w[0]*x0 + w[1]*x1 + w[2]*x2 + w[3]*x3 to y (len(y) elements):
// one pass over y for four rows.
func axpy4(w *[4]float32, x0, x1, x2, x3, y []float32) {
	n := len(y)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	a0, a1, a2, a3 := w[0], w[1], w[2], w[3]
	for c := range y {
		y[c] += a0*x0[c] + a1*x1[c] + a2*x2[c] + a3*x3[c]
	}
}

// row returns row i of a [.][d] matrix.
func row(x []float32, i, d int) []float32 { return x[i*d : (i+1)*d] }

// scoresNT sets s[r*ld+i] = scale * (a_r . b_i) for rows r < m and keys
// i < cnt[r]; a is [m][d], b is [n][d]. Keys are taken four at a time (the
// last group repeats its last key); entries at i >= cnt[r] are left alone.
// With simd, two consecutive rows with the same count run together
// (dot2x4: each key chunk is loaded once for both rows); which rows pair up
// depends only on the counts, so results do not depend on the worker count.
func scoresNT(simd bool, s []float32, ld int, a []float32, m int, b []float32, d int, cnt []int32, scale float32) {
	var out [4]float32
	var out8 [8]float32
	for r := 0; r < m; r++ {
		ar := row(a, r, d)
		n := int(cnt[r])
		sr := s[r*ld : r*ld+n]
		if simd && r+1 < m && int(cnt[r+1]) == n && n > 0 {
			ar1 := row(a, r+1, d)
			sr1 := s[(r+1)*ld : (r+1)*ld+n]
			last := n - 1
			for i := 0; i < n; i += 4 {
				b0, b1, b2, b3 := row(b, i, d), row(b, min(i+1, last), d), row(b, min(i+2, last), d), row(b, min(i+3, last), d)
				dot2x4AVX2(&ar[0], &ar1[0], &b0[0], &b1[0], &b2[0], &b3[0], d, &out8)
				for j := 0; j < 4 && i+j < n; j++ {
					sr[i+j] = scale * out8[j]
					sr1[i+j] = scale * out8[4+j]
				}
			}
			r++
			continue
		}
		for i := 0; i < n; i += 4 {
			last := n - 1
			dot4(simd, ar, row(b, i, d), row(b, min(i+1, last), d), row(b, min(i+2, last), d), row(b, min(i+3, last), d), &out)
			for j := 0; j < 4 && i+j < n; j++ {
				sr[i+j] = scale * out[j]
			}
		}
	}
}

// accTN adds sum_r w[r*ld+i] * a_r to c_i for keys i < n: c is [n][d]
// (dK, dV of a block), w is [m][ld] (dS or P), a is [m][d] (Q or dO).
// Rows are taken four at a time (a last, partial group gets zero weights),
// so each c_i is read and written once per four rows; groups whose four
// weights are all zero (masked keys) are skipped.
func accTN(c []float32, n int, w []float32, ld int, a []float32, m, d int) {
	var wt [4]float32
	var ar [4][]float32
	for r := 0; r < m; r += 4 {
		for j := 0; j < 4; j++ {
			ar[j] = row(a, min(r+j, m-1), d)
		}
		for i := 0; i < n; i++ {
			zero := true
			for j := 0; j < 4; j++ {
				wt[j] = 0
				if r+j < m {
					wt[j] = w[(r+j)*ld+i]
				}
				zero = zero && wt[j] == 0
			}
			if !zero {
				axpy4(&wt, ar[0], ar[1], ar[2], ar[3], row(c, i, d))
			}
		}
	}
}

// accNN adds sum_i w[r*ld+i] * b_i to c_r for rows r < m and keys
// i < cnt[r]: c is [m][d] (dQ or O), w is [m][ld] (dS or P), b is [n][d]
// (K or V). Keys are taken four at a time (a last, partial group gets zero
// weights).
func accNN(c []float32, m int, w []float32, ld int, b []float32, d int, cnt []int32) {
	var wt [4]float32
	for r := 0; r < m; r++ {
		cr := row(c, r, d)
		n := int(cnt[r])
		wr := w[r*ld : r*ld+n]
		for i := 0; i < n; i += 4 {
			for j := 0; j < 4; j++ {
				wt[j] = 0
				if i+j < n {
					wt[j] = wr[i+j]
				}
			}
			last := n - 1
			axpy4(&wt, row(b, i, d), row(b, min(i+1, last), d), row(b, min(i+2, last), d), row(b, min(i+3, last), d), cr)
		}
	}
}

package grad

// The float32 building blocks of the forward and backward: three small
// matrix products over row-major [rows][d] operands. They are plain Go
// loops with four independent accumulators (dot) or four rows per pass
// (axpy), which the compiler keeps in registers; their results depend only
// on their inputs (fixed summation order).

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

// axpy adds alpha*x to y (len(x) elements).
func axpy(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for c, xv := range x {
		y[c] += alpha * xv
	}
}

// axpy4 adds a0*x0 + a1*x1 + a2*x2 + a3*x3 to y (len(y) elements): one
// pass over y for four rows.
func axpy4(a0, a1, a2, a3 float32, x0, x1, x2, x3, y []float32) {
	n := len(y)
	x0, x1, x2, x3 = x0[:n], x1[:n], x2[:n], x3[:n]
	for c := range y {
		y[c] += a0*x0[c] + a1*x1[c] + a2*x2[c] + a3*x3[c]
	}
}

// scoresNT sets s[r*ld+i] = scale * (a_r . b_i) for rows r < m and keys
// i < cnt[r]; a is [m][d], b is [n][d]. Entries at i >= cnt[r] are left
// alone.
func scoresNT(s []float32, ld int, a []float32, m int, b []float32, d int, cnt []int32, scale float32) {
	for r := 0; r < m; r++ {
		ar := a[r*d : (r+1)*d]
		sr := s[r*ld : r*ld+int(cnt[r])]
		for i := range sr {
			sr[i] = scale * dot(ar, b[i*d:(i+1)*d])
		}
	}
}

// accTN adds sum_r w[r*ld+i] * a_r to c_i for keys i < n: c is [n][d]
// (dK, dV of a block), w is [m][ld] (dS or P), a is [m][d] (Q or dO).
// Rows are taken four at a time, so each c_i is read and written once per
// four rows; zero weights of a whole group are skipped (masked keys).
func accTN(c []float32, n int, w []float32, ld int, a []float32, m, d int) {
	r := 0
	for ; r+4 <= m; r += 4 {
		a0, a1, a2, a3 := a[r*d:(r+1)*d], a[(r+1)*d:(r+2)*d], a[(r+2)*d:(r+3)*d], a[(r+3)*d:(r+4)*d]
		w0, w1, w2, w3 := w[r*ld:r*ld+n], w[(r+1)*ld:(r+1)*ld+n], w[(r+2)*ld:(r+2)*ld+n], w[(r+3)*ld:(r+3)*ld+n]
		for i := 0; i < n; i++ {
			if w0[i] == 0 && w1[i] == 0 && w2[i] == 0 && w3[i] == 0 {
				continue
			}
			axpy4(w0[i], w1[i], w2[i], w3[i], a0, a1, a2, a3, c[i*d:(i+1)*d])
		}
	}
	for ; r < m; r++ {
		ar := a[r*d : (r+1)*d]
		wr := w[r*ld : r*ld+n]
		for i, x := range wr {
			if x != 0 {
				axpy(x, ar, c[i*d:(i+1)*d])
			}
		}
	}
}

// accNN adds sum_i w[r*ld+i] * b_i to c_r for rows r < m and keys
// i < cnt[r]: c is [m][d] (dQ or O), w is [m][ld] (dS or P), b is [n][d]
// (K or V). Keys are taken four at a time.
func accNN(c []float32, m int, w []float32, ld int, b []float32, d int, cnt []int32) {
	for r := 0; r < m; r++ {
		cr := c[r*d : (r+1)*d]
		wr := w[r*ld : r*ld+int(cnt[r])]
		i := 0
		for ; i+4 <= len(wr); i += 4 {
			axpy4(wr[i], wr[i+1], wr[i+2], wr[i+3], b[i*d:(i+1)*d], b[(i+1)*d:(i+2)*d], b[(i+2)*d:(i+3)*d], b[(i+3)*d:(i+4)*d], cr)
		}
		for ; i < len(wr); i++ {
			axpy(wr[i], b[i*d:(i+1)*d], cr)
		}
	}
}

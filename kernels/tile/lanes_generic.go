package tile

// lanesUpdateGeneric is Lanes.Update in portable Go on the layout of qT and oT:
// per row, the operations of updateGeneric in the same order (so it equals
// the generic Acc tier bit for bit where Go does not fuse multiply-adds).
// Keys >= n are invisible to every row.
func lanesUpdateGeneric(l *Lanes, k, v []float32, n int) {
	d := l.d
	st := &l.st
	var s [BlockN]float32
	for r := 0; r < l.m; r++ {
		nr := int(st.valid[r])
		st.alpha[r] = 1
		if nr <= 0 {
			continue
		}
		sr := s[:nr]
		clear(sr)
		for c := 0; c < d; c++ {
			qc := l.qT[c<<4|r]
			for i := range sr {
				sr[i] += qc * k[i*d+c]
			}
		}
		for i := range sr {
			sr[i] *= st.scale
		}
		// foldRow works on a contiguous output row: move row r out of the
		// layout and back (exact copies; l.o is only filled by
		// FinishLSE, so it serves as the scratch row).
		o := l.o[r*d : (r+1)*d]
		for c := range o {
			o[c] = l.oT[c<<4|r]
		}
		st.alpha[r] = foldRow(sr, v, d, o, &st.mx[r], &st.sum[r], &st.tsum[r], l.temp, st.invT, l.round)
		for c, x := range o {
			l.oT[c<<4|r] = x
		}
	}
}

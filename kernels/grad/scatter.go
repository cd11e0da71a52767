package grad

// scatterPage reduces the staged block gradients of a paged call into
// page pg of the page pools dK and dV (buildPageRefs lists the uses of
// every page first). Page pg, KV head h, slot i receives the sum of the
// staged rows of every token that page-table entry (b, col) = pg maps to it
// (token t = col*PageSize + i of sequence b, for tokens inside the CSR's
// blocks and below seqlen_k_b), added in ascending (b, col) order, so pages
// shared between sequences (or used twice by one) accumulate
// deterministically. Pages nobody reaches are zero.
func (ws *Workspace) scatterPage(p *Problem, dv *derived, dK, dV []float32, pg int) {
	d, ps := p.D, p.PageSize
	for h := 0; h < p.Hkv; h++ {
		base := (pg*p.Hkv + h) * ps * d
		dk, dvp := dK[base:base+ps*d], dV[base:base+ps*d]
		clear(dk)
		clear(dvp)
		for _, ref := range ws.pageRefs[ws.pageRefPtr[pg]:ws.pageRefPtr[pg+1]] {
			b, col := int(ref)/p.PTCols, int(ref)%p.PTCols
			lim := min(int(dv.seqK[b]), int(dv.rows.Count[b])*p.BlkKV)
			for i := 0; i < ps; i++ {
				t := col*ps + i
				if t >= lim {
					break
				}
				r := dv.rows.RowOf(b, t/p.BlkKV)
				src := ((r*p.Hkv+h)*p.BlkKV + t%p.BlkKV) * d
				addTo(dk[i*d:(i+1)*d], ws.stageK[src:src+d])
				addTo(dvp[i*d:(i+1)*d], ws.stageV[src:src+d])
			}
		}
	}
}

// buildPageRefs lists, for every page, the page-table entries (b*PTCols +
// col) that reference it within the tokens the backward reaches, in
// ascending order.
func (ws *Workspace) buildPageRefs(p *Problem, dv *derived) {
	ws.pageRefPtr = growI32(ws.pageRefPtr, p.NumPages+1)
	clear(ws.pageRefPtr)
	used := func(b int) int {
		lim := min(int(dv.seqK[b]), int(dv.rows.Count[b])*p.BlkKV)
		return (lim + p.PageSize - 1) / p.PageSize
	}
	nb := dv.rows.NumSeq
	for b := 0; b < nb; b++ {
		for col := 0; col < used(b); col++ {
			ws.pageRefPtr[p.PageTable[b*p.PTCols+col]+1]++
		}
	}
	for i := 0; i < p.NumPages; i++ {
		ws.pageRefPtr[i+1] += ws.pageRefPtr[i]
	}
	ws.pageRefs = growI32(ws.pageRefs, int(ws.pageRefPtr[p.NumPages]))
	ws.pagePos = growI32(ws.pagePos, p.NumPages)
	pos := ws.pagePos
	copy(pos, ws.pageRefPtr[:p.NumPages])
	for b := 0; b < nb; b++ {
		for col := 0; col < used(b); col++ {
			pg := p.PageTable[b*p.PTCols+col]
			ws.pageRefs[pos[pg]] = int32(b*p.PTCols + col)
			pos[pg]++
		}
	}
}

// addTo adds x to y element-wise (len(y) elements).
func addTo(y, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += x[i]
	}
}

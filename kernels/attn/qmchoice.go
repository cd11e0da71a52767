package attn

// The per-tile path choice of PathAuto (cost.go's model, tileChoice).
//
// A tile is the qpk query heads of qmTileTokens consecutive tokens of one
// sequence, cut from the sequence's first token, for one KV head: the
// tiles do not move with the query windows, so a tile's choice and its
// rows' bits do not depend on them. The query-major part (runQueryMajor)
// chooses each tile's path from its lists in the window's block table,
// runs the query-major tiles and records the others in ws.tileKV; the
// KV-major part then computes and combines only their rows (kvRow).

// startChoices sizes the per-tile record of a call: ws.tileBase[b] is the
// first tile of sequence b, ws.tileKV one flag per (KV head, tile).
func (ws *Workspace) startChoices(p *Prefill, tok int) {
	nb := len(p.CuQ) - 1
	ws.tileTok = tok
	ws.tileBase = grow(ws.tileBase, nb+1)
	ws.tileBase[0] = 0
	cols := 1
	for b := 0; b < nb; b++ {
		ws.tileBase[b+1] = ws.tileBase[b] + (p.CuQ[b+1]-p.CuQ[b]+int32(tok)-1)/int32(tok)
		cols = max(cols, (int(p.SeqK[b])+p.BlkKV-1)/p.BlkKV)
	}
	ws.tileKV = grow(ws.tileKV, p.Hkv*int(ws.tileBase[nb]))
	clear(ws.tileKV)
	ws.stamp = grow(ws.stamp, cols)
	for i := range ws.stamp {
		ws.stamp[i] = -1
	}
	ws.stampID = 0
	ws.costs = callCosts(p)
	ws.staged = stagedCall(p)
}

// tileIndex returns the index in ws.tileKV of KV head h's tile that holds
// batch-local token q of sequence b.
func (ws *Workspace) tileIndex(h, b, q int) int {
	return h*int(ws.tileBase[len(ws.tileBase)-1]) + int(ws.tileBase[b]) + q/ws.tileTok
}

// kvRow reports whether the KV-major part computes KV head h's rows of
// batch-local token q of sequence b: always, unless a query-major part ran
// before it in this call and took the token's tile.
func (ws *Workspace) kvRow(h, b, q int) bool {
	return !ws.mixed || ws.tileKV[ws.tileIndex(h, b, q)]
}

// chooseWindow chooses the path of every tile of the window [ws.w0,
// ws.w1) (whole tiles: the window ends at a tile end) and KV head from the
// block table, records it and returns whether some tile took the
// query-major path and whether some took the KV-major path.
func (ws *Workspace) chooseWindow(p *Prefill, tok int) (anyQuery, anyKV bool) {
	qpk := p.HQ / p.Hkv
	for b := 0; b < len(p.CuQ)-1; b++ {
		lo, hi := max(ws.w0, int(p.CuQ[b])), min(ws.w1, int(p.CuQ[b+1]))
		for t := lo; t < hi; t += tok {
			n := min(tok, hi-t)
			for h := 0; h < p.Hkv; h++ {
				c := ws.tileChoice(p, h, b, t, n, qpk)
				kv := !c.Query()
				ws.tileKV[ws.tileIndex(h, b, t-int(p.CuQ[b]))] = kv
				anyQuery, anyKV = anyQuery || !kv, anyKV || kv
			}
		}
	}
	return anyQuery, anyKV
}

// tileChoice weighs the tile of tokens [t, t+n) of sequence b, KV head h,
// from the window's block table: its entries are its tokens' listed
// blocks, its union the distinct ones that some token may see (a block
// that starts at or after the last token's causal limit is seen by none:
// the limits grow with the token).
func (ws *Workspace) tileChoice(p *Prefill, h, b, t, n, qpk int) tileChoice {
	seqQ, seqK := int(p.CuQ[b+1]-p.CuQ[b]), int(p.SeqK[b])
	lim := seqK
	if p.Causal {
		lim = min(lim, t+n-1-int(p.CuQ[b])+seqK-seqQ+1)
	}
	ws.stampID++
	entries, union := 0, 0
	for i := 0; i < n; i++ {
		for _, j := range ws.sel[(h*ws.win+t+i-ws.w0)*ws.slots:][:ws.slots] {
			if j < 0 {
				continue
			}
			entries++
			if int(j)*p.BlkKV < lim && ws.stamp[j] != ws.stampID {
				ws.stamp[j] = ws.stampID
				union++
			}
		}
	}
	return choose(ws.costs, entries, union, n, qpk, float64(p.BlkKV), ws.staged)
}

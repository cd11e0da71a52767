package attn

// The cost model of PathAuto.
//
// Both paths compute the same scores and products for every selected
// (query, head, block) pair; they differ in what else they do and in how
// many rows their kernels compute:
//
//   - KV-major: each selected (query, KV head, block) entry of the CSR
//     costs qpk rows times the block's keys in the block kernel (tile.Acc,
//     rows of several queries sharing one loaded block), plus one partial
//     row per query head: its normalisation and store in the partial dtype,
//     and its reload and weighted sum in the combine. That last part does
//     not scale with the keys.
//   - Query-major: each (query tile, KV head) visits every block in the
//     union of its tokens' selections, and the lane kernels compute all 16
//     lanes of a group (the tile's rows rounded up to 16) for every key of
//     it, whether a row's token selected the block or not. With qpk >= 16 a
//     tile is one token: the union is the token's own selection and no lane
//     is wasted; with fewer heads per KV head a tile spans 16/qpk tokens,
//     and a block only one of them selected wastes the others' lanes.
//
// So, with E the CSR entries, U the (tile, block) visits (E when a tile is
// one token; counted from the CSR rows otherwise), n the block size:
//
//	kv    = E * qpk * (n * kvKeyCost + kvSlotCost)
//	query = U * roundup16(qpk * tokens) * n * qmKeyCost
//
// and auto takes the cheaper. The constants are per (row, key) in the
// query-major kernels' unit; see their comments for where they come from.
const (
	qmKeyCost = 1.0
	// kvKeyCost is the KV-major block kernel's cost per (row, key).
	kvKeyCost = 1.0
	// kvSlotCost is a partial row's store, reload and combine, in (row,
	// key) units.
	kvSlotCost = 0.0
)

// choosePath returns the cheaper path of p by the model above.
func choosePath(p *Prefill) PrefillPath {
	qpk := p.HQ / p.Hkv
	tok := qmTileTokens(qpk)
	c := p.CSR
	var entries, visits int64
	for h := 0; h < c.Hkv; h++ {
		rp := c.RowPtr[h*(c.TotalRows+1) : (h+1)*(c.TotalRows+1)]
		entries += int64(rp[c.TotalRows])
		if tok == 1 {
			continue
		}
		for r := 0; r < c.TotalRows; r++ {
			last := int32(-1)
			for _, q := range c.QIdx[h*c.Stride+int(rp[r]) : h*c.Stride+int(rp[r+1])] {
				if t := q / int32(tok); t != last {
					visits++
					last = t
				}
			}
		}
	}
	if tok == 1 {
		visits = entries
	}
	n := float64(p.BlkKV)
	rows := float64((qpk*tok + 15) / 16 * 16)
	kv := float64(entries) * float64(qpk) * (n*kvKeyCost + kvSlotCost)
	query := float64(visits) * rows * n * qmKeyCost
	if query < kv {
		return PathQuery
	}
	return PathKV
}

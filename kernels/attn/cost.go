package attn

import "github.com/sparseattn/msa/kernels/tile"

// The cost model of PathAuto.
//
// Both paths compute the same scores and products for every selected
// (query, head, block) pair; they differ in what else they do and in how
// many rows their kernels compute:
//
//   - KV-major: each selected (query, KV head, block) entry of the CSR
//     costs qpk rows times the block's keys in the block kernel (tile.Acc,
//     rows of many queries sharing one loaded block), plus one partial row
//     per query head: its normalisation and store in the partial dtype,
//     and its reload and weighted sum in the combine, a cost that does not
//     scale with the keys.
//   - Query-major: each (query tile, KV head) visits every block in the
//     union of its tokens' selections, and the lane kernels compute all 16
//     lanes of a group (the tile's rows rounded up to 16) for every key of
//     it, whether a row's token selected the block or not. With qpk >= 16 a
//     tile is one token: the union is the token's own selection and no lane
//     is wasted; with fewer heads per KV head a tile spans 16/qpk tokens,
//     and a block only some of them selected wastes the others' lanes.
//
// With E the CSR entries, U the (tile, block) visits (E when a tile is one
// token; counted from the CSR rows otherwise) and n the block size:
//
//	kv    = E * qpk * (n * kvKeyCost + kvSlotCost)
//	query = U * roundup16(qpk * tokens) * n * qmKeyCost * strided
//
// auto takes the query-major path when query < kv. The constants are in
// units of one (row, key) of the float32 lane kernels (qmKeyCost = 1) and
// come from BenchmarkPrefillPaths on AMD Zen 4 (2 vCPUs, 8K tokens, D 128,
// 128-key blocks, topK 16): at qpk 16 with one KV head, where U = E and no
// lane is wasted, the query-major path took 0.77-0.93 of the KV-major
// time on the avx512 and avx2 tiers, which n/(n + kvSlotCost) = 0.85
// matches with kvSlotCost = 24.
//
// Two cases are outside the lane kernels' best case and keep KV-major:
//
//   - the bf16-product tiers (avx512bf16, amxbf16): their block kernel
//     runs the products at about twice the FP32 multiply-add rate
//     (VDPBF16PS, AMX) while the query-major path's lane kernels stay in
//     float32 (on avx512bf16 the query-major path took 1.4-2.3x the
//     KV-major time): kvKeyCost is 0.5 there;
//   - K/V rows of one KV head that are not contiguous (dense K/V with
//     several KV heads, or token-major NHD pages): the lane kernels cannot
//     read a chunk in place and the walk decodes it row by row, for 16
//     rows, where the KV-major path decodes a block once for every query
//     of a work item (at qpk 4 and 1 with no lane wasted, the query-major
//     path took 1.9x and 3.2x the KV-major time): strided is 2.
//
// Where the lane kernels have no SIMD code (the generic tier, other
// architectures, head dimensions they do not cover: tile.LanesSIMD) the
// query-major walk packs a whole block for 16 rows with the block kernel,
// which the KV-major path amortises over a whole work item: auto keeps
// the KV-major path without weighing.
const (
	qmKeyCost  = 1.0
	kvKeyCost  = 1.0 // float32 block kernel, per (row, key)
	kvBF16Key  = 0.5 // bf16-product block kernel, per (row, key)
	kvSlotCost = 24  // one partial row's store, reload and combine
	qmStrided  = 2.0 // query-major factor for K/V rows read one at a time
)

// choosePath returns the cheaper path of p by the model above.
func choosePath(p *Prefill) PrefillPath {
	if !tile.LanesSIMD(p.D) {
		return PathKV
	}
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
	key := kvKeyCost
	if tile.BF16Products() {
		key = kvBF16Key
	}
	strided := 1.0
	if l := &p.KV; l.Hkv > 1 && (!l.Paged || l.NHD) {
		strided = qmStrided
	}
	rows := float64((qpk*tok + 15) / 16 * 16)
	kv := float64(entries) * float64(qpk) * (n*key + kvSlotCost)
	query := float64(visits) * rows * n * qmKeyCost * strided
	if query < kv {
		return PathQuery
	}
	return PathKV
}

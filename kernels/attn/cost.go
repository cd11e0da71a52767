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
//	query = U * roundup16(qpk * tokens) * n * qmKeyCost * staged
//
// auto takes the query-major path when query < kv. The constants are in
// units of one (row, key) of the float32 lane kernels (qmKeyCost = 1) and
// come from BenchmarkPrefillPaths on AMD Zen 4 (2 vCPUs, 8K tokens, D 128,
// topK 16; docs/performance.md): at qpk 16 with one KV head, where U = E
// and no lane is wasted, the query-major path took 0.91-0.98 of the
// KV-major time with 128-key blocks and 0.77-0.92 with 64-key blocks on
// the avx512 tier (0.90-0.93 on avx2 with 128-key blocks), which
// n/(n + kvSlotCost) = 0.91 and 0.84 matches with kvSlotCost = 12.
//
// Two cases are outside the lane kernels' best case and keep KV-major:
//
//   - the bf16-product tiers (avx512bf16, amxbf16): their block kernel
//     runs the products at about twice the FP32 multiply-add rate
//     (VDPBF16PS, AMX) while the query-major path's lane kernels stay in
//     float32 (on avx512bf16 the query-major path took 1.4-2.3x the
//     KV-major time): kvKeyCost is 0.5 there;
//   - K/V the lane kernels cannot read in place: NVFP4, and rows of one
//     KV head that are not contiguous (dense K/V with several KV heads, or
//     token-major NHD pages). The walk then decodes each chunk for the 16
//     rows of one tile, where the KV-major path decodes a block once for
//     every query of a work item: at qpk 16 with NVFP4 K/V the query-major
//     path took 2.2x the KV-major time, at qpk 4 and 1 with strided BF16
//     rows and no lane wasted 1.9x and 3.2x: staged is 2.
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
	kvSlotCost = 12  // one partial row's store, reload and combine
	qmStaged   = 2.0 // query-major factor for K/V the lane kernels cannot read in place
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
	staged := 1.0
	if l := &p.KV; l.Hkv > 1 && (!l.Paged || l.NHD) || !inPlace(&p.K) || !inPlace(&p.V) {
		staged = qmStaged
	}
	rows := float64((qpk*tok + 15) / 16 * 16)
	kv := float64(entries) * float64(qpk) * (n*key + kvSlotCost)
	query := float64(visits) * rows * n * qmKeyCost * staged
	if query < kv {
		return PathQuery
	}
	return PathKV
}

// inPlace reports whether the lane kernels of the active tier read o's
// rows in place (Operand.rawFormat): BF16 and E4M3 rows with the AVX2 or
// AVX-512 kernels.
func inPlace(o *Operand) bool {
	return (o.Dtype == BF16 || o.Dtype == E4M3) && vecLevel() != vecGo
}

package attn

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/kernels/tile"
)

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
//   - K/V that the lane kernels cannot read in place (NVFP4, and rows of
//     one KV head that are not contiguous: dense K/V with several KV heads,
//     token-major NHD pages) go through the block cache (qmcache.go): each
//     block a query window visits is converted once, as the KV-major path
//     decodes a block once per work item, and the tiles read the copy in
//     place. The conversion is left out of the model (one pass over the
//     window's blocks, against U * 16 lane rows of products over them).
//     Where the cache cannot hold the blocks of one KV head, the tiles
//     decode K/V chunk by chunk for their 16 rows: Staged.
//
// Auto weighs the paths per query tile and KV head (tileChoice). With E
// the tile's CSR entries (its tokens' selected blocks), U the blocks of
// its union that some token may see and n the block size:
//
//	kv    = E * qpk * (n * KVKey + KVSlot)
//	query = U * roundup16(qpk * tokens) * n * QMKey * (Staged if decoded per tile)
//
// and the tile takes the query-major path when query < kv. One call then
// runs both kinds of work: the query-major tiles first (runQueryMajor),
// then the KV-major work items and combine over the other tiles' rows
// only. A tile is cut from its sequence's first token, and its choice
// depends on its own lists, the call's shape and the tier alone, never on
// the query window or the worker count; each row gets the bits of the path
// that computed it. Where the lane kernels have no SIMD code (the generic
// tier, other architectures, head dimensions they do not cover:
// tile.LanesSIMD) the query-major walk packs a whole block for 16 rows
// with the block kernel, and auto keeps the KV-major path without
// weighing.
type pathCosts struct {
	QMKey  float64 // query-major: one (lane row, key) of the lane kernels
	KVKey  float64 // KV-major: one (row, key) of the block kernel
	KVSlot float64 // KV-major: one partial row's store, reload and combine
	Staged float64 // query-major factor for K/V decoded per tile
}

// The constants, in units of one (row, key) of the float32 block kernel,
// come from both paths run end to end on AMD Zen 4 at 8K tokens, 16 query
// heads on one KV head, D 128 (`go run ./bench -cases prefill,nvfp4 -path
// query` against `-path kv`, and `go test ./kernels/attn -run '^$' -bench
// PrefillPaths`):
//
//   - float32 tiers (avx2, avx512): with one-token tiles (U = E, no lane
//     wasted) and 128-key blocks the query-major path reaches 0.92-1.04 of
//     the KV-major path's share of the FMA peak end to end (ratios of the
//     medians, the paths alternated: 0.92
//     and 0.94 at 2K and 8K tokens with random selections, 1.04 and 0.95
//     with correlated ones). Its
//     lane kernels do not make up for the partials it saves: QMKey = 1.05
//     and KVSlot = 0, so auto keeps the KV-major path on these tiers for
//     every tile whose tokens see all the blocks they selected, and gives
//     the query-major path only tiles whose lists name blocks none of
//     their tokens sees. (In BenchmarkPrefillPaths, whose lists also
//     select blocks that lie wholly in a query's future, which cost the
//     KV-major path a partial row each and the query-major path nothing,
//     the query-major path is 2-9% faster with 128-key blocks and 8-23%
//     with 64-key blocks.)
//   - bf16-product tiers (avx512bf16, amxbf16): the block kernel's
//     products run at about twice the FP32 rate while the lane kernels
//     stay in float32; the query-major path takes 1.4-2.3x the KV-major
//     time (KVKey = 0.5).
//   - Staged: K/V decoded per tile, without the block cache, took 2.2x
//     the KV-major time on NVFP4 K/V (bench, nvfp4kv-bf16q-8k) and 1.9x
//     and 3.2x on strided BF16 rows at qpk 4 and 1 with no lane wasted: 2.
//     Through the block cache NVFP4 K/V at qpk 16 takes 1.00-1.03x the
//     KV-major CPU time per call, as BF16 K/V read in place does
//     (0.99-1.01x; BenchmarkPrefillPaths' cpu-ms, random selections, 2
//     workers, docs/performance.md): QMKey covers it.
var (
	float32Costs = pathCosts{QMKey: 1.05, KVKey: 1, KVSlot: 0, Staged: 2}
	bf16Costs    = pathCosts{QMKey: 1.05, KVKey: 0.5, KVSlot: 0, Staged: 2}
)

// weighs reports whether auto weighs the paths on the active tier for p:
// not where the lane kernels have no SIMD code, where it keeps the
// KV-major path.
func weighs(p *Prefill) bool { return tile.LanesSIMD(p.D) }

// costsOverride, when set (tests only), replaces the active tier's
// constants.
var costsOverride *pathCosts

// activeCosts returns the constants of the active tier.
func activeCosts() *pathCosts {
	if costsOverride != nil {
		return costsOverride
	}
	if tile.BF16Products() {
		return &bf16Costs
	}
	return &float32Costs
}

// tileChoice is the cost model's verdict on one query tile (one KV head):
// the model's two costs and the quantities they come from.
type tileChoice struct {
	entries int     // the tile's CSR entries: (token, selected block) pairs
	union   int     // blocks of its union that some token may see
	lanes   int     // lane rows the query-major path computes per block
	qpk     int     // rows the KV-major path computes per entry
	waste   float64 // (union * lanes) / (entries * qpk): work the lanes add
	rate    float64 // QMKey * Staged / (KVKey + KVSlot/n): cost per row-key
	staged  bool    // the tile would decode K/V per tile (no cache)
}

// choose returns the model's verdict on a tile of tokens tokens (qpk rows
// each) whose lists hold entries entries and whose union is union blocks
// of n keys; staged says that its K/V would be decoded per tile.
func (m *pathCosts) choose(entries, union, tokens, qpk int, n float64, staged bool) tileChoice {
	c := tileChoice{entries: entries, union: union, lanes: (qpk*tokens + 15) / 16 * 16, qpk: qpk, staged: staged}
	c.rate = m.QMKey / (m.KVKey + m.KVSlot/n)
	if staged {
		c.rate *= m.Staged
	}
	c.waste = 0
	if union > 0 {
		c.waste = math.Inf(1)
		if entries > 0 {
			c.waste = float64(union*c.lanes) / float64(entries*qpk)
		}
	}
	return c
}

// path returns the cheaper path: query-major when waste * rate < 1 (also
// for a tile with no visible block, which costs the query-major path
// nothing and the KV-major path a partial row per entry).
func (c tileChoice) path() PrefillPath {
	if c.waste*c.rate < 1 {
		return PathQuery
	}
	return PathKV
}

// String says which path the tile takes and which factor decided it: the
// lane factor (union blocks times 16-lane groups against entries times
// rows; below 1 where the KV-major path computes entries nobody sees) or
// the rate factor (the lane kernels' cost per row and key against the
// block kernel's and its partial rows'), the one farther from 1; "decoded
// per tile" marks a rate factor raised by Staged.
func (c tileChoice) String() string {
	what := "lanes"
	if math.Abs(math.Log(c.rate)) > math.Abs(math.Log(c.waste)) {
		what = "rate"
		if c.staged {
			what = "rate (K/V decoded per tile)"
		}
	}
	return fmt.Sprintf("%v: lanes %d blocks x %d lanes / (%d entries x %d rows) = %.3g, rate %.3g, product %.3g; decided by %s",
		c.path(), c.union, c.lanes, c.entries, c.qpk, c.waste, c.rate, c.waste*c.rate, what)
}

// stagedCall reports whether the query-major tiles of p decode K/V per
// tile: K/V the lane kernels cannot read in place whose KV head's blocks
// the block cache cannot hold.
func stagedCall(p *Prefill) bool { return needsCache(p) && !cacheHoldsHead(p) }

package attn

import (
	"math"

	"github.com/sparseattn/msa/kernels/plan"
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
//     it, whether a row's token selected the block or not, plus each lane
//     row's work per block that does not scale with the keys (the block's
//     set-up and the online softmax's rescale). With qpk >= 16 a tile is
//     one token: the union is the token's own selection and no lane
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
//	query = U * roundup16(qpk * tokens) * (n * QMKey + QMSlot) * (Staged if decoded per tile)
//
// and the tile takes the query-major path when query < kv: the form of
// plan.PathCosts.Weigh, which the GPU path shares with its own constants
// and row group, here with 16 lane rows (choose). One call then
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
type pathCosts = plan.PathCosts

// The constants are CPU time in nanoseconds per unit on AMD Zen 4 (AMD
// EPYC family 25 model 17, 2 workers), fitted per tier to both paths run
// end to end at 8K tokens, 16 query heads on one KV head (one-token tiles:
// no lane wasted, U the entries a token sees), D 128, BF16 Q and K/V, topK
// 16, random and local selections, 128- and 64-key blocks:
//
//	MSA_CPU_TIER=<tier> go test ./kernels/attn -run '^$' -benchtime 3x \
//	    -bench 'PrefillPaths/<tier>$/kv=(?i)bf16/qpk=16/blk=/paged=false/(random|local)/'
//
// reading its cpu-ms (process CPU time per call, median of the calls; the
// host is shared, so CPU time rather than wall time), two alternated runs
// per tier. The KV-major time is fitted, least squares over the four
// cases, as 16 * (U * n * KVKey + E * KVSlot) (the keys of the blocks a
// token sees, a partial row for every entry, seen or not), the
// query-major time as 16 * U * (n * QMKey + QMSlot); the counts E and U
// are the benchmark's (its entries and union metrics), and the data,
// counts and fits are in docs/results/pathcost/amd-zen4.csv. Piping the
// command's output (alternated runs together) into
// `go run ./kernels/attn/internal/costfit` prints the fitted constants in
// this file's form, with their rates and residuals (its tests reproduce
// the committed avx512bf16 fit from that file). Only the ratio
// (QMKey + QMSlot/n) / (KVKey + KVSlot/n), the rate of tileChoice, decides.
// The fits' residuals reach 5% and the two runs of a tier differ by as
// much: the per-key constants are known to a few percent, the per-row
// ones (fixed mostly by the difference between the block sizes) to tens of
// percent, and a rate within 5% of 1 is a tie, where either path costs
// about the same. One-token tiles that see all their blocks take the
// query-major path at 64-key blocks on every measured tier (the partial
// rows the KV-major path writes cost more than the lane kernels' extra
// time per key) and, at 128-key blocks, the KV-major path on avx512bf16
// (rate 1.05, at the edge of a tie: its bf16 block kernel keeps the
// larger blocks' partial rows cheap). The kernels alone, in cache on
// one thread (go test ./kernels/tile -run '^$' -benchtime 3000x -bench
// 'LanesUpdate/tier=(avx2|avx512|avx512bf16)$/path=/m=16/n=128/d=128$',
// best-GFLOP/s), show the same order on avx512bf16: the bf16-product lane
// kernels reach 152 GFLOP/s, the float32 ones 112 and the bf16 block
// kernel 136 with its block load (200 without it).
//
// Staged, K/V decoded per tile without the block cache, is a factor on the
// lane kernels' rate, measured with the float32 lane kernels: 2.2x the
// KV-major time on NVFP4 K/V (bench, nvfp4kv-bf16q-8k) and 1.9x and 3.2x
// on strided BF16 rows at qpk 4 and 1 with no lane wasted; through the
// block cache NVFP4 K/V took the time of BF16 K/V read in place, which the
// other constants cover.
var (
	// avx2: rate 0.93 at 64-key blocks, 1.00 at 128. Fitted the same way
	// on Zen 3 (AMD EPYC family 25 model 1, AVX2 only, whose cores run
	// this tier), the rates are 0.97 and 1.00 (QMKey 7.64, QMSlot 152,
	// KVKey 7.27, KVSlot 197: docs/results/pathcost/amd-zen3.csv), so
	// these constants make Zen 3's choices too: query-major at 64-key
	// blocks, a tie within 1% at 128.
	avx2Costs = pathCosts{QMKey: 5.59, QMSlot: 17.8, KVKey: 5.18, KVSlot: 72.1, Staged: 2}
	// avx512: rate 0.95 at 64-key blocks, 1.04 at 128.
	avx512Costs = pathCosts{QMKey: 5.05, QMSlot: 65.5, KVKey: 4.27, KVSlot: 137, Staged: 2}
	// avx512 where the query-major tiles take Q.K on VDPBF16PS
	// (bf16ScoresCall: AVX512_BF16, BF16 Q and K): the KV-major constants
	// of avx512, the query-major ones fitted as above to the query-major
	// runs with VDPBF16PS scores (the benchmark's query rows; its
	// query-f32scores rows are the float32 Q.K kernels, which avx512's
	// constants still fit to within the host's load, 0-20% above them):
	// rate 0.82 at 64-key blocks, 0.92 at 128 (the runs' query-major to
	// KV-major CPU time: 0.82 and 0.84). Data and fit:
	// docs/results/paths/amd-zen4-bf16scores.csv.
	avx512ScoresCosts = pathCosts{QMKey: 4.58, QMSlot: 41.6, KVKey: 4.27, KVSlot: 137, Staged: 2}
	// avx512bf16, whose query-major tiles run the bf16-product lane kernels
	// (VDPBF16PS, tile.Lanes.SetBF16Products) as its block kernel runs bf16
	// products, the V pairs made inside the Q.K kernel: rate 0.96 at 64-key
	// blocks, 1.05 at 128 (CPU time per call at 128-key blocks: 684-718 ms
	// KV-major, 720-756 ms query-major; with the float32 lane kernels the
	// rates were 1.66 and 1.77: QMKey 4.48, QMSlot 108).
	avx512bf16Costs = pathCosts{QMKey: 2.85, QMSlot: 32.1, KVKey: 2.38, KVSlot: 72.2, Staged: 2}
	// amxbf16 is unmeasured: no CPU with AMX was available (on one, the
	// command above with MSA_CPU_TIER=amxbf16, piped into costfit). Its constants
	// are in other units (one (row, key) of the float32 block kernel) and
	// assume its block kernel's products at twice the float32 rate and its
	// lane path no faster than the float32 lane kernels: rate 2.1, so auto
	// keeps the KV-major path for every tile whose tokens see the blocks
	// they selected.
	amxbf16Costs = pathCosts{QMKey: 1.05, KVKey: 0.5, KVSlot: 0, Staged: 2}
)

// tierCosts maps each tier that weighs the paths to its constants; the
// generic tier has none, since it has no SIMD lane kernels and auto keeps
// the KV-major path there without weighing (weighs): its query-major path,
// which packs a block for 16 rows with the block kernel, took 1.14x and
// 1.15x the KV-major CPU time at 128- and 64-key blocks (medians of two
// runs, random lists, the command above with MSA_CPU_TIER=generic and
// -benchtime 1x; in docs/results/pathcost/amd-zen4.csv).
var tierCosts = map[string]*pathCosts{
	"avx2":       &avx2Costs,
	"avx512":     &avx512Costs,
	"avx512bf16": &avx512bf16Costs,
	"amxbf16":    &amxbf16Costs,
}

// weighs reports whether auto weighs the paths on the active tier for p:
// not where the lane kernels have no SIMD code, where it keeps the
// KV-major path.
func weighs(p *Prefill) bool { return tile.LanesSIMD(p.D) }

// costsOverride, when set (tests only), replaces the constants of the
// tier that runs a call.
var costsOverride *pathCosts

// tierCostsOf returns the constants of the named tier.
func tierCostsOf(name string) *pathCosts {
	if costsOverride != nil {
		return costsOverride
	}
	if c, ok := tierCosts[name]; ok {
		return c
	}
	// The tiers without constants of their own: the emulated bf16 tier
	// (tests on CPUs without AVX512_BF16) chooses as avx512bf16 does, and
	// the generic tier, which never weighs (weighs), as avx512.
	if name == "avx512bf16-emulated" {
		return &avx512bf16Costs
	}
	return &avx512Costs
}

// callCosts returns the constants that weigh p's tiles: those of the tier
// that runs them (PrefillTier: the bf16 twin for a call with bf16
// products), or avx512ScoresCosts where the avx512 tier's query-major
// tiles take VDPBF16PS scores.
func callCosts(p *Prefill) *pathCosts {
	c := tierCostsOf(PrefillTier(p.Q.Dtype, p.K.Dtype, p.V.Dtype))
	if c == &avx512Costs && bf16ScoresCall(p) {
		return &avx512ScoresCosts
	}
	return c
}

// PrefillTier returns the name of the tile tier that runs a prefill call
// with Q, K and V of dtypes q, k and v: the bf16 twin of the active tier
// (tile.BF16InputTier) where every dtype is exact in bf16, else the
// active tier (tile.Tier).
func PrefillTier(q, k, v Dtype) string {
	if exactBF16(q) && exactBF16(k) && exactBF16(v) {
		return tile.BF16InputTier()
	}
	return tile.Tier()
}

// bf16ScoresCall reports whether p's query-major tiles ask their lane
// kernels for VDPBF16PS scores (runQueryItems) and get them (BF16Scores).
func bf16ScoresCall(p *Prefill) bool { return BF16Scores(p.Q.Dtype, p.K.Dtype, p.D) }

// BF16Scores reports whether the query-major tiles of a prefill call with
// Q and K of dtypes q and k and head dimension d take Q.K on VDPBF16PS
// while their lane kernels are the float32 ones: BF16 Q and K, whose
// values are bf16 already, on the avx512 lane kernels of a CPU with
// AVX512_BF16 that read them in place (tile.LanesBF16Scores). The products
// are exact, so the results keep float32's accuracy; what changes is the
// speed bound: half of such a tile's multiply-adds (Q.K) run at the
// VDPBF16PS rate, the other half (P.V) at the float32 rate. A call with
// bf16 products (BF16Products) runs both on its bf16 lane kernels instead,
// where this does not apply.
func BF16Scores(q, k Dtype, d int) bool {
	return !qmNoBF16Scores && q == BF16 && k == BF16 && tile.LanesBF16Scores(d)
}

// tileChoice is the cost model's verdict on one query tile (one KV head).
type tileChoice = plan.TileVerdict

// laneRows is the row group of the lane kernels: a query-major tile
// computes its rows rounded up to 16 lanes for every key it visits.
const laneRows = 16

// choose returns m's verdict (plan.PathCosts.Weigh) on a tile of tokens
// tokens (qpk rows each) whose lists hold entries entries and whose union
// is union blocks of n keys; staged says that its K/V would be decoded per
// tile. The counts come from the call's block table and its validated
// shape, which Weigh accepts; were it to refuse them, the tile keeps the
// KV-major path, which computes every tile.
func choose(m *pathCosts, entries, union, tokens, qpk int, n float64, staged bool) tileChoice {
	c, err := m.Weigh(entries, union, tokens, qpk, laneRows, n, staged)
	if err != nil {
		return tileChoice{Waste: math.Inf(1), Rate: 1}
	}
	return c
}

// pathOf returns the path verdict c gives its tile.
func pathOf(c tileChoice) PrefillPath {
	if c.Query() {
		return PathQuery
	}
	return PathKV
}

// stagedCall reports whether the query-major tiles of p decode K/V per
// tile: K/V the lane kernels cannot read in place whose KV head's blocks
// the block cache cannot hold.
func stagedCall(p *Prefill) bool { return needsCache(p) && !cacheHoldsHead(p) }

package plan

import (
	"fmt"
	"math"
)

// The per-tile choice between the two prefill paths, shared by the CPU
// path (kernels/attn) and the GPU path (cuda): each weighs a query tile
// (the query heads of consecutive tokens of one sequence, one KV head)
// with constants of its own hardware and takes the path the model finds
// cheaper.
//
// Both paths compute the scores and products of every selected (query,
// head, block) pair; they differ in what else they do and in how many
// rows they compute:
//
//   - KV-major: each CSR entry (token, selected block) costs qpk rows times
//     the block's keys, plus one partial row per query head: its store in
//     the partial dtype and its reload and weighted sum in the combine,
//     a cost that does not scale with the keys.
//   - Query-major: the tile visits every block in the union of its tokens'
//     selections and computes all its lane rows (the tile's rows rounded up
//     to the kernel's row group: 16 lanes on the CPU, 64 rows on the GPU)
//     for every key of it, whether a row's token selected the block or
//     not, plus each lane row's work per block that does not scale with
//     the keys (set-up, the online softmax's rescale).
//
// With E the tile's entries, U its union, L its lane rows and n the keys
// per block:
//
//	kv    = E * qpk * (n * KVKey + KVSlot)
//	query = U * L * (n * QMKey + QMSlot) * (Staged if K/V is decoded per tile)
//
// and the tile takes the query-major path when query < kv, that is when
// waste * rate < 1 with waste = (U * L) / (E * qpk) and rate = (QMKey +
// QMSlot/n) * Staged / (KVKey + KVSlot/n).

// PathCosts are the constants that weigh the paths, in any unit common to
// the five (only the rate, a ratio, decides).
type PathCosts struct {
	QMKey  float64 // query-major: one (lane row, key)
	QMSlot float64 // query-major: one lane row's work per block that does not scale with its keys
	KVKey  float64 // KV-major: one (row, key)
	KVSlot float64 // KV-major: one partial row's store, reload and combine
	Staged float64 // query-major factor for K/V decoded per tile
}

// TileVerdict is the model's verdict on one query tile: the quantities it
// comes from and the two factors whose product decides.
type TileVerdict struct {
	Entries int     // the tile's CSR entries: (token, selected block) pairs
	Union   int     // distinct blocks the query-major path visits
	Lanes   int     // lane rows the query-major path computes per block
	QPK     int     // rows the KV-major path computes per entry
	Waste   float64 // (Union * Lanes) / (Entries * QPK): work the lanes add
	Rate    float64 // (QMKey + QMSlot/n) * Staged / (KVKey + KVSlot/n): cost per row-key
	Staged  bool    // K/V would be decoded per tile
}

// Weigh returns the verdict on a tile of tokens tokens (qpk rows each)
// whose selections hold entries entries and whose union is union blocks
// of keysPerBlock keys, on a query-major kernel computing rows in groups
// of laneRows; staged says that its K/V would be decoded per tile. A
// tile with no visible block (union 0) costs the query-major path nothing
// and takes it; a tile with blocks but no entry cannot be weighed by the
// ratio and keeps the KV-major path (waste +Inf).
func (m *PathCosts) Weigh(entries, union, tokens, qpk, laneRows int, keysPerBlock float64, staged bool) (TileVerdict, error) {
	switch {
	case m == nil:
		return TileVerdict{}, fmt.Errorf("plan: path costs: nil")
	case entries < 0 || union < 0:
		return TileVerdict{}, fmt.Errorf("plan: path choice: entries %d, union %d: expected counts >= 0", entries, union)
	case tokens < 1 || qpk < 1 || laneRows < 1:
		return TileVerdict{}, fmt.Errorf("plan: path choice: tokens %d, qhead_per_kv %d, lane rows %d: expected each >= 1", tokens, qpk, laneRows)
	case !(keysPerBlock > 0) || math.IsInf(keysPerBlock, 1):
		return TileVerdict{}, fmt.Errorf("plan: path choice: keys per block %v: expected a finite value > 0", keysPerBlock)
	case !(m.KVKey+m.KVSlot/keysPerBlock > 0) || !(m.QMKey >= 0 && m.QMSlot >= 0 && m.Staged > 0):
		return TileVerdict{}, fmt.Errorf("plan: path costs %+v: expected KVKey + KVSlot/n > 0, QMKey, QMSlot >= 0 and Staged > 0", *m)
	}
	c := TileVerdict{Entries: entries, Union: union, Lanes: (qpk*tokens + laneRows - 1) / laneRows * laneRows, QPK: qpk, Staged: staged}
	c.Rate = (m.QMKey + m.QMSlot/keysPerBlock) / (m.KVKey + m.KVSlot/keysPerBlock)
	if staged {
		c.Rate *= m.Staged
	}
	if union > 0 {
		c.Waste = math.Inf(1)
		if entries > 0 {
			c.Waste = float64(union*c.Lanes) / float64(entries*qpk)
		}
	}
	return c, nil
}

// Query reports whether the tile takes the query-major path: waste * rate
// < 1 (also for a tile with no visible block, which costs the query-major
// path nothing and the KV-major path a partial row per entry).
func (c TileVerdict) Query() bool { return c.Waste*c.Rate < 1 }

// Factor names the factor that decided the verdict, the one farther from
// 1: "lanes" (union blocks times lane rows against entries times rows;
// below 1 where the KV-major path computes entries nobody sees) or "rate"
// (the query-major cost per row and key against the KV-major one and its
// partial rows), "rate (K/V decoded per tile)" where Staged raised it.
func (c TileVerdict) Factor() string {
	if math.Abs(math.Log(c.Rate)) > math.Abs(math.Log(c.Waste)) {
		if c.Staged {
			return "rate (K/V decoded per tile)"
		}
		return "rate"
	}
	return "lanes"
}

// String says which path the tile takes ("query" or "kv"), the two
// factors and which one decided.
func (c TileVerdict) String() string {
	path := "kv"
	if c.Query() {
		path = "query"
	}
	return fmt.Sprintf("%s: lanes %d blocks x %d lanes / (%d entries x %d rows) = %.3g, rate %.3g, product %.3g; decided by %s",
		path, c.Union, c.Lanes, c.Entries, c.QPK, c.Waste, c.Rate, c.Waste*c.Rate, c.Factor())
}

// WithRate returns m with KVSlot set so that a tile of blocks of
// keysPerBlock keys (K/V not staged) weighs at rate, the other constants
// kept: KVSlot = n * ((QMKey + QMSlot/n) / rate - KVKey). It turns a rate
// measured by timing both paths on one call into the constant the model
// needs to give it.
func (m PathCosts) WithRate(rate, keysPerBlock float64) (PathCosts, error) {
	n := keysPerBlock
	switch {
	case !(rate > 0) || math.IsInf(rate, 1):
		return m, fmt.Errorf("plan: path costs for rate %v: expected a finite rate > 0", rate)
	case !(n > 0) || math.IsInf(n, 1):
		return m, fmt.Errorf("plan: path costs for keys per block %v: expected a finite value > 0", n)
	case !(m.QMKey+m.QMSlot/n > 0):
		return m, fmt.Errorf("plan: path costs %+v: expected QMKey + QMSlot/n > 0", m)
	}
	m.KVSlot = n * ((m.QMKey+m.QMSlot/n)/rate - m.KVKey)
	return m, nil
}

package plan

import (
	"math"
	"math/rand"
	"strings"
	"testing"
)

// selectionTile is one query tile's selections: per token the blocks it
// selected.
type selectionTile [][]int

// counts returns the tile's entries and union (distinct blocks).
func (t selectionTile) counts() (entries, union int) {
	seen := map[int]bool{}
	for _, sel := range t {
		entries += len(sel)
		for _, j := range sel {
			seen[j] = true
		}
	}
	return entries, len(seen)
}

// patternTile builds the selections of a tile of tokens tokens, topK
// blocks each out of nblk, in one of the patterns the planner meets:
// sink (every token the first topK blocks), uniform (random per token),
// local (each token the topK blocks ending at its own) and correlated
// (each token keeps all but one of its neighbour's blocks).
func patternTile(pattern string, tokens, topK, nblk int, rng *rand.Rand) selectionTile {
	t := make(selectionTile, tokens)
	for i := range t {
		switch pattern {
		case "sink":
			for j := 0; j < topK; j++ {
				t[i] = append(t[i], j)
			}
		case "uniform":
			t[i] = rng.Perm(nblk)[:topK]
		case "local":
			own := nblk - tokens + i // the block of token i: one block per token
			for j := own - topK + 1; j <= own; j++ {
				t[i] = append(t[i], j)
			}
		case "correlated":
			if i == 0 {
				t[i] = rng.Perm(nblk)[:topK]
				continue
			}
			t[i] = append([]int(nil), t[i-1]...)
			for {
				j := rng.Intn(nblk)
				if !contains(t[i], j) {
					t[i][rng.Intn(topK)] = j
					break
				}
			}
		}
	}
	return t
}

func contains(v []int, x int) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}

// checkVerdict recomputes the model's arithmetic for entries, union,
// tokens and qpk from first principles (the two costs, not the factors)
// and returns "" when v agrees, else what differs.
func checkVerdict(m PathCosts, v TileVerdict, entries, union, tokens, qpk, laneRows int, n float64) string {
	lanes := laneRows * int(math.Ceil(float64(tokens*qpk)/float64(laneRows)))
	kv := float64(entries*qpk) * (n*m.KVKey + m.KVSlot)
	query := float64(union*lanes) * (n*m.QMKey + m.QMSlot)
	switch {
	case v.Entries != entries || v.Union != union || v.Lanes != lanes || v.QPK != qpk:
		return "counts"
	case union > 0 && entries > 0 && math.Abs(v.Waste*v.Rate-query/kv) > 1e-12*query/kv:
		return "product"
	case v.Query() != (query < kv):
		return "verdict"
	}
	return ""
}

// TestWeighPatterns weighs tiles of the sink, uniform, local and
// correlated patterns on the CPU's 16 lane rows and the GPU's 64 rows,
// checks the verdict's arithmetic against the two costs, and checks which
// path and which factor decides where the pattern fixes them: sink tiles
// share every block (no lane wasted beyond the row rounding), uniform
// tiles of several tokens barely share (the union near tokens x topK),
// local tiles share all but a few blocks, correlated ones most.
func TestWeighPatterns(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	even := PathCosts{QMKey: 1, KVKey: 1, Staged: 2}              // rate 1: the lanes decide
	slots := PathCosts{QMKey: 1, KVKey: 1, KVSlot: 64, Staged: 2} // rate 0.5 at n 64
	for _, tc := range []struct {
		pattern          string
		qpk, lane        int
		m                PathCosts
		wantQuery        bool
		wantBy           string
		wasteLo, wasteHi float64
	}{
		// qpk 4, 16-lane tiles of 4 tokens: sink shares all 16 blocks.
		{"sink", 4, 16, slots, true, "rate", 1, 1},
		// uniform over 512 blocks: 4 tokens' 16 blocks barely overlap.
		{"uniform", 4, 16, slots, false, "lanes", 3.5, 4},
		// local: tokens of one block window share 16 - 3 ... 16 blocks.
		{"local", 4, 16, even, false, "lanes", 1.1, 1.2},
		{"local", 4, 16, slots, true, "rate", 1.1, 1.2},
		// correlated: one new block per token.
		{"correlated", 4, 16, slots, true, "rate", 1.1, 1.2},
		// GPU: qpk 16, 64-row tiles of 4 tokens.
		{"sink", 16, 64, slots, true, "rate", 1, 1},
		{"uniform", 16, 64, slots, false, "lanes", 3.5, 4},
		// qpk 1 on the GPU: 64 tokens per tile.
		// qpk 1 on the GPU: 64 tokens per tile; 64 random 16-of-512
		// selections cover 512 (1 - (1 - 16/512)^64) ~ 445 blocks.
		{"uniform", 1, 64, slots, false, "lanes", 20, 32},
		// union 16 x 64 rows = 1024 entries, rate 1: a tie keeps the KV-major path.
		{"sink", 1, 64, even, false, "lanes", 1, 1},
	} {
		tokens := tc.lane / tc.qpk
		tile := patternTile(tc.pattern, tokens, 16, 512, rng)
		e, u := tile.counts()
		v, err := tc.m.Weigh(e, u, tokens, tc.qpk, tc.lane, 64, false)
		if err != nil {
			t.Fatalf("%s: %v", tc.pattern, err)
		}
		if what := checkVerdict(tc.m, v, e, u, tokens, tc.qpk, tc.lane, 64); what != "" {
			t.Errorf("%s qpk %d: %v: %s wrong", tc.pattern, tc.qpk, v, what)
		}
		if v.Query() != tc.wantQuery || v.Factor() != tc.wantBy || v.Waste < tc.wasteLo || v.Waste > tc.wasteHi {
			t.Errorf("%s qpk %d lanes %d: %v: want query %v by %s, waste in [%g, %g]", tc.pattern, tc.qpk, tc.lane, v, tc.wantQuery, tc.wantBy, tc.wasteLo, tc.wasteHi)
		}
		if !strings.HasSuffix(v.String(), "decided by "+tc.wantBy) {
			t.Errorf("%s: %q does not name %s", tc.pattern, v.String(), tc.wantBy)
		}
	}
}

// TestWeighStaged: K/V decoded per tile multiplies the rate by Staged and
// the debug string says so; no visible block takes the query-major path,
// blocks with no entry keep the KV-major one.
func TestWeighStaged(t *testing.T) {
	m := PathCosts{QMKey: 1, KVKey: 1, KVSlot: 64, Staged: 4}
	v, err := m.Weigh(16, 16, 1, 16, 16, 64, true)
	if err != nil {
		t.Fatal(err)
	}
	if v.Rate != 2 || v.Query() || v.Factor() != "rate (K/V decoded per tile)" {
		t.Errorf("staged: %v", v)
	}
	if v, _ := m.Weigh(3, 0, 1, 16, 16, 64, false); !v.Query() || v.Waste != 0 {
		t.Errorf("no visible block: %v", v)
	}
	if v, _ := m.Weigh(0, 2, 1, 16, 16, 64, false); v.Query() || !math.IsInf(v.Waste, 1) {
		t.Errorf("blocks without entries: %v", v)
	}
}

// TestWeighMutation: checkVerdict catches a weigh with union and entries
// swapped (on a uniform tile, where they differ), so the pattern test can
// fail.
func TestWeighMutation(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	m := PathCosts{QMKey: 1, KVKey: 1, KVSlot: 64, Staged: 2}
	tile := patternTile("correlated", 4, 16, 512, rng)
	e, u := tile.counts()
	if e == u {
		t.Fatalf("entries = union = %d: the mutation cannot show", e)
	}
	swapped, err := m.Weigh(u, e, 4, 4, 16, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	if checkVerdict(m, swapped, e, u, 4, 4, 16, 64) == "" {
		t.Error("checkVerdict accepts union and entries swapped")
	}
	// The swap also flips this tile's verdict: 19 blocks x 16 lanes
	// against 64 entries x 4 rows at rate 0.5 is query-major, 64 x 16
	// against 19 x 4 is not.
	right, _ := m.Weigh(e, u, 4, 4, 16, 64, false)
	if right.Query() == swapped.Query() {
		t.Errorf("verdicts %v and %v agree", right, swapped)
	}
}

// TestWeighRefuses: bad counts, shapes and constants are errors naming
// the argument.
func TestWeighRefuses(t *testing.T) {
	m := PathCosts{QMKey: 1, KVKey: 1, Staged: 1}
	for _, tc := range []struct {
		m                                    *PathCosts
		entries, union, tokens, qpk, laneRow int
		n                                    float64
		want                                 string
	}{
		{nil, 1, 1, 1, 1, 16, 64, "nil"},
		{&m, -1, 1, 1, 1, 16, 64, "entries -1"},
		{&m, 1, -2, 1, 1, 16, 64, "union -2"},
		{&m, 1, 1, 0, 1, 16, 64, "tokens 0"},
		{&m, 1, 1, 1, 0, 16, 64, "qhead_per_kv 0"},
		{&m, 1, 1, 1, 1, 0, 64, "lane rows 0"},
		{&m, 1, 1, 1, 1, 16, 0, "keys per block 0"},
		{&m, 1, 1, 1, 1, 16, math.NaN(), "keys per block NaN"},
		{&PathCosts{QMKey: 1, Staged: 1}, 1, 1, 1, 1, 16, 64, "KVKey + KVSlot/n > 0"},
		{&PathCosts{QMKey: 1, KVKey: 1}, 1, 1, 1, 1, 16, 64, "Staged > 0"},
	} {
		_, err := tc.m.Weigh(tc.entries, tc.union, tc.tokens, tc.qpk, tc.laneRow, tc.n, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "plan: ") {
			t.Errorf("%+v: error %v, want %q", tc, err, tc.want)
		}
	}
}

// TestWithRate: the constants WithRate returns weigh a tile at the rate
// asked for (above and below the model's), keep the query-major ones, and
// bad rates are refused.
func TestWithRate(t *testing.T) {
	m := PathCosts{QMKey: 1, QMSlot: 3.75, KVKey: 1, KVSlot: 415, Staged: 1}
	for _, rate := range []float64{0.1, 0.24, 1, 1.02, 3} {
		f, err := m.WithRate(rate, 128)
		if err != nil {
			t.Fatal(err)
		}
		v, err := f.Weigh(64, 16, 4, 16, 64, 128, false)
		if err != nil || math.Abs(v.Rate/rate-1) > 1e-12 || f.QMKey != m.QMKey || f.QMSlot != m.QMSlot || f.KVKey != m.KVKey {
			t.Errorf("rate %v: %+v weighs at %v (%v)", rate, f, v.Rate, err)
		}
	}
	for _, bad := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := m.WithRate(bad, 128); err == nil {
			t.Errorf("rate %v accepted", bad)
		}
	}
	if _, err := m.WithRate(1, 0); err == nil {
		t.Error("0 keys per block accepted")
	}
}

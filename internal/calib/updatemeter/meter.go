// Package updatemeter measures the in-cache rate of one attention tile's
// update with the kernels of kernels/tile: the bound of the ops' kernels
// when memory costs nothing, the bench's %kern reference. It is a package
// of its own, beside calib, because it runs tile's kernels while calib must
// not import tile (tile's tests import calib). It depends on kernels/tile
// and kernels/lowp only; nothing in the ops' call path may depend on it.
package updatemeter

import (
	"fmt"
	"math"
	"math/rand"
	"time"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// Meter measures the in-cache rate of one attention tile's update on the
// tier that runs it: rows query rows against one full block of tile.BlockN
// keys at head dimension d, the same operands every call, so that they stay
// in L1/L2. For prefill it runs Acc.Update, as prefill's work items do (128
// rows: 8 queries of 16 query heads at GQA 16), on the bf16 twin of the
// active tier (tile.BF16InputTier), where prefill's low-precision calls
// run; for decode it runs, on the active tier, the
// kernels decode runs on float32 keys and values (Lanes.Update where
// tile.LanesSIMD(d), else Acc.Update), without the conversion of stored
// low-precision K/V. It is the bound of the op's kernels when memory costs
// nothing. Unlike the calibration loops of calib.PeakGFLOPS (multiply-adds
// on registers only) it loads from memory the way the product's kernels
// do: on a host whose other tenants take more from code that loads than
// from code that only multiplies, it pays that toll too. The bench pairs it
// with every timed call (the %kern column).
//
// A Meter is not safe for concurrent use; give each goroutine its own.
type Meter struct {
	rows, d int
	decode  bool
	tier    string // tiers the operands were laid out for (tiers; "" before setup)
	acc     *tile.Acc
	lanes   *tile.Lanes // decode on lane kernels, else nil
	blk     *tile.Block
	valid   []int32
	k, v    []float32
	q       []lowp.BFloat16
}

// New returns a meter for rows query rows and head dimension d, both 1 to
// 1024 (rows at most tile.LanesMaxM for decode); decode selects decode's
// kernels.
func New(rows, d int, decode bool) (*Meter, error) {
	maxRows := 1024
	if decode {
		maxRows = tile.LanesMaxM
	}
	if rows < 1 || rows > maxRows {
		return nil, fmt.Errorf("updatemeter: New: rows = %d, want 1 to %d", rows, maxRows)
	}
	if d < 1 || d > 1024 {
		return nil, fmt.Errorf("updatemeter: New: head dimension d = %d, want 1 to 1024", d)
	}
	rng := rand.New(rand.NewSource(1))
	m := &Meter{
		rows: rows, d: d, decode: decode,
		acc:   tile.NewAcc(rows, d),
		blk:   tile.NewBlock(d),
		valid: make([]int32, rows),
		k:     make([]float32, tile.BlockN*d),
		v:     make([]float32, tile.BlockN*d),
		q:     make([]lowp.BFloat16, rows*d),
	}
	m.acc.SetBF16Products(!decode)
	m.blk.SetBF16Products(!decode)
	for i := range m.k {
		m.k[i], m.v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	for i := range m.q {
		m.q[i] = lowp.BF16(float32(rng.NormFloat64()))
	}
	for r := range m.valid {
		m.valid[r] = tile.BlockN
	}
	return m, nil
}

// tiers names the active tier and its bf16 twin, the layouts setup
// depends on.
func tiers() string { return tile.Tier() + "/" + tile.BF16InputTier() }

// setup lays the operands out for the tier that runs the update and starts the
// accumulation; later updates keep adding to it (the scores are the same
// every call, so the running max stays and the sums only grow, without
// overflow for far more calls than a measurement makes).
func (m *Meter) setup() {
	m.tier = tiers()
	scale := float32(1/math.Sqrt(float64(m.d))) * math.Log2E
	q := make([]float32, m.d)
	m.lanes = nil
	if m.decode && tile.LanesSIMD(m.d) {
		m.lanes = tile.NewLanes(m.d)
		m.lanes.Reset(m.rows, scale, tile.RoundNone, 0)
		for r := range m.rows {
			for c := range q {
				q[c] = m.q[r*m.d+c].Float32()
			}
			m.lanes.SetQ(r, q)
		}
	} else {
		m.blk.Load(tile.BlockN, m.k, m.v)
		m.acc.Reset(m.rows, scale, tile.RoundNone, 0)
		if !m.acc.SetQBF16(0, m.q) {
			qs := m.acc.QRows(0, m.rows)
			for i, x := range m.q {
				qs[i] = x.Float32()
			}
		}
	}
	m.update() // warm the caches
}

func (m *Meter) update() {
	if m.lanes != nil {
		m.lanes.Update(m.k, m.v, tile.BlockN, m.valid)
		return
	}
	m.acc.Update(m.blk, m.valid)
}

// Sustained runs the update for about dur on the calling goroutine and
// returns its rate over the whole interval in GFLOP/s (4*rows*tile.BlockN*d
// flops per call, all calls / elapsed time), including any time the core
// was not the goroutine's, like calib.SustainedGFLOPS. The operands are laid out
// again first if the active tier or its bf16 twin changed since the last
// call.
func (m *Meter) Sustained(dur time.Duration) float64 {
	if m.tier != tiers() {
		m.setup()
	}
	per := 4 * float64(m.rows*tile.BlockN*m.d)
	n := 0
	start := time.Now()
	for n == 0 || time.Since(start) < dur {
		m.update()
		n++
	}
	return per * float64(n) / time.Since(start).Seconds() / 1e9
}

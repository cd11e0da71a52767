package attn

import (
	"unsafe"

	"github.com/sparseattn/msa/kernels/tile"
)

// rowAcc is the online-softmax accumulator a decode tile drives: either the
// block kernel (tile.Acc over a transposed tile.Block, best when many rows
// share a block) or tile.Lanes groups (query rows in SIMD lanes, K/V read
// row-major without a transpose; best for the few rows of decode).
type rowAcc interface {
	// bf16Products asks the accumulations that start after it (reset)
	// for the bf16 twin's products (on) or the active tier's (off): the
	// SetBF16Products of tile.Block, tile.Acc and tile.Lanes.
	bf16Products(on bool)
	// reset starts an accumulation of m rows; invT > 0 also tracks the
	// temperature sum (1/T), as tile.Acc.Reset.
	reset(m int, scale float32, round tile.Round, invT float32)
	setQ(r int, q []float32)
	// setQRows sets rows r .. r+n-1 from rows src .. src+n-1 of q (tmp:
	// scratch of D floats).
	setQRows(q *Operand, r, src, n int, tmp []float32)
	update(k, v []float32, n int, valid []int32)
	// updateStaged is update with the block's rows decoded by src on
	// demand, a few at a time.
	updateStaged(src *kvStager, n int, valid []int32)
	// finishLSE writes the rows' LSEs, their temperature LSEs when tlse is
	// non-nil and the accumulation tracks them, and the normalising
	// factors (tile.Acc.FinishLSE).
	finishLSE(lse, tlse, inv []float32)
	o(r int) []float32
	// prefetchNext hints the storage of the block after the next update
	// (tile.Lanes.PrefetchNext); the block accumulator ignores it.
	prefetchNext(k unsafe.Pointer, kBytes int, v unsafe.Pointer, vBytes int)
	// widenNext hints the raw first key rows of the block after the next
	// update (tile.Lanes.WidenNext); the block accumulator ignores it.
	widenNext(k unsafe.Pointer, f tile.RawFormat, rows int)
	oScaler
}

// blockAcc adapts tile.Acc + tile.Block.
type blockAcc struct {
	acc *tile.Acc
	blk *tile.Block
}

func (b *blockAcc) bf16Products(on bool) {
	b.acc.SetBF16Products(on)
	b.blk.SetBF16Products(on)
}
func (b *blockAcc) reset(m int, scale float32, round tile.Round, invT float32) {
	b.acc.Reset(m, scale, round, invT)
}
func (b *blockAcc) setQ(r int, q []float32) { copy(b.acc.Q(r), q) }
func (b *blockAcc) setQRows(q *Operand, r, src, n int, _ []float32) {
	q.setQRows(b.acc, r, src, n)
}
func (b *blockAcc) update(k, v []float32, n int, valid []int32) {
	d := len(k) / max(n, 1)
	b.blk.Load(n, k[:n*d], v[:n*d])
	b.acc.Update(b.blk, valid[:b.acc.M()])
}

// updateStaged decodes the whole block (Block.Load packs it at once).
func (b *blockAcc) updateStaged(src *kvStager, n int, valid []int32) {
	b.update(src.StageK(0, n), src.StageV(0, n), n, valid)
}
func (b *blockAcc) finishLSE(lse, tlse, inv []float32)                    { b.acc.FinishLSE(lse, tlse, inv) }
func (b *blockAcc) prefetchNext(unsafe.Pointer, int, unsafe.Pointer, int) {}
func (b *blockAcc) widenNext(unsafe.Pointer, tile.RawFormat, int)         {}
func (b *blockAcc) o(r int) []float32                                     { return b.acc.O(r) }
func (b *blockAcc) scaleO(f float32) {
	for r := 0; r < b.acc.M(); r++ {
		scaleInPlace(b.acc.O(r), f)
	}
}

// scaleInPlace multiplies x by f.
func scaleInPlace(x []float32, f float32) {
	for i := range x {
		x[i] *= f
	}
}

// lanesAcc covers up to maxTileRows rows with tile.Lanes groups of 16. A
// group is created when a tile first needs its rows (reserve), so a worker
// whose tiles hold one token at GQA <= 16 keeps one group, not eight.
type lanesAcc struct {
	g []*tile.Lanes // [maxTileRows/16], nil until reserved
	d int
	m int
	// The settings every group takes, a group created later included.
	products, scores bool
}

func newLanesAcc(d int) *lanesAcc {
	return &lanesAcc{g: make([]*tile.Lanes, maxTileRows/tile.LanesMaxM), d: d}
}

// reserve creates the groups rows need (at most maxTileRows), so that a
// run that reserves its largest tile before its first item allocates
// nothing afterwards.
func (a *lanesAcc) reserve(rows int) {
	for i := range min(len(a.g), (rows+tile.LanesMaxM-1)/tile.LanesMaxM) {
		if a.g[i] == nil {
			g := tile.NewLanes(a.d)
			g.SetBF16Products(a.products)
			g.SetBF16Scores(a.scores)
			a.g[i] = g
		}
	}
}

func (a *lanesAcc) groups() int { return (a.m + tile.LanesMaxM - 1) / tile.LanesMaxM }

func (a *lanesAcc) reset(m int, scale float32, round tile.Round, invT float32) {
	a.reserve(m)
	a.m = m
	for i := 0; i < a.groups(); i++ {
		a.g[i].Reset(min(tile.LanesMaxM, m-i*tile.LanesMaxM), scale, round, invT)
	}
}

func (a *lanesAcc) setQ(r int, q []float32) { a.g[r/tile.LanesMaxM].SetQ(r%tile.LanesMaxM, q) }

// setQRows decodes each row into tmp (the lanes hold Q transposed).
func (a *lanesAcc) setQRows(q *Operand, r, src, n int, tmp []float32) {
	for i := range n {
		q.DecodeRow(tmp, src+i)
		a.setQ(r+i, tmp[:q.D])
	}
}

func (a *lanesAcc) update(k, v []float32, n int, valid []int32) {
	for i := 0; i < a.groups(); i++ {
		lo := i * tile.LanesMaxM
		hi := min(a.m, lo+tile.LanesMaxM)
		for _, x := range valid[lo:hi] {
			if x > 0 {
				a.g[i].Update(k, v, n, valid[lo:hi])
				break
			}
		}
	}
}

// updateStaged is update with the block's rows decoded by src on demand
// (see tile.Lanes.UpdateStaged). With one group of rows (m <= 16, decode at
// GQA <= 16 and one query token) the chunks are decoded once; with several
// groups each would decode them again, so the whole block is decoded once
// and update runs instead.
func (a *lanesAcc) updateStaged(src *kvStager, n int, valid []int32) {
	if a.groups() == 1 {
		a.g[0].UpdateStaged(n, valid[:a.m], src)
		return
	}
	k, v := src.StageK(0, n), src.StageV(0, n)
	a.update(k, v, n, valid)
}

func (a *lanesAcc) finishLSE(lse, tlse, inv []float32) {
	for i := 0; i < a.groups(); i++ {
		lo := i * tile.LanesMaxM
		hi := min(a.m, lo+tile.LanesMaxM)
		var t []float32
		if tlse != nil {
			t = tlse[lo:hi]
		}
		a.g[i].FinishLSE(lse[lo:hi], t, inv[lo:hi])
	}
}

func (a *lanesAcc) o(r int) []float32 { return a.g[r/tile.LanesMaxM].O(r % tile.LanesMaxM) }

// prefetchNext passes the hint to a single lane group (several groups
// decode whole blocks, see updateStaged).
func (a *lanesAcc) prefetchNext(k unsafe.Pointer, kBytes int, v unsafe.Pointer, vBytes int) {
	if a.groups() == 1 {
		a.g[0].PrefetchNext(k, kBytes, v, vBytes)
	}
}

// widenNext passes the hint to a single lane group, like prefetchNext.
func (a *lanesAcc) widenNext(k unsafe.Pointer, f tile.RawFormat, rows int) {
	if a.groups() == 1 {
		a.g[0].WidenNext(k, f, rows)
	}
}

func (a *lanesAcc) scaleO(f float32) {
	for i := 0; i < a.groups(); i++ {
		a.g[i].ScaleO(f)
	}
}

package selection

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/kernels/lowp"
)

// Operand is the values of q or k, row-major: exactly one slice is set
// (all nil for an empty tensor).
type Operand struct {
	F32  []float32
	BF16 []lowp.BFloat16
	E4M3 []lowp.Float8E4M3FN
}

// Scorer is a validated BlockScores request (op.BlockScoresFunc): the
// shapes, sequences, block size and score rules; Run computes the scores.
type Scorer struct {
	TotalQ, HQ, Hkv, D, Blk, MaxBlocks int
	CuQ, CuK                           []int32
	Q, K                               Operand // [TotalQ][HQ][D], [total_k][Hkv][D]
	Causal                             bool
	Scale                              float32
	Mean                               bool // average the group's heads (else their maximum)
	Workers                            int
}

// rowChunk is the query rows of one scoring task: 64 rows of a 128-wide
// head are 32 KiB of q, and a 2K-token sequence gives 32 tasks per KV
// head to share among the workers.
const rowChunk = 64

// Scratch is the memory of a Run: the decoded k (when it is not float32),
// the transposed block means, each worker's GEMM tiler and row buffers,
// the sequences' task tables, and the run in progress, which the pool's
// goroutines read (its task function is made once, so that a warm RunInto
// allocates nothing). Run keeps Scratch values in a sync.Pool; a caller
// that runs one Scorer shape again and again keeps its own (the zero value
// is ready to use).
type Scratch struct {
	k, means                   []float32
	workers                    []*workerScratch
	off, firstBlock, firstTask []int

	// The run in progress: its Scorer, output and operands, the phase its
	// tasks belong to, their count, the next one to hand out, and the
	// function the pool's goroutines call (Scratch.work, made once).
	s        *Scorer
	out, q   []float32
	kbf      []lowp.BFloat16
	kf       []float32
	phase    int
	tasks    int
	next     atomic.Int64
	workFunc func(w int)
}

// The phases of a Run, each a set of independent tasks (Scratch.task).
const (
	phaseDecodeK = iota // convert a contiguous chunk of a BFloat16 k
	phaseMeans          // (sequence, block) mean keys
	phaseScores         // (sequence, KV head, row chunk) scores
)

// workerScratch is one worker's tiler, its accumulated scores (acc) and
// one query head's products (dot), both rowChunk x padded blocks, a
// D-length row of key sums and, for a q that is not float32, its decoded
// rows (rowChunk x the group's heads x D).
type workerScratch struct {
	tiler              *grad.GEMMTiler
	acc, dot, sum, qch []float32
}

var scratches = sync.Pool{New: func() any { return new(Scratch) }}

// grow returns buf resized to n elements, reusing its memory when it is
// large enough.
func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// growInts is grow for []int.
func growInts(buf []int, n int) []int {
	if cap(buf) < n {
		return make([]int, n)
	}
	return buf[:n]
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// parallel runs the tasks of phase (n of them) on the first nw workers of
// pool, handing them out in increasing order.
func (sc *Scratch) parallel(pool *attn.Pool, phase, n, nw int) {
	sc.phase, sc.tasks = phase, n
	sc.next.Store(0)
	if sc.workFunc == nil {
		sc.workFunc = sc.work
	}
	pool.RunN(nw, sc.workFunc)
}

// work is worker w's loop: it takes tasks of the current phase until none
// is left.
func (sc *Scratch) work(w int) {
	for i := int(sc.next.Add(1) - 1); i < sc.tasks; i = int(sc.next.Add(1) - 1) {
		sc.task(w, i)
	}
}

// task runs task i of the current phase on worker w.
func (sc *Scratch) task(w, i int) {
	s := sc.s
	switch sc.phase {
	case phaseDecodeK:
		n := len(sc.kbf)
		lo, hi := i*n/sc.tasks, (i+1)*n/sc.tasks
		lowp.DecodeBF16(sc.kf[lo:hi], sc.kbf[lo:hi])
	case phaseMeans:
		b := 0
		for sc.firstBlock[b+1] <= i {
			b++
		}
		s.blockMeans(sc.means[sc.off[b]:sc.off[b+1]], sc.kf, b, i-sc.firstBlock[b], sc.workers[w].sum)
	case phaseScores:
		b := 0
		for sc.firstTask[b+1] <= i {
			b++
		}
		i -= sc.firstTask[b]
		h, chunk := i%s.Hkv, i/s.Hkv
		s.scoreRows(sc.out, sc.q, sc.means[sc.off[b]:sc.off[b+1]], sc.workers[w], b, h, int(s.CuQ[b])+chunk*rowChunk)
	}
}

// padBlocks is the leading dimension of a sequence's transposed means: its
// block count rounded up to the GEMM column granularity.
func padBlocks(nb int) int { return (nb + grad.GEMMCols - 1) &^ (grad.GEMMCols - 1) }

// Run computes the scores [Hkv][total_q][max_blocks] into new storage
// (RunInto with a pooled Scratch).
func (s *Scorer) Run() []float32 {
	out := make([]float32, s.Hkv*s.TotalQ*s.MaxBlocks)
	sc := scratches.Get().(*Scratch)
	defer scratches.Put(sc)
	s.RunInto(out, sc)
	return out
}

// RunInto computes the scores [Hkv][total_q][max_blocks] into out (of that
// size) with the memory of sc, on up to min(Workers, GOMAXPROCS) pooled
// goroutines (attn.AcquirePool). Once sc has held a run of this size, it
// allocates nothing.
//
// The block means are float32 sums in token order times 1/n, as the
// formula is written; each (query head, block) dot product over D is one
// FMA chain in D order on kernels/grad's GEMM tiles (a plain multiply-add
// loop where the tile tier has none), then scaled and reduced over the
// group's heads in head order. Every score is computed by one goroutine
// in a fixed order, so the bits do not depend on the worker count.
func (s *Scorer) RunInto(out []float32, sc *Scratch) {
	out = out[:s.Hkv*s.TotalQ*s.MaxBlocks]
	ninf := float32(math.Inf(-1))
	for i := range out {
		out[i] = ninf
	}
	d, hkv, blk := s.D, s.Hkv, s.Blk
	batch := len(s.CuQ) - 1
	nw := max(1, min(s.Workers, runtime.GOMAXPROCS(0)))
	pool := attn.AcquirePool(nw)
	defer attn.ReleasePool(pool)
	sc.s, sc.out, sc.q = s, out, s.Q.F32 // q nil: each scoring task decodes its own rows
	defer func() { sc.s, sc.out, sc.q, sc.kf, sc.kbf = nil, nil, nil, nil, nil }()
	switch {
	case s.K.F32 != nil:
		sc.kf = s.K.F32
	case s.K.BF16 != nil:
		sc.k = grow(sc.k, len(s.K.BF16))
		sc.kf, sc.kbf = sc.k, s.K.BF16
		sc.parallel(pool, phaseDecodeK, lowp.SplitWorkers(len(s.K.BF16), nw), nw)
	default:
		sc.k = grow(sc.k, len(s.K.E4M3))
		sc.kf = sc.k
		lowp.DecodeE4M3(sc.kf, s.K.E4M3)
	}
	// The means of sequence b, KV head h, transposed: a [D x padBlocks(nb)]
	// row-major matrix at off[b] + h*D*padBlocks(nb); the padding columns
	// are zero and their products are never read.
	sc.off, sc.firstBlock = growInts(sc.off, batch+1), growInts(sc.firstBlock, batch+1)
	off, firstBlock := sc.off, sc.firstBlock // (b, j) tasks: b's blocks start at firstBlock[b]
	off[0], firstBlock[0] = 0, 0
	widest := 0
	for b := 0; b < batch; b++ {
		nb := ceilDiv(int(s.CuK[b+1]-s.CuK[b]), blk)
		off[b+1] = off[b] + hkv*d*padBlocks(nb)
		firstBlock[b+1] = firstBlock[b] + nb
		widest = max(widest, padBlocks(nb))
	}
	sc.means = grow(sc.means, off[batch])
	clear(sc.means)
	for len(sc.workers) < nw {
		sc.workers = append(sc.workers, new(workerScratch))
	}
	for _, ws := range sc.workers[:nw] {
		ws.acc = grow(ws.acc, rowChunk*widest)
		ws.dot = grow(ws.dot, rowChunk*widest)
		ws.sum = grow(ws.sum, d)
		if sc.q == nil {
			ws.qch = grow(ws.qch, rowChunk*s.HQ/hkv*d)
		}
	}
	sc.parallel(pool, phaseMeans, firstBlock[batch], nw)
	// Scoring tasks: (sequence, KV head, chunk of rowChunk query rows).
	sc.firstTask = growInts(sc.firstTask, batch+1)
	firstTask := sc.firstTask
	firstTask[0] = 0
	for b := 0; b < batch; b++ {
		firstTask[b+1] = firstTask[b] + hkv*ceilDiv(int(s.CuQ[b+1]-s.CuQ[b]), rowChunk)
	}
	sc.parallel(pool, phaseScores, firstTask[batch], nw)
}

// blockMeans writes the mean key of block j of sequence b for every KV
// head into column j of the sequence's transposed means mt; sum is a
// D-length scratch row.
func (s *Scorer) blockMeans(mt, k []float32, b, j int, sum []float32) {
	d, hkv, blk := s.D, s.Hkv, s.Blk
	sk := int(s.CuK[b+1] - s.CuK[b])
	ld := padBlocks(ceilDiv(sk, blk))
	n := min(blk, sk-j*blk)
	inv := 1 / float32(n)
	for h := 0; h < hkv; h++ {
		clear(sum)
		for t := j * blk; t < j*blk+n; t++ {
			row := k[((int(s.CuK[b])+t)*hkv+h)*d:][:d]
			for c, x := range row {
				sum[c] += x
			}
		}
		m := mt[h*d*ld:]
		for c, x := range sum {
			m[c*ld+j] = x * inv
		}
	}
}

// scoreRows fills the scores of KV head h for the query rows [gq0,
// gq0+rowChunk) of sequence b (clipped to the sequence); mt is the
// sequence's transposed means, q the float32 queries or nil, when the
// rows are decoded here into ws.qch.
func (s *Scorer) scoreRows(out, q, mt []float32, ws *workerScratch, b, h, gq0 int) {
	d, hq, blk := s.D, s.HQ, s.Blk
	qpk := hq / s.Hkv
	sq := int(s.CuQ[b+1] - s.CuQ[b])
	sk := int(s.CuK[b+1] - s.CuK[b])
	nb := ceilDiv(sk, blk)
	if nb == 0 {
		return
	}
	ld := padBlocks(nb)
	rows := min(rowChunk, int(s.CuQ[b+1])-gq0)
	m := mt[h*d*ld : (h+1)*d*ld]
	acc, dot := ws.acc[:rows*ld], ws.dot[:rows*ld]
	// Row r of A is query row gq0+r, head h*qpk+g: a[r*lda+g*D:].
	a, lda := ws.qch, qpk*d
	if q != nil {
		a, lda = q[(gq0*hq+h*qpk)*d:], hq*d
	} else {
		s.decodeRows(a, gq0, rows, h*qpk, qpk*d)
	}
	for g := 0; g < qpk; g++ {
		s.products(ws, rows, ld, a[g*d:], lda, m, dot)
		for i, x := range dot {
			x *= s.Scale
			switch {
			case s.Mean && g == 0:
				acc[i] = 0 + x // 0 + x: a -0 product sums to +0 as in a running sum from 0
			case s.Mean:
				acc[i] += x
			case g == 0 || x > acc[i] || x != x:
				// NaN propagates: a NaN score is never selected.
				acc[i] = x
			}
		}
	}
	for r := 0; r < rows; r++ {
		gq := gq0 + r
		visible := nb
		if s.Causal {
			last := gq - int(s.CuQ[b]) + sk - sq // last visible key
			if last < 0 {
				visible = 0
			} else {
				visible = min(nb, last/blk+1)
			}
		}
		dst := out[(h*s.TotalQ+gq)*s.MaxBlocks:][:visible]
		src := acc[r*ld:][:visible]
		if s.Mean {
			for j, x := range src {
				dst[j] = x / float32(qpk)
			}
		} else {
			copy(dst, src)
		}
	}
}

// decodeRows decodes n elements of q (the heads [h0, h0+n/D)) of each of
// the query rows [gq0, gq0+rows) into dst, n per row.
func (s *Scorer) decodeRows(dst []float32, gq0, rows, h0, n int) {
	for r := 0; r < rows; r++ {
		at := ((gq0+r)*s.HQ + h0) * s.D
		if s.Q.BF16 != nil {
			lowp.DecodeBF16(dst[r*n:][:n], s.Q.BF16[at:][:n])
		} else {
			lowp.DecodeE4M3(dst[r*n:][:n], s.Q.E4M3[at:][:n])
		}
	}
}

// products sets dot[r*ld+j] = sum_c a[r*lda+c] * m[c*ld+j] for r < rows,
// j < ld, one FMA chain in c order per element on the GEMM tiles, or a
// multiply-add loop in c order where the tile tier has none.
func (s *Scorer) products(ws *workerScratch, rows, ld int, a []float32, lda int, m, dot []float32) {
	d := s.D
	if ws.tiler == nil && grad.GEMMAvailable() {
		ws.tiler, _ = grad.NewGEMMTiler()
	}
	if ws.tiler != nil && ws.tiler.Gemm(rows, ld, d, a, lda, m, ld, dot, ld, false) == nil {
		return
	}
	for r := 0; r < rows; r++ {
		qr := a[r*lda:][:d]
		dr := dot[r*ld:][:ld]
		clear(dr)
		for c, x := range qr {
			mr := m[c*ld:][:ld]
			for j, y := range mr {
				dr[j] += x * y
			}
		}
	}
}

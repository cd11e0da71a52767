package attn

import "github.com/sparseattn/msa/kernels/lowp"

// The K/V block cache of the query-major path.
//
// The lane kernels read BF16 and E4M3 rows in place when the rows of one
// KV head are contiguous (one KV head, or head-major pages). NVFP4 rows
// have to be decoded, and the rows of one head of dense K/V with several
// KV heads (or token-major pages) lie one head apart: without the cache
// every query tile would decode or gather each block of its union again,
// and a block is in the union of many tiles (every tile of a token that
// selected it, at qpk 16 one per token). The cache converts each block
// the query window's tiles visit once, before the tiles run, into a
// head-major copy the lane kernels read in place:
//
//   - NVFP4 rows become BF16 rows of e2m1 * e4m3 block scale, which BF16
//     holds exactly (2 and 4 significant bits, at most 6 in the product,
//     magnitudes 2^-10 .. 2688). The global scale stays out: K's goes
//     into the score scale and V's into the output's normalising factor
//     (a power of two, as the bench's, gives the decoded path's bits;
//     another rounds the score scale once, 2^-24 relative).
//   - BF16 and E4M3 rows are copied as they are.
//
// The cache holds the blocks the window visits for a group of KV heads,
// in cache slots of BlkKV rows addressed like pages: qmCache.pt maps
// (KV head, sequence, block) to a slot, and a walk reads the cache through
// a paged KVLayout of one KV head over that head's part of pt. Heads are
// grouped so that the cache stays within qmCacheBytes; a head whose blocks
// alone exceed it runs on the source operands, decoded per tile.

// qmCacheBytes bounds the query-major K/V block cache: 64 MiB, 64K keys
// of BF16 K and V at D 128 for one KV head, twice the bench's longest
// sequence.
const qmCacheBytes = 64 << 20

// qmCacheSlotsOverride, when positive (tests only), replaces the number of
// blocks the cache may hold.
var qmCacheSlotsOverride int

// qmCache is the query-major path's K/V block cache (see above).
type qmCache struct {
	use     bool // the call converts K/V through the cache
	on      bool // the current head group runs on the cache
	src     [2]Operand
	k, v    Operand // the cached rows: BF16 or E4M3, BlkKV rows per slot
	kFactor float32 // K's global scale, folded into the score scale
	vFactor float32 // V's global scale, folded into the output factor
	pt      []int32 // [Hkv][B][cols] slot of (h, b, block j); -1: none
	cols    int     // blocks of the longest sequence
	slots   int     // slots the cache may hold (qmCacheBytes)
	kb      []lowp.BFloat16
	vb      []lowp.BFloat16
	k8, v8  []lowp.Float8E4M3FN
	todo    []qmBlock // the current group's blocks to convert
	counts  []int     // [Hkv] blocks of each KV head the window visits
	h0, h1  int       // the current head group [h0, h1)
}

// qmBlock is a block to convert into the cache: block j of sequence b,
// KV head h, into slot s.
type qmBlock struct{ h, b, j, s int32 }

// needsCache reports whether the lane kernels cannot read p's K/V rows of
// one KV head in place: NVFP4 rows, or rows one KV head apart (dense K/V
// with several KV heads, token-major pages with several).
func needsCache(p *Prefill) bool {
	l := &p.KV
	return l.Hkv > 1 && (!l.Paged || l.NHD) || p.K.Dtype == NVFP4 || p.V.Dtype == NVFP4
}

// cachedDtype is the dtype o's rows have in the cache.
func cachedDtype(o *Operand) Dtype {
	if o.Dtype == NVFP4 {
		return BF16
	}
	return o.Dtype
}

// start sets the cache up for call p: whether it is used, the folded
// global scales, the slot table and the cache's capacity. scale is the
// call's score scale (softmax_scale * log2(e)).
func (c *qmCache) start(p *Prefill, scale float32) {
	c.use, c.on = needsCache(p), false
	if !c.use {
		return
	}
	c.src = [2]Operand{p.K, p.V}
	c.kFactor, c.vFactor = 1, 1
	for i := range c.src {
		if o := &c.src[i]; o.Dtype == NVFP4 {
			if i == 0 {
				c.kFactor = o.Global
			} else {
				c.vFactor = o.Global
			}
			o.Global = 1
		}
	}
	// A global scale that would take the folded score scale out of
	// float32's normal range (or is not finite) stays in the decoding.
	if c.kFactor != 1 && !foldsGlobal(scale, c.kFactor) {
		c.use = false
		return
	}
	d := p.D
	c.slots = qmCacheSlots(p)
	c.cols = 1
	for _, n := range p.SeqK {
		c.cols = max(c.cols, (int(n)+p.BlkKV-1)/p.BlkKV)
	}
	c.pt = grow(c.pt, p.Hkv*(len(p.CuQ)-1)*c.cols)
	c.k = Operand{Dtype: cachedDtype(&p.K), D: d, Global: 1, vec: p.K.vec}
	c.v = Operand{Dtype: cachedDtype(&p.V), D: d, Global: 1, vec: p.V.vec}
}

// qmCacheSlots returns the number of blocks the cache of p may hold.
func qmCacheSlots(p *Prefill) int {
	if qmCacheSlotsOverride > 0 {
		return qmCacheSlotsOverride
	}
	row := p.D * (cachedDtype(&p.K).size() + cachedDtype(&p.V).size())
	return max(qmCacheBytes/(row*max(p.BlkKV, 1)), 1)
}

// cacheHoldsHead reports whether the cache of p holds every block of one
// KV head: then no head of any window is decoded per tile.
func cacheHoldsHead(p *Prefill) bool {
	n := 0
	for _, k := range p.SeqK {
		n += (int(k) + p.BlkKV - 1) / p.BlkKV
	}
	return n <= qmCacheSlots(p)
}

// size returns the bytes of one element of dtype d (BF16 or E4M3).
func (d Dtype) size() int {
	if d == BF16 {
		return 2
	}
	return 1
}

// markWindow marks in the slot table every block some query of the
// window [ws.w0, ws.w1) in a query-major tile selected and may see (0; -1 elsewhere) and
// counts the marked blocks of each KV head in c.counts.
func (ws *Workspace) markWindow(p *Prefill) {
	c := &ws.cache
	c.counts = grow(c.counts, p.Hkv)
	counts := c.counts
	for i := range c.pt {
		c.pt[i] = -1
	}
	nb := len(p.CuQ) - 1
	for h := 0; h < p.Hkv; h++ {
		counts[h] = 0
		for b := 0; b < nb; b++ {
			lo, hi := max(ws.w0, int(p.CuQ[b])), min(ws.w1, int(p.CuQ[b+1]))
			seqQ, seqK := int(p.CuQ[b+1]-p.CuQ[b]), int(p.SeqK[b])
			pt := c.pt[(h*nb+b)*c.cols:][:c.cols]
			for gq := lo; gq < hi; gq++ {
				if ws.auto && ws.tileKV[ws.tileIndex(h, b, gq-int(p.CuQ[b]))] {
					continue // a KV-major tile's token
				}
				lim := seqK
				if p.Causal {
					lim = min(lim, gq-int(p.CuQ[b])+seqK-seqQ+1)
				}
				for _, j := range ws.sel[(h*ws.win+gq-ws.w0)*ws.slots:][:ws.slots] {
					if j >= 0 && int(j)*p.BlkKV < lim && pt[j] < 0 {
						pt[j] = 0
						counts[h]++
					}
				}
			}
		}
	}
}

// group takes the KV heads from h0 on whose marked blocks fit the cache
// together (at least one head), gives their blocks slots, lists them in
// c.todo and sizes the cache; c.on says whether the group runs on it (a
// single head whose blocks exceed the cache does not).
func (c *qmCache) group(p *Prefill, h0 int) {
	nb := len(p.CuQ) - 1
	counts := c.counts
	n, h1 := counts[h0], h0+1
	for h1 < p.Hkv && n+counts[h1] <= c.slots {
		n += counts[h1]
		h1++
	}
	c.h0, c.h1 = h0, h1
	c.on = n <= c.slots
	c.todo = c.todo[:0]
	if !c.on {
		return
	}
	s := int32(0)
	for h := h0; h < h1; h++ {
		for b := 0; b < nb; b++ {
			pt := c.pt[(h*nb+b)*c.cols:][:c.cols]
			for j, x := range pt {
				if x >= 0 {
					pt[j] = s
					c.todo = append(c.todo, qmBlock{int32(h), int32(b), int32(j), s})
					s++
				}
			}
		}
	}
	rows := n * p.BlkKV * p.D
	c.k = c.sized(c.k, &c.kb, &c.k8, rows)
	c.v = c.sized(c.v, &c.vb, &c.v8, rows)
}

// sized returns o with its rows' slice grown to rows elements of its dtype.
func (c *qmCache) sized(o Operand, b *[]lowp.BFloat16, e *[]lowp.Float8E4M3FN, rows int) Operand {
	if o.Dtype == BF16 {
		*b = grow(*b, rows)
		o.BF16 = *b
	} else {
		*e = grow(*e, rows)
		o.E4M3 = *e
	}
	return o
}

// runCacheItems converts the blocks of c.todo, taken from the shared
// counter, into the cache.
func (ws *Workspace) runCacheItems(w int) {
	p, c := ws.pf, &ws.cache
	wk := ws.worker(w).buffers()
	n := int64(len(c.todo))
	for {
		i := ws.next.Add(1) - 1
		if i >= n {
			return
		}
		x := c.todo[i]
		t0 := int(x.j) * p.BlkKV
		rows := min(p.BlkKV, int(p.SeqK[x.b])-t0)
		at := int(x.s) * p.BlkKV * p.D
		c.convert(&c.src[0], &c.k, p, int(x.b), int(x.h), t0, rows, at, wk.kbuf)
		c.convert(&c.src[1], &c.v, p, int(x.b), int(x.h), t0, rows, at, wk.kbuf)
	}
}

// convert writes tokens t0 .. t0+n-1 of sequence b, KV head h of src into
// dst's rows from element at: NVFP4 decoded into buf, then stored as BF16
// (exact, see above), BF16 and E4M3 copied.
func (c *qmCache) convert(src, dst *Operand, p *Prefill, b, h, t0, n, at int, buf []float32) {
	d := p.D
	if src.Dtype == NVFP4 {
		loadRows(src, &p.KV, b, h, t0, n, buf, false)
		storeBF16(dst.BF16[at:at+n*d], buf[:n*d], 1, src.vec)
		return
	}
	for i := 0; i < n; {
		r, k := p.KV.Run(b, h, t0+i, n-i)
		if src.Dtype == BF16 {
			copy(dst.BF16[at+i*d:at+(i+k)*d], src.BF16[r*d:(r+k)*d])
		} else {
			copy(dst.E4M3[at+i*d:at+(i+k)*d], src.E4M3[r*d:(r+k)*d])
		}
		i += k
	}
}

// layout returns, in l, the layout that reads KV head h of the cache: one
// KV head whose pages are the cache slots of pt.
func (c *qmCache) layout(l *KVLayout, h, nb, blk int) {
	*l = KVLayout{Hkv: 1, Paged: true, PageTable: c.pt[h*nb*c.cols : (h+1)*nb*c.cols], PTCols: c.cols, PageSize: blk}
}

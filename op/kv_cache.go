package op

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// PagedKVCacheConfig sizes a PagedKVCache. NumPages, PageSize, KVHeads,
// HeadDim and MaxBatch are required.
type PagedKVCacheConfig struct {
	// NumPages is the pool's page count: K and V are
	// [NumPages, KVHeads, PageSize, HeadDim] (HND) or
	// [NumPages, PageSize, KVHeads, HeadDim] (NHD).
	NumPages int
	// PageSize is the tokens per page (the decode wrapper's page size).
	PageSize int
	// KVHeads and HeadDim are Hkv and D.
	KVHeads, HeadDim int
	// MaxBatch is the number of requests held at once: the rows of the
	// page table and of seqused_k.
	MaxBatch int
	// MaxPagesPerSeq is the page table's width, the most pages one request
	// may hold (0: NumPages).
	MaxPagesPerSeq int
	// Dtype is the K/V element type: BFloat16 (the zero value) or
	// Float8E4M3FN.
	Dtype tensor.Dtype
	// Layout is the paged layout, HND (the zero value) or NHD; give the
	// same to the attention calls (DecodeArgs.KVLayout, KVLayout).
	Layout PagedLayout
}

// PagedKVCache is a paged K/V cache for a serving loop: a pool of pages,
// a page allocator, and the page table and seqused_k the decode and paged
// prefill calls take. A request is admitted into a free row of the batch
// (Admit), receives tokens (Append for one request, a prompt or a chunk;
// AppendStep for a decode step of every admitted request), and gives its
// pages back when it finishes (Free). Pages are taken from the pool as the
// tokens need them; an append that needs more pages than are free is an
// error naming the pool size and changes nothing, never an overwrite.
//
// PageTable and SeqUsedK share the cache's storage and are always current:
// plan a DecodeWrapper with them after the step's appends (a plan made
// before an append is refused by Run with a *StalePlanError), and run it
// on K and V. Rows of free slots have seqused_k 0 (their decode rows give
// O = 0, LSE = -inf). A PagedKVCache is not safe for concurrent use: a
// call that changes it (Admit, Append, AppendStep, Free) made while another
// is in progress returns an error instead of racing.
type PagedKVCache struct {
	busy      atomic.Bool
	cfg       PagedKVCacheConfig
	cols      int
	k, v      *tensor.Dense
	pt, su    *tensor.Dense // [MaxBatch, cols], [MaxBatch] int32
	ptv, used []int32
	admitted  []bool
	free      []int32 // free pages, taken from the end
	dst       []int   // scratch: the cache rows of one append
}

// maxPoolBytes caps the bytes of a cache's K (and of its V) pool: 16 TiB
// (or the int range), beyond the memory of any machine, so that a mistyped
// size is an error rather than a failed allocation's panic.
const maxPoolBytes = min(1<<44, math.MaxInt)

// NewPagedKVCache allocates the pages of cfg (2 * NumPages * PageSize *
// KVHeads * HeadDim elements) and an empty page table.
func NewPagedKVCache(cfg PagedKVCacheConfig) (*PagedKVCache, error) {
	c := &validate.Checker{Fn: "NewPagedKVCache"}
	for _, f := range []struct {
		name string
		v    int
	}{{"NumPages", cfg.NumPages}, {"PageSize", cfg.PageSize}, {"KVHeads", cfg.KVHeads}, {"HeadDim", cfg.HeadDim}, {"MaxBatch", cfg.MaxBatch}} {
		c.Need(f.v >= 1 && f.v <= validate.MaxInt32, f.name, fmt.Sprintf("1 <= %s <= %d", f.name, validate.MaxInt32), f.v)
	}
	c.Need(cfg.MaxPagesPerSeq >= 0 && cfg.MaxPagesPerSeq <= cfg.NumPages, "MaxPagesPerSeq",
		fmt.Sprintf("0 (NumPages) <= MaxPagesPerSeq <= NumPages = %d", cfg.NumPages), cfg.MaxPagesPerSeq)
	if cfg.Dtype == (tensor.Dtype{}) {
		cfg.Dtype = BFloat16
	}
	c.Need(cfg.Dtype == BFloat16 || cfg.Dtype == Float8E4M3FN, "Dtype", "BFloat16 or Float8E4M3FN", validate.DtypeName(cfg.Dtype))
	checkLayout(c, cfg.Layout, true)
	if c.Err != nil {
		return nil, c.Err
	}
	cols := cfg.MaxPagesPerSeq
	if cols == 0 {
		cols = cfg.NumPages
	}
	validate.PageCapacity(c, cols, cfg.PageSize)
	elems := validate.MulCap(maxPoolBytes/int(cfg.Dtype.Size()), cfg.NumPages, cfg.PageSize, cfg.KVHeads, cfg.HeadDim)
	c.Need(elems >= 0, "NumPages", fmt.Sprintf("a pool of NumPages * PageSize * KVHeads * HeadDim elements of at most %d bytes each for K and V", maxPoolBytes),
		fmt.Sprintf("%d * %d * %d * %d", cfg.NumPages, cfg.PageSize, cfg.KVHeads, cfg.HeadDim))
	c.Need(validate.MulCap(validate.MaxInt32, cfg.MaxBatch, cols) >= 0, "MaxBatch",
		fmt.Sprintf("a page table of MaxBatch * MaxPagesPerSeq <= %d entries", validate.MaxInt32), fmt.Sprintf("%d * %d", cfg.MaxBatch, cols))
	if c.Err != nil {
		return nil, c.Err
	}
	shape := []int{cfg.NumPages, cfg.KVHeads, cfg.PageSize, cfg.HeadDim}
	if cfg.Layout == NHD {
		shape[1], shape[2] = cfg.PageSize, cfg.KVHeads
	}
	pool := func() *tensor.Dense {
		if cfg.Dtype == BFloat16 {
			return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]lowp.BFloat16, elems)))
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]lowp.Float8E4M3FN, elems)))
	}
	kc := &PagedKVCache{cfg: cfg, cols: cols, k: pool(), v: pool(),
		ptv: make([]int32, cfg.MaxBatch*cols), used: make([]int32, cfg.MaxBatch),
		admitted: make([]bool, cfg.MaxBatch), free: make([]int32, cfg.NumPages)}
	for i := range kc.ptv {
		kc.ptv[i] = -1
	}
	for i := range kc.free {
		kc.free[i] = int32(cfg.NumPages - 1 - i) // page 0 is taken first
	}
	kc.pt = tensor.New(tensor.WithShape(cfg.MaxBatch, cols), tensor.WithBacking(kc.ptv))
	kc.su = tensor.New(tensor.WithShape(cfg.MaxBatch), tensor.WithBacking(kc.used))
	return kc, nil
}

// K returns the key pages (written in place by the appends).
func (kc *PagedKVCache) K() *tensor.Dense { return kc.k }

// V returns the value pages (written in place by the appends).
func (kc *PagedKVCache) V() *tensor.Dense { return kc.v }

// PageTable returns the page table int32 [MaxBatch, MaxPagesPerSeq]; it
// shares the cache's storage (entries past a request's pages are -1).
func (kc *PagedKVCache) PageTable() *tensor.Dense { return kc.pt }

// SeqUsedK returns seqused_k int32 [MaxBatch], each row's token count; it
// shares the cache's storage.
func (kc *PagedKVCache) SeqUsedK() *tensor.Dense { return kc.su }

// Config returns the configuration the cache was made with (MaxPagesPerSeq
// and Dtype resolved).
func (kc *PagedKVCache) Config() PagedKVCacheConfig {
	cfg := kc.cfg
	cfg.MaxPagesPerSeq = kc.cols
	return cfg
}

// FreePages returns the number of pages not held by any request.
func (kc *PagedKVCache) FreePages() int { return len(kc.free) }

// Len returns the tokens held by row seq (0 for a free row or an index
// outside [0, MaxBatch)).
func (kc *PagedKVCache) Len(seq int) int {
	if seq < 0 || seq >= len(kc.used) {
		return 0
	}
	return int(kc.used[seq])
}

// Admit takes the lowest free row of the batch for a new request and
// returns its index; it holds no page until tokens are appended.
func (kc *PagedKVCache) Admit() (int, error) {
	if err := acquire(&kc.busy, "PagedKVCache.Admit"); err != nil {
		return 0, err
	}
	defer kc.busy.Store(false)
	seq := slices.Index(kc.admitted, false)
	if seq < 0 {
		return 0, validate.ArgErr("PagedKVCache.Admit", "MaxBatch", fmt.Sprintf("a free row (MaxBatch = %d; Free a finished request first)", kc.cfg.MaxBatch),
			fmt.Sprintf("all %d rows admitted", kc.cfg.MaxBatch))
	}
	kc.admitted[seq] = true
	return seq, nil
}

// Free ends the request in row seq: its pages return to the pool, its
// page-table row is reset and its seqused_k is 0. The row can be admitted
// again.
func (kc *PagedKVCache) Free(seq int) error {
	if err := acquire(&kc.busy, "PagedKVCache.Free"); err != nil {
		return err
	}
	defer kc.busy.Store(false)
	if err := kc.admittedRow("PagedKVCache.Free", seq); err != nil {
		return err
	}
	row := kc.ptv[seq*kc.cols : (seq+1)*kc.cols]
	held := validate.CeilDiv(int(kc.used[seq]), kc.cfg.PageSize)
	for j := held - 1; j >= 0; j-- {
		kc.free = append(kc.free, row[j])
	}
	for j := range row {
		row[j] = -1
	}
	kc.used[seq], kc.admitted[seq] = 0, false
	return nil
}

// admittedRow returns an *ArgError unless seq is an admitted row.
func (kc *PagedKVCache) admittedRow(fn string, seq int) error {
	if seq < 0 || seq >= len(kc.admitted) || !kc.admitted[seq] {
		return validate.ArgErr(fn, "seq", fmt.Sprintf("an admitted row in [0, MaxBatch = %d) (Admit returns one)", kc.cfg.MaxBatch), seq)
	}
	return nil
}

// Append appends the keys k and values v, [n, KVHeads, HeadDim] of the
// cache's dtype, to the request in row seq (a prompt, a prefill chunk or a
// decode step), taking pages from the pool as needed.
func (kc *PagedKVCache) Append(seq int, k, v tensor.Tensor) error {
	const fn = "PagedKVCache.Append"
	if err := acquire(&kc.busy, fn); err != nil {
		return err
	}
	defer kc.busy.Store(false)
	if err := kc.admittedRow(fn, seq); err != nil {
		return err
	}
	kd, vd, rows, err := kc.newKV(fn, k, v)
	if err != nil {
		return err
	}
	return kc.write(fn, kd, vd, seq, seq, rows)
}

// AppendStep appends one decode step of s tokens to every admitted
// request: k and v are [MaxBatch * s, KVHeads, HeadDim], row b*s+i the
// i-th new token of row b (the layout of a decode q). Rows of free slots
// are padding and are not written.
func (kc *PagedKVCache) AppendStep(k, v tensor.Tensor) error {
	const fn = "PagedKVCache.AppendStep"
	if err := acquire(&kc.busy, fn); err != nil {
		return err
	}
	defer kc.busy.Store(false)
	kd, vd, rows, err := kc.newKV(fn, k, v)
	if err != nil {
		return err
	}
	if rows%kc.cfg.MaxBatch != 0 {
		return validate.ArgErr(fn, "k", fmt.Sprintf("[MaxBatch * s, KVHeads, HeadDim] with MaxBatch = %d", kc.cfg.MaxBatch), validate.ShapeStr(kd))
	}
	return kc.write(fn, kd, vd, 0, kc.cfg.MaxBatch-1, rows/kc.cfg.MaxBatch)
}

// newKV checks an append's k and v: dense tensors of the cache's dtype and
// one shape [rows, KVHeads, HeadDim].
func (kc *PagedKVCache) newKV(fn string, k, v tensor.Tensor) (kd, vd *tensor.Dense, rows int, err error) {
	c := &validate.Checker{Fn: fn}
	kd, vd = c.Dense(k, "k"), c.Dense(v, "v")
	c.Dtype(kd, "k", kc.cfg.Dtype)
	c.Dtype(vd, "v", kc.cfg.Dtype)
	c.Rank(kd, "k", "[n, KVHeads, HeadDim]", 3)
	c.Rank(vd, "v", "[n, KVHeads, HeadDim]", 3)
	if c.Err != nil {
		return nil, nil, 0, c.Err
	}
	want := fmt.Sprintf("[n, KVHeads = %d, HeadDim = %d]", kc.cfg.KVHeads, kc.cfg.HeadDim)
	c.Need(kd.Shape()[1] == kc.cfg.KVHeads && kd.Shape()[2] == kc.cfg.HeadDim, "k", want, validate.ShapeStr(kd))
	c.Need(validate.ShapeIs(vd, kd.Shape()...), "v", "k's shape "+validate.ShapeStr(kd), validate.ShapeStr(vd))
	return kd, vd, kd.Shape()[0], c.Err
}

// write appends rows s tokens to each admitted row b in [first, last],
// taken from row (b-first)*s of kd and vd: it checks the lengths and the
// free pages first (an error changes nothing), then takes the pages,
// updates seqused_k and writes K and V.
func (kc *PagedKVCache) write(fn string, kd, vd *tensor.Dense, first, last, s int) error {
	ps, capacity := kc.cfg.PageSize, kc.cols*kc.cfg.PageSize
	need := 0
	for b := first; b <= last; b++ {
		if !kc.admitted[b] {
			continue
		}
		n := int(kc.used[b]) + s
		if n > capacity {
			return validate.ArgErr(fn, fmt.Sprintf("seq %d", b), fmt.Sprintf("at most MaxPagesPerSeq * PageSize = %d tokens", capacity),
				fmt.Sprintf("%d held + %d new", kc.used[b], s))
		}
		need += validate.CeilDiv(n, ps) - validate.CeilDiv(int(kc.used[b]), ps)
	}
	if need > len(kc.free) {
		return validate.ArgErr(fn, "NumPages", fmt.Sprintf("%d free pages for the new tokens (the pool has NumPages = %d; Free finished requests or make a larger cache)",
			need, kc.cfg.NumPages), fmt.Sprintf("%d free: out of pages", len(kc.free)))
	}
	hkv, d := kc.cfg.KVHeads, kc.cfg.HeadDim
	for b := first; b <= last; b++ {
		if !kc.admitted[b] {
			continue
		}
		row := kc.ptv[b*kc.cols : (b+1)*kc.cols]
		kc.dst = kc.dst[:0]
		for i := 0; i < s; i++ {
			pos := int(kc.used[b]) + i
			if pos%ps == 0 {
				row[pos/ps] = kc.free[len(kc.free)-1]
				kc.free = kc.free[:len(kc.free)-1]
			}
			kc.dst = append(kc.dst, kvRow(kc.cfg.Layout, int(row[pos/ps]), pos%ps, hkv, ps))
		}
		kc.used[b] += int32(s)
		scatterKV(kc.k, kd, (b-first)*s, kc.dst, kc.cfg.Layout, hkv, ps, d)
		scatterKV(kc.v, vd, (b-first)*s, kc.dst, kc.cfg.Layout, hkv, ps, d)
	}
	return nil
}

package attn

import "github.com/sparseattn/msa/kernels/tile"

// The fused KV-major form's block cache.
//
// The fused form's windows are small (their partials stay in L2), so a
// K/V block serves the queries of many windows, one task per window:
// decoding and packing it for every task (loadKV, vScale.block,
// tile.Block.Load) would cost more than the cached partials save. Before
// the tasks, the workers decode and pack every block the call's tasks read
// once, into a packed tile.Block of its own (with its V rows, which the
// float32 tiers read in place), and every task reads that. A block is
// packed exactly as a task would pack it, so the bits are those of the
// per-task load. The cache holds at most maxBlockCacheBytes; a call that
// needs more runs the separate form (runKVMajor).

// maxBlockCacheBytes bounds the fused form's block cache: 128 MiB, the
// blocks of 32K keys on one KV head at D 128 (256 blocks of 128 keys,
// 272 KiB each with their scratch by blockCacheBytes) with room to spare.
const maxBlockCacheBytes = 128 << 20

// kvBlock is one cached K/V block: packed, its V rows, and the factor its
// normalised rows still need (V's overflow guard).
type kvBlock struct {
	blk  *tile.Block
	vbuf []float32 // [BlockN][d] V rows (the float32 tiers read them in place)
	vf   float32
}

// blockCacheBytes is the memory of one cached block of head dimension d:
// the packed keys (float32 and, on avx512bf16, bf16 pairs and their
// scratch) and the V rows (float32 and bf16 pairs).
func blockCacheBytes(d int) int {
	return 4*d*tile.BlockN*3 + 2*4*(d/2+16)*tile.BlockN
}

// callBlocks returns the number of K/V blocks of p over its sequences and
// KV heads (per sequence, its keys' blocks and any block a work item
// names beyond them) and sets ws.kvBase[b] to the first block of
// sequence b.
func (ws *Workspace) callBlocks(p *Prefill) int {
	nb := len(p.CuQ) - 1
	ws.kvBase = grow(ws.kvBase, nb+1)
	base := ws.kvBase
	base[0] = 0
	for b := 0; b < nb; b++ {
		base[b+1] = (max(p.SeqK[b], 0) + int32(p.BlkKV) - 1) / int32(p.BlkKV)
	}
	for i := 0; i < int(p.Sched.WorkCount); i++ {
		b, j := p.Sched.Metadata[i*6+4], p.Sched.Metadata[i*6+5]
		base[b+1] = max(base[b+1], j+1)
	}
	for b := 0; b < nb; b++ {
		base[b+1] += base[b]
	}
	return p.Hkv * int(base[nb])
}

// cacheFits reports whether the block cache can hold every block of p.
func (ws *Workspace) cacheFits(p *Prefill) bool {
	return ws.callBlocks(p)*blockCacheBytes(p.D) <= maxBlockCacheBytes
}

// blockKey returns the cache key of block j of sequence b, KV head h.
func (ws *Workspace) blockKey(p *Prefill, h, b, j int) int {
	return h*int(ws.kvBase[len(ws.kvBase)-1]) + int(ws.kvBase[b]) + j
}

// fillBlockCache gives every block that ws.tasks read a cache entry
// (ws.kvSlot[key], -1 for the others) and lists them in ws.kvList, then
// loads them on the pool. cacheFits must hold.
func (ws *Workspace) fillBlockCache(p *Prefill, pool *Pool) {
	keys := ws.callBlocks(p)
	ws.kvSlot = grow(ws.kvSlot, keys)
	for i := range ws.kvSlot {
		ws.kvSlot[i] = -1
	}
	ws.kvList = ws.kvList[:0]
	for _, t := range ws.tasks {
		if t.item < 0 {
			continue
		}
		m := p.Sched.Metadata[int(t.item)*6 : int(t.item)*6+6]
		if k := ws.blockKey(p, int(m[0]), int(m[4]), int(m[5])); ws.kvSlot[k] < 0 {
			ws.kvSlot[k] = int32(len(ws.kvList))
			ws.kvList = append(ws.kvList, t.item)
		}
	}
	if ws.kvBlockD != p.D {
		ws.kvBlocks, ws.kvBlockD = ws.kvBlocks[:0], p.D
	}
	for len(ws.kvBlocks) < len(ws.kvList) {
		ws.kvBlocks = append(ws.kvBlocks, kvBlock{blk: tile.NewBlock(p.D), vbuf: make([]float32, tile.BlockN*p.D)})
	}
	if n := len(ws.kvList); n > 0 {
		ws.next.Store(0)
		pool.RunN(n, ws.blockItems)
	}
}

// runBlockItems loads the cache's blocks, taking them from the shared
// counter until none is left.
func (ws *Workspace) runBlockItems(w int) {
	p := ws.pf
	wk := ws.worker(w).buffers()
	n := int64(len(ws.kvList))
	for {
		i := ws.next.Add(1) - 1
		if i >= n {
			return
		}
		m := p.Sched.Metadata[int(ws.kvList[i])*6 : int(ws.kvList[i])*6+6]
		c := &ws.kvBlocks[i]
		c.vf = ws.loadBlock(p, int(m[0]), int(m[4]), int(m[5]), wk.kbuf, c.vbuf, c.blk)
	}
}

// cachedBlock returns the cache entry of block j of sequence b, KV head h,
// or nil when the call runs without the cache.
func (ws *Workspace) cachedBlock(p *Prefill, h, b, j int) *kvBlock {
	if !ws.cacheOn {
		return nil
	}
	return &ws.kvBlocks[ws.kvSlot[ws.blockKey(p, h, b, j)]]
}

// loadBlock decodes block j of sequence b, KV head h (keys from j*BlkKV,
// at most BlkKV of them, none past the sequence's keys) of the call's
// KV-major operands (kvOperands) into kbuf and vbuf, applies V's overflow
// guard, packs it into blk in the call's precision (ws.bf16) and returns
// the factor its normalised rows still need.
func (ws *Workspace) loadBlock(p *Prefill, h, b, j int, kbuf, vbuf []float32, blk *tile.Block) float32 {
	d := p.D
	t0 := j * p.BlkKV
	n := max(min(p.BlkKV, int(p.SeqK[b])-t0), 0)
	loadKV(&ws.kvK, &ws.kvV, &p.KV, b, h, t0, n, kbuf, vbuf)
	var vs vScale // one block per accumulation: nothing to rescale
	vs.block(vbuf[:n*d], nil, &ws.kvV)
	blk.SetBF16Products(ws.bf16)
	blk.Load(n, kbuf[:n*d], vbuf[:n*d])
	return vs.factor()
}

package op

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/kernels/lowp"
	"gorgonia.org/tensor"
)

// CPStrategy is how context-parallel prefill gets at the remote key blocks
// that a rank's queries selected.
type CPStrategy int

const (
	// CPAuto picks, per pair of ranks, the cheaper of the two in bytes
	// moved (the cost model of docs/distributed.md).
	CPAuto CPStrategy = iota
	// CPFetchKV fetches the selected K/V blocks from their owner and
	// attends them locally.
	CPFetchKV
	// CPSendQueries sends the queries to the blocks' owner, which attends
	// its blocks and returns partial (O, LSE) pairs to be merged.
	CPSendQueries
)

// String names the strategy.
func (s CPStrategy) String() string {
	switch s {
	case CPAuto:
		return "auto"
	case CPFetchKV:
		return "fetch-kv"
	case CPSendQueries:
		return "send-queries"
	}
	return fmt.Sprintf("CPStrategy(%d)", int(s))
}

// CPPrefillArgs are the arguments of CPSparsePrefill that every rank
// passes alike (checked collectively).
type CPPrefillArgs struct {
	// CuSeqlensQ, CuSeqlensK: the whole batch's prefix sums [B+1];
	// seqlen_q <= seqlen_k per sequence.
	CuSeqlensQ, CuSeqlensK []int32
	// BlkKV: tokens per key block, 1..128 (0: 128).
	BlkKV int
	// Causal: bottom-right causal masking, as in SparseAttenFunc.
	Causal bool
	// SoftmaxScale: 0 means 1/sqrt(D).
	SoftmaxScale float64
	// Workers: goroutines of the rank's attention calls (<= 0: GOMAXPROCS).
	Workers int
	// Strategy: CPAuto (the cost model), or one strategy for every pair.
	Strategy CPStrategy
}

// CPPeerStats is what one rank exchanged with one peer for the blocks of
// that peer its queries selected.
type CPPeerStats struct {
	Strategy CPStrategy // the strategy chosen for this peer's blocks
	Blocks   int        // distinct (sequence, block) pairs needed from the peer
	Queries  int        // queries that selected at least one of them
	// CostFetch and CostSend are the cost model's bytes for the two
	// strategies (request plus reply).
	CostFetch, CostSend int64
	// Fetched: the K/V bytes fetched from the peer (CPFetchKV), exactly
	// the selected blocks' rows.
	Fetched int64
	// BytesSent, BytesReceived: bytes this rank sent to and received from
	// the peer (requests and replies, both directions' traffic).
	BytesSent, BytesReceived int64
}

// CPPrefillStats reports one rank's exchanges, per peer rank (the entry of
// the rank itself is zero).
type CPPrefillStats struct {
	Peers []CPPeerStats
}

// cpPrefill is one rank's validated context-parallel prefill.
type cpPrefill struct {
	c                   comm.Comm
	p, r                int
	args                CPPrefillArgs
	lq, lk, nb          []int
	sh                  *CPShard
	q0, k0              []int // prefix offsets of the local queries / keys per sequence
	blk, hq, hkv, d, tk int
	qdt, kvdt           tensor.Dtype
	eq, ekv             int // element sizes
	qb, kb, vb          []byte
	q2k                 []int32 // [Hkv, nq, topK]
	// the rank's own blocks as pages [page, Hkv, blk, D] and their ids
	ownPage map[[2]int]int
	pool    [2][]byte // K, V pages: own pages, then fetched ones
}

// CPSparsePrefill computes one rank's share of block-sparse prefill
// attention with the batch's context spread over the ranks of c
// (CPPrefillShard says which keys and queries each rank holds): q is the
// rank's queries [shard.Queries(), Hq, D], k and v its keys [shard.Keys(),
// Hkv, D] (dense, BF16 or FP8 as SparseAttenFunc takes them) and q2k its
// queries' block selection [Hkv, shard.Queries(), topK] with the
// sequences' block ids (sequence-local over the whole sequence, -1 for an
// unused entry). It returns the attention of the rank's queries over every
// rank's keys (Out BFloat16 [shard.Queries(), Hq, D], LSE float32), equal
// to SparseAttenFunc over the whole batch within the merge's rounding
// (docs/distributed.md), identical from run to run.
//
// From q2k the rank knows which remote blocks its queries need; for each
// peer it either fetches those K/V blocks (CPFetchKV) or sends the
// queries that need them and merges the partial results the peer returns
// (CPSendQueries); CPAuto takes the one that moves fewer bytes. Only
// selected blocks move: the cache is never all-gathered. Two all-to-all
// exchanges (requests, replies) and two small all-gathers (the metadata
// digest, the request sizes) per call.
//
// Every rank must call it; metadata that differs between ranks (the
// batch, head counts, dtypes, block size, masking, scale) or a rank whose
// inputs are invalid gives an error on every rank, and an error after that
// aborts the group (comm.Comm.Abort).
func CPSparsePrefill(c comm.Comm, q, k, v, q2k tensor.Tensor, args CPPrefillArgs) (*Result, *CPPrefillStats, error) {
	const fn = "CPSparsePrefill"
	if c == nil {
		return nil, nil, argErr(fn, "comm", "a comm.Comm", "nil")
	}
	cp, err := newCPPrefill(fn, c, q, k, v, q2k, args)
	digest := []byte(fmt.Sprintf("inputs invalid on rank %d", c.Rank()))
	if err == nil {
		digest = cp.digest()
	}
	aerr := comm.Agree(c, "the prefill metadata (batch, heads, dtypes, blk_kv, masking, scale, strategy)", digest)
	switch {
	case err != nil:
		return nil, nil, err
	case aerr != nil:
		return nil, nil, &CommError{fn, aerr}
	}
	res, stats, err := cp.run(fn)
	if err != nil {
		c.Abort(err)
		return nil, nil, err
	}
	return res, stats, nil
}

func newCPPrefill(fn string, c comm.Comm, q, k, v, q2k tensor.Tensor, args CPPrefillArgs) (*cpPrefill, error) {
	ch := &checker{fn: fn}
	cp := &cpPrefill{c: c, p: c.Size(), r: c.Rank(), args: args, blk: args.BlkKV}
	if cp.blk == 0 {
		cp.blk = 128
	}
	cp.lq, cp.lk = cpSeqlens(ch, args.CuSeqlensQ, args.CuSeqlensK)
	ch.need(cp.blk >= 1 && cp.blk <= 128, "blk_kv", "1 <= blk_kv <= 128 (0: 128)", args.BlkKV)
	ch.need(args.Strategy >= CPAuto && args.Strategy <= CPSendQueries, "strategy", "CPAuto, CPFetchKV or CPSendQueries", int(args.Strategy))
	qd, kd, vd, sd := ch.dense(q, "q"), ch.dense(k, "k"), ch.dense(v, "v"), ch.dense(q2k, "q2k_indices")
	ch.dtype(qd, "q", BFloat16, Float8E4M3FN)
	if !ch.dtype(kd, "k", BFloat16, Float8E4M3FN) {
		return nil, ch.err
	}
	ch.dtype(vd, "v", kd.Dtype())
	ch.dtype(sd, "q2k_indices", tensor.Int32)
	ch.rank(qd, "q", "[queries, Hq, D]", 3)
	ch.rank(kd, "k", "[keys, Hkv, D]", 3)
	ch.rank(sd, "q2k_indices", "[Hkv, queries, topK]", 3)
	if ch.err != nil {
		return nil, ch.err
	}
	cp.sh = cpShard(cp.lq, cp.lk, cp.blk, cp.p, cp.r)
	nq, nk := cp.sh.Queries(), cp.sh.Keys()
	qs, ks, ss := qd.Shape(), kd.Shape(), sd.Shape()
	cp.hq, cp.hkv, cp.d, cp.tk = qs[1], ks[1], qs[2], ss[2]
	ch.need(qs[0] == nq, "q", fmt.Sprintf("[%d, Hq, D]: the %d queries rank %d holds (CPPrefillShard)", nq, nq, cp.r), fmt.Sprint(qs))
	ch.need(ks[0] == nk && ks[2] == cp.d, "k", fmt.Sprintf("[%d, Hkv, D = %d]: the %d keys rank %d holds", nk, cp.d, nk, cp.r), fmt.Sprint(ks))
	ch.need(vd.Shape().Eq(ks), "v", fmt.Sprintf("shape %v (that of k)", ks), fmt.Sprint(vd.Shape()))
	ch.need(ss[0] == cp.hkv && ss[1] == nq && cp.tk >= 1 && cp.tk <= 64, "q2k_indices",
		fmt.Sprintf("[Hkv = %d, %d, topK in 1..64]", cp.hkv, nq), fmt.Sprint(ss))
	ch.need(cp.hkv >= 1 && cp.hq%cp.hkv == 0, "q", fmt.Sprintf("Hq a multiple of Hkv = %d", cp.hkv), cp.hq)
	if ch.err != nil {
		return nil, ch.err
	}
	cp.qdt, cp.kvdt = qd.Dtype(), kd.Dtype()
	cp.eq, cp.ekv = int(cp.qdt.Size()), int(cp.kvdt.Size())
	cp.qb, cp.kb, cp.vb, cp.q2k = qd.Header.Raw, kd.Header.Raw, vd.Header.Raw, int32s(sd)
	B := len(cp.lq)
	cp.nb, cp.q0, cp.k0 = make([]int, B), make([]int, B+1), make([]int, B+1)
	for b := 0; b < B; b++ {
		cp.nb[b] = (cp.lk[b] + cp.blk - 1) / cp.blk
		cp.q0[b+1] = cp.q0[b] + cp.sh.QueryEnd[b] - cp.sh.QueryBegin[b]
		cp.k0[b+1] = cp.k0[b] + cp.sh.KeyEnd[b] - cp.sh.KeyBegin[b]
	}
	// The selection: ids in [-1, blocks of the sequence), no repeats.
	for h := 0; h < cp.hkv; h++ {
		for b := 0; b < B; b++ {
			for ql := cp.q0[b]; ql < cp.q0[b+1]; ql++ {
				row := cp.q2k[(h*nq+ql)*cp.tk : (h*nq+ql+1)*cp.tk]
				for t, j := range row {
					if j < -1 || int(j) >= cp.nb[b] || (j >= 0 && slices.Contains(row[:t], j)) {
						return nil, argErr(fn, fmt.Sprintf("q2k_indices[%d][%d][%d]", h, ql, t),
							fmt.Sprintf("-1 or a block id of sequence %d in [0, %d), not repeated in its list", b, cp.nb[b]), j)
					}
				}
			}
		}
	}
	return cp, nil
}

// digest encodes what every rank must share.
func (cp *cpPrefill) digest() []byte {
	var d []byte
	for _, x := range []int{cp.p, cp.blk, cp.hq, cp.hkv, cp.d, cp.tk, cp.eq, cp.ekv, int(cp.args.Strategy), len(cp.lq)} {
		d = binary.LittleEndian.AppendUint64(d, uint64(x))
	}
	d = append(d, dtypeName(cp.qdt)+"/"+dtypeName(cp.kvdt)...)
	if cp.args.Causal {
		d = append(d, 1)
	}
	d = binary.LittleEndian.AppendUint64(d, math.Float64bits(cp.args.SoftmaxScale))
	for i := range cp.lq {
		d = binary.LittleEndian.AppendUint64(d, uint64(cp.lq[i])<<32|uint64(cp.lk[i]))
	}
	return d
}

// pos is the key position of local query ql of sequence b.
func (cp *cpPrefill) pos(b, ql int) int {
	return cp.lk[b] - cp.lq[b] + cp.sh.QueryBegin[b] + ql - cp.q0[b]
}

// visible reports whether block j can hold a key visible to a query at
// position pos (not wholly in its causal future).
func (cp *cpPrefill) visible(j, pos int) bool { return !cp.args.Causal || j*cp.blk <= pos }

// tokens is the number of keys of block j of sequence b.
func (cp *cpPrefill) tokens(b, j int) int { return min(cp.blk, cp.lk[b]-j*cp.blk) }

// blockBytes is the size of one K (or V) block's rows of sequence b.
func (cp *cpPrefill) blockBytes(b, j int) int { return cp.tokens(b, j) * cp.hkv * cp.d * cp.ekv }

// cpNeed is what this rank needs from one peer.
type cpNeed struct {
	blocks  [][2]int // (sequence, block), ascending
	queries []int    // local query indices, ascending
	strat   CPStrategy
	reply   int // bytes of the peer's reply
}

const (
	cpReqFetch   = 1
	cpReqQueries = 2
)

func (cp *cpPrefill) run(fn string) (*Result, *CPPrefillStats, error) {
	needs := cp.needs()
	stats := &CPPrefillStats{Peers: make([]CPPeerStats, cp.p)}
	reqs := make([][]byte, cp.p)
	for s, n := range needs {
		if s == cp.r || (len(n.blocks) == 0 && len(n.queries) == 0) {
			continue
		}
		cf, cs := cp.costs(n)
		n.strat = cp.args.Strategy
		if n.strat == CPAuto {
			n.strat = CPSendQueries
			if cf <= cs {
				n.strat = CPFetchKV
			}
		}
		reqs[s] = cp.request(s, n)
		stats.Peers[s] = CPPeerStats{Strategy: n.strat, Blocks: len(n.blocks), Queries: len(n.queries), CostFetch: cf, CostSend: cs,
			BytesSent: int64(len(reqs[s])), BytesReceived: int64(n.reply)}
		if n.strat == CPFetchKV {
			stats.Peers[s].Fetched = int64(n.reply)
		}
	}
	// Request sizes, so every rank knows what it receives.
	sizes := make([]int64, cp.p)
	for s := range reqs {
		sizes[s] = int64(len(reqs[s]))
	}
	all := make([]int64, cp.p*cp.p)
	if err := cp.c.AllGather(comm.Bytes(sizes), comm.Bytes(all)); err != nil {
		return nil, nil, &CommError{fn, err}
	}
	in := make([][]byte, cp.p)
	for s := range in {
		in[s] = make([]byte, all[s*cp.p+cp.r])
	}
	if err := cp.c.AllToAllV(reqs, in); err != nil {
		return nil, nil, &CommError{fn, err}
	}
	cp.buildOwnPages()
	replies := make([][]byte, cp.p)
	for s := range in {
		if s == cp.r || len(in[s]) == 0 {
			continue
		}
		rep, err := cp.serve(fn, s, in[s])
		if err != nil {
			return nil, nil, err
		}
		replies[s] = rep
		stats.Peers[s].BytesSent += int64(len(rep))
		stats.Peers[s].BytesReceived += int64(len(in[s]))
	}
	got := make([][]byte, cp.p)
	for s, n := range needs {
		if s != cp.r && reqs[s] != nil {
			got[s] = make([]byte, n.reply)
		}
	}
	if err := cp.c.AllToAllV(replies, got); err != nil {
		return nil, nil, &CommError{fn, err}
	}
	res, err := cp.finish(fn, needs, got)
	if err != nil {
		return nil, nil, err
	}
	return res, stats, nil
}

// needs lists, per peer, the remote blocks this rank's queries selected
// (wholly masked ones left out) and the queries that selected them.
func (cp *cpPrefill) needs() []*cpNeed {
	needs := make([]*cpNeed, cp.p)
	for s := range needs {
		needs[s] = &cpNeed{}
	}
	nq := cp.sh.Queries()
	seen := make(map[[2]int]bool)
	for b := range cp.lq {
		for ql := cp.q0[b]; ql < cp.q0[b+1]; ql++ {
			pos := cp.pos(b, ql)
			for h := 0; h < cp.hkv; h++ {
				for _, j := range cp.q2k[(h*nq+ql)*cp.tk : (h*nq+ql+1)*cp.tk] {
					if j < 0 || !cp.visible(int(j), pos) {
						continue
					}
					s := cpOwner(cp.nb[b], cp.p, int(j))
					if s == cp.r {
						continue
					}
					n := needs[s]
					if !seen[[2]int{b, int(j)}] {
						seen[[2]int{b, int(j)}] = true
						n.blocks = append(n.blocks, [2]int{b, int(j)})
					}
					if len(n.queries) == 0 || n.queries[len(n.queries)-1] != ql {
						n.queries = append(n.queries, ql)
					}
				}
			}
		}
	}
	for _, n := range needs {
		slices.SortFunc(n.blocks, func(x, y [2]int) int {
			if x[0] != y[0] {
				return x[0] - y[0]
			}
			return x[1] - y[1]
		})
	}
	return needs
}

// costs is the cost model: the bytes each strategy moves between this rank
// and one peer (request plus reply). The attention arithmetic is the same
// either way (each selected (query, block) pair is computed once), so the
// bytes decide.
func (cp *cpPrefill) costs(n *cpNeed) (fetch, send int64) {
	fetch = 8 + 8*int64(len(n.blocks))
	for _, bj := range n.blocks {
		fetch += 2 * int64(cp.blockBytes(bj[0], bj[1]))
	}
	nq := int64(len(n.queries))
	send = 8 + nq*int64(8+cp.hkv*cp.tk*4+cp.hq*cp.d*cp.eq) + nq*int64(cp.hq*(4+2*cp.d))
	return fetch, send
}

// request encodes this rank's request to peer s and sets n.reply.
//
//	fetch:   [1, n] then n (sequence, block) pairs, int32
//	queries: [2, n] then n (sequence, sequence-local query) pairs, then
//	         q2k [Hkv][n][topK] (the peer's visible blocks, else -1), int32,
//	         then the n query rows [Hq, D]
func (cp *cpPrefill) request(s int, n *cpNeed) []byte {
	var w []int32
	if n.strat == CPFetchKV {
		w = append(w, cpReqFetch, int32(len(n.blocks)))
		for _, bj := range n.blocks {
			w = append(w, int32(bj[0]), int32(bj[1]))
			n.reply += 2 * cp.blockBytes(bj[0], bj[1])
		}
		return comm.Bytes(w)
	}
	w = append(w, cpReqQueries, int32(len(n.queries)))
	seq := make([]int, len(n.queries))
	for i, ql := range n.queries {
		b, _ := slices.BinarySearch(cp.q0, ql+1)
		seq[i] = b - 1
		w = append(w, int32(seq[i]), int32(cp.sh.QueryBegin[seq[i]]+ql-cp.q0[seq[i]]))
	}
	nq := cp.sh.Queries()
	for h := 0; h < cp.hkv; h++ {
		for i, ql := range n.queries {
			b, pos := seq[i], cp.pos(seq[i], ql)
			for _, j := range cp.q2k[(h*nq+ql)*cp.tk : (h*nq+ql+1)*cp.tk] {
				if j >= 0 && cp.visible(int(j), pos) && cpOwner(cp.nb[b], cp.p, int(j)) == s {
					w = append(w, j)
				} else {
					w = append(w, -1)
				}
			}
		}
	}
	out := append([]byte(nil), comm.Bytes(w)...)
	row := cp.hq * cp.d * cp.eq
	for _, ql := range n.queries {
		out = append(out, cp.qb[ql*row:(ql+1)*row]...)
	}
	n.reply = len(n.queries) * cp.hq * (4 + 2*cp.d)
	return out
}

// buildOwnPages copies the rank's key blocks into pages [page, Hkv, blk,
// D] (HND, the paged layout of SparseAttenFunc), in (sequence, block)
// order.
func (cp *cpPrefill) buildOwnPages() {
	cp.ownPage = map[[2]int]int{}
	for b := range cp.lq {
		first, end := cpBlockRange(cp.nb[b], cp.p, cp.r)
		for j := first; j < end; j++ {
			cp.ownPage[[2]int{b, j}] = len(cp.ownPage)
			t0 := cp.k0[b] + j*cp.blk - cp.sh.KeyBegin[b]
			for i, src := range [2][]byte{cp.kb, cp.vb} {
				cp.pool[i] = cp.appendPage(cp.pool[i], src, t0, cp.tokens(b, j))
			}
		}
	}
}

// appendPage appends one page built from n token rows [t0, t0+n) of a
// dense [tokens, Hkv, D] buffer (rows past n stay zero: beyond the
// sequence's length, never read).
func (cp *cpPrefill) appendPage(pool, src []byte, t0, n int) []byte {
	row := cp.d * cp.ekv
	base := len(pool)
	pool = append(pool, make([]byte, cp.hkv*cp.blk*row)...)
	for h := 0; h < cp.hkv; h++ {
		for i := 0; i < n; i++ {
			copy(pool[base+(h*cp.blk+i)*row:][:row], src[((t0+i)*cp.hkv+h)*row:][:row])
		}
	}
	return pool
}

// appendBlockRows appends the dense rows [tokens, Hkv, D] of a page.
func (cp *cpPrefill) appendBlockRows(out, pool []byte, page, n int) []byte {
	row := cp.d * cp.ekv
	base := page * cp.hkv * cp.blk * row
	for i := 0; i < n; i++ {
		for h := 0; h < cp.hkv; h++ {
			out = append(out, pool[base+(h*cp.blk+i)*row:][:row]...)
		}
	}
	return out
}

// serve answers peer s's request.
func (cp *cpPrefill) serve(fn string, s int, req []byte) ([]byte, error) {
	bad := func(what string) error {
		return &CommError{fn, fmt.Errorf("rank %d's request to rank %d is malformed: %s (ranks run different code?)", s, cp.r, what)}
	}
	if len(req) < 8 || len(req)%4 != 0 {
		return nil, bad(fmt.Sprintf("%d bytes", len(req)))
	}
	w := viewAs[int32](slices.Clone(req[:len(req)/4*4]))
	mode, n := w[0], int(w[1])
	if n < 0 || len(w) < 2+2*n {
		return nil, bad(fmt.Sprintf("%d entries in %d bytes", n, len(req)))
	}
	pairs := w[2 : 2+2*n]
	for i := 0; i < n; i++ {
		b := int(pairs[2*i])
		if b < 0 || b >= len(cp.lq) {
			return nil, bad(fmt.Sprintf("sequence %d", b))
		}
	}
	switch mode {
	case cpReqFetch:
		if len(w) != 2+2*n {
			return nil, bad("length of a fetch request")
		}
		var out []byte
		for i := 0; i < n; i++ {
			b, j := int(pairs[2*i]), int(pairs[2*i+1])
			page, ok := cp.ownPage[[2]int{b, j}]
			if !ok {
				return nil, bad(fmt.Sprintf("block %d of sequence %d, which rank %d does not hold", j, b, cp.r))
			}
			out = cp.appendBlockRows(out, cp.pool[0], page, cp.tokens(b, j))
			out = cp.appendBlockRows(out, cp.pool[1], page, cp.tokens(b, j))
		}
		return out, nil
	case cpReqQueries:
		sel := w[2+2*n:]
		qbytes := n * cp.hq * cp.d * cp.eq
		if len(sel) < cp.hkv*n*cp.tk || len(req) != 4*(2+2*n+cp.hkv*n*cp.tk)+qbytes {
			return nil, bad("length of a query request")
		}
		sel = sel[:cp.hkv*n*cp.tk]
		seqs := make([]int, n)
		for i := range seqs {
			seqs[i] = int(pairs[2*i])
			if i > 0 && seqs[i] < seqs[i-1] {
				return nil, bad("queries out of sequence order")
			}
		}
		for i, j := range sel {
			b := seqs[(i/cp.tk)%n]
			if _, ok := cp.ownPage[[2]int{b, int(j)}]; j >= 0 && !ok {
				return nil, bad(fmt.Sprintf("block %d of sequence %d, which rank %d does not hold", j, b, cp.r))
			}
		}
		// All keys of the requested blocks precede the queries (or the
		// attention is not causal): the owner attends them unmasked, up to
		// each sequence's length.
		used := slices.Clone(cp.lk)
		res, err := cp.attend(fn, req[len(req)-qbytes:], seqs, cp.pool, len(cp.ownPage), cp.ownPage, used, sel, false)
		if err != nil {
			return nil, err
		}
		out := append([]byte(nil), res.LSE.Header.Raw...)
		return append(out, res.Out.Header.Raw...), nil
	}
	return nil, bad(fmt.Sprintf("request kind %d", mode))
}

// attend runs paged sparse prefill of n queries (rows qb, sequence
// seqs[i] each, ascending) over the pages of pool, pages[(b, j)] the page
// of block j of sequence b (blocks without a page are never selected),
// with seqused[b] keys per sequence and the selection sel [Hkv, n, topK].
func (cp *cpPrefill) attend(fn string, qb []byte, seqs []int, pool [2][]byte, npages int, pages map[[2]int]int, seqused []int, sel []int32, causal bool) (*Result, error) {
	B, n := len(cp.lq), len(seqs)
	cols := 1
	for b := range seqused {
		cols = max(cols, (seqused[b]+cp.blk-1)/cp.blk)
	}
	pt := make([]int32, B*cols)
	for bj, pg := range pages {
		if bj[1] < cols {
			pt[bj[0]*cols+bj[1]] = int32(pg)
		}
	}
	cuQ, cuK, su := make([]int32, B+1), make([]int32, B+1), make([]int32, B)
	for _, b := range seqs {
		cuQ[b+1]++
	}
	for b := 0; b < B; b++ {
		cuQ[b+1] += cuQ[b]
		su[b] = int32(seqused[b])
		cuK[b+1] = cuK[b] + su[b]
	}
	i32 := func(v []int32, shape ...int) *tensor.Dense {
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
	}
	cuQT, cuKT := i32(cuQ, B+1), i32(cuK, B+1)
	rowPtr, qIdx, err := BuildK2QCSR(i32(sel, cp.hkv, n, cp.tk), cuQT, cuKT, cp.blk)
	if err != nil {
		return nil, err
	}
	q := bytesTensor(cp.qdt, slices.Clone(qb), n, cp.hq, cp.d)
	k := bytesTensor(cp.kvdt, pool[0][:npages*cp.hkv*cp.blk*cp.d*cp.ekv], npages, cp.hkv, cp.blk, cp.d)
	v := bytesTensor(cp.kvdt, pool[1][:npages*cp.hkv*cp.blk*cp.d*cp.ekv], npages, cp.hkv, cp.blk, cp.d)
	return SparseAttenFunc(q, k, v, rowPtr, qIdx, cp.tk, SparseArgs{CuSeqlensQ: cuQT, CuSeqlensK: cuKT, BlkKV: cp.blk, Causal: causal,
		SoftmaxScale: cp.args.SoftmaxScale, PageTable: i32(pt, B, cols), SeqUsedK: i32(su, B), Workers: cp.args.Workers})
}

// bytesTensor makes a tensor of dtype dt over b.
func bytesTensor(dt tensor.Dtype, b []byte, shape ...int) *tensor.Dense {
	var back any
	switch dt {
	case BFloat16:
		back = viewAs[lowp.BFloat16](b)
	case Float8E4M3FN:
		back = viewAs[lowp.Float8E4M3FN](b)
	default:
		back = viewAs[float32](b)
	}
	if len(b) == 0 {
		return tensor.New(tensor.WithShape(shape...), tensor.Of(dt))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(back))
}

// finish attends the rank's queries over its own and the fetched blocks and
// merges the partials returned by the peers its queries were sent to (the
// local partial first, then the peers in rank order).
func (cp *cpPrefill) finish(fn string, needs []*cpNeed, got [][]byte) (*Result, error) {
	nq, B := cp.sh.Queries(), len(cp.lq)
	pages := maps.Clone(cp.ownPage)
	npages := len(cp.ownPage)
	pool := cp.pool
	fetched := map[int]bool{}
	for s, n := range needs {
		if s == cp.r || n.strat != CPFetchKV || got[s] == nil {
			continue
		}
		fetched[s] = true
		off := 0
		for _, bj := range n.blocks {
			nb := cp.blockBytes(bj[0], bj[1])
			for i := range pool {
				pool[i] = cp.appendPage(pool[i], got[s][off:off+nb], 0, cp.tokens(bj[0], bj[1]))
				off += nb
			}
			pages[bj] = npages
			npages++
		}
	}
	// The local problem: every selected block held here or fetched.
	sel := make([]int32, len(cp.q2k))
	seqs := make([]int, nq)
	used := make([]int, B)
	for b := 0; b < B; b++ {
		for ql := cp.q0[b]; ql < cp.q0[b+1]; ql++ {
			seqs[ql] = b
		}
		if cp.q0[b+1] > cp.q0[b] {
			used[b] = cp.lk[b]
			if cp.args.Causal {
				used[b] = cp.pos(b, cp.q0[b+1]-1) + 1
			}
		}
	}
	for h := 0; h < cp.hkv; h++ {
		for ql := 0; ql < nq; ql++ {
			b := seqs[ql]
			for t := 0; t < cp.tk; t++ {
				i := (h*nq+ql)*cp.tk + t
				j := int(cp.q2k[i])
				sel[i] = -1
				if j < 0 || j*cp.blk >= used[b] {
					continue
				}
				if s := cpOwner(cp.nb[b], cp.p, j); s == cp.r || fetched[s] {
					sel[i] = int32(j)
				}
			}
		}
	}
	out := tensor.New(tensor.WithShape(nq, cp.hq, cp.d), tensor.Of(BFloat16))
	lse := tensor.New(tensor.WithShape(nq, cp.hq), tensor.Of(tensor.Float32))
	if nq == 0 {
		return &Result{Out: out, LSE: lse}, nil
	}
	local, err := cp.attend(fn, cp.qb, seqs, pool, npages, pages, used, sel, cp.args.Causal)
	if err != nil {
		return nil, err
	}
	// Sources: the local partial, then each peer that attended queries.
	srcs := [][]lowp.BFloat16{backing[lowp.BFloat16](local.Out)}
	srcL := [][]float32{backing[float32](local.LSE)}
	var rowOf [][]int
	for s, n := range needs {
		if s == cp.r || n.strat != CPSendQueries || got[s] == nil {
			continue
		}
		nl := len(n.queries) * cp.hq * 4
		srcL = append(srcL, viewAs[float32](slices.Clone(got[s][:nl])))
		srcs = append(srcs, viewAs[lowp.BFloat16](slices.Clone(got[s][nl:])))
		idx := make([]int, nq)
		for i := range idx {
			idx[i] = -1
		}
		for i, ql := range n.queries {
			idx[ql] = i
		}
		rowOf = append(rowOf, idx)
	}
	var sc mergeScratch
	sc.reserve(len(srcs), cp.d)
	o, l := backing[lowp.BFloat16](out), backing[float32](lse)
	ninf := float32(math.Inf(-1))
	for ql := 0; ql < nq; ql++ {
		for h := 0; h < cp.hq; h++ {
			row := ql*cp.hq + h
			sc.l[0], sc.off[0] = srcL[0][row], row*cp.d
			for k, idx := range rowOf {
				sc.l[k+1], sc.off[k+1] = ninf, 0
				if i := idx[ql]; i >= 0 {
					sc.l[k+1], sc.off[k+1] = srcL[k+1][i*cp.hq+h], (i*cp.hq+h)*cp.d
				}
			}
			l[row] = mergeRow(o[row*cp.d:(row+1)*cp.d], srcs, &sc)
		}
	}
	return &Result{Out: out, LSE: lse}, nil
}

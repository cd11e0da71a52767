package op

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/op/internal/validate"
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

// CPPrefillArgs are the arguments of ContextParallelPrefillFunc that every rank
// passes alike (checked collectively).
type CPPrefillArgs struct {
	// CuSeqlensQ, CuSeqlensK: the whole batch's prefix sums [B+1];
	// seqlen_q <= seqlen_k per sequence.
	CuSeqlensQ, CuSeqlensK []int32
	// BlkKV: tokens per key block, 1..128 (0: 128).
	BlkKV int
	// Causal: bottom-right causal masking, as in SparseAttentionFunc.
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

// ContextParallelPrefillFunc computes one rank's share of block-sparse prefill
// attention with the batch's context spread over the ranks of c
// (CPPrefillShard says which keys and queries each rank holds): q is the
// rank's queries [shard.Queries(), Hq, D], k and v its keys [shard.Keys(),
// Hkv, D] (dense, BF16 or FP8 as SparseAttentionFunc takes them) and q2k its
// queries' block selection [Hkv, shard.Queries(), topK] with the
// sequences' block ids (sequence-local over the whole sequence, -1 for an
// unused entry). It returns the attention of the rank's queries over every
// rank's keys (Out BFloat16 [shard.Queries(), Hq, D], LSE float32), equal
// to SparseAttentionFunc over the whole batch within the merge's rounding
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
func ContextParallelPrefillFunc(c comm.Comm, q, k, v, q2k tensor.Tensor, args CPPrefillArgs) (*Result, *CPPrefillStats, error) {
	const fn = "ContextParallelPrefillFunc"
	if c == nil {
		return nil, nil, validate.ArgErr(fn, "comm", "a comm.Comm", "nil")
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
	ch := &validate.Checker{Fn: fn}
	cp := &cpPrefill{c: c, p: c.Size(), r: c.Rank(), args: args, blk: args.BlkKV}
	if cp.blk == 0 {
		cp.blk = 128
	}
	cp.lq, cp.lk = cpSeqlens(ch, args.CuSeqlensQ, args.CuSeqlensK)
	ch.Need(cp.blk >= 1 && cp.blk <= 128, "blk_kv", "1 <= blk_kv <= 128 (0: 128)", args.BlkKV)
	ch.Need(args.Strategy >= CPAuto && args.Strategy <= CPSendQueries, "strategy", "CPAuto, CPFetchKV or CPSendQueries", int(args.Strategy))
	qd, kd, vd, sd := ch.Dense(q, "q"), ch.Dense(k, "k"), ch.Dense(v, "v"), ch.Dense(q2k, "q2k_indices")
	ch.Dtype(qd, "q", BFloat16, Float8E4M3FN)
	if !ch.Dtype(kd, "k", BFloat16, Float8E4M3FN) {
		return nil, ch.Err
	}
	ch.Dtype(vd, "v", kd.Dtype())
	ch.Dtype(sd, "q2k_indices", tensor.Int32)
	ch.Rank(qd, "q", "[queries, Hq, D]", 3)
	ch.Rank(kd, "k", "[keys, Hkv, D]", 3)
	ch.Rank(sd, "q2k_indices", "[Hkv, queries, topK]", 3)
	if ch.Err != nil {
		return nil, ch.Err
	}
	cp.sh = cpShard(cp.lq, cp.lk, cp.blk, cp.p, cp.r)
	nq, nk := cp.sh.Queries(), cp.sh.Keys()
	qs, ks, ss := qd.Shape(), kd.Shape(), sd.Shape()
	cp.hq, cp.hkv, cp.d, cp.tk = qs[1], ks[1], qs[2], ss[2]
	ch.Need(qs[0] == nq, "q", fmt.Sprintf("[%d, Hq, D]: the %d queries rank %d holds (CPPrefillShard)", nq, nq, cp.r), fmt.Sprint(qs))
	ch.Need(ks[0] == nk && ks[2] == cp.d, "k", fmt.Sprintf("[%d, Hkv, D = %d]: the %d keys rank %d holds", nk, cp.d, nk, cp.r), fmt.Sprint(ks))
	ch.Need(vd.Shape().Eq(ks), "v", fmt.Sprintf("shape %v (that of k)", ks), fmt.Sprint(vd.Shape()))
	ch.Need(ss[0] == cp.hkv && ss[1] == nq && cp.tk >= 1 && cp.tk <= 64, "q2k_indices",
		fmt.Sprintf("[Hkv = %d, %d, topK in 1..64]", cp.hkv, nq), fmt.Sprint(ss))
	ch.Need(cp.hkv >= 1 && cp.hq%cp.hkv == 0, "q", fmt.Sprintf("Hq a multiple of Hkv = %d", cp.hkv), cp.hq)
	if ch.Err != nil {
		return nil, ch.Err
	}
	cp.qdt, cp.kvdt = qd.Dtype(), kd.Dtype()
	cp.eq, cp.ekv = int(cp.qdt.Size()), int(cp.kvdt.Size())
	cp.qb, cp.kb, cp.vb, cp.q2k = qd.Header.Raw, kd.Header.Raw, vd.Header.Raw, validate.Int32s(sd)
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
						return nil, validate.ArgErr(fn, fmt.Sprintf("q2k_indices[%d][%d][%d]", h, ql, t),
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
	d = append(d, validate.DtypeName(cp.qdt)+"/"+validate.DtypeName(cp.kvdt)...)
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

// run exchanges the requests and replies and computes the result; every
// rank runs the same sequence of collectives.
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
		n := all[s*cp.p+cp.r]
		if n < 0 {
			return nil, nil, &CommError{fn, fmt.Errorf("rank %d announced a request of %d bytes", s, n)}
		}
		in[s] = make([]byte, n)
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

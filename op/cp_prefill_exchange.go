package op

import (
	"fmt"
	"slices"

	"github.com/sparseattn/msa/kernels/comm"
)

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

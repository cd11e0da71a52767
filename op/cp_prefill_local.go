package op

import (
	"maps"
	"math"
	"slices"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/merge"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// buildOwnPages copies the rank's key blocks into pages [page, Hkv, blk,
// D] (HND, the paged layout of SparseAttentionFunc), in (sequence, block)
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
	rowPtr, qIdx, err := K2QCSRFunc(i32(sel, cp.hkv, n, cp.tk), cuQT, cuKT, cp.blk)
	if err != nil {
		return nil, err
	}
	q := bytesTensor(cp.qdt, slices.Clone(qb), n, cp.hq, cp.d)
	k := bytesTensor(cp.kvdt, pool[0][:npages*cp.hkv*cp.blk*cp.d*cp.ekv], npages, cp.hkv, cp.blk, cp.d)
	v := bytesTensor(cp.kvdt, pool[1][:npages*cp.hkv*cp.blk*cp.d*cp.ekv], npages, cp.hkv, cp.blk, cp.d)
	return SparseAttentionFunc(q, k, v, rowPtr, qIdx, cp.tk, SparseArgs{CuSeqlensQ: cuQT, CuSeqlensK: cuKT, BlkKV: cp.blk, Causal: causal,
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
	srcs := [][]lowp.BFloat16{validate.Backing[lowp.BFloat16](local.Out)}
	srcL := [][]float32{validate.Backing[float32](local.LSE)}
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
	var sc merge.Scratch
	sc.Reserve(len(srcs), cp.d)
	o, l := validate.Backing[lowp.BFloat16](out), validate.Backing[float32](lse)
	ninf := float32(math.Inf(-1))
	for ql := 0; ql < nq; ql++ {
		for h := 0; h < cp.hq; h++ {
			row := ql*cp.hq + h
			sc.Source(0, srcL[0][row], row*cp.d)
			for k, idx := range rowOf {
				sc.Source(k+1, ninf, 0)
				if i := idx[ql]; i >= 0 {
					sc.Source(k+1, srcL[k+1][i*cp.hq+h], (i*cp.hq+h)*cp.d)
				}
			}
			l[row] = merge.Row(o[row*cp.d:(row+1)*cp.d], srcs, &sc)
		}
	}
	return &Result{Out: out, LSE: lse}, nil
}

package op

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// cpPrefillSpecs: ragged batches with seqlen_q < seqlen_k (a chunk after a
// cached prefix) and a last short block, causal and not, BF16 and FP8.
func cpPrefillSpecs() []sparseSpec {
	return []sparseSpec{
		{seed: 1, seqQ: []int{300, 200}, seqK: []int{300, 450}, hq: 4, hkv: 2, d: 64, topK: 4, blk: 64, causal: true, qDt: "bf16", kvDt: "bf16"},
		{seed: 2, seqQ: []int{130, 70}, seqK: []int{250, 70}, hq: 2, hkv: 2, d: 64, topK: 3, blk: 32, qDt: "bf16", kvDt: "e4m3"},
		{seed: 3, seqQ: []int{256}, seqK: []int{384}, hq: 8, hkv: 1, d: 128, topK: 2, blk: 128, causal: true, qDt: "e4m3", kvDt: "e4m3"},
		// A few queries after a long context: sending them is cheaper.
		{seed: 4, seqQ: []int{8}, seqK: []int{1024}, hq: 2, hkv: 1, d: 64, topK: 8, blk: 64, causal: true, qDt: "bf16", kvDt: "bf16"},
	}
}

// The cost model fetches when many queries share the remote blocks and
// sends the queries when few queries need many blocks.
func TestCPSparsePrefillAutoChoice(t *testing.T) {
	for i, want := range map[int]CPStrategy{0: CPFetchKV, 3: CPSendQueries} {
		s := cpPrefillSpecs()[i]
		pr := buildSparse(s)
		cs, _ := comm.NewLocal(2, 0)
		stats := make([]*CPPrefillStats, 2)
		for r, err := range comm.Each(cs, func(c comm.Comm) error {
			var err error
			_, _, stats[c.Rank()], err = cpPrefillRank(c, s, pr, CPAuto)
			return err
		}) {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		if ps := stats[1].Peers[0]; ps.Blocks == 0 || ps.Strategy != want {
			t.Errorf("%v: rank 1 chose %v for %d blocks of rank 0 (costs fetch %d, send %d), want %v", s, ps.Strategy, ps.Blocks, ps.CostFetch, ps.CostSend, want)
		}
	}
}

// cpRankInputs slices rank r of p's q, k, v and q2k out of the whole
// batch's problem.
func cpRankInputs(s sparseSpec, pr *sparseProblem, p, r int) (sh *CPShard, q, k, v, q2k *tensor.Dense) {
	cuQ, cuK := validate.Int32s(pr.cuQ), validate.Int32s(pr.cuK)
	sh, err := CPPrefillShard(cuQ, cuK, s.blk, p, r)
	if err != nil {
		panic(err)
	}
	rows := func(t *tensor.Dense, begin, end []int, cu []int32) *tensor.Dense {
		sh := t.Shape()
		per := sh[1] * sh[2] * int(t.Dtype().Size())
		var b []byte
		for i := range begin {
			b = append(b, t.Header.Raw[(int(cu[i])+begin[i])*per:(int(cu[i])+end[i])*per]...)
		}
		return bytesTensor(t.Dtype(), b, len(b)/per, sh[1], sh[2])
	}
	q = rows(pr.q, sh.QueryBegin, sh.QueryEnd, cuQ)
	k = rows(pr.k, sh.KeyBegin, sh.KeyEnd, cuK)
	v = rows(pr.v, sh.KeyBegin, sh.KeyEnd, cuK)
	all := validate.Int32s(pr.q2k)
	totalQ := int(cuQ[len(cuQ)-1])
	var sel []int32
	for h := 0; h < s.hkv; h++ {
		for b := range sh.QueryBegin {
			sel = append(sel, all[(h*totalQ+int(cuQ[b])+sh.QueryBegin[b])*s.topK:(h*totalQ+int(cuQ[b])+sh.QueryEnd[b])*s.topK]...)
		}
	}
	return sh, q, k, v, tensor.New(tensor.WithShape(s.hkv, sh.Queries(), s.topK), tensor.WithBacking(sel))
}

// cpPrefillRank runs rank c's share twice (the runs must agree bit for
// bit) and returns its shard, result and stats.
func cpPrefillRank(c comm.Comm, s sparseSpec, pr *sparseProblem, strat CPStrategy) (*CPShard, *Result, *CPPrefillStats, error) {
	sh, q, k, v, q2k := cpRankInputs(s, pr, c.Size(), c.Rank())
	args := CPPrefillArgs{CuSeqlensQ: validate.Int32s(pr.cuQ), CuSeqlensK: validate.Int32s(pr.cuK), BlkKV: s.blk, Causal: s.causal, Workers: 2, Strategy: strat}
	var res [2]*Result
	var st *CPPrefillStats
	for i := range res {
		var err error
		res[i], st, err = ContextParallelPrefillFunc(c, q, k, v, q2k, args)
		if err != nil {
			return nil, nil, nil, err
		}
	}
	if string(res[0].Out.Header.Raw) != string(res[1].Out.Header.Raw) || string(res[0].LSE.Header.Raw) != string(res[1].LSE.Header.Raw) {
		return nil, nil, nil, fmt.Errorf("rank %d: two runs differ", c.Rank())
	}
	return sh, res[0], st, nil
}

// comparePrefill compares rank-local results with the single-process ones
// (want, the whole batch). Each (query, block) partial is computed alike
// in both, so they differ only in how the partials are combined: the
// single-process combine rounds once to BF16 (unit roundoff u = 2^-8,
// values at most max|V|), context-parallel prefill rounds the rank's
// combine and each peer's partial (u*max|V| together, weights summing to
// 1) and the merge (u*max|V|): 3u*max|V|, plus the float32 sums of up to
// topK+P terms in different orders, 2*(topK+P)*2^-24*max|V|. LSEs: float32
// merges of up to topK+P terms, 2*(topK+P+4)*2^-24 + 4*2^-24*|LSE|.
func comparePrefill(s sparseSpec, pr *sparseProblem, p int, sh *CPShard, got *Result, want *Result) error {
	cuQ := validate.Int32s(pr.cuQ)
	g, w := validate.Backing[lowp.BFloat16](got.Out), validate.Backing[lowp.BFloat16](want.Out)
	gl, wl := validate.Backing[float32](got.LSE), validate.Backing[float32](want.LSE)
	tol := (3*0x1p-8 + 2*float64(s.topK+p)*0x1p-24) * pr.maxV
	row := s.hq * s.d
	ql := 0
	for b := range sh.QueryBegin {
		for i := sh.QueryBegin[b]; i < sh.QueryEnd[b]; i, ql = i+1, ql+1 {
			gq := int(cuQ[b]) + i
			for e := 0; e < row; e++ {
				x, y := float64(g[ql*row+e].Float32()), float64(w[gq*row+e].Float32())
				if d := math.Abs(x - y); !(d <= tol) {
					return fmt.Errorf("query %d of sequence %d, element %d: %v, single-process %v (diff %g > %g)", i, b, e, x, y, d, tol)
				}
			}
			for h := 0; h < s.hq; h++ {
				x, y := gl[ql*s.hq+h], wl[gq*s.hq+h]
				if math.IsInf(float64(x), -1) && math.IsInf(float64(y), -1) {
					continue
				}
				lt := 2*float64(s.topK+p+4)*0x1p-24 + 4*0x1p-24*math.Abs(float64(y))
				if d := math.Abs(float64(x - y)); !(d <= lt) {
					return fmt.Errorf("query %d of sequence %d, head %d: LSE %v, single-process %v (diff %g > %g)", i, b, h, x, y, d, lt)
				}
			}
		}
	}
	return nil
}

// checkCPPrefill runs s context-parallel on rank c with strategy strat and
// compares with single-process prefill; the in-process tests and the MPI
// run share it.
func checkCPPrefill(c comm.Comm, s sparseSpec, strat CPStrategy) error {
	pr := buildSparse(s)
	sh, res, st, err := cpPrefillRank(c, s, pr, strat)
	if err != nil {
		return err
	}
	rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
	if err != nil {
		return err
	}
	want, err := SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, s.topK, SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: s.blk, Causal: s.causal, Workers: 2})
	if err != nil {
		return err
	}
	if err := comparePrefill(s, pr, c.Size(), sh, res, want); err != nil {
		return fmt.Errorf("%v %v on rank %d of %d: %w", s, strat, c.Rank(), c.Size(), err)
	}
	return cpCheckStats(s, pr, c, st, strat)
}

// cpCheckStats checks that exactly the selected remote blocks moved: the
// bytes fetched from each peer are those of the distinct blocks of that
// peer that the rank's queries selected and can see (recounted here from
// q2k), so a sparse selection never moves a peer's whole share; and the
// forced strategy, or auto's cheaper one, was used.
func cpCheckStats(s sparseSpec, pr *sparseProblem, c comm.Comm, st *CPPrefillStats, strat CPStrategy) error {
	cuQ, cuK := validate.Int32s(pr.cuQ), validate.Int32s(pr.cuK)
	sh, _ := CPPrefillShard(cuQ, cuK, s.blk, c.Size(), c.Rank())
	q2k, totalQ := validate.Int32s(pr.q2k), int(cuQ[len(cuQ)-1])
	want := make([]int64, c.Size())
	seen := map[[2]int]bool{}
	e := int64(s.hkv * s.d * int(pr.k.Dtype().Size()) * 2)
	for b := range sh.QueryBegin {
		lq, lk := int(cuQ[b+1]-cuQ[b]), int(cuK[b+1]-cuK[b])
		nb := (lk + s.blk - 1) / s.blk
		for i := sh.QueryBegin[b]; i < sh.QueryEnd[b]; i++ {
			for h := 0; h < s.hkv; h++ {
				for _, j := range q2k[(h*totalQ+int(cuQ[b])+i)*s.topK:][:s.topK] {
					owner := cpOwner(nb, c.Size(), int(j))
					if j < 0 || owner == c.Rank() || seen[[2]int{b, int(j)}] || (s.causal && int(j)*s.blk > lk-lq+i) {
						continue
					}
					seen[[2]int{b, int(j)}] = true
					want[owner] += int64(min(s.blk, lk-int(j)*s.blk)) * e
				}
			}
		}
	}
	for peer, ps := range st.Peers {
		if strat != CPAuto && ps.Blocks > 0 && ps.Strategy != strat {
			return fmt.Errorf("rank %d, peer %d: strategy %v, forced %v", c.Rank(), peer, ps.Strategy, strat)
		}
		if strat == CPAuto && ps.Blocks > 0 && (ps.Strategy == CPFetchKV) != (ps.CostFetch <= ps.CostSend) {
			return fmt.Errorf("rank %d, peer %d: auto chose %v with costs fetch %d, send %d", c.Rank(), peer, ps.Strategy, ps.CostFetch, ps.CostSend)
		}
		if ps.Strategy == CPFetchKV && ps.Fetched != want[peer] {
			return fmt.Errorf("rank %d fetched %d bytes from rank %d, its selected blocks hold %d", c.Rank(), ps.Fetched, peer, want[peer])
		}
	}
	return nil
}

func TestCPSparsePrefillLocal(t *testing.T) {
	for _, s := range cpPrefillSpecs() {
		for _, p := range []int{1, 2, 3, 4} {
			for _, strat := range []CPStrategy{CPAuto, CPFetchKV, CPSendQueries} {
				cs, _ := comm.NewLocal(p, 0)
				for r, err := range comm.Each(cs, func(c comm.Comm) error { return checkCPPrefill(c, s, strat) }) {
					if err != nil {
						t.Errorf("P=%d rank %d: %v", p, r, err)
					}
				}
			}
		}
	}
}

// The comparison fails when a peer's contribution is dropped: rank 0's
// result computed as if it were alone (its own keys only).
func TestCPSparsePrefillCheckCatchesMissingPeer(t *testing.T) {
	s := cpPrefillSpecs()[0]
	s.causal = false
	pr := buildSparse(s)
	sh, q, k, v, q2k := cpRankInputs(s, pr, 2, 0)
	// Selections of rank 1's blocks dropped: rank 0 alone.
	sel := slices.Clone(validate.Int32s(q2k))
	cuQ, cuK := validate.Int32s(pr.cuQ), validate.Int32s(pr.cuK)
	nq := sh.Queries()
	ql := 0
	for b := range sh.QueryBegin {
		nb := (int(cuK[b+1]-cuK[b]) + s.blk - 1) / s.blk
		for i := sh.QueryBegin[b]; i < sh.QueryEnd[b]; i, ql = i+1, ql+1 {
			for h := 0; h < s.hkv; h++ {
				for t := 0; t < s.topK; t++ {
					if j := sel[(h*nq+ql)*s.topK+t]; j >= 0 && cpOwner(nb, 2, int(j)) != 0 {
						sel[(h*nq+ql)*s.topK+t] = -1
					}
				}
			}
		}
	}
	_ = cuQ
	cs, _ := comm.NewLocal(2, 0)
	errs := comm.Each(cs, func(c comm.Comm) error {
		if c.Rank() == 1 {
			_, q1, k1, v1, s1 := cpRankInputs(s, pr, 2, 1)
			_, _, err := ContextParallelPrefillFunc(c, q1, k1, v1, s1, CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: s.blk})
			return err
		}
		res, _, err := ContextParallelPrefillFunc(c, q, k, v, tensor.New(tensor.WithShape(s.hkv, nq, s.topK), tensor.WithBacking(sel)),
			CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: s.blk})
		if err != nil {
			return err
		}
		rp, qi, _ := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
		want, err := SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, s.topK, SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: s.blk})
		if err != nil {
			return err
		}
		if comparePrefill(s, pr, 2, sh, res, want) == nil {
			return errors.New("a result without rank 1's blocks passed the comparison")
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestCPSparsePrefillErrors(t *testing.T) {
	s := cpPrefillSpecs()[0]
	pr := buildSparse(s)
	cuQ, cuK := validate.Int32s(pr.cuQ), validate.Int32s(pr.cuK)
	// Ranks disagreeing on the batch, or a rank with a bad selection: an
	// error on every rank.
	cs, _ := comm.NewLocal(2, 0)
	errs := comm.Each(cs, func(c comm.Comm) error {
		_, q, k, v, q2k := cpRankInputs(s, pr, 2, c.Rank())
		args := CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: s.blk, Causal: s.causal}
		if c.Rank() == 1 {
			args.Causal = !s.causal
		}
		_, _, err := ContextParallelPrefillFunc(c, q, k, v, q2k, args)
		return err
	})
	for r, err := range errs {
		var me *comm.MismatchError
		if !errors.As(err, &me) || err.Error() != errs[0].Error() {
			t.Errorf("rank %d, causal differing: got %v", r, err)
		}
	}
	cs, _ = comm.NewLocal(2, 0)
	errs = comm.Each(cs, func(c comm.Comm) error {
		_, q, k, v, q2k := cpRankInputs(s, pr, 2, c.Rank())
		if c.Rank() == 1 {
			sel := slices.Clone(validate.Int32s(q2k))
			sel[5] = 99
			q2k = tensor.New(tensor.WithShape(q2k.Shape()...), tensor.WithBacking(sel))
		}
		_, _, err := ContextParallelPrefillFunc(c, q, k, v, q2k, CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: s.blk, Causal: s.causal})
		return err
	})
	var ae *ArgError
	var me *comm.MismatchError
	if !errors.As(errs[1], &ae) || ae.Arg != "q2k_indices[0][1][1]" {
		t.Errorf("rank 1 with block 99: got %v", errs[1])
	}
	if !errors.As(errs[0], &me) {
		t.Errorf("rank 0 beside rank 1's bad input: got %v", errs[0])
	}
	// Argument errors name the argument.
	cs, _ = comm.NewLocal(1, 0)
	_, q, k, v, q2k := cpRankInputs(s, pr, 1, 0)
	for _, tc := range []struct {
		q, k, v, q2k tensor.Tensor
		args         CPPrefillArgs
		arg          string
	}{
		{q, k, v, q2k, CPPrefillArgs{CuSeqlensQ: cuQ[:1], CuSeqlensK: cuK[:1]}, "cu_seqlens_q"},
		{q, k, v, q2k, CPPrefillArgs{CuSeqlensQ: []int32{0, 500, 700}, CuSeqlensK: cuK, BlkKV: s.blk}, "cu_seqlens_q (sequence 0)"},
		{q, k, v, q2k, CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: 256}, "blk_kv"},
		{q, k, v, q2k, CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: s.blk, Strategy: 7}, "strategy"},
		{k, k, v, q2k, CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: s.blk}, "q"},
		{q, q, v, q2k, CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: s.blk}, "k"},
		{q, k, q, q2k, CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: s.blk}, "v"},
		{q, k, v, nil, CPPrefillArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: s.blk}, "q2k_indices"},
	} {
		_, _, err := ContextParallelPrefillFunc(cs[0], tc.q, tc.k, tc.v, tc.q2k, tc.args)
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("got %v, want an ArgError naming %s", err, tc.arg)
		}
	}
	if _, _, err := ContextParallelPrefillFunc(nil, q, k, v, q2k, CPPrefillArgs{}); err == nil {
		t.Error("nil comm: no error")
	}
	if _, err := CPPrefillShard(cuQ, cuK, 64, 2, 2); err == nil {
		t.Error("CPPrefillShard rank 2 of 2: no error")
	}
}

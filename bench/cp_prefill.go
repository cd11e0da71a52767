package main

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// cpPrefillProb is one causal sequence of the suite's prefill shape with
// its random selection (causalQ2K), and this rank's share of it.
type cpPrefillProb struct {
	s          cpShapes
	shape      string
	q, k, v    *tensor.Dense
	q2k        []int32
	cu         []int32
	lq, lk, lv *tensor.Dense // this rank's queries and keys
	lsel       *tensor.Dense // this rank's queries' selection [Hkv, nq, topK]
	shardErr   error
	single     func() error // rank 0: the single-process prefill
}

func newCPPrefillProb(c comm.Comm, s cpShapes) (*cpPrefillProb, error) {
	T := s.prefillLen
	pf := &cpPrefillProb{s: s, cu: []int32{0, int32(T)},
		shape: fmt.Sprintf("T%d-hq%d-hkv%d-d%d-blk%d-topk%d-bf16", T, s.hq, s.hkv, s.d, s.blk, s.topK)}
	pf.q = bf16Tensor(21, T, s.hq, s.d)
	pf.k = bf16Tensor(22, T, s.hkv, s.d)
	pf.v = bf16Tensor(23, T, s.hkv, s.d)
	var err error
	if pf.q2k, _, err = causalQ2K(T, s.hkv, s.topK, s.blk, 24); err != nil {
		return nil, err
	}
	if c.Rank() == 0 {
		out := tensor.New(tensor.WithShape(T, s.hq, s.d), tensor.Of(op.BFloat16))
		lse := tensor.New(tensor.WithShape(T, s.hq), tensor.Of(tensor.Float32))
		cu := int32Tensor(pf.cu, 2)
		q2k := int32Tensor(pf.q2k, s.hkv, T, s.topK)
		pf.single = func() error {
			rp, qi, err := op.K2QCSRFunc(q2k, cu, cu, s.blk)
			if err != nil {
				return err
			}
			_, err = op.SparseAttentionFunc(pf.q, pf.k, pf.v, rp, qi, s.topK, op.SparseArgs{CuSeqlensQ: cu, CuSeqlensK: cu,
				BlkKV: s.blk, Causal: true, Workers: cpOpts.workers, Out: out, OutLSE: lse})
			return err
		}
	}
	sh, err := op.CPPrefillShard(pf.cu, pf.cu, s.blk, c.Size(), c.Rank())
	if err != nil {
		pf.shardErr = err
		return pf, nil
	}
	q0, q1, k0, k1 := sh.QueryBegin[0], sh.QueryEnd[0], sh.KeyBegin[0], sh.KeyEnd[0]
	rows := func(t *tensor.Dense, a, b, width int) *tensor.Dense {
		d := t.Data().([]lowp.BFloat16)
		return tensor.New(tensor.WithShape(b-a, t.Shape()[1], t.Shape()[2]), tensor.WithBacking(d[a*width:b*width]))
	}
	pf.lq = rows(pf.q, q0, q1, s.hq*s.d)
	pf.lk, pf.lv = rows(pf.k, k0, k1, s.hkv*s.d), rows(pf.v, k0, k1, s.hkv*s.d)
	sel := make([]int32, 0, s.hkv*(q1-q0)*s.topK)
	for h := 0; h < s.hkv; h++ {
		sel = append(sel, pf.q2k[(h*T+q0)*s.topK:(h*T+q1)*s.topK]...)
	}
	pf.lsel = int32Tensor(sel, s.hkv, q1-q0, s.topK)
	return pf, nil
}

// run times ContextParallelPrefillFunc with the strategy st on every rank.
func (pf *cpPrefillProb) run(c comm.Comm, st op.CPStrategy, single cpTime) (cpRow, error) {
	row := cpRow{kind: "cp-prefill", shape: pf.shape, strategy: st.String(), single: single}
	if pf.shardErr != nil {
		return row, pf.shardErr
	}
	args := op.CPPrefillArgs{CuSeqlensQ: pf.cu, CuSeqlensK: pf.cu, BlkKV: pf.s.blk, Causal: true, Workers: cpOpts.workers, Strategy: st}
	var stats *op.CPPrefillStats
	call := func() error {
		var err error
		_, stats, err = op.ContextParallelPrefillFunc(c, pf.lq, pf.lk, pf.lv, pf.lsel, args)
		return err
	}
	// The bytes are the same on every call: the last call's.
	recv := func() int64 {
		var n int64
		for _, ps := range stats.Peers {
			n += ps.BytesReceived
		}
		return n
	}
	return cpTimed(c, row, call, recv)
}

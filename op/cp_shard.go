package op

import (
	"fmt"

	"github.com/sparseattn/msa/op/internal/validate"
)

// CPShard is the part of a batch that one rank holds in context-parallel
// sparse prefill. Each sequence's key blocks of BlkKV tokens are cut into
// Size contiguous runs, run r belongs to rank r: its keys are the tokens
// KeyBegin[b] .. KeyEnd[b] of sequence b (whole blocks, the last one
// possibly short), its queries those that sit at these key positions
// (bottom-right alignment: sequence-local query i sits at position
// seqlen_k - seqlen_q + i), QueryBegin[b] .. QueryEnd[b]. A sequence with
// fewer blocks than ranks leaves some ranks empty.
type CPShard struct {
	KeyBegin, KeyEnd     []int // sequence-local key tokens, per sequence
	QueryBegin, QueryEnd []int // sequence-local query indices, per sequence
}

// Keys is the number of key tokens the rank holds (the rows of its k, v).
func (s *CPShard) Keys() int { return sumRanges(s.KeyBegin, s.KeyEnd) }

// Queries is the number of queries the rank holds (the rows of its q).
func (s *CPShard) Queries() int { return sumRanges(s.QueryBegin, s.QueryEnd) }

func sumRanges(a, b []int) int {
	n := 0
	for i := range a {
		n += b[i] - a[i]
	}
	return n
}

// CPPrefillShard returns what rank rank of ranks holds of the batch
// described by cu_seqlens_q and cu_seqlens_k (int32 prefix sums of length
// B+1, seqlen_q <= seqlen_k per sequence) with key blocks of blkKV tokens.
func CPPrefillShard(cuSeqlensQ, cuSeqlensK []int32, blkKV, ranks, rank int) (*CPShard, error) {
	const fn = "CPPrefillShard"
	c := &validate.Checker{Fn: fn}
	lq, lk := cpSeqlens(c, cuSeqlensQ, cuSeqlensK)
	c.Need(blkKV >= 1 && blkKV <= 128, "blk_kv", "1 <= blk_kv <= 128", blkKV)
	c.Need(ranks >= 1, "ranks", ">= 1", ranks)
	c.Need(rank >= 0 && rank < ranks, "rank", fmt.Sprintf("0 <= rank < ranks = %d", ranks), rank)
	if c.Err != nil {
		return nil, c.Err
	}
	return cpShard(lq, lk, blkKV, ranks, rank), nil
}

// cpSeqlens checks the global cu_seqlens pair and returns the lengths.
func cpSeqlens(c *validate.Checker, cuQ, cuK []int32) (lq, lk []int) {
	c.Need(len(cuQ) >= 2, "cu_seqlens_q", "int32 prefix sums of length B+1 >= 2", len(cuQ))
	c.Need(len(cuK) == len(cuQ), "cu_seqlens_k", fmt.Sprintf("length B+1 = %d (that of cu_seqlens_q)", len(cuQ)), len(cuK))
	if c.Err != nil {
		return nil, nil
	}
	c.Need(cuQ[0] == 0, "cu_seqlens_q", "a first element of 0", cuQ[0])
	c.Need(cuK[0] == 0, "cu_seqlens_k", "a first element of 0", cuK[0])
	B := len(cuQ) - 1
	lq, lk = make([]int, B), make([]int, B)
	for b := 0; b < B && c.Err == nil; b++ {
		lq[b], lk[b] = int(cuQ[b+1])-int(cuQ[b]), int(cuK[b+1])-int(cuK[b])
		c.Need(lq[b] >= 0, fmt.Sprintf("cu_seqlens_q[%d]", b+1), fmt.Sprintf(">= cu_seqlens_q[%d] = %d", b, cuQ[b]), cuQ[b+1])
		c.Need(lk[b] >= 0, fmt.Sprintf("cu_seqlens_k[%d]", b+1), fmt.Sprintf(">= cu_seqlens_k[%d] = %d", b, cuK[b]), cuK[b+1])
		c.Need(lq[b] <= lk[b], fmt.Sprintf("cu_seqlens_q (sequence %d)", b),
			fmt.Sprintf("seqlen_q <= seqlen_k = %d (queries sit at the last key positions)", lk[b]), lq[b])
	}
	return lq, lk
}

// cpBlockRange is the run of key blocks of a sequence of nb blocks that
// rank r of p owns: [r*nb/p, (r+1)*nb/p).
func cpBlockRange(nb, p, r int) (first, end int) { return r * nb / p, (r + 1) * nb / p }

// cpOwner is the rank that owns block j of a sequence of nb blocks.
func cpOwner(nb, p, j int) int {
	for r := p - 1; r > 0; r-- {
		if first, _ := cpBlockRange(nb, p, r); j >= first {
			return r
		}
	}
	return 0
}

func cpShard(lq, lk []int, blk, p, r int) *CPShard {
	B := len(lq)
	s := &CPShard{KeyBegin: make([]int, B), KeyEnd: make([]int, B), QueryBegin: make([]int, B), QueryEnd: make([]int, B)}
	for b := range lq {
		nb := (lk[b] + blk - 1) / blk
		first, end := cpBlockRange(nb, p, r)
		s.KeyBegin[b], s.KeyEnd[b] = min(lk[b], first*blk), min(lk[b], end*blk)
		off := lk[b] - lq[b]
		s.QueryBegin[b] = min(lq[b], max(0, s.KeyBegin[b]-off))
		s.QueryEnd[b] = min(lq[b], max(0, s.KeyEnd[b]-off))
	}
	return s
}

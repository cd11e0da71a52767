package decode

import (
	"encoding/binary"

	"github.com/sparseattn/msa/kernels/comm"
	"gorgonia.org/tensor"
)

// CPRows turns a rank's plan of seqlen_q > 1 query tokens per request
// (CPDecodeWrapper's) into the page table, seqused_k and (sparse)
// q2k_indices of a plan of seqlen_q = 1 rows that a DecodeWrapper runs
// unchanged: query i of request b becomes row b*seqlen_q+i (q's row order
// already) with the request's page-table row and, as its seqused_k, the
// number of this rank's keys that query sees. Query i of a request of L
// tokens sits at position L - seqlen_q + i; the rank's keys are the
// positions a .. a+n-1, where a is the tokens of the lower ranks (the
// ranks hold each sequence's tokens in rank order), so it sees
// clamp(L - seqlen_q + i + 1 - a, 0, n) of them: the causal mask of
// single-process decode, cut at the rank's share. One all-gather of every
// rank's seqused_k (4*B bytes) gives L and a. Sparse decode keeps in each
// row's selection only the blocks that start before the row's limit.
func CPRows(c comm.Comm, m *Meta) (pageTable, seqUsedK, q2k *tensor.Dense, err error) {
	B, sq := m.Batch, m.SeqlenQ
	send := make([]byte, 4*B)
	for b, n := range m.SeqUsed {
		binary.LittleEndian.PutUint32(send[4*b:], uint32(n))
	}
	recv := make([]byte, c.Size()*len(send))
	if err := c.AllGather(send, recv); err != nil {
		return nil, nil, nil, err
	}
	used := func(r, b int) int { return int(int32(binary.LittleEndian.Uint32(recv[(r*B+b)*4:]))) }
	pt := make([]int32, B*sq*m.Cols)
	su := make([]int32, B*sq)
	for b := 0; b < B; b++ {
		total, before := 0, 0
		for r := 0; r < c.Size(); r++ {
			total += used(r, b)
			if r < c.Rank() {
				before += used(r, b)
			}
		}
		n := int(m.SeqUsed[b])
		for i := 0; i < sq; i++ {
			row := b*sq + i
			copy(pt[row*m.Cols:(row+1)*m.Cols], m.PT[b*m.Cols:(b+1)*m.Cols])
			su[row] = int32(min(n, max(0, total-sq+i+1-before)))
		}
	}
	pageTable = tensor.New(tensor.WithShape(B*sq, m.Cols), tensor.WithBacking(pt))
	seqUsedK = tensor.New(tensor.WithShape(B*sq), tensor.WithBacking(su))
	if m.Q2K == nil {
		return pageTable, seqUsedK, nil, nil
	}
	sel := make([]int32, len(m.Q2K))
	for i, j := range m.Q2K {
		row := (i / m.TopK) % (B * sq) // q2k is [Hkv, B*seqlen_q, topK]
		sel[i] = -1
		if j >= 0 && int(j)*m.Blk < int(su[row]) {
			sel[i] = j
		}
	}
	return pageTable, seqUsedK, tensor.New(tensor.WithShape(m.Hkv, B*sq, m.TopK), tensor.WithBacking(sel)), nil
}

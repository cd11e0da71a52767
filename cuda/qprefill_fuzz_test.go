package cuda

import (
	"math/bits"
	"testing"
)

// FuzzQPlan: for random ragged batches (empty sequences included), head
// ratios, block sizes and selections, the query-major plan of either row
// tile (QTileRows, SM100QTileRows) validates; its tiles hold at most
// QTileTokensFor tokens each; and every (token, KV head) finds each block
// it selected in its tile's list with its own mask bit set, and its bit in
// no other block of the list.
func FuzzQPlan(f *testing.F) {
	f.Add(uint64(1), uint8(2), uint8(5), uint8(4), uint16(300), false)
	f.Add(uint64(7), uint8(3), uint8(0), uint8(7), uint16(900), true)
	f.Add(uint64(11), uint8(0), uint8(8), uint8(1), uint16(40), true)
	qpks := []int{1, 2, 3, 4, 8, 16, 32, 64, 128}
	f.Fuzz(func(t *testing.T, seed uint64, nb, qpk, topK uint8, maxLen uint16, causal bool) {
		B := 1 + int(nb)%4
		maxL := 1 + int(maxLen)%700
		cuQ, cuK := make([]int32, B+1), make([]int32, B+1)
		x := seed | 1
		next := func(n int) int { // xorshift: lengths of the sequences
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			return int(x % uint64(n))
		}
		for b := 0; b < B; b++ {
			sk := next(maxL + 1)
			sq := next(sk + 1)
			if !causal {
				sq = next(maxL + 1)
			}
			cuQ[b+1], cuK[b+1] = cuQ[b]+int32(sq), cuK[b]+int32(sk)
		}
		if cuQ[B] == 0 {
			return // no query: nothing to plan
		}
		c := &prefillCase{cuQ: cuQ, cuK: cuK, hkv: 1 + int(seed%2), qhpk: qpks[int(qpk)%len(qpks)], d: 64, topK: 1 + int(topK)%8,
			blk: 64 << (seed >> 8 % 2), causal: causal, qd: BF16, kvd: BF16, pd: F32, round: RoundBF16}
		genPrefill(t, c, seed)
		for _, rows := range []int{QTileRows, SM100QTileRows} {
			qp, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv, c.qhpk, rows)
			if err != nil {
				t.Fatalf("%d rows: %v", rows, err)
			}
			if err := qp.Validate(c.cuQ, seqKs(c), c.hkv, c.qhpk, c.blk); err != nil {
				t.Fatalf("%d rows: %v", rows, err)
			}
			if qp.TileRows != rows || qp.TileTokens != QTileTokensFor(rows, c.qhpk) || qp.TileTokens > 64 {
				t.Fatalf("%d rows: plan of %d rows, %d tokens per tile", rows, qp.TileRows, qp.TileTokens)
			}
			for tl := 0; tl < qp.NumTiles(); tl++ {
				f := qp.Tiles[tl*QTileFields:]
				h, first, n := int(f[1]), int(f[2]), int(f[3])
				lo, hi := int(qp.TilePtr[tl]), int(qp.TilePtr[tl+1])
				for k := 0; k < n; k++ {
					q := first + k
					sel := map[int32]bool{}
					for j := 0; j < c.topK; j++ {
						if blk := c.q2k[(h*c.totalQ+q)*c.topK+j]; blk >= 0 {
							sel[blk] = true
						}
					}
					found := 0
					for i := lo; i < hi; i++ {
						if on := qp.Masks[i]>>uint(k)&1 != 0; on != sel[qp.Blocks[i]] {
							t.Fatalf("%d rows: tile %d token %d (query %d, head %d): block %d mask bit %v, selected %v", rows, tl, k, q, h, qp.Blocks[i], on, sel[qp.Blocks[i]])
						} else if on {
							found++
						}
					}
					if found != len(sel) {
						t.Fatalf("%d rows: query %d head %d selected %d blocks, its tile lists %d", rows, q, h, len(sel), found)
					}
				}
				for i := lo; i < hi; i++ {
					if bits.Len64(qp.Masks[i]) > n {
						t.Fatalf("%d rows: tile %d block %d: mask %#x past its %d tokens", rows, tl, qp.Blocks[i], qp.Masks[i], n)
					}
				}
			}
		}
	})
}

package op

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestK2QCSRBlkKVOfProducer: K2QCSR read the block ids of a TopKBlocks
// node as blocks of its own blk_kv, whatever block size the BlockScores
// node before it scored: BlkKV(128) scores fed to K2QCSR(BlkKV(64)) ran and
// attended to the wrong keys, and the other direction failed at run time
// with "block id out of range" without naming blk_kv. K2QCSR (and
// DecodeAttention) now compare the block size of the node that produced
// q2k_indices at construction and name blk_kv and both values.
func TestK2QCSRBlkKVOfProducer(t *testing.T) {
	const totalQ, hq, hkv, d, keys = 16, 2, 1, 64, 500
	g := G.NewGraph()
	in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
	q := in("q", tensor.New(tensor.WithShape(totalQ, hq, d), tensor.WithBacking(make([]lowp.BFloat16, totalQ*hq*d))))
	k := in("k", tensor.New(tensor.WithShape(keys, hkv, d), tensor.WithBacking(make([]lowp.BFloat16, keys*hkv*d))))
	cuQ := in("cu_q", tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, totalQ})))
	cuK := in("cu_k", tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, keys})))
	for _, c := range []struct{ scored, csr int }{{128, 64}, {64, 128}, {64, 0}, {32, 32}, {0, 128}} {
		sc, err := BlockScores(q, k, cuQ, cuK, BlkKV(c.scored), MaxSeqlenK(keys))
		if err != nil {
			t.Fatal(err)
		}
		q2k, err := TopKBlocks(sc, TopK(2))
		if err != nil {
			t.Fatal(err)
		}
		_, err = K2QCSR(q2k, cuQ, cuK, BlkKV(c.csr), MaxSeqlenK(keys))
		scored, csr := orDefault(c.scored), orDefault(c.csr)
		if scored == csr {
			if err != nil {
				t.Fatalf("BlkKV %d -> %d: %v", c.scored, c.csr, err)
			}
			continue
		}
		wantArgErr(t, err, "blk_kv", "blk_kv")
		for _, s := range []string{"blk_kv = " + strconv.Itoa(scored), "blk_kv = " + strconv.Itoa(csr), "BlockScores"} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("BlkKV %d -> %d: error %v does not name %q", c.scored, c.csr, err, s)
			}
		}
	}

	// Eager: an id past the sequence's blocks names blk_kv and the count.
	ids := tensor.New(tensor.WithShape(1, 1, 2), tensor.WithBacking([]int32{0, 5}))
	cq := tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, 1}))
	ck := tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, keys}))
	_, _, err := K2QCSRFunc(ids, cq, ck, 128)
	wantArgErr(t, err, "q2k_indices", "blk_kv = 128")
	if !strings.Contains(err.Error(), "ceil(500 / 128) = 4") {
		t.Fatalf("error %v does not count the blocks", err)
	}
}

// orDefault is blk_kv with 0 meaning 128, as the prefill constructors read it.
func orDefault(blk int) int {
	if blk == 0 {
		return 128
	}
	return blk
}

// TestDecodeQ2KNamesBlkKV: a sparse-decode block id past the request's
// blocks names blk_kv and seqused_k, the two values the count comes from.
func TestDecodeQ2KNamesBlkKV(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	args := planArgs(s, pr).DecodeArgs
	args.BlkKV = 32
	totalQ := 2 * s.seqlenQ
	ids := make([]int32, s.hkv*totalQ)
	ids[0] = 3 // request 0 has seqused_k = 70: ceil(70 / 32) = 3 blocks
	q2k := tensor.New(tensor.WithShape(s.hkv, totalQ, 1), tensor.WithBacking(ids))
	_, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, q2k, args)
	wantArgErr(t, err, "q2k_indices[0, 0, 0]", "ceil(seqused_k = 70 / blk_kv = 32) blocks")
}

// TestDecodeAttentionBlkKVOfProducer: sparse decode over q2k_indices
// selected by TopKBlocks from BlockScores of another blk_kv is refused at
// construction, naming both values; the same block size is accepted.
func TestDecodeAttentionBlkKVOfProducer(t *testing.T) {
	s := misuseSpec() // B 2, seqlen_q 2, Hq 4, Hkv 2, D 64, page size 16
	pr := buildDecode(s)
	g := G.NewGraph()
	in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
	q, pt, su := in("q", pr.q), in("pt", pr.pt), in("su", pr.su)
	keys := tensor.New(tensor.WithShape(103, s.hkv, s.d), tensor.WithBacking(make([]lowp.BFloat16, 103*s.hkv*s.d)))
	cuQ := in("cu_q", tensor.New(tensor.WithShape(3), tensor.WithBacking([]int32{0, 2, 4})))
	cuK := in("cu_k", tensor.New(tensor.WithShape(3), tensor.WithBacking([]int32{0, 70, 103})))
	sched, err := DecodeSchedule(pt, su, Heads(s.hq, s.hkv), PageSize(s.pageSize), SeqlenQ(s.seqlenQ), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, blk := range []int{64, 16} {
		sc, err := BlockScores(q, in(fmt.Sprint("keys", blk), keys), cuQ, cuK, BlkKV(blk), MaxSeqlenK(70))
		if err != nil {
			t.Fatal(err)
		}
		q2k, err := TopKBlocks(sc, TopK(2))
		if err != nil {
			t.Fatal(err)
		}
		_, err = DecodeAttention(q, in(fmt.Sprint("k", blk), pr.k), in(fmt.Sprint("v", blk), pr.v), pt, su, sched, q2k)
		if blk == s.pageSize {
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		wantNames(t, err, "blk_kv", "blk_kv = 64", "blk_kv = 16")
	}
}

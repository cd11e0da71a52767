package op

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// graphValueLimit bounds the elements of the graph values a fuzzed graph
// may create before it is run: larger graphs (legal up to maxGraphValue)
// are only constructed.
const graphValueLimit = 1 << 20

// graphElems returns the elements of every node value of g (saturating).
func graphElems(g *G.ExprGraph) int {
	n := 0
	for _, nd := range g.AllNodes() {
		e := 1
		for _, x := range nd.Shape() {
			if x > 0 && e > math.MaxInt32/x {
				return math.MaxInt32
			}
			e *= max(x, 1)
		}
		n += e
		if n > math.MaxInt32 {
			return math.MaxInt32
		}
	}
	return n
}

// wantGraphError fails unless a graph construction or run error carries
// one of the package's error types.
func wantGraphError(t *testing.T, err error) {
	t.Helper()
	var ae *ArgError
	var ne *NotImplementedError
	var fe *ForwardOnlyError
	if errors.As(err, &ae) || errors.As(err, &ne) || errors.As(err, &fe) {
		return
	}
	// Gorgonia's VM wraps an op's error in a type without Unwrap: accept
	// the message of one of the package's errors.
	if m := err.Error(); !strings.Contains(m, ": expected ") && !strings.Contains(m, ": not implemented: ") {
		t.Fatalf("graph error %T %v carries no *ArgError / *NotImplementedError", err, err)
	}
}

// runGraph runs g on a TapeMachine under the allocation cap; it returns
// the run error.
func runGraph(t *testing.T, g *G.ExprGraph, in int) error {
	t.Helper()
	m := G.NewTapeMachine(g)
	defer m.Close()
	var err error
	alloc := allocDuring(func() { err = m.RunAll() })
	if c := allocCap(in + 4*graphElems(g)); alloc > c {
		t.Fatalf("graph run allocated %d bytes (cap %d)", alloc, c)
	}
	return err
}

// FuzzAPIGraph fuzzes the graph constructors' parameters (block sizes,
// max_seqlen_k, worker counts, qhead_per_kv, every scalar option, the
// paged options, decode configs) over small valid inputs. Construction
// returns an error or a node; a constructed graph of bounded size runs to
// an error or to the eager function's result, bit for bit.
func FuzzAPIGraph(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 3, 1, 1, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{1, 2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{2, 7, 1, 0, 0, 0, 8, 0, 0, 0, 1})
	f.Add([]byte{0, 9, 0, 1, 6, 4, 0, 7, 3, 0, 2, 1, 1, 5})
	f.Add([]byte{1, 4, 1, 0, 11, 0, 9, 0, 2, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		z := &fz{b: data}
		switch z.pick(3) {
		case 0:
			fuzzGraphPrefill(t, z)
		case 1:
			fuzzGraphDecode(t, z)
		default:
			fuzzGraphSelect(t, z)
		}
	})
}

func fuzzGraphPrefill(t *testing.T, z *fz) {
	s := sparseSpec{seed: uint64(z.u8()), seqQ: []int{z.pick(5), z.pick(5)}, seqK: []int{z.pick(260), z.pick(260)},
		hq: 4, hkv: 2, d: 64, topK: 1 + z.pick(3), blk: 128, causal: z.bit(), paged: z.bit(), qDt: "bf16", kvDt: "bf16",
		partial: tensor.Float32}
	pr := buildSparse(s)
	in := denseBytes(pr.q, pr.k, pr.v, pr.q2k, pr.cuQ, pr.cuK, pr.pageTable, pr.seqused)
	g := G.NewGraph()
	q, k, v := gnode(t, g, "q", pr.q), gnode(t, g, "k", pr.k), gnode(t, g, "v", pr.v)
	cuQ, cuK := gnode(t, g, "cu_q", pr.cuQ), gnode(t, g, "cu_k", pr.cuK)
	maxK := 1
	for _, n := range s.seqK {
		maxK = max(maxK, n)
	}
	blk := z.intArg(s.blk)
	effBlk := blk // the block size the CSR node declares
	if effBlk == 0 {
		effBlk = 128
	}
	csrTopK := s.topK
	maxSeqlenK := z.intArg(maxK)
	var csr *G.Node
	var err error
	var rp, qi *tensor.Dense
	alloc := allocDuring(func() {
		if z.bit() {
			csr, err = K2QCSR(gnode(t, g, "q2k", pr.q2k), cuQ, cuK, BlkKV(blk), MaxSeqlenK(maxSeqlenK))
			return
		}
		rp, qi, err = K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
		if err != nil {
			t.Fatal(err)
		}
		totalQ := z.intArg(len(pr.ref.q) / s.hq)
		csrTopK = z.intArg(s.topK)
		csr, err = PackK2QCSR(gnode(t, g, "rp", rp), gnode(t, g, "qi", qi), TotalQ(totalQ), TopK(csrTopK), BlkKV(blk))
	})
	if alloc > allocCap(in) {
		t.Fatalf("CSR node construction allocated %d bytes", alloc)
	}
	if err != nil {
		wantGraphError(t, err)
		return
	}
	workers := z.intArg(2)
	sched, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(z.intArg(s.hq/s.hkv)), Workers(workers))
	if err != nil {
		wantGraphError(t, err)
		return
	}
	scale := z.scalar(0)
	opts := []Option{SoftmaxScale(scale), Workers(workers)}
	args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: effBlk, SoftmaxScale: scale, Workers: workers,
		Causal: s.causal}
	if s.causal {
		opts = append(opts, Causal())
	}
	temp := 0.0
	if z.bit() {
		temp = z.scalar(2)
		opts = append(opts, Temperature(temp))
		args.Temperature, args.ReturnTemperatureLSE = temp, true
	}
	pd := []tensor.Dtype{{}, tensor.Float32, Float16, Float8E4M3FN, tensor.Int32}[z.pick(5)]
	opts = append(opts, PartialDtype(pd))
	args.PartialDtype = pd
	if s.paged {
		var su *G.Node
		if z.pick(3) > 0 {
			su = gnode(t, g, "su", pr.seqused)
			args.SeqUsedK = pr.seqused
		}
		pt := gnode(t, g, "pt", pr.pageTable)
		args.PageTable = pr.pageTable
		if z.pick(8) == 0 {
			pt = nil // Paged(nil, seqused): an error when seqused is given
		}
		opts = append(opts, Paged(pt, su))
	}
	out, err := SparseAttention(q, k, v, csr, sched, cuQ, cuK, opts...)
	if err != nil {
		wantGraphError(t, err)
		return
	}
	if !scaleOK(scale) || !temperatureOK(temp) {
		t.Fatalf("SparseAttention accepted scale %v, temperature %v", scale, temp)
	}
	var lse, tlse *G.Node
	if lse, err = LSE(out); err != nil {
		t.Fatal(err)
	}
	if args.ReturnTemperatureLSE {
		if tlse, err = TemperatureLSE(out); err != nil {
			t.Fatal(err)
		}
	}
	if graphElems(g) > graphValueLimit {
		return
	}
	if err := runGraph(t, g, in); err != nil {
		wantGraphError(t, err)
		return
	}
	if rp == nil {
		if rp, qi, err = K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, effBlk); err != nil {
			t.Fatalf("graph ran, K2QCSRFunc fails: %v", err)
		}
	}
	want, err := SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, csrTopK, args)
	if err != nil {
		t.Fatalf("graph ran, eager call fails: %v", err)
	}
	if !bytes.Equal(out.Value().(*tensor.Dense).Header.Raw, want.Out.Header.Raw) ||
		!bytes.Equal(lse.Value().(*tensor.Dense).Header.Raw, want.LSE.Header.Raw) {
		t.Fatal("graph output or LSE differs from the eager call")
	}
	if tlse != nil && !bytes.Equal(tlse.Value().(*tensor.Dense).Header.Raw, want.TemperatureLSE.Header.Raw) {
		t.Fatal("graph temperature LSE differs from the eager call")
	}
}

func fuzzGraphDecode(t *testing.T, z *fz) {
	s := decodeSpec{seed: uint64(z.u8()), seqused: []int{z.pick(70), z.pick(70)}, seqlenQ: 1 + z.pick(2), hq: 4, hkv: 2, d: 64,
		pageSize: []int{16, 5}[z.pick(2)], dt: "bf16", extraCols: z.pick(2), workers: 2}
	if z.bit() {
		s.topK, s.blk = 1+z.pick(2), 16
	}
	pr := buildDecode(s)
	in := denseBytes(pr.q, pr.k, pr.v, pr.pt, pr.su, pr.q2k)
	g := G.NewGraph()
	pt, su := gnode(t, g, "pt", pr.pt), gnode(t, g, "su", pr.su)
	seqlenQ, hq, hkv := z.intArg(s.seqlenQ), z.intArg(s.hq), z.intArg(s.hkv)
	pageSize, nw, fixed := z.intArg(s.pageSize), z.intArg(2), z.intArg(0)
	opts := []Option{SeqlenQ(seqlenQ), Heads(hq, hkv), PageSize(pageSize), Workers(nw), FixedSplitSize(fixed)}
	if z.bit() {
		opts = append(opts, DisableSplitKV())
	}
	var sched *G.Node
	var err error
	alloc := allocDuring(func() { sched, err = DecodeSchedule(pt, su, opts...) })
	if alloc > allocCap(in) {
		t.Fatalf("DecodeSchedule seqlen_q %d, heads %d/%d, page size %d, workers %d, fixed split %d allocated %d bytes",
			seqlenQ, hq, hkv, pageSize, nw, fixed, alloc)
	}
	if err != nil {
		wantGraphError(t, err)
		return
	}
	var q2k *G.Node
	if pr.q2k != nil {
		q2k = gnode(t, g, "q2k", pr.q2k)
	}
	blk, scale := z.intArg(s.blk), z.scalar(0)
	out, err := DecodeAttention(gnode(t, g, "q", pr.q), gnode(t, g, "k", pr.k), gnode(t, g, "v", pr.v), pt, su, sched, q2k, BlkKV(blk), SoftmaxScale(scale))
	if err != nil {
		wantGraphError(t, err)
		return
	}
	if !scaleOK(scale) {
		t.Fatalf("DecodeAttention accepted scale %v", scale)
	}
	if graphElems(g) > graphValueLimit {
		return
	}
	if err := runGraph(t, g, in); err != nil {
		wantGraphError(t, err)
		return
	}
	if blk != s.blk && s.topK > 0 && !(blk == 0 && s.blk == s.pageSize) {
		return // another block size selects other keys: error-or-result only
	}
	s.scale = scale
	checkDecode(t, s, pr, &Result{Out: out.Value().(*tensor.Dense), LSE: out.Op().(*decodeAttnOp).st.lse})
}

func fuzzGraphSelect(t *testing.T, z *fz) {
	s := sparseSpec{seed: uint64(z.u8()), seqQ: []int{z.pick(5), 1 + z.pick(5)}, seqK: []int{z.pick(300), 1 + z.pick(300)},
		hq: 4, hkv: 2, d: 64, topK: 1, blk: 128, qDt: []string{"bf16", "e4m3"}[z.pick(2)], kvDt: "bf16", partial: tensor.Float32}
	if s.qDt == "e4m3" {
		s.kvDt = "e4m3"
	}
	pr := buildSparse(s)
	in := denseBytes(pr.q, pr.k, pr.cuQ, pr.cuK)
	g := G.NewGraph()
	cfg := BlockScoreConfig{BlkKV: z.intArg(64), MaxSeqlenK: z.intArg(pr.k.Shape()[0]), Causal: z.bit(),
		SoftmaxScale: z.scalar(0), Reduce: HeadReduce(z.pick(3)), Workers: z.intArg(2)}
	cuQ, cuK := gnode(t, g, "cu_q", pr.cuQ), gnode(t, g, "cu_k", pr.cuK)
	var scores *G.Node
	var err error
	alloc := allocDuring(func() {
		scores, err = BlockScores(gnode(t, g, "q", pr.q), gnode(t, g, "k", pr.k), cuQ, cuK, scoreOptions(cfg)...)
	})
	if alloc > allocCap(in) {
		t.Fatalf("BlockScores %+v allocated %d bytes", cfg, alloc)
	}
	if err != nil {
		wantGraphError(t, err)
		return
	}
	if !scaleOK(cfg.SoftmaxScale) {
		t.Fatalf("BlockScores accepted scale %v", cfg.SoftmaxScale)
	}
	topK := z.intArg(2)
	tc := TopKConfig{KeepFirst: z.bit(), KeepLast: z.bit()}
	sel, err := TopKBlocks(scores, topKOptions(topK, tc)...)
	if err != nil {
		wantGraphError(t, err)
		return
	}
	if graphElems(g) > graphValueLimit {
		return
	}
	if err := runGraph(t, g, in); err != nil {
		wantGraphError(t, err)
		return
	}
	want, err := BlockScoresFunc(pr.q, pr.k, pr.cuQ, pr.cuK, cfg)
	if err != nil {
		t.Fatalf("graph ran, BlockScoresFunc fails: %v", err)
	}
	if !bytes.Equal(scores.Value().(*tensor.Dense).Header.Raw, want.Header.Raw) {
		t.Fatal("graph scores differ from BlockScoresFunc")
	}
	wantSel, err := TopKBlocksFunc(want, topK, tc)
	if err != nil {
		t.Fatalf("graph ran, TopKBlocksFunc fails: %v", err)
	}
	if !bytes.Equal(sel.Value().(*tensor.Dense).Header.Raw, wantSel.Header.Raw) {
		t.Fatal("graph selection differs from TopKBlocksFunc")
	}
}

// scoreOptions returns the BlockScores options equivalent to an eager
// BlockScoreConfig.
func scoreOptions(c BlockScoreConfig) []Option {
	opts := []Option{BlkKV(c.BlkKV), MaxSeqlenK(c.MaxSeqlenK), SoftmaxScale(c.SoftmaxScale), Reduce(c.Reduce), Workers(c.Workers)}
	if c.Causal {
		opts = append(opts, Causal())
	}
	return opts
}

// topKOptions returns the TopKBlocks options equivalent to an eager call.
func topKOptions(topK int, c TopKConfig) []Option {
	opts := []Option{TopK(topK)}
	if c.KeepFirst {
		opts = append(opts, KeepFirst())
	}
	if c.KeepLast {
		opts = append(opts, KeepLast())
	}
	return opts
}

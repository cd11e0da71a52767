package op

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// cpLocalPages is rank r of p's share of a decode problem: each sequence's
// pages are cut into p contiguous runs, rank r holds run r. It returns the
// rank's page table (rows with no page keep a valid page id, unused) and
// seqused_k (the tokens of its pages).
func cpLocalPages(s decodeSpec, pr *decodeProblem, p, r int) (pt, su *tensor.Dense) {
	B := len(s.seqused)
	first, count := make([]int, B), make([]int, B)
	cols := 1
	for b, n := range s.seqused {
		np := (n + s.pageSize - 1) / s.pageSize
		first[b] = r * np / p
		count[b] = (r+1)*np/p - first[b]
		cols = max(cols, count[b])
	}
	ptv, suv := make([]int32, B*cols), make([]int32, B)
	for b, n := range s.seqused {
		for j := 0; j < cols; j++ {
			ptv[b*cols+j] = pr.ptv[b*pr.cols] // a valid page, never read
			if j < count[b] {
				ptv[b*cols+j] = pr.ptv[b*pr.cols+first[b]+j]
			}
		}
		lo, hi := first[b]*s.pageSize, min(n, (first[b]+count[b])*s.pageSize)
		suv[b] = int32(max(0, hi-lo))
	}
	return tensor.New(tensor.WithShape(B, cols), tensor.WithBacking(ptv)), tensor.New(tensor.WithShape(B), tensor.WithBacking(suv))
}

// cpLocalQ2K is rank r of p's q2k_indices for sparse decode (nil for
// dense): the blocks of its pages (blk_kv equals the page size), numbered
// from its first page; blocks of other ranks are -1.
func cpLocalQ2K(s decodeSpec, pr *decodeProblem, p, r int) *tensor.Dense {
	if pr.q2k == nil {
		return nil
	}
	if s.blk != s.pageSize {
		panic("cpLocalQ2K: blk_kv must equal the page size")
	}
	totalQ := len(s.seqused) * s.seqlenQ
	sel := make([]int32, len(pr.q2kv))
	for h := 0; h < s.hkv; h++ {
		for gq := 0; gq < totalQ; gq++ {
			np := (s.seqused[gq/s.seqlenQ] + s.pageSize - 1) / s.pageSize
			first, end := r*np/p, (r+1)*np/p
			for t := 0; t < s.topK; t++ {
				i := (h*totalQ+gq)*s.topK + t
				sel[i] = -1
				if j := int(pr.q2kv[i]); j >= first && j < end {
					sel[i] = int32(j - first)
				}
			}
		}
	}
	return tensor.New(tensor.WithShape(s.hkv, totalQ, s.topK), tensor.WithBacking(sel))
}

// cpRef is single-process decode of the whole cache.
func cpRef(s decodeSpec, pr *decodeProblem) (*Result, error) {
	var q2k tensor.Tensor
	if pr.q2k != nil {
		q2k = pr.q2k
	}
	return DecodeAttentionFunc(pr.q, pr.k, pr.v, q2k, decodeArgs(s, pr))
}

// cpDecodeRank runs context-parallel decode of s on rank c (two calls,
// which must agree bit for bit) and returns O and LSE.
func cpDecodeRank(c comm.Comm, s decodeSpec, pr *decodeProblem) (o, lse *tensor.Dense, err error) {
	pt, su := cpLocalPages(s, pr, c.Size(), c.Rank())
	w, err := NewCPDecodeWrapper(s.pageSize, c)
	if err != nil {
		return nil, nil, err
	}
	defer w.Close()
	args := PlanArgs{DecodeArgs: DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: s.seqlenQ, Workers: s.workers,
		FixedSplitSize: s.fixedSplit, BlkKV: s.blk}, NumQOHeads: s.hq, NumKVHeads: s.hkv, HeadDim: s.d}
	var q2k tensor.Tensor
	if t := cpLocalQ2K(s, pr, c.Size(), c.Rank()); t != nil {
		q2k = t
	}
	if err := w.Plan(args, q2k); err != nil {
		return nil, nil, err
	}
	rows := len(s.seqused) * s.seqlenQ
	outDtype := BFloat16
	if isFloat32(pr.q) {
		outDtype = tensor.Float32
	}
	var outs [2]*tensor.Dense
	for i := range outs {
		o = tensor.New(tensor.WithShape(rows, s.hq, s.d), tensor.Of(outDtype))
		lse = tensor.New(tensor.WithShape(rows, s.hq), tensor.Of(tensor.Float32))
		if err := w.RunInto(pr.q, pr.k, pr.v, 0, o, lse); err != nil {
			return nil, nil, err
		}
		outs[i] = o
	}
	if string(outs[0].Header.Raw) != string(outs[1].Header.Raw) {
		return nil, nil, fmt.Errorf("rank %d: two runs differ", c.Rank())
	}
	return o, lse, nil
}

// cpDecodeTol bounds |CP - single-process| per element of O. Both paths
// compute the same keys' softmax in float32 with different groupings:
// single-process decode rounds its float32 merge to BF16 once (unit
// roundoff u = 2^-8 of values at most max|V|); context-parallel decode
// rounds each rank's partial to BF16 (u*max|V| together, the weights
// summing to 1) and the merged result again (u*max|V|): 3u*max|V| in all.
// The float32 sums over n keys in different orders add at most
// 2*n*2^-24*max|V|, and FP8 K/V round P to e4m3 against different running
// maxima in the two groupings (relative 2^-4 per weight, u_e4m3): 2*2^-4*max|V|;
// tiers that run P.V in bf16 (tile.BF16Products) round P to bf16 the same
// way: 2*2^-8*max|V|.
func cpDecodeTol(s decodeSpec, maxV float64) float64 {
	n := 0
	for _, x := range s.seqused {
		n = max(n, x)
	}
	t := (3*0x1p-8 + 2*float64(n)*0x1p-24) * maxV
	if s.dt == "e4m3" {
		t += 2 * 0x1p-4 * maxV
	}
	if tile.BF16Products() {
		t += 2 * 0x1p-8 * maxV
	}
	return t
}

// compareDecode returns the first element where got differs from want by
// more than the CP tolerance (O) or the LSE tolerance: the LSEs are float32
// sums of e^x over the same n keys in different orders and merges of
// float32 LSEs, within 2*(n + 4)*2^-24 in ln S plus the roundings of
// |LSE| (4 * 2^-24 * |LSE|).
func compareDecode(s decodeSpec, maxV float64, got, gotLSE, want, wantLSE *tensor.Dense) error {
	g, w := validate.Backing[lowp.BFloat16](got), validate.Backing[lowp.BFloat16](want)
	tol := cpDecodeTol(s, maxV)
	for i := range w {
		if d := math.Abs(float64(g[i].Float32() - w[i].Float32())); !(d <= tol) {
			return fmt.Errorf("O[%d] = %v, single-process %v (diff %g > %g)", i, g[i].Float32(), w[i].Float32(), d, tol)
		}
	}
	n := 0
	for _, x := range s.seqused {
		n = max(n, x)
	}
	gl, wl := validate.Backing[float32](gotLSE), validate.Backing[float32](wantLSE)
	for i := range wl {
		if math.IsInf(float64(wl[i]), -1) && math.IsInf(float64(gl[i]), -1) {
			continue
		}
		lt := 2*float64(n+4)*0x1p-24 + 4*0x1p-24*math.Abs(float64(wl[i]))
		if d := math.Abs(float64(gl[i] - wl[i])); !(d <= lt) {
			return fmt.Errorf("LSE[%d] = %v, single-process %v (diff %g > %g)", i, gl[i], wl[i], d, lt)
		}
	}
	return nil
}

// checkCPDecode runs s context-parallel on rank c and compares it with
// single-process decode over the whole cache; the in-process tests and the
// MPI run share it.
func checkCPDecode(c comm.Comm, s decodeSpec) error {
	pr := buildDecode(s)
	o, lse, err := cpDecodeRank(c, s, pr)
	if err != nil {
		return err
	}
	ref, err := cpRef(s, pr)
	if err != nil {
		return err
	}
	if err := compareDecode(s, pr.maxV, o, lse, ref.Out, ref.LSE); err != nil {
		return fmt.Errorf("%v on rank %d of %d: %w", s, c.Rank(), c.Size(), err)
	}
	// Every rank holds the same bits.
	return comm.Agree(c, "the merged decode output", append(append([]byte(nil), o.Header.Raw...), lse.Header.Raw...))
}

// cpDecodeSpecs are the cases: dense and sparse, ragged lengths (one sequence shorter than
// the rank count in pages, so some ranks hold none of it), GQA, BF16 and
// FP8, split-KV on and off within each rank.
func cpDecodeSpecs() []decodeSpec {
	return []decodeSpec{
		{seed: 1, seqused: []int{300, 17, 1000, 5}, seqlenQ: 1, hq: 8, hkv: 2, d: 64, pageSize: 16, dt: "bf16", workers: 2},
		{seed: 2, seqused: []int{257, 1024}, seqlenQ: 1, hq: 4, hkv: 4, d: 128, pageSize: 32, dt: "e4m3", workers: 2, fixedSplit: 4},
		// Sparse decode: each rank takes the selected blocks of its pages.
		{seed: 3, seqused: []int{700, 64, 333}, seqlenQ: 1, hq: 4, hkv: 2, d: 64, pageSize: 32, dt: "bf16", workers: 2, topK: 6, blk: 32},
	}
}

// cpDecodeMultiSpecs are cases of seqlen_q > 1 (the wrapper only: the
// graph's ContextParallelMerge takes seqlen_q = 1): ragged lengths where
// a rank's share ends inside the query tokens' positions (17 tokens in
// 16-token pages on 4 ranks: the last rank holds one token), so the causal
// limits cut a rank's keys; dense and sparse.
func cpDecodeMultiSpecs() []decodeSpec {
	return []decodeSpec{
		{seed: 4, seqused: []int{300, 17, 1000, 5}, seqlenQ: 4, hq: 8, hkv: 2, d: 64, pageSize: 16, dt: "bf16", workers: 2},
		{seed: 5, seqused: []int{700, 64, 333}, seqlenQ: 3, hq: 4, hkv: 2, d: 64, pageSize: 32, dt: "bf16", workers: 2, topK: 6, blk: 32},
	}
}

func TestCPDecodeLocal(t *testing.T) {
	for _, s := range append(cpDecodeSpecs(), cpDecodeMultiSpecs()...) {
		for _, p := range []int{1, 2, 3, 4} {
			cs, _ := comm.NewLocal(p, 0)
			for r, err := range comm.Each(cs, func(c comm.Comm) error { return checkCPDecode(c, s) }) {
				if err != nil {
					t.Errorf("P=%d rank %d: %v", p, r, err)
				}
			}
		}
	}
}

// The comparison fails when a rank's partial is left out of the merge
// (rank 0's own partial against the whole cache).
func TestCPDecodeCheckCatchesMissingRank(t *testing.T) {
	s := cpDecodeSpecs()[0]
	pr := buildDecode(s)
	cs, _ := comm.NewLocal(1, 0)
	pt, su := cpLocalPages(s, pr, 2, 0)
	w, _ := NewCPDecodeWrapper(s.pageSize, cs[0])
	defer w.Close()
	if err := w.Plan(PlanArgs{DecodeArgs: DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: 1, Workers: 2},
		NumQOHeads: s.hq, NumKVHeads: s.hkv, HeadDim: s.d}, nil); err != nil {
		t.Fatal(err)
	}
	o := tensor.New(tensor.WithShape(len(s.seqused), s.hq, s.d), tensor.Of(BFloat16))
	lse := tensor.New(tensor.WithShape(len(s.seqused), s.hq), tensor.Of(tensor.Float32))
	if err := w.RunInto(pr.q, pr.k, pr.v, 0, o, lse); err != nil {
		t.Fatal(err)
	}
	ref, _ := DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, decodeArgs(s, pr))
	if compareDecode(s, pr.maxV, o, lse, ref.Out, ref.LSE) == nil {
		t.Fatal("half of the context passed the comparison with the whole")
	}
}

// Ranks that plan different shapes, or a rank whose plan fails, get an
// error on every rank; a rank failing in RunInto aborts the others.
func TestCPDecodeErrors(t *testing.T) {
	s := cpDecodeSpecs()[0]
	pr := buildDecode(s)
	plan := func(c comm.Comm, hq int, su *tensor.Dense) error {
		pt, lsu := cpLocalPages(s, pr, c.Size(), c.Rank())
		if su != nil {
			lsu = su
		}
		w, _ := NewCPDecodeWrapper(s.pageSize, c)
		defer w.Close()
		return w.Plan(PlanArgs{DecodeArgs: DecodeArgs{PageTable: pt, SeqUsedK: lsu, SeqlenQ: 1, Workers: 2},
			NumQOHeads: hq, NumKVHeads: s.hkv, HeadDim: s.d}, nil)
	}
	cs, _ := comm.NewLocal(3, 0)
	errs := comm.Each(cs, func(c comm.Comm) error {
		hq := s.hq
		if c.Rank() == 2 {
			hq = 2 * s.hq
		}
		return plan(c, hq, nil)
	})
	for r, err := range errs {
		var me *comm.MismatchError
		if !errors.As(err, &me) || fmt.Sprint(me.Groups) != "[[0 1] [2]]" || err.Error() != errs[0].Error() {
			t.Errorf("rank %d, Hq differing on rank 2: got %v", r, err)
		}
	}
	cs, _ = comm.NewLocal(2, 0)
	errs = comm.Each(cs, func(c comm.Comm) error {
		if c.Rank() == 1 {
			return plan(c, s.hq, tensor.New(tensor.WithShape(4), tensor.WithBacking([]int32{-1, 0, 0, 0})))
		}
		return plan(c, s.hq, nil)
	})
	var ae *ArgError
	var me *comm.MismatchError
	if !errors.As(errs[1], &ae) || !strings.Contains(errs[1].Error(), "seqused_k") {
		t.Errorf("bad seqused_k on rank 1: got %v", errs[1])
	}
	if !errors.As(errs[0], &me) {
		t.Errorf("rank 0 beside a failed plan: got %v", errs[0])
	}
	// Ranks that disagree on seqlen_q (each plan valid on its own).
	cs, _ = comm.NewLocal(2, 0)
	errs = comm.Each(cs, func(c comm.Comm) error {
		pt, su := cpLocalPages(s, pr, 2, c.Rank())
		w, _ := NewCPDecodeWrapper(s.pageSize, c)
		defer w.Close()
		return w.Plan(PlanArgs{DecodeArgs: DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: 1 + c.Rank(), Workers: 2},
			NumQOHeads: s.hq, NumKVHeads: s.hkv, HeadDim: s.d}, nil)
	})
	for r, err := range errs {
		if !errors.As(err, &me) || err.Error() != errs[0].Error() || !strings.Contains(err.Error(), "seqlen_q") {
			t.Errorf("rank %d, seqlen_q 1 and 2: got %v, want the same MismatchError on both", r, err)
		}
	}
	cs, _ = comm.NewLocal(2, 0)
	errs = comm.Each(cs, func(c comm.Comm) error {
		pt, su := cpLocalPages(s, pr, 2, c.Rank())
		w, _ := NewCPDecodeWrapper(s.pageSize, c)
		defer w.Close()
		if err := w.Plan(PlanArgs{DecodeArgs: DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: 1, Workers: 2},
			NumQOHeads: s.hq, NumKVHeads: s.hkv, HeadDim: s.d}, nil); err != nil {
			return err
		}
		o := tensor.New(tensor.WithShape(len(s.seqused), s.hq, s.d), tensor.Of(BFloat16))
		if c.Rank() == 1 {
			o = tensor.New(tensor.WithShape(len(s.seqused), s.hq, 32), tensor.Of(BFloat16))
		}
		return w.RunInto(pr.q, pr.k, pr.v, 0, o, nil)
	})
	if !errors.As(errs[1], &ae) || ae.Arg != "out" {
		t.Errorf("rank 1 with a bad out: got %v", errs[1])
	}
	if !errors.Is(errs[0], comm.ErrAborted) {
		t.Errorf("rank 0 beside a failed run: got %v, want comm.ErrAborted", errs[0])
	}
	if _, err := NewCPDecodeWrapper(16, nil); err == nil {
		t.Error("nil comm: no error")
	}
	// Run before a plan, and after a failed one, names the wrapper.
	cs, _ = comm.NewLocal(1, 0)
	w, _ := NewCPDecodeWrapper(s.pageSize, cs[0])
	defer w.Close()
	o := tensor.New(tensor.WithShape(len(s.seqused), s.hq, s.d), tensor.Of(BFloat16))
	if err := w.RunInto(pr.q, pr.k, pr.v, 0, o, nil); !errors.As(err, &ae) || ae.Arg != "wrapper" {
		t.Errorf("Run before Plan: got %v", err)
	}
	cs, _ = comm.NewLocal(1, 0)
	w2, _ := NewCPDecodeWrapper(s.pageSize, cs[0])
	defer w2.Close()
	good := PlanArgs{DecodeArgs: DecodeArgs{PageTable: pr.pt, SeqUsedK: pr.su, SeqlenQ: 1, Workers: 2}, NumQOHeads: s.hq, NumKVHeads: s.hkv, HeadDim: s.d}
	if err := w2.Plan(good, nil); err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.HeadDim = 3
	if err := w2.Plan(bad, nil); err == nil {
		t.Fatal("head_dim 3: no error")
	}
	if err := w2.RunInto(pr.q, pr.k, pr.v, 0, o, nil); !errors.As(err, &ae) || ae.Arg != "wrapper" {
		t.Errorf("Run after a failed Plan: got %v", err)
	}
}

// RunInto allocates nothing in the steady state, over both ranks of an
// in-process group.
func TestCPDecodeNoAllocs(t *testing.T) {
	s := cpDecodeSpecs()[0]
	pr := buildDecode(s)
	cs, _ := comm.NewLocal(2, 0)
	ws := make([]*CPDecodeWrapper, 2)
	outs, lses := make([]*tensor.Dense, 2), make([]*tensor.Dense, 2)
	for r, err := range comm.Each(cs, func(c comm.Comm) error {
		pt, su := cpLocalPages(s, pr, 2, c.Rank())
		w, _ := NewCPDecodeWrapper(s.pageSize, c)
		ws[c.Rank()] = w
		outs[c.Rank()] = tensor.New(tensor.WithShape(len(s.seqused), s.hq, s.d), tensor.Of(BFloat16))
		lses[c.Rank()] = tensor.New(tensor.WithShape(len(s.seqused), s.hq), tensor.Of(tensor.Float32))
		return w.Plan(PlanArgs{DecodeArgs: DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: 1, Workers: 2},
			NumQOHeads: s.hq, NumKVHeads: s.hkv, HeadDim: s.d}, nil)
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer ws[0].Close()
	defer ws[1].Close()
	const runs = 20
	peer := make(chan error, 1)
	go func() {
		for i := 0; i < runs+2; i++ {
			if err := ws[1].RunInto(pr.q, pr.k, pr.v, 0, outs[1], lses[1]); err != nil {
				peer <- err
				return
			}
		}
		peer <- nil
	}()
	run := func() {
		if err := ws[0].RunInto(pr.q, pr.k, pr.v, 0, outs[0], lses[0]); err != nil {
			t.Fatal(err)
		}
	}
	run()
	// AllocsPerRun: one warm-up call, then runs.
	if a := testing.AllocsPerRun(runs, run); a != 0 {
		t.Errorf("steady-state RunInto allocates %v times per call (both ranks)", a)
	}
	if err := <-peer; err != nil {
		t.Fatal(err)
	}
}

package op_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Helpers of this file carry a "sel" prefix: other test files of the
// package define their own.

func selI32(shape []int, v []int32) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

func selPrefix(lens []int) []int32 {
	cu := make([]int32, len(lens)+1)
	for i, n := range lens {
		cu[i+1] = cu[i] + int32(n)
	}
	return cu
}

// selRand returns a tensor of N(0,1) values in dtype dt (bf16, e4m3 or
// float32) and the values it holds, widened to float64.
func selRand(rng *rand.Rand, dt string, shape ...int) (*tensor.Dense, []float64) {
	n := 1
	for _, s := range shape {
		n *= s
	}
	vals := make([]float64, n)
	var t *tensor.Dense
	switch dt {
	case "bf16":
		d := make([]lowp.BFloat16, n)
		for i := range d {
			d[i] = lowp.BF16(float32(rng.NormFloat64()))
			vals[i] = float64(d[i].Float32())
		}
		t = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(d))
	case "e4m3":
		d := make([]lowp.Float8E4M3FN, n)
		for i := range d {
			d[i] = lowp.E4M3(float32(rng.NormFloat64()))
			vals[i] = float64(d[i].Float32())
		}
		t = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(d))
	default:
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64())
			vals[i] = float64(d[i])
		}
		t = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(d))
	}
	return t, vals
}

// naiveBlockScores is BlockScoresFunc's formula, term by term, in float64.
func naiveBlockScores(q, k []float64, cuQ, cuK []int32, totalQ, hq, hkv, d, blk, maxBlocks int, causal bool, scale float64, mean bool) []float64 {
	out := make([]float64, hkv*totalQ*maxBlocks)
	for i := range out {
		out[i] = math.Inf(-1)
	}
	qpk := hq / hkv
	for b := 0; b+1 < len(cuQ); b++ {
		sq, sk := int(cuQ[b+1]-cuQ[b]), int(cuK[b+1]-cuK[b])
		for i := 0; i < sq; i++ {
			gq := int(cuQ[b]) + i
			for h := 0; h < hkv; h++ {
				for j := 0; j*blk < sk; j++ {
					if causal && j*blk > i+sk-sq {
						continue // the whole block is in the query's future
					}
					keys := min(blk, sk-j*blk)
					acc := math.Inf(-1)
					if mean {
						acc = 0
					}
					for g := 0; g < qpk; g++ {
						s := 0.0
						for t := j * blk; t < j*blk+keys; t++ {
							for c := 0; c < d; c++ {
								s += q[(gq*hq+h*qpk+g)*d+c] * k[((int(cuK[b])+t)*hkv+h)*d+c]
							}
						}
						s *= scale / float64(keys)
						if mean {
							acc += s / float64(qpk)
						} else {
							acc = math.Max(acc, s)
						}
					}
					out[(h*totalQ+gq)*maxBlocks+j] = acc
				}
			}
		}
	}
	return out
}

// TestBlockScoresMatchesNaive: a ragged batch with an empty key sequence,
// an empty query sequence, seqlen_q > seqlen_k (queries that see nothing
// under causal masking), a partial last block and two rows past
// cu_seqlens_q[B]; causal and not, both head reductions, every dtype.
func TestBlockScoresMatchesNaive(t *testing.T) {
	seqQ := []int{5, 0, 9, 3, 40}
	seqK := []int{300, 40, 130, 0, 20}
	const hq, hkv, d, blk = 4, 2, 16, 32
	totalQ := 57 + 2
	totalK := 490 + 3
	cuQ, cuK := selPrefix(seqQ), selPrefix(seqK)
	for _, dt := range []string{"bf16", "e4m3", "f32"} {
		for _, causal := range []bool{false, true} {
			for _, reduce := range []op.HeadReduce{op.ReduceMax, op.ReduceMean} {
				name := fmt.Sprintf("%s/causal=%v/%v", dt, causal, reduce)
				rng := rand.New(rand.NewPCG(3, uint64(len(name))))
				q, qv := selRand(rng, dt, totalQ, hq, d)
				k, kv := selRand(rng, dt, totalK, hkv, d)
				cfg := op.BlockScoreConfig{BlkKV: blk, Causal: causal, Reduce: reduce, SoftmaxScale: 0.3, Workers: 3}
				got, err := op.BlockScoresFunc(q, k, selI32([]int{6}, cuQ), selI32([]int{6}, cuK), cfg)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				maxBlocks := (300 + blk - 1) / blk
				if !got.Shape().Eq(tensor.Shape{hkv, totalQ, maxBlocks}) {
					t.Fatalf("%s: shape %v", name, got.Shape())
				}
				want := naiveBlockScores(qv, kv, cuQ, cuK, totalQ, hq, hkv, d, blk, maxBlocks, causal, 0.3, reduce == op.ReduceMean)
				g := got.Data().([]float32)
				for i, w := range want {
					x := float64(g[i])
					if math.IsInf(w, -1) != math.IsInf(x, -1) || math.Abs(x-w) > 1e-4*(1+math.Abs(w)) {
						t.Fatalf("%s: score %d = %v, want %v", name, i, x, w)
					}
				}
				// The worker count does not change a bit.
				cfg.Workers = 1
				one, err := op.BlockScoresFunc(q, k, selI32([]int{6}, cuQ), selI32([]int{6}, cuK), cfg)
				if err != nil {
					t.Fatal(err)
				}
				for i, x := range one.Data().([]float32) {
					if math.Float32bits(x) != math.Float32bits(g[i]) {
						t.Fatalf("%s: workers=1 differs at %d", name, i)
					}
				}
			}
		}
	}
}

// naiveTopK is TopKBlocksFunc's rule spelled out: forced blocks (last
// visible, then block 0), then the rest by (score desc, block id asc);
// result ascending, -1 padded.
func naiveTopK(row []float32, topK int, cfg op.TopKConfig) []int32 {
	ok := func(x float32) bool { return !math.IsInf(float64(x), 0) && !math.IsNaN(float64(x)) }
	var vis []int
	for j, x := range row {
		if ok(x) {
			vis = append(vis, j)
		}
	}
	chosen := map[int]bool{}
	var sel []int
	take := func(j int) {
		if len(sel) < topK && !chosen[j] {
			chosen[j] = true
			sel = append(sel, j)
		}
	}
	if cfg.KeepLast && len(vis) > 0 {
		take(vis[len(vis)-1])
	}
	if cfg.KeepFirst && len(vis) > 0 && vis[0] == 0 {
		take(0)
	}
	sort.SliceStable(vis, func(a, b int) bool { return row[vis[a]] > row[vis[b]] }) // stable: ids ascending on ties
	for _, j := range vis {
		take(j)
	}
	sort.Ints(sel)
	out := make([]int32, topK)
	for i := range out {
		out[i] = -1
		if i < len(sel) {
			out[i] = int32(sel[i])
		}
	}
	return out
}

// TestTopKBlocksMatchesNaive: random scores drawn from a few values (many
// ties), with -inf, NaN and +inf entries, every topK from 1 to past
// max_blocks, all flag combinations.
func TestTopKBlocksMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	const hkv, rows, maxBlocks = 2, 40, 9
	vals := []float32{-1, 0, 0.5, 2, float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.NaN()), float32(math.Inf(1))}
	scores := make([]float32, hkv*rows*maxBlocks)
	for i := range scores {
		scores[i] = vals[rng.IntN(len(vals))]
	}
	st := tensor.New(tensor.WithShape(hkv, rows, maxBlocks), tensor.WithBacking(scores))
	for topK := 1; topK <= maxBlocks+2; topK++ {
		for _, cfg := range []op.TopKConfig{{}, {KeepFirst: true}, {KeepLast: true}, {KeepFirst: true, KeepLast: true}} {
			got, err := op.TopKBlocksFunc(st, topK, cfg)
			if err != nil {
				t.Fatal(err)
			}
			g := got.Data().([]int32)
			for r := 0; r < hkv*rows; r++ {
				want := naiveTopK(scores[r*maxBlocks:(r+1)*maxBlocks], topK, cfg)
				for i := range want {
					if g[r*topK+i] != want[i] {
						t.Fatalf("topK=%d %+v row %d %v: got %v, want %v", topK, cfg, r,
							scores[r*maxBlocks:(r+1)*maxBlocks], g[r*topK:(r+1)*topK], want)
					}
				}
			}
		}
	}
}

// TestTopKBlocksTies documents the tie rule: equal scores go to the lower
// block id.
func TestTopKBlocksTies(t *testing.T) {
	ninf := float32(math.Inf(-1))
	scores := tensor.New(tensor.WithShape(1, 3, 5), tensor.WithBacking([]float32{
		1, 1, 1, 1, 1, // all equal: the lowest ids
		0, 3, 3, 3, ninf, // tie among 1, 2, 3 for two slots
		ninf, ninf, ninf, ninf, ninf, // nothing visible: all -1
	}))
	got, err := op.TopKBlocksFunc(scores, 2, op.TopKConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{0, 1, 1, 2, -1, -1}
	for i, x := range got.Data().([]int32) {
		if x != want[i] {
			t.Fatalf("got %v, want %v", got.Data(), want)
		}
	}
}

// TestSelectBadInputs: every bad argument returns an *ArgError naming it.
func TestSelectBadInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	q, _ := selRand(rng, "bf16", 6, 4, 8)
	k, _ := selRand(rng, "bf16", 10, 2, 8)
	k3, _ := selRand(rng, "bf16", 10, 3, 8)
	kD, _ := selRand(rng, "bf16", 10, 2, 4)
	cu := func(v ...int32) *tensor.Dense { return selI32([]int{len(v)}, v) }
	okQ, okK := cu(0, 2, 6), cu(0, 4, 10)
	scores := tensor.New(tensor.WithShape(2, 6, 3), tensor.WithBacking(make([]float32, 36)))
	f64 := tensor.New(tensor.WithShape(2, 6, 3), tensor.WithBacking(make([]float64, 36)))
	bs := func(q, k, cq, ck tensor.Tensor, cfg op.BlockScoreConfig) func() error {
		return func() error { _, err := op.BlockScoresFunc(q, k, cq, ck, cfg); return err }
	}
	tk := func(s tensor.Tensor, topK int) func() error {
		return func() error { _, err := op.TopKBlocksFunc(s, topK, op.TopKConfig{}); return err }
	}
	cases := []struct {
		arg string
		run func() error
	}{
		{"q", bs(nil, k, okQ, okK, op.BlockScoreConfig{})},
		{"q", bs(okQ, k, okQ, okK, op.BlockScoreConfig{})},
		{"k", bs(q, cu(1, 2), okQ, okK, op.BlockScoreConfig{})},
		{"k", bs(q, kD, okQ, okK, op.BlockScoreConfig{})},
		{"q", bs(q, k3, okQ, okK, op.BlockScoreConfig{})},
		{"cu_seqlens_q", bs(q, k, scores, okK, op.BlockScoreConfig{})},
		{"cu_seqlens_q[2]", bs(q, k, cu(0, 4, 2), okK, op.BlockScoreConfig{})},
		{"cu_seqlens_q[2]", bs(q, k, cu(0, 2, 7), okK, op.BlockScoreConfig{})},
		{"cu_seqlens_k[2]", bs(q, k, okQ, cu(0, 4, 11), op.BlockScoreConfig{})},
		{"cu_seqlens_k", bs(q, k, okQ, cu(0, 10), op.BlockScoreConfig{})},
		{"blk_kv", bs(q, k, okQ, okK, op.BlockScoreConfig{BlkKV: -1})},
		{"softmax_scale", bs(q, k, okQ, okK, op.BlockScoreConfig{SoftmaxScale: math.NaN()})},
		{"softmax_scale", bs(q, k, okQ, okK, op.BlockScoreConfig{SoftmaxScale: math.Inf(1)})},
		{"max_seqlen_k", bs(q, k, okQ, okK, op.BlockScoreConfig{MaxSeqlenK: 5})},
		{"max_seqlen_k", bs(q, k, okQ, okK, op.BlockScoreConfig{MaxSeqlenK: -3})},
		{"reduce", bs(q, k, okQ, okK, op.BlockScoreConfig{Reduce: 7})},
		{"scores", tk(nil, 2)},
		{"scores", tk(f64, 2)},
		{"scores", tk(tensor.New(tensor.WithShape(6, 3), tensor.WithBacking(make([]float32, 18))), 2)},
		{"topK", tk(scores, 0)},
		{"topK", tk(scores, 65)},
	}
	// Graph constructors.
	g := G.NewGraph()
	node := func(name string, t *tensor.Dense) *G.Node {
		return G.NewTensor(g, t.Dtype(), t.Dims(), G.WithShape(t.Shape()...), G.WithName(name))
	}
	qn, kn, cqn, ckn := node("q", q), node("k", k), node("cu_q", okQ), node("cu_k", okK)
	sn, in := node("scores", scores), node("ints", cu(1, 2))
	graphErr := func(f func() (*G.Node, error)) func() error {
		return func() error { _, err := f(); return err }
	}
	cases = append(cases, []struct {
		arg string
		run func() error
	}{
		{"q", graphErr(func() (*G.Node, error) { return op.BlockScores(nil, kn, cqn, ckn, op.MaxSeqlenK(8)) })},
		{"q", graphErr(func() (*G.Node, error) { return op.BlockScores(cqn, kn, cqn, ckn, op.MaxSeqlenK(8)) })},
		{"cu_seqlens_k", graphErr(func() (*G.Node, error) { return op.BlockScores(qn, kn, cqn, qn, op.MaxSeqlenK(8)) })},
		{"MaxSeqlenK", graphErr(func() (*G.Node, error) { return op.BlockScores(qn, kn, cqn, ckn) })},
		{"blk_kv", graphErr(func() (*G.Node, error) {
			return op.BlockScores(qn, kn, cqn, ckn, op.MaxSeqlenK(8), op.BlkKV(-2))
		})},
		{"q/k", graphErr(func() (*G.Node, error) {
			return op.BlockScores(qn, node("k3", k3), cqn, ckn, op.MaxSeqlenK(8))
		})},
		{"scores", graphErr(func() (*G.Node, error) { return op.TopKBlocks(in, op.TopK(2)) })},
		{"topK", graphErr(func() (*G.Node, error) { return op.TopKBlocks(sn, op.TopK(0)) })},
		{"x", graphErr(func() (*G.Node, error) { return op.CastToBF16(in) })},
		{"x", graphErr(func() (*G.Node, error) { return op.CastFromBF16(sn) })},
		{"x", graphErr(func() (*G.Node, error) { return op.CastToBF16(nil) })},
		{"seqlen_q", graphErr(func() (*G.Node, error) {
			return op.WritePagedKV(node("cache", tensor.New(tensor.WithShape(2, 2, 4, 8), tensor.WithBacking(make([]lowp.BFloat16, 128)))), kn, node("pt", selI32([]int{1, 2}, []int32{0, 1})), node("su", cu(3)), op.SeqlenQ(0))
		})},
	}...)
	for i, c := range cases {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("case %d (%s): panic %v", i, c.arg, r)
				}
			}()
			err = c.run()
		}()
		var ae *op.ArgError
		if !errors.As(err, &ae) {
			t.Fatalf("case %d (%s): error %v, want *ArgError", i, c.arg, err)
		}
		if ae.Arg != c.arg {
			t.Fatalf("case %d: error names %q, want %q: %v", i, ae.Arg, c.arg, err)
		}
	}
}

// TestSelectGraphMatchesEager: BlockScores -> TopKBlocks in a TapeMachine
// equals the eager functions bit for bit (run twice, with the inputs
// changed by G.Let between runs), and a key sequence longer than the
// construction-time max_seqlen_k is a run-time error, not a panic.
func TestSelectGraphMatchesEager(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	seqQ, seqK := []int{7, 0, 12}, []int{200, 3, 12}
	const hq, hkv, d, blk, maxK, topK = 8, 2, 64, 32, 200, 3
	cuQ, cuK := selI32([]int{4}, selPrefix(seqQ)), selI32([]int{4}, selPrefix(seqK))
	g := G.NewGraph()
	in := func(name string, v *tensor.Dense) *G.Node {
		n := G.NewTensor(g, v.Dtype(), v.Dims(), G.WithShape(v.Shape()...), G.WithName(name))
		if err := G.Let(n, v); err != nil {
			t.Fatal(err)
		}
		return n
	}
	q, _ := selRand(rng, "bf16", 19, hq, d)
	k, _ := selRand(rng, "e4m3", 215, hkv, d)
	qn, kn, cqn, ckn := in("q", q), in("k", k), in("cu_q", cuQ), in("cu_k", cuK)
	cfg := op.BlockScoreConfig{BlkKV: blk, MaxSeqlenK: maxK, Causal: true, Reduce: op.ReduceMean, Workers: 2}
	sc, err := op.BlockScores(qn, kn, cqn, ckn, op.BlkKV(blk), op.MaxSeqlenK(maxK), op.Causal(), op.Reduce(op.ReduceMean), op.Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	tcfg := op.TopKConfig{KeepFirst: true, KeepLast: true}
	q2k, err := op.TopKBlocks(sc, op.TopK(topK), op.KeepFirst(), op.KeepLast())
	if err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	for run := 0; run < 2; run++ {
		if run == 1 {
			q, _ = selRand(rng, "bf16", 19, hq, d)
			if err := G.Let(qn, q); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		ws, err := op.BlockScoresFunc(q, k, cuQ, cuK, cfg)
		if err != nil {
			t.Fatal(err)
		}
		wq, err := op.TopKBlocksFunc(ws, topK, tcfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range sc.Value().Data().([]float32) {
			if math.Float32bits(x) != math.Float32bits(ws.Data().([]float32)[i]) {
				t.Fatalf("run %d: score %d differs", run, i)
			}
		}
		for i, x := range q2k.Value().Data().([]int32) {
			if x != wq.Data().([]int32)[i] {
				t.Fatalf("run %d: q2k %d differs", run, i)
			}
		}
		m.Reset()
	}
	// A key sequence longer than max_seqlen_k.
	if err := G.Let(ckn, selI32([]int{4}, []int32{0, 201, 204, 215})); err != nil {
		t.Fatal(err)
	}
	selRunErr(t, m.RunAll(), "BlockScores", "max_seqlen_k")
}

// selRunErr checks that a machine's run failed with the ArgError of fn on
// arg. The tape machine wraps Do's error in a message of its own, so the
// ArgError is recognised by its text.
func selRunErr(t *testing.T, err error, fn, arg string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), fn+": "+arg+": expected") {
		t.Fatalf("got %v, want the ArgError of %s on %s", err, fn, arg)
	}
}

// TestSelectCastAndWritePagedKV: CastToBF16 rounds like lowp.BF16 and
// CastFromBF16 widens exactly; WritePagedKV writes each new row at
// seqused_k - seqlen_q + i of its request's pages and leaves the input
// cache alone.
func TestSelectCastAndWritePagedKV(t *testing.T) {
	g := G.NewGraph()
	xs := []float32{1, 1.00390625, -3.14159, 1e-20, float32(math.Inf(1)), 65504.7}
	x := G.NewTensor(g, tensor.Float32, 2, G.WithShape(2, 3), G.WithName("x"))
	if err := G.Let(x, tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(append([]float32{}, xs...)))); err != nil {
		t.Fatal(err)
	}
	b, err := op.CastToBF16(x)
	if err != nil {
		t.Fatal(err)
	}
	back, err := op.CastFromBF16(b)
	if err != nil {
		t.Fatal(err)
	}
	// Cache: 3 pages of 1 head x 2 slots x D=1; one request, seqlen_q 2,
	// pages [2, 0]; seqused 3 -> new rows at positions 1 and 2 = page 2
	// slot 1 and page 0 slot 0.
	cache := make([]lowp.BFloat16, 6)
	for i := range cache {
		cache[i] = lowp.BF16(float32(i))
	}
	cn := G.NewTensor(g, op.BFloat16, 4, G.WithShape(3, 1, 2, 1), G.WithName("cache"))
	nn := G.NewTensor(g, op.BFloat16, 3, G.WithShape(2, 1, 1), G.WithName("new"))
	pn := G.NewTensor(g, tensor.Int32, 2, G.WithShape(1, 2), G.WithName("pt"))
	un := G.NewTensor(g, tensor.Int32, 1, G.WithShape(1), G.WithName("used"))
	for _, l := range []struct {
		n *G.Node
		v *tensor.Dense
	}{
		{cn, tensor.New(tensor.WithShape(3, 1, 2, 1), tensor.WithBacking(cache))},
		{nn, tensor.New(tensor.WithShape(2, 1, 1), tensor.WithBacking([]lowp.BFloat16{lowp.BF16(10), lowp.BF16(11)}))},
		{pn, selI32([]int{1, 2}, []int32{2, 0})},
		{un, selI32([]int{1}, []int32{3})},
	} {
		if err := G.Let(l.n, l.v); err != nil {
			t.Fatal(err)
		}
	}
	w, err := op.WritePagedKV(cn, nn, pn, un, op.SeqlenQ(2))
	if err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	for i, v := range b.Value().Data().([]lowp.BFloat16) {
		if v != lowp.BF16(xs[i]) || back.Value().Data().([]float32)[i] != v.Float32() {
			t.Fatalf("cast %d: %v -> %v -> %v", i, xs[i], v, back.Value().Data().([]float32)[i])
		}
	}
	// In place: the node's value is the cache tensor given to G.Let, updated.
	want := []float32{11, 1, 2, 3, 4, 10}
	got := w.Value().Data().([]lowp.BFloat16)
	if &got[0] != &cache[0] {
		t.Fatal("WritePagedKV returned a copy, want the cache input's own storage")
	}
	for i, v := range got {
		if v.Float32() != want[i] {
			t.Fatalf("WritePagedKV: %d = %v, want %v", i, v.Float32(), want[i])
		}
	}
	// seqused_k < seqlen_q: a run-time ArgError.
	m.Reset()
	if err := G.Let(un, selI32([]int{1}, []int32{1})); err != nil {
		t.Fatal(err)
	}
	selRunErr(t, m.RunAll(), "WritePagedKV", "seqused_k[0]")
}

// In-graph block selection: scores for one KV head, two queries and four
// key blocks (-inf = invisible), the best two blocks per query. The
// second query forces its last visible block (its diagonal block) and
// block 0; ties go to the lower block id.
func ExampleTopKBlocks() {
	ninf := float32(math.Inf(-1))
	scores := tensor.New(tensor.WithShape(1, 2, 4), tensor.WithBacking([]float32{
		0.5, 2.0, 1.0, ninf,
		0.1, 3.0, 3.0, 0.2,
	}))
	g := G.NewGraph()
	s := G.NewTensor(g, tensor.Float32, 3, G.WithShape(1, 2, 4), G.WithName("scores"))
	if err := G.Let(s, scores); err != nil {
		panic(err)
	}
	best, err := op.TopKBlocks(s, op.TopK(2))
	if err != nil {
		panic(err)
	}
	forced, err := op.TopKBlocks(s, op.TopK(3), op.KeepFirst(), op.KeepLast())
	if err != nil {
		panic(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		panic(err)
	}
	fmt.Println(best.Value().Data())
	fmt.Println(forced.Value().Data())
	// Output:
	// [1 2 1 2]
	// [0 1 2 0 1 3]
}

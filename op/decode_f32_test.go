package op

import (
	"errors"
	"math"
	"testing"

	"github.com/sparseattn/msa/kernels/comm"
	"gorgonia.org/tensor"
)

// decodeF32Specs are float32 decode problems: dense and sparse, seqlen_q 1
// to 4, every qhead_per_kv the decode path takes, page sizes 16 and 64,
// sparse blocks smaller than, equal to and larger than a page, ragged
// seqused_k with an empty request and a request of one page exactly.
func decodeF32Specs() []decodeSpec {
	var specs []decodeSpec
	seed := uint64(900)
	for _, qpk := range []int{1, 2, 4, 8, 16} {
		for _, sq := range []int{1, 3} {
			for _, sparse := range []struct{ topK, blk int }{{0, 0}, {3, 16}, {2, 64}, {4, 24}} {
				for _, ps := range []int{16, 64} {
					seed++
					specs = append(specs, decodeSpec{seed: seed, seqused: []int{ps, 0, 3*ps + 5, 37, 1 + sq},
						seqlenQ: sq, hq: 2 * qpk, hkv: 2, d: 64, pageSize: ps, dt: "bf16",
						topK: sparse.topK, blk: sparse.blk, workers: 1 + int(seed%3)})
				}
			}
		}
	}
	specs = append(specs, decodeSpec{seed: 7, seqused: []int{300, 129}, seqlenQ: 4, hq: 4, hkv: 4, d: 128, pageSize: 16,
		dt: "bf16", scale: 0.05, workers: 2})
	return specs
}

// widenDecode replaces pr's BF16 q, k, v by float32 tensors of the same
// values (exact), so that referenceDecode's float64 copies still apply.
func widenDecode(pr *decodeProblem) {
	pr.q, _ = widenTest(pr.q)
	pr.k, _ = widenTest(pr.k)
	pr.v, _ = widenTest(pr.v)
}

// checkDecodeF32 compares a float32 decode result with the float64
// reference. The float32 forward accumulates D products per score and
// seqused_k terms per output in float32 with an online softmax: the
// bounds are those of the float32 prefill test (O within
// 2e-6 * max|v| * D/16, LSE within 2e-5), whose problems have the same
// sizes.
func checkDecodeF32(t *testing.T, what string, s decodeSpec, pr *decodeProblem, res *Result) {
	t.Helper()
	if res.Out.Dtype() != tensor.Float32 {
		t.Fatalf("%s %v: out dtype %v, want float32", what, s, res.Out.Dtype())
	}
	ref := referenceDecode(s, pr)
	o, lse := backing[float32](res.Out), backing[float32](res.LSE)
	for r, row := range ref.o {
		for c, w := range row {
			if e := math.Abs(float64(o[r*s.d+c]) - w); !(e <= 2e-6*pr.maxV*float64(s.d)/16) {
				t.Fatalf("%s %v: O[%d][%d] = %v, want %v", what, s, r, c, o[r*s.d+c], w)
			}
		}
		g, w := float64(lse[r]), ref.lse[r]
		if math.IsInf(w, -1) || math.IsInf(g, -1) {
			if math.IsInf(w, -1) != math.IsInf(g, -1) {
				t.Fatalf("%s %v: LSE[%d] = %v, want %v", what, s, r, g, w)
			}
			continue
		}
		if math.Abs(g-w) > 2e-5 {
			t.Fatalf("%s %v: LSE[%d] = %v, want %v", what, s, r, g, w)
		}
	}
}

// TestDecodeF32MatchesReference runs float32 decode eagerly and through a
// DecodeWrapper (Run and RunInto) against the float64 reference.
func TestDecodeF32MatchesReference(t *testing.T) {
	for _, s := range decodeF32Specs() {
		pr := buildDecode(s)
		widenDecode(pr)
		var q2k tensor.Tensor
		if pr.q2k != nil {
			q2k = pr.q2k
		}
		res, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, q2k, decodeArgs(s, pr))
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		checkDecodeF32(t, "DecodeAttentionFunc", s, pr, res)

		w, err := NewDecodeWrapper(s.pageSize)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Plan(planArgs(s, pr), q2k); err != nil {
			t.Fatalf("%v: Plan: %v", s, err)
		}
		if res, err = w.Run(pr.q, pr.k, pr.v, 0); err != nil {
			t.Fatalf("%v: Run: %v", s, err)
		}
		checkDecodeF32(t, "DecodeWrapper.Run", s, pr, res)
		rows := len(s.seqused) * s.seqlenQ
		out, lse := newDecodeOutputs(true, rows, s.hq, s.d)
		if err := w.RunInto(pr.q, pr.k, pr.v, 0, out, lse); err != nil {
			t.Fatalf("%v: RunInto: %v", s, err)
		}
		checkDecodeF32(t, "DecodeWrapper.RunInto", s, pr, &Result{Out: out, LSE: lse})
		w.Close()
	}
}

// TestDecodeF32Errors checks that the float32 combinations decode does not
// take are errors naming the argument: float32 q with BF16 k/v, float32 K/V
// in the NHD layout, a BFloat16 out for float32 q, float32 in the graph op.
func TestDecodeF32Errors(t *testing.T) {
	s := decodeSpec{seed: 3, seqused: []int{40, 17}, seqlenQ: 1, hq: 4, hkv: 2, d: 64, pageSize: 16, dt: "bf16", workers: 1}
	pr := buildDecode(s)
	bf16K := pr.k
	widenDecode(pr)
	args := decodeArgs(s, pr)

	var ae *ArgError
	_, err := DecodeAttentionFunc(pr.q, bf16K, pr.v, nil, args)
	if !errors.As(err, &ae) || ae.Arg != "q, k, v" {
		t.Errorf("float32 q with bfloat16 k: got %v, want an *ArgError on q, k, v", err)
	}

	nhd := args
	nhd.KVLayout = NHD
	nk := tensor.New(tensor.WithShape(pr.k.Shape()[0], s.pageSize, s.hkv, s.d), tensor.WithBacking(backing[float32](pr.k)))
	nv := tensor.New(tensor.WithShape(pr.v.Shape()[0], s.pageSize, s.hkv, s.d), tensor.WithBacking(backing[float32](pr.v)))
	var ni *NotImplementedError
	if _, err := DecodeAttentionFunc(pr.q, nk, nv, nil, nhd); !errors.As(err, &ni) {
		t.Errorf("float32 NHD decode: got %v, want a *NotImplementedError", err)
	}

	w, err := NewDecodeWrapper(s.pageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Plan(planArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	out, lse := newDecodeOutputs(false, len(s.seqused), s.hq, s.d)
	if err := w.RunInto(pr.q, pr.k, pr.v, 0, out, lse); !errors.As(err, &ae) || ae.Arg != "out" {
		t.Errorf("float32 q with a bfloat16 out: got %v, want an *ArgError on out", err)
	}
	// The low-precision dtype rules still hold for the graph op's check.
	c := &checker{fn: "DecodeAttention"}
	if decodeQKVLayout(c, pr.q, pr.k, pr.v, HND, false); !errors.As(c.err, &ae) || ae.Arg != "q" {
		t.Errorf("float32 q where float32 is not taken: got %v, want an *ArgError on q", c.err)
	}
}

// TestCPDecodeF32NotImplemented checks that context-parallel decode, whose
// merge is BFloat16, rejects float32 q with a *NotImplementedError rather
// than an error about the internal output it would write.
func TestCPDecodeF32NotImplemented(t *testing.T) {
	s := cpDecodeSpecs()[0]
	pr := buildDecode(s)
	widenDecode(pr)
	cs, _ := comm.NewLocal(1, 0)
	w, _ := NewCPDecodeWrapper(s.pageSize, cs[0])
	defer w.Close()
	if err := w.Plan(planArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	o, lse := newDecodeOutputs(false, len(s.seqused), s.hq, s.d)
	var ni *NotImplementedError
	if err := w.RunInto(pr.q, pr.k, pr.v, 0, o, lse); !errors.As(err, &ni) {
		t.Errorf("float32 context-parallel decode: got %v, want a *NotImplementedError", err)
	}
}

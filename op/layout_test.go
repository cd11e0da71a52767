package op

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// toNHD transposes paged K/V (or its packed NVFP4 bytes) from HND
// [pages, Hkv, page_size, X] to NHD [pages, page_size, Hkv, X].
func toNHD(t *testing.T, x *tensor.Dense) *tensor.Dense {
	t.Helper()
	switch x.Dtype() {
	case BFloat16:
		return toNHDOf[lowp.BFloat16](x)
	case Float8E4M3FN:
		return toNHDOf[lowp.Float8E4M3FN](x)
	case tensor.Uint8:
		return toNHDOf[uint8](x)
	case tensor.Float32:
		return toNHDOf[float32](x)
	}
	t.Fatalf("toNHD: dtype %v", x.Dtype())
	return nil
}

func toNHDOf[T any](x *tensor.Dense) *tensor.Dense {
	s := x.Shape()
	pages, hkv, ps, w := s[0], s[1], s[2], s[3]
	src := validate.Backing[T](x)
	dst := make([]T, len(src))
	for p := 0; p < pages; p++ {
		for h := 0; h < hkv; h++ {
			for i := 0; i < ps; i++ {
				copy(dst[((p*ps+i)*hkv+h)*w:][:w], src[((p*hkv+h)*ps+i)*w:][:w])
			}
		}
	}
	return tensor.New(tensor.WithShape(pages, ps, hkv, w), tensor.WithBacking(dst))
}

// TestNHDSparseMatchesHND: prefill with NHD pages gives bit-identical
// results to HND pages holding the same keys and values.
func TestNHDSparseMatchesHND(t *testing.T) {
	for _, kv := range []string{"bf16", "e4m3"} {
		q := "bf16"
		if kv == "e4m3" {
			q = "e4m3"
		}
		s := sparseSpec{seed: 21, seqQ: []int{6, 9}, seqK: []int{130, 70}, hq: 8, hkv: 2, d: 64, topK: 3, blk: 32,
			paged: true, causal: true, qDt: q, kvDt: kv, partial: tensor.Float32}
		pr := buildSparse(s)
		rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
		if err != nil {
			t.Fatal(err)
		}
		args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: s.blk, Causal: true, PartialDtype: tensor.Float32,
			PageTable: pr.pageTable, SeqUsedK: pr.seqused, Workers: 2, Temperature: 2, ReturnTemperatureLSE: true}
		want, err := SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, s.topK, args)
		if err != nil {
			t.Fatal(err)
		}
		args.KVLayout = NHD
		got, err := SparseAttentionFunc(pr.q, toNHD(t, pr.k), toNHD(t, pr.v), rp, qi, s.topK, args)
		if err != nil {
			t.Fatal(err)
		}
		sameResult(t, kv+" NHD vs HND", want, got)
		// HND-shaped pages under NHD name the layout.
		_, err = SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, s.topK, args)
		wantArgErr(t, err, "k", "NHD layout [num_pages, page_size, Hkv, D]")

		// The graph op with the KVLayout option.
		g := G.NewGraph()
		qn, kn, vn := gnode(t, g, "q", pr.q), gnode(t, g, "k", toNHD(t, pr.k)), gnode(t, g, "v", toNHD(t, pr.v))
		cuQ, cuK, q2k := gnode(t, g, "cu_q", pr.cuQ), gnode(t, g, "cu_k", pr.cuK), gnode(t, g, "q2k", pr.q2k)
		ptn, sun := gnode(t, g, "pt", pr.pageTable), gnode(t, g, "su", pr.seqused)
		csr, err := K2QCSR(q2k, cuQ, cuK, BlkKV(s.blk), MaxSeqlenK(160))
		if err != nil {
			t.Fatal(err)
		}
		sched, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(s.hq/s.hkv), Workers(2))
		if err != nil {
			t.Fatal(err)
		}
		out, err := SparseAttention(qn, kn, vn, csr, sched, cuQ, cuK, Causal(), PartialDtype(tensor.Float32),
			Paged(ptn, sun), KVLayout(NHD))
		if err != nil {
			t.Fatal(err)
		}
		lse, err := LSE(out)
		if err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		m.Close()
		sameResult(t, kv+" graph NHD vs eager HND", &Result{Out: want.Out, LSE: want.LSE},
			&Result{Out: out.Value().(*tensor.Dense), LSE: lse.Value().(*tensor.Dense)})
	}
}

// TestNHDNVFP4MatchesHND: NVFP4 K/V quantised in NHD order (scale rows
// numbered (page*page_size + slot)*Hkv + h) give the same result as the
// same values quantised in HND order.
func TestNHDNVFP4MatchesHND(t *testing.T) {
	s := sparseSpec{seed: 5, seqQ: []int{5, 7}, seqK: []int{64, 40}, hq: 4, hkv: 2, d: 64, topK: 2, blk: 16,
		paged: true, qDt: "bf16", kvDt: "bf16", partial: tensor.Float32}
	pr := buildSparse(s)
	ks := pr.k.Shape()
	pages, hkv, ps, d := ks[0], ks[1], ks[2], ks[3]
	rng := rand.New(rand.NewPCG(1, 2))
	hnd := [2][]float32{make([]float32, pages*hkv*ps*d), make([]float32, pages*hkv*ps*d)}
	nhd := [2][]float32{make([]float32, len(hnd[0])), make([]float32, len(hnd[0]))}
	for x := range hnd {
		for i := range hnd[x] {
			hnd[x][i] = float32(rng.NormFloat64())
		}
		for p := 0; p < pages; p++ {
			for h := 0; h < hkv; h++ {
				for i := 0; i < ps; i++ {
					copy(nhd[x][((p*ps+i)*hkv+h)*d:][:d], hnd[x][((p*hkv+h)*ps+i)*d:][:d])
				}
			}
		}
	}
	quant := func(data []float32, shape ...int) *NVFP4 {
		nv, err := NewNVFP4(data, 0.5, shape...)
		if err != nil {
			t.Fatal(err)
		}
		return nv
	}
	hk, hv := quant(hnd[0], pages, hkv, ps, d), quant(hnd[1], pages, hkv, ps, d)
	nk, nv := quant(nhd[0], pages, ps, hkv, d), quant(nhd[1], pages, ps, hkv, d)
	rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
	if err != nil {
		t.Fatal(err)
	}
	args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: s.blk, PartialDtype: tensor.Float32,
		PageTable: pr.pageTable, SeqUsedK: pr.seqused, Workers: 2}
	want, err := SparseAttentionNVFP4KVFunc(pr.q, hk.Data, hv.Data, hk.Scale, hv.Scale, hk.Global, hv.Global, rp, qi, s.topK, args)
	if err != nil {
		t.Fatal(err)
	}
	args.KVLayout = NHD
	got, err := SparseAttentionNVFP4KVFunc(pr.q, nk.Data, nv.Data, nk.Scale, nv.Scale, nk.Global, nv.Global, rp, qi, s.topK, args)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, "NVFP4 NHD vs HND", want, got)
}

// TestNHDDecodeMatchesHND: dense and sparse decode, eager, wrapper and
// graph, with NHD pages equal HND pages bit for bit.
func TestNHDDecodeMatchesHND(t *testing.T) {
	for _, topK := range []int{0, 2} {
		s := decodeSpec{seed: 8, seqused: []int{70, 33}, seqlenQ: 2, hq: 8, hkv: 2, d: 64, pageSize: 16, dt: "bf16",
			topK: topK, blk: 16, workers: 2}
		pr := buildDecode(s)
		var q2k tensor.Tensor
		if pr.q2k != nil {
			q2k = pr.q2k
		}
		want := runDecodeSpec(t, s, pr)
		nk, nv := toNHD(t, pr.k), toNHD(t, pr.v)
		args := decodeArgs(s, pr)
		args.KVLayout = NHD
		got, err := DecodeAttentionFunc(pr.q, nk, nv, q2k, args)
		if err != nil {
			t.Fatal(err)
		}
		sameResult(t, "decode NHD vs HND", want, got)
		_, err = DecodeAttentionFunc(pr.q, pr.k, pr.v, q2k, args)
		wantArgErr(t, err, "k", "NHD layout")

		w, err := NewDecodeWrapper(s.pageSize)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Plan(planOf(s, args), q2k); err != nil {
			t.Fatal(err)
		}
		wres, err := w.Run(pr.q, nk, nv, 0)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		sameResult(t, "wrapper NHD vs HND", want, wres)

		g := G.NewGraph()
		pt, su := gnode(t, g, "pt", pr.pt), gnode(t, g, "su", pr.su)
		sched, err := DecodeSchedule(pt, su, Heads(s.hq, s.hkv), PageSize(s.pageSize), SeqlenQ(s.seqlenQ), Workers(2))
		if err != nil {
			t.Fatal(err)
		}
		var q2kn *G.Node
		if pr.q2k != nil {
			q2kn = gnode(t, g, "q2k", pr.q2k)
		}
		out, err := DecodeAttention(gnode(t, g, "q", pr.q), gnode(t, g, "k", nk), gnode(t, g, "v", nv), pt, su, sched, q2kn,
			BlkKV(s.blk), KVLayout(NHD))
		if err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		m.Close()
		sameResult(t, "graph decode NHD vs HND", &Result{Out: want.Out, LSE: want.LSE},
			&Result{Out: out.Value().(*tensor.Dense), LSE: out.Op().(*decodeAttnOp).st.lse})
	}
}

// TestNHDRejections: NHD without a page table, an unknown layout and NHD
// with float32 q, k, v are errors naming the layout.
func TestNHDRejections(t *testing.T) {
	c, _ := validBase(t, false)
	c.args.KVLayout = NHD
	_, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, c.args)
	wantArgErr(t, err, "kv_layout", "without page_table")
	c.args.KVLayout = PagedLayout(7)
	_, err = SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, c.args)
	wantArgErr(t, err, "kv_layout", "HND or NHD")

	f32 := func(shape ...int) *tensor.Dense {
		n := 1
		for _, x := range shape {
			n *= x
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]float32, n)))
	}
	args := SparseArgs{CuSeqlensQ: i32T([]int{2}, 0, 2), CuSeqlensK: i32T([]int{2}, 0, 16), BlkKV: 16,
		PageTable: i32T([]int{1, 1}, 0), KVLayout: NHD}
	rp, qi := i32T([]int{1, 2}, 0, 0), i32T([]int{1, 2})
	_, err = SparseAttentionFunc(f32(2, 1, 64), f32(1, 16, 1, 64), f32(1, 16, 1, 64), rp, qi, 1, args)
	var ne *NotImplementedError
	if !errors.As(err, &ne) || ne.What == "" {
		t.Fatalf("float32 with NHD: got %v, want a NotImplementedError naming the layout", err)
	}

	g := G.NewGraph()
	q := G.NewTensor(g, tensor.Float32, 3, G.WithShape(2, 1, 64), G.WithName("q"))
	k := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 16, 1, 64), G.WithName("k"))
	v := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 16, 1, 64), G.WithName("v"))
	if _, err := SparseAttention(q, k, v, nil, nil, nil, nil, KVLayout(NHD)); !errors.As(err, new(*ArgError)) || !errorsNames(err, "kv_layout") {
		t.Fatalf("KVLayout(NHD) without Paged: got %v", err)
	}
}

// errorsNames reports whether err is an *ArgError naming arg.
func errorsNames(err error, arg string) bool {
	var ae *ArgError
	return errors.As(err, &ae) && ae.Arg == arg
}

// TestNHDCacheWriters: WritePagedKVFunc and WritePagedKV with the NHD layout
// write the same values as with HND, transposed.
func TestNHDCacheWriters(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	bf := func(shape ...int) *tensor.Dense {
		n := 1
		for _, x := range shape {
			n *= x
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(rng.NormFloat64())
		}
		x, err := NewBF16(data, shape...)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	cacheH := bf(3, 2, 4, 8)
	cacheN := toNHD(t, cacheH)
	nw := bf(5, 2, 8)
	pt := i32T([]int{2, 2}, 0, 1, 2, -1)
	if err := WritePagedKVFunc(cacheH, nw, pt, i32T([]int{3}, 0, 3, 5), i32T([]int{2}, 6, 2), HND); err != nil {
		t.Fatal(err)
	}
	if err := WritePagedKVFunc(cacheN, nw, pt, i32T([]int{3}, 0, 3, 5), i32T([]int{2}, 6, 2), NHD); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(toNHD(t, cacheH).Header.Raw, cacheN.Header.Raw) {
		t.Fatal("WritePagedKVFunc: NHD cache differs from the transposed HND cache")
	}
	err := WritePagedKVFunc(cacheH, nw, pt, i32T([]int{3}, 0, 3, 5), i32T([]int{2}, 6, 2), NHD)
	wantArgErr(t, err, "new_kv", "NHD layout")

	// The graph op: one decode step of B = 2 into both layouts.
	step := bf(2, 2, 8)
	su := i32T([]int{2}, 7, 3)
	want := toNHD(t, cacheH)
	if err := WritePagedKVFunc(cacheH, step, pt, i32T([]int{3}, 0, 1, 2), su, HND); err != nil {
		t.Fatal(err)
	}
	g := G.NewGraph()
	cn := gnode(t, g, "cache", want)
	w, err := WritePagedKV(cn, gnode(t, g, "new", step), gnode(t, g, "pt", pt), gnode(t, g, "su", su), KVLayout(NHD))
	if err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(toNHD(t, cacheH).Header.Raw, w.Value().(*tensor.Dense).Header.Raw) {
		t.Fatal("WritePagedKV: NHD cache differs from the transposed HND cache")
	}
}

package op

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Fuzz targets of the newest surfaces: WritePagedKVFunc against an
// independent model of the cache positions, the NVFP4 scale tensors' shapes,
// the float32 backward over tensor variants and scalars, and option lists
// (repeats and conflicts included) on every graph constructor.

// FuzzAppendPagedKV writes fuzzer-chosen rows through a fuzzer-chosen page
// table (entries out of range, colliding, lengths past the table) into a
// small cache in either layout: the call must accept exactly the inputs
// the model accepts and leave the cache equal to the model's, and an error
// must leave the cache unchanged.
func FuzzAppendPagedKV(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 1, 2, 1, 1, 0, 1, 2, 3, 2, 1, 3, 1})
	f.Add([]byte{5, 2, 3, 1, 0, 2, 4, 4, 4, 4, 1, 2, 9, 9})
	f.Add([]byte{1, 0, 0, 0, 1, 3, 7, 0, 200, 5})
	f.Fuzz(func(t *testing.T, data []byte) {
		z := &fz{b: data}
		numPages, hkv, ps, d := 1+z.pick(6), 1+z.pick(3), 1+z.pick(4), 1+z.pick(4)
		layout := []PagedLayout{HND, NHD}[z.pick(2)]
		batch, cols := 1+z.pick(3), 1+z.pick(3)
		pt := make([]int32, batch*cols)
		for i := range pt {
			pt[i] = int32(z.pick(numPages+2)) - 1 // -1 .. numPages
		}
		cu := make([]int32, batch+1)
		used := make([]int32, batch)
		for b := 0; b < batch; b++ {
			cu[b+1] = cu[b] + int32(z.pick(4))
			used[b] = int32(z.pick(cols*ps + 2))
		}
		total := int(cu[batch])
		cacheShape := []int{numPages, hkv, ps, d}
		if layout == NHD {
			cacheShape = []int{numPages, ps, hkv, d}
		}
		cacheV := make([]lowp.BFloat16, numPages*hkv*ps*d)
		for i := range cacheV {
			cacheV[i] = lowp.BF16(float32(-1 - i%7))
		}
		newV := make([]lowp.BFloat16, total*hkv*d)
		for i := range newV {
			newV[i] = lowp.BF16(float32(1 + i%251))
		}
		// The model: where each element of each new row lands, or why the
		// call must be refused.
		want := slices.Clone(cacheV)
		ok := true
		hit := map[[2]int]bool{}
		for b := 0; b < batch && ok; b++ {
			n := int(cu[b+1] - cu[b])
			if int(used[b]) < n || int(used[b]) > cols*ps {
				ok = false
				break
			}
			for i := 0; i < n && ok; i++ {
				pos := int(used[b]) - n + i
				page, slot := int(pt[b*cols+pos/ps]), pos%ps
				if page < 0 || page >= numPages || hit[[2]int{page, slot}] {
					ok = false
					break
				}
				hit[[2]int{page, slot}] = true
				for h := 0; h < hkv; h++ {
					at := ((page*hkv+h)*ps + slot) * d
					if layout == NHD {
						at = ((page*ps+slot)*hkv + h) * d
					}
					copy(want[at:at+d], newV[((int(cu[b])+i)*hkv+h)*d:][:d])
				}
			}
		}
		cache := tensor.New(tensor.WithShape(cacheShape...), tensor.WithBacking(cacheV))
		before := slices.Clone(cacheV)
		err := WritePagedKVFunc(cache, tensor.New(tensor.WithShape(total, hkv, d), tensor.WithBacking(newV)),
			tensor.New(tensor.WithShape(batch, cols), tensor.WithBacking(pt)), tensor.New(tensor.WithShape(batch+1), tensor.WithBacking(cu)),
			tensor.New(tensor.WithShape(batch), tensor.WithBacking(used)), layout)
		switch {
		case err != nil && ok:
			t.Fatalf("valid append refused: %v", err)
		case err != nil:
			wantAPIError(t, err)
			if !slices.Equal(cacheV, before) {
				t.Fatal("a refused append changed the cache")
			}
		case !ok:
			t.Fatalf("invalid append accepted (page table %v, cu %v, seqused %v, page size %d)", pt, cu, used, ps)
		case !slices.Equal(cacheV, want):
			t.Fatalf("cache %v, want %v", cacheV, want)
		}
	})
}

// FuzzNVFP4ScaleShapes gives SparseAttentionNVFP4KVFunc k_scale and v_scale
// tensors of fuzzer-chosen shapes (the exact padded one, more or fewer
// rows or columns, a wider valid tiling): only the exact shape is
// accepted, and then the result matches the reference.
func FuzzNVFP4ScaleShapes(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 4, 0, 0})
	f.Add([]byte{2, 1, 0, 1, 5, 3})
	f.Add([]byte{0, 2, 4, 2, 2, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		z := &fz{b: data}
		s := sparseSpec{seed: uint64(z.u8()), seqQ: []int{1 + z.pick(6), z.pick(4)}, seqK: []int{1 + z.pick(200), z.pick(150)},
			hq: 4, hkv: 2, d: []int{64, 128, 256}[z.pick(3)], topK: 2, blk: 128, causal: z.bit(),
			qDt: "bf16", kvDt: "nvfp4", partial: tensor.Float32}
		pr := buildSparse(s)
		rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
		if err != nil {
			t.Fatal(err)
		}
		reshape := func(x *tensor.Dense) (*tensor.Dense, bool) {
			rows, cols := x.Shape()[0], x.Shape()[1]
			dr := []int{0, 0, 0, 128, -128, 1, -1}[z.pick(7)]
			dc := []int{0, 0, 0, 4, -4, 1, -1, 8}[z.pick(8)]
			r, c := rows+dr, cols+dc
			if r < 1 || c < 1 {
				return x, true
			}
			if dr == 0 && dc > 0 && dc%4 == 0 {
				return widenScales(x, cols, c), false // a valid tiling of a wider matrix
			}
			v := make([]uint8, r*c)
			copy(v, validate.Backing[uint8](x))
			return tensor.New(tensor.WithShape(r, c), tensor.WithBacking(v)), dr == 0 && dc == 0
		}
		ks, kExact := reshape(pr.kScale)
		vs, vExact := reshape(pr.vScale)
		args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: s.blk, Causal: s.causal, PartialDtype: s.partial, Workers: 2}
		res, err := SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, ks, vs, nil, nil, rp, qi, s.topK, args)
		switch {
		case kExact && vExact && err != nil:
			t.Fatalf("%v: exact scale shapes refused: %v", s, err)
		case kExact && vExact:
			checkAgainstReference(t, s, pr, res)
		case err == nil:
			t.Fatalf("%v: k_scale %v, v_scale %v accepted (exact %v)", s, ks.Shape(), vs.Shape(), pr.kScale.Shape())
		default:
			wantAPIError(t, err)
		}
	})
}

// FuzzSparseAttenBackward calls the float32 backward with fuzzer-chosen
// variants of its tensors (absent, views, other dtypes or ranks), topK,
// worker counts and NaN/Inf in dOut: every call returns an API error or
// gradients of the inputs' shapes; an unchanged valid call returns the
// gradients of the plain call bit for bit.
func FuzzSparseAttenBackward(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 5})
	f.Add([]byte{2, 0, 14, 16, 0, 18, 0, 19, 0, 1, 0, 7})
	f.Add([]byte{3, 1, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		z := &fz{b: data}
		s := sparseSpec{seed: uint64(z.u8()), seqQ: []int{z.pick(9), 1 + z.pick(9)}, seqK: []int{z.pick(60), 1 + z.pick(60)},
			hq: 4, hkv: 2, d: 16, topK: 1 + z.pick(3), blk: 16, causal: z.bit(), paged: z.bit()}
		fp := newF32Problem(s)
		rp, qi, err := K2QCSRFunc(fp.q2k, fp.cuQ, fp.cuK, s.blk)
		if err != nil {
			t.Fatal(err)
		}
		a := fp.args()
		res, err := SparseAttentionFunc(fp.q, fp.k, fp.v, rp, qi, s.topK, a)
		if err != nil {
			t.Fatalf("%v: forward: %v", s, err)
		}
		totalQ := fp.q.Shape()[0]
		dO := make([]float32, totalQ*s.hq*s.d)
		for i := range dO {
			dO[i] = float32(i%13) - 6
		}
		dOut := tensor.New(tensor.WithShape(totalQ, s.hq, s.d), tensor.WithBacking(dO))
		want, err := SparseAttentionBackwardFunc(fp.q, fp.k, fp.v, res.Out, res.LSE, dOut, nil, rp, qi, s.topK, a)
		if err != nil {
			t.Fatalf("%v: backward: %v", s, err)
		}
		changed, mustFail := false, false
		arg := func(x *tensor.Dense, optional bool) tensor.Tensor {
			v, k := z.variant(x)
			switch {
			case k == inCorrupt || (k == inAbsent && !optional):
				mustFail = true
			case k == inAbsent:
				changed = true
			}
			return v
		}
		q, k, v := arg(fp.q, false), arg(fp.k, false), arg(fp.v, false)
		out, lse, dOutT := arg(res.Out, false), arg(res.LSE, false), arg(dOut, false)
		rpT, qiT := arg(rp, false), arg(qi, false)
		var dLSE tensor.Tensor
		if z.bit() {
			dLSE, changed = arg(res.LSE, true), true
		}
		topK := z.intArg(s.topK)
		if topK != s.topK {
			changed = true
		}
		if a.Workers = z.intArg(2); a.Workers != 2 {
			changed = true // another worker count may sum in another order
		}
		if z.pick(8) == 0 && totalQ > 0 {
			dO[z.pick(len(dO))] = float32([]float64{math.NaN(), math.Inf(1)}[z.pick(2)])
			changed = true
		}
		g, err := SparseAttentionBackwardFunc(q, k, v, out, lse, dOutT, dLSE, rpT, qiT, topK, a)
		if err != nil {
			if !mustFail && !changed {
				t.Fatalf("%v: valid backward refused: %v", s, err)
			}
			wantAPIError(t, err)
			return
		}
		if mustFail {
			t.Fatalf("%v: invalid backward accepted", s)
		}
		if !g.DQ.Shape().Eq(fp.q.Shape()) || !g.DK.Shape().Eq(fp.k.Shape()) || !g.DV.Shape().Eq(fp.v.Shape()) {
			t.Fatalf("gradient shapes %v %v %v", g.DQ.Shape(), g.DK.Shape(), g.DV.Shape())
		}
		if !changed {
			for i, p := range [][2]*tensor.Dense{{g.DQ, want.DQ}, {g.DK, want.DK}, {g.DV, want.DV}} {
				if !bytes.Equal(p[0].Header.Raw, p[1].Header.Raw) {
					t.Fatalf("%v: gradient %d differs from the plain call's", s, i)
				}
			}
		}
	})
}

// FuzzGraphOptions builds each graph constructor with a fuzzer-chosen list
// of options (any option, any value, repeated or conflicting): no panic,
// errors of the package's types, and a list that repeats an option with
// other arguments or pairs FixedSplitSize(n > 0) with DisableSplitKV is
// always refused.
func FuzzGraphOptions(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 3, 9, 1, 9, 2})
	f.Add([]byte{3, 3, 17, 1, 18, 0})
	f.Add([]byte{4, 4, 6, 0, 6, 3, 5, 1, 12, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		z := &fz{b: data}
		g, q, k, v, csr, sched, cuQ, cuK := sparseGraphNodes(t)
		pt := G.NewTensor(g, tensor.Int32, 2, G.WithShape(2, 8), G.WithName("pt"))
		su := G.NewTensor(g, tensor.Int32, 1, G.WithShape(2), G.WithName("su"))
		q2k := G.NewTensor(g, tensor.Int32, 3, G.WithShape(2, 8, 2), G.WithName("q2k_f"))
		node := func() *G.Node { return []*G.Node{nil, pt, su, q2k, csr}[z.pick(5)] }
		dtype := func() tensor.Dtype {
			return []tensor.Dtype{{}, tensor.Float32, BFloat16, Float16, Float8E4M3FN, tensor.Int32}[z.pick(6)]
		}
		makers := []func() Option{
			func() Option { return Causal() }, func() Option { return SoftmaxScale(z.scalar(0.1)) },
			func() Option { return Temperature(z.scalar(2)) }, func() Option { return PartialDtype(dtype()) },
			func() Option { return MMADtypes(dtype(), dtype()) }, func() Option { return Workers(z.intArg(2)) },
			func() Option { return Paged(node(), node()) }, func() Option { return SharedKV() },
			func() Option { return BlkKV(z.intArg(128)) }, func() Option { return MaxSeqlenK(z.intArg(256)) },
			func() Option { return TopK(z.intArg(2)) }, func() Option { return TotalQ(z.intArg(8)) },
			func() Option { return QheadPerKV(z.intArg(2)) }, func() Option { return SeqlenQ(z.intArg(1)) },
			func() Option { return Heads(z.intArg(4), z.intArg(2)) }, func() Option { return PageSize(z.intArg(16)) },
			func() Option { return FixedSplitSize(z.intArg(0)) }, func() Option { return DisableSplitKV() },
			func() Option { return Reduce(HeadReduce(z.pick(3))) }, func() Option { return KeepFirst() },
			func() Option { return KeepLast() }, func() Option { return KVLayout(PagedLayout(z.pick(3))) },
			func() Option { return MaxWorkspaceBytes(int64(z.intArg(0))) },
		}
		which := z.pick(9)
		var opts []Option
		for n := z.pick(6); n > 0; n-- {
			opts = append(opts, makers[z.pick(len(makers))]())
		}
		var err error
		switch which {
		case 0:
			_, err = K2QCSR(q2k, cuQ, cuK, opts...)
		case 1:
			_, err = BlockScores(q, k, cuQ, cuK, opts...)
		case 2:
			_, err = TopKBlocks(G.NewTensor(g, tensor.Float32, 3, G.WithShape(2, 8, 4), G.WithName("scores")), opts...)
		case 3:
			_, err = DecodeSchedule(pt, su, opts...)
		case 4:
			_, err = SparseAttention(q, k, v, csr, sched, cuQ, cuK, opts...)
		case 6:
			_, _, err = SelectBlocks(q, k, cuQ, cuK, opts...)
		case 7:
			_, err = BlockSparseAttention(q, k, v, cuQ, cuK, opts...)
		case 8:
			_, err = DenseAttention(q, k, v, cuQ, cuK, opts...)
		default:
			_, err = FwdSchedule(csr, cuQ, cuK, opts...)
		}
		conflict := false
		var fixed, disable bool
		for i, o := range opts {
			for _, p := range opts[:i] {
				if p.id == o.id && p.val != o.val {
					conflict = true
				}
			}
			fixed = fixed || o.id == optFixedSplitSize && o.val.(int) > 0
			disable = disable || o.id == optDisableSplitKV
		}
		if conflict || (which == 3 && fixed && disable) {
			if err == nil {
				t.Fatalf("conflicting options accepted: %v", callsOf(opts))
			}
		}
		if err != nil {
			wantAPIError(t, err)
		}
	})
}

// callsOf lists the calls that made opts, for failure messages.
func callsOf(opts []Option) []string {
	s := make([]string, len(opts))
	for i, o := range opts {
		s[i] = o.call
	}
	return s
}

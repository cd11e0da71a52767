package op

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/sparseattn/msa/internal/allocs"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// API fuzz targets: the fuzzer controls tensor presence (nil, typed nil),
// dtypes, ranks, views (sliced and transposed inputs with the same
// content), every scalar argument (huge, negative, NaN, Inf, tiny), worker
// counts, the Plan/Run/RunInto/Close order of a DecodeWrapper and graph
// construction parameters (fuzz_graph_test.go). Every call must return an
// *ArgError / *NotImplementedError or a result equal to the float64
// reference; a valid call must not be rejected; allocation stays under a
// cap proportional to the inputs.

// fz decodes fuzz bytes; past the end it yields zeros (the first choice).
type fz struct {
	b []byte
	i int
}

func (f *fz) u8() byte {
	if f.i >= len(f.b) {
		return 0
	}
	x := f.b[f.i]
	f.i++
	return x
}

func (f *fz) pick(n int) int { return int(f.u8()) % n }

func (f *fz) bit() bool { return f.u8()&1 == 1 }

func (f *fz) u64() uint64 {
	var buf [8]byte
	for i := range buf {
		buf[i] = f.u8()
	}
	return binary.LittleEndian.Uint64(buf[:])
}

// scalar returns a scalar argument: mostly def, else a special value, a
// random valid-looking value or arbitrary float64 bits.
func (f *fz) scalar(def float64) float64 {
	specials := []float64{0, -def, 1e39, -1e39, 3e38, 1e-46, 1e-39, 1e-30, 1e30, math.NaN(), math.Inf(1), math.Inf(-1),
		math.MaxFloat64, math.SmallestNonzeroFloat64, -0.5, 2.5}
	switch k := f.pick(24); {
	case k < 6:
		return def
	case k < 6+len(specials):
		return specials[k-6]
	default:
		return math.Float64frombits(f.u64())
	}
}

// intArg returns an integer argument: mostly def, else a boundary value.
func (f *fz) intArg(def int) int {
	vals := []int{0, -1, 1, 2, 3, 64, 100000, math.MaxInt32, math.MaxInt32 + 1, math.MaxInt, math.MinInt, 1 << 40}
	if k := f.pick(16); k < len(vals) && k >= 4 {
		return vals[k]
	}
	return def
}

// inKind classifies what a tensor variant did to an argument.
type inKind int

const (
	inSame    inKind = iota // the tensor or a view with the same content
	inAbsent                // nil or a typed nil
	inCorrupt               // another dtype or rank: must be rejected
)

// sliceLast returns a view of x with x's shape and content: x sliced out
// of a parent twice as large along the last dimension of size >= 2 (the
// rest of the parent filled with 0xff bytes). The tensor package turns a
// slice of width 1 into an index (dropping the dimension), so a tensor
// whose dimensions are all 1 is returned as is.
func sliceLast(x *tensor.Dense) tensor.Tensor {
	s := x.Shape()
	j := len(s) - 1
	for j >= 0 && s[j] < 2 {
		j--
	}
	if j < 0 {
		return x
	}
	es := int(x.Dtype().Size())
	inner := es
	for _, n := range s[j+1:] {
		inner *= n
	}
	outer := x.DataSize() * es / (inner * s[j])
	ps := append([]int(nil), s...)
	ps[j] = 2 * s[j]
	p := tensor.New(tensor.WithShape(ps...), tensor.Of(x.Dtype()))
	raw := p.Header.Raw
	for i := range raw {
		raw[i] = 0xff
	}
	blk := s[j] * inner
	for o := 0; o < outer; o++ {
		copy(raw[o*2*blk:], x.Header.Raw[o*blk:(o+1)*blk])
	}
	sl := make([]tensor.Slice, len(s))
	sl[j] = tensor.S(0, s[j])
	v, err := p.Slice(sl...)
	if err != nil {
		panic(err)
	}
	if !v.Shape().Eq(s) {
		panic(fmt.Sprintf("sliceLast: view shape %v, want %v", v.Shape(), s))
	}
	return v
}

// transposed returns a lazily transposed tensor with x's shape and
// content (its storage holds x with the last two dimensions swapped).
func transposed(x *tensor.Dense) tensor.Tensor {
	s := x.Shape()
	n := len(s)
	if n < 2 {
		return sliceLast(x)
	}
	a, b := s[n-2], s[n-1]
	es := int(x.Dtype().Size())
	ts := append([]int(nil), s...)
	ts[n-2], ts[n-1] = b, a
	y := tensor.New(tensor.WithShape(ts...), tensor.Of(x.Dtype()))
	mats := x.DataSize() / max(a*b, 1)
	for m := 0; m < mats; m++ {
		for i := 0; i < a; i++ {
			for j := 0; j < b; j++ {
				src := ((m*a+i)*b + j) * es
				dst := ((m*b+j)*a + i) * es
				copy(y.Header.Raw[dst:dst+es], x.Header.Raw[src:src+es])
			}
		}
	}
	axes := make([]int, n)
	for i := range axes {
		axes[i] = i
	}
	axes[n-2], axes[n-1] = n-1, n-2
	if err := y.T(axes...); err != nil {
		panic(err)
	}
	return y
}

// variant returns x or a fuzzer-chosen variant of it.
func (f *fz) variant(x *tensor.Dense) (tensor.Tensor, inKind) {
	if x == nil {
		return nil, inAbsent
	}
	switch f.pick(20) {
	case 12:
		return nil, inAbsent
	case 13:
		return (*tensor.Dense)(nil), inAbsent
	case 14, 15:
		if x.DataSize() == 0 {
			return x, inSame
		}
		return sliceLast(x), inSame
	case 16, 17:
		if x.DataSize() == 0 {
			return x, inSame
		}
		return transposed(x), inSame
	case 18: // another dtype, same shape: one no entry point accepts
		dt := tensor.Float64 // (float32 q, k, v form the gradient path)
		if x.Dtype() == tensor.Int32 || x.Dtype() == tensor.Uint8 {
			dt = tensor.Int64
		}
		return tensor.New(tensor.WithShape(x.Shape()...), tensor.Of(dt)), inCorrupt
	case 19: // another rank
		n := x.DataSize()
		if x.Dims() == 1 {
			return tensor.New(tensor.WithShape(1, n), tensor.Of(x.Dtype())), inCorrupt
		}
		return tensor.New(tensor.WithShape(n), tensor.Of(x.Dtype())), inCorrupt
	}
	return x, inSame
}

// wantAPIError fails unless err is one of the package's error types.
func wantAPIError(t *testing.T, err error) {
	t.Helper()
	var ae *ArgError
	var ne *NotImplementedError
	if !errors.As(err, &ae) && !errors.As(err, &ne) {
		t.Fatalf("error %T %v is neither *ArgError nor *NotImplementedError", err, err)
	}
}

// scaleOK is the scalar rule for softmax_scale, stated independently of
// the implementation: 0 (the default) or a value whose float32 kernel
// value scale*log2(e) is finite and nonzero.
func scaleOK(x float64) bool {
	if x == 0 {
		return true
	}
	k := float64(float32(x * math.Log2E))
	return !math.IsNaN(x) && !math.IsInf(x, 0) && k != 0 && !math.IsInf(k, 0) && float32(x) != 0
}

// temperatureOK is the lse_temperature_scale rule: 0 (the default) or
// T > 0 with float32(T) and float32(1/T) finite and nonzero.
func temperatureOK(x float64) bool {
	if x == 0 {
		return true
	}
	f, inv := float64(float32(x)), float64(float32(1/x))
	return x > 0 && !math.IsInf(x, 0) && f != 0 && !math.IsInf(f, 0) && inv != 0 && !math.IsInf(inv, 0)
}

// allocCap is the allocation bound of one fuzzed call: a fixed allowance
// for the worker pool, workspaces and schedule, plus a multiple of the
// bytes of the inputs and outputs.
func allocCap(bytes int) uint64 { return 48<<20 + 64*uint64(bytes) }

// denseBytes sums the storage of the non-nil tensors.
func denseBytes(ts ...*tensor.Dense) int {
	n := 0
	for _, x := range ts {
		if x != nil {
			n += len(x.Header.Raw)
		}
	}
	return n
}

// FuzzAPIPrefill fuzzes SparseAttentionFunc over tensor variants, scalars,
// worker counts and options of a small valid problem.
func FuzzAPIPrefill(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 1, 3, 4, 200, 100, 1, 2, 1, 0, 1})
	f.Add([]byte{7, 0, 5, 5, 80, 250, 3, 0, 2, 2, 0, 14, 16, 0, 0, 0, 0, 0, 0, 0, 0, 9})
	f.Add([]byte{9, 1, 2, 0, 0, 0, 4, 1, 0, 3, 1, 0, 0, 13, 0, 12, 0, 0, 0, 0, 0, 0, 10, 11})
	f.Add([]byte{3, 1, 4, 4, 128, 129, 1, 1, 1, 1, 1, 17, 15, 14, 16, 17, 15, 14, 16, 17, 6, 6, 6})
	f.Fuzz(func(t *testing.T, data []byte) {
		z := &fz{b: data}
		gqa := [][2]int{{2, 1}, {2, 2}, {4, 1}, {8, 2}}[z.pick(4)]
		dts := [][2]string{{"bf16", "bf16"}, {"e4m3", "e4m3"}, {"bf16", "e4m3"}}[z.pick(3)]
		s := sparseSpec{seed: uint64(z.u8()), seqQ: []int{z.pick(6), z.pick(6)}, seqK: []int{z.pick(300), z.pick(300)},
			hq: gqa[0], hkv: gqa[1], d: []int{64, 128}[z.pick(2)], topK: 1 + z.pick(3), blk: 128, causal: z.bit(), paged: z.bit(),
			qDt: dts[0], kvDt: dts[1], partial: []tensor.Dtype{tensor.Float32, BFloat16, Float16, Float8E4M3FN}[z.pick(4)]}
		pr := buildSparse(s)
		rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
		if err != nil {
			t.Fatalf("%v: K2QCSRFunc: %v", s, err)
		}
		// mustFail: the call is invalid and must be rejected; mayFail: the
		// fuzzer changed something whose validity depends on the data
		// (then any API error or a NaN-free result is accepted).
		mustFail, mayFail := false, false
		arg := func(x *tensor.Dense, optional bool) tensor.Tensor {
			v, k := z.variant(x)
			switch {
			case k == inCorrupt:
				mustFail = true
			case k == inAbsent && !optional:
				mustFail = true
			case k == inAbsent:
				mayFail = true // an absent optional tensor changes the problem
			}
			return v
		}
		q, k, v := arg(pr.q, false), arg(pr.k, false), arg(pr.v, false)
		rpT, qiT := arg(rp, false), arg(qi, false)
		args := SparseArgs{CuSeqlensQ: arg(pr.cuQ, false), CuSeqlensK: arg(pr.cuK, false), Causal: s.causal,
			PartialDtype: s.partial}
		if s.paged {
			args.PageTable = arg(pr.pageTable, false)
			args.SeqUsedK = arg(pr.seqused, true)
		}
		args.SoftmaxScale = z.scalar(0.125)
		if !scaleOK(args.SoftmaxScale) {
			mustFail = true
		}
		if z.bit() {
			args.ReturnTemperatureLSE = true
			args.Temperature = z.scalar(2)
			if !temperatureOK(args.Temperature) {
				mustFail = true
			}
		}
		args.Workers = z.intArg(2)
		if args.BlkKV = z.intArg(0); args.BlkKV != 0 && args.BlkKV != s.blk {
			mayFail = true // another block size: usually a CSR mismatch
		}
		if m := z.intArg(0); m != 0 {
			args.MaxSeqlenK, mayFail = m, true // valid when >= every key length
		}
		if m := z.intArg(0); m != 0 {
			args.MaxSeqlenQ, mayFail = m, true
		}
		topK := s.topK
		if z.pick(8) == 0 {
			if topK = z.intArg(s.topK); topK != s.topK {
				mayFail = true
			}
		}
		in := denseBytes(pr.q, pr.k, pr.v, rp, qi, pr.cuQ, pr.cuK, pr.pageTable, pr.seqused)
		var res *Result
		alloc := allocs.Within(allocCap(in), func() { res, err = SparseAttentionFunc(q, k, v, rpT, qiT, topK, args) })
		if alloc > allocCap(in) {
			t.Fatalf("%v: allocated %d bytes (inputs %d bytes)", s, alloc, in)
		}
		if err != nil {
			wantAPIError(t, err)
			if !mustFail && !mayFail {
				t.Fatalf("%v: valid call rejected: %v", s, err)
			}
			return
		}
		if mustFail {
			t.Fatalf("%v: invalid call accepted (scale %v, T %v, blk %d)", s, args.SoftmaxScale, args.Temperature, args.BlkKV)
		}
		if mayFail {
			noNaN(t, res)
			return
		}
		s.scale = args.SoftmaxScale
		if args.ReturnTemperatureLSE {
			s.temperature = args.Temperature
			if s.temperature == 0 {
				s.temperature = 1
			}
		}
		pr.ref.scale = s.scale
		if s.scale == 0 {
			pr.ref.scale = 1 / math.Sqrt(float64(s.d))
		}
		pr.ref.temperature = s.temperature
		checkAgainstReference(t, s, pr, res)
	})
}

// decodeOp is one step of the DecodeWrapper lifecycle fuzzer.
const (
	dopPlan = iota
	dopRun
	dopRunInto
	dopClose
	dopScribble // overwrite the caller's planned metadata (Plan snapshots it)
	dopCount
)

// FuzzAPIDecode fuzzes DecodeAttentionFunc and a DecodeWrapper driven
// through a fuzzer-chosen sequence of Plan, Run, RunInto, Close and
// metadata overwrites, with tensor variants and scalars.
func FuzzAPIDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3, 0, 1, 1, 2, 3, 1, 0, 1, 4, 1})
	f.Add([]byte{5, 0, 1, 1, 2, 2, 3, 0, 0, 3, 1, 0, 1, 2})
	f.Add([]byte{9, 3, 0, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 4, 1, 2, 3, 1})
	f.Add([]byte{2, 1, 1, 0, 0, 16, 14, 12, 13, 18, 19, 7, 8, 0, 1, 1, 1, 2, 2, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		z := &fz{b: data}
		gqa := [][2]int{{1, 1}, {4, 2}, {8, 1}, {4, 4}}[z.pick(4)]
		s := decodeSpec{seed: uint64(z.u8()), seqused: []int{z.pick(90), z.pick(90)}, seqlenQ: 1 + z.pick(3),
			hq: gqa[0], hkv: gqa[1], d: []int{64, 128}[z.pick(2)], pageSize: []int{16, 32, 7}[z.pick(3)],
			dt: []string{"bf16", "e4m3"}[z.pick(2)], extraCols: z.pick(3), workers: 1 + z.pick(4)}
		if z.bit() {
			s.topK, s.blk = 1+z.pick(3), []int{16, 8, 20}[z.pick(3)]
		}
		if z.bit() {
			s.fixedSplit = 1 + z.pick(3)
		}
		s.disableSplit = z.pick(4) == 0
		pr := buildDecode(s)
		in := denseBytes(pr.q, pr.k, pr.v, pr.pt, pr.su, pr.q2k)

		// Eager call with variants (mustFail / mayFail as in FuzzAPIPrefill).
		mustFail, mayFail := false, false
		arg := func(x *tensor.Dense, optional bool) tensor.Tensor {
			v, k := z.variant(x)
			if k == inCorrupt || (k == inAbsent && !optional) {
				mustFail = true
			}
			if k == inAbsent && optional {
				mayFail = true
			}
			return v
		}
		args := decodeArgs(s, pr)
		args.PageTable, args.SeqUsedK = arg(pr.pt, false), arg(pr.su, false)
		q, k, v := arg(pr.q, false), arg(pr.k, false), arg(pr.v, false)
		var q2k tensor.Tensor
		if pr.q2k != nil {
			q2k = arg(pr.q2k, true)
		}
		args.SoftmaxScale = z.scalar(0)
		if !scaleOK(args.SoftmaxScale) {
			mustFail = true
		}
		args.Workers = z.intArg(s.workers)
		if b := z.intArg(s.blk); b != s.blk {
			args.BlkKV, mayFail = b, true
		}
		var res *Result
		var err error
		alloc := allocs.Within(allocCap(in), func() { res, err = DecodeAttentionFunc(q, k, v, q2k, args) })
		if alloc > allocCap(in) {
			t.Fatalf("%v: DecodeAttentionFunc allocated %d bytes", s, alloc)
		}
		switch {
		case err != nil:
			wantAPIError(t, err)
			if !mustFail && !mayFail {
				t.Fatalf("%v: valid call rejected: %v", s, err)
			}
		case mustFail:
			t.Fatalf("%v: invalid call accepted (scale %v)", s, args.SoftmaxScale)
		case !mayFail:
			s2 := s
			s2.scale = args.SoftmaxScale
			checkDecode(t, s2, pr, res)
		default:
			noNaN(t, res)
		}

		// Wrapper lifecycle. The model: the plan state (none, planned for
		// this problem, planned for other shapes, or unknown after a
		// failed Plan, which may keep the previous plan) and whether the
		// wrapper is open (no Close since the last successful Plan).
		const (
			stNone = iota
			stMatch
			stOther
			stUnknown
		)
		w, err := NewDecodeWrapper(s.pageSize)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		state, open := stNone, false
		var planScale float64
		var planPT, planSU tensor.Tensor // what the last accepted Plan was given
		for step := 0; step < 6; step++ {
			switch z.pick(dopCount) {
			case dopPlan:
				pa := planArgs(s, pr)
				bad := false
				pv, pk := z.variant(pr.pt)
				sv, sk := z.variant(pr.su)
				pa.PageTable, pa.SeqUsedK = pv, sv
				bad = pk != inSame || sk != inSame
				pa.SoftmaxScale = z.scalar(0)
				bad = bad || !scaleOK(pa.SoftmaxScale)
				pa.Workers = z.intArg(s.workers)
				pa.EnableCUDAGraph = z.bit()
				other := false
				if z.pick(6) == 0 {
					pa.SeqlenQ = z.intArg(s.seqlenQ)
					other = pa.SeqlenQ != s.seqlenQ
				}
				var pq tensor.Tensor
				if pr.q2k != nil {
					pq = pr.q2k
				}
				var perr error
				alloc := allocs.Within(allocCap(in), func() { perr = w.Plan(pa, pq) })
				if alloc > allocCap(in) {
					t.Fatalf("%v: Plan allocated %d bytes", s, alloc)
				}
				switch {
				case perr != nil:
					wantAPIError(t, perr)
					if !bad && !other {
						t.Fatalf("%v: valid Plan rejected: %v", s, perr)
					}
					if state != stNone {
						state = stUnknown
					}
				case bad:
					t.Fatalf("%v: invalid Plan accepted (scale %v)", s, pa.SoftmaxScale)
				case other:
					state, open = stOther, true
					planPT, planSU = pv, sv
				default:
					state, open, planScale = stMatch, true, pa.SoftmaxScale
					planPT, planSU = pv, sv
				}
			case dopRun, dopRunInto:
				scale := z.scalar(0)
				into := z.bit()
				var out, lse *tensor.Dense
				outOK := true
				if into {
					rows := len(s.seqused) * s.seqlenQ
					out = tensor.New(tensor.WithShape(rows, s.hq, s.d), tensor.Of(BFloat16))
					lse = tensor.New(tensor.WithShape(rows, s.hq), tensor.Of(tensor.Float32))
					switch z.pick(6) {
					case 1:
						out, outOK = nil, false
					case 2:
						out, outOK = sliceLast(out).(*tensor.Dense), false
					case 3:
						out, outOK = tensor.New(tensor.WithShape(rows+1, s.hq, s.d), tensor.Of(BFloat16)), false
					case 4:
						lse = nil
					}
				}
				var rres *Result
				var rerr error
				alloc := allocs.Within(allocCap(in), func() {
					if into {
						rerr = w.RunInto(pr.q, pr.k, pr.v, scale, out, lse)
						rres = &Result{Out: out, LSE: lse}
					} else {
						rres, rerr = w.Run(pr.q, pr.k, pr.v, scale)
					}
				})
				if alloc > allocCap(in) {
					t.Fatalf("%v: Run allocated %d bytes", s, alloc)
				}
				good := open && outOK && scaleOK(scale)
				switch {
				case rerr != nil:
					wantAPIError(t, rerr)
					if good && state == stMatch {
						t.Fatalf("%v: valid Run rejected: %v", s, rerr)
					}
				case !good || state == stNone || state == stOther:
					t.Fatalf("%v: Run accepted (state %d, open %v, out ok %v, scale %v)", s, state, open, outOK, scale)
				case state == stUnknown:
					if rres.LSE == nil {
						rres.LSE = tensor.New(tensor.WithShape(1), tensor.Of(tensor.Float32))
					}
					noNaN(t, rres)
				default:
					s2 := s
					s2.scale = planScale
					if scale != 0 {
						s2.scale = scale
					}
					if rres.LSE == nil {
						rres.LSE = tensor.New(tensor.WithShape(len(s.seqused)*s.seqlenQ, s.hq), tensor.Of(tensor.Float32))
						if err := w.RunInto(pr.q, pr.k, pr.v, scale, out, rres.LSE); err != nil {
							t.Fatal(err)
						}
					}
					checkDecode(t, s2, pr, rres)
				}
			case dopClose:
				w.Close()
				open = false
			case dopScribble:
				// Plan copied the metadata, and Run compares the tensors
				// Plan was given with that copy where it still reads them:
				// a change after Plan is refused with a *StalePlanError or
				// has no effect (a view Plan read through is not watched),
				// never attended with; Run works again once the metadata
				// is back.
				pt, su := validate.Backing[int32](pr.pt), validate.Backing[int32](pr.su)
				if d, ok := planPT.(*tensor.Dense); ok && d != nil {
					pt = validate.Backing[int32](d)
				}
				if d, ok := planSU.(*tensor.Dense); ok && d != nil {
					su = validate.Backing[int32](d)
				}
				spt, ssu := append([]int32(nil), pt...), append([]int32(nil), su...)
				for i := range pt {
					pt[i] = -3
				}
				for i := range su {
					su[i] = math.MaxInt32
				}
				sres, serr := w.Run(pr.q, pr.k, pr.v, 0)
				copy(pt, spt)
				copy(su, ssu)
				var stale *StalePlanError
				switch {
				case serr != nil && !errors.As(serr, &stale):
					wantAPIError(t, serr)
					if open && state == stMatch {
						t.Fatalf("%v: Run after scribbling on the planned metadata: %T %v, want *StalePlanError or the planned result", s, serr, serr)
					}
				case serr == nil && (!open || state == stNone || state == stOther):
					t.Fatalf("%v: Run accepted (state %d, open %v)", s, state, open)
				case serr == nil && state == stMatch:
					s2 := s
					s2.scale = planScale
					checkDecode(t, s2, pr, sres)
				}
				rres, rerr := w.Run(pr.q, pr.k, pr.v, 0)
				switch {
				case rerr != nil:
					wantAPIError(t, rerr)
					if open && state == stMatch {
						t.Fatalf("%v: Run after restoring the planned metadata: %v", s, rerr)
					}
				case !open || state == stNone || state == stOther:
					t.Fatalf("%v: Run accepted (state %d, open %v)", s, state, open)
				case state == stMatch:
					s2 := s
					s2.scale = planScale
					checkDecode(t, s2, pr, rres)
				}
			}
		}
	})
}

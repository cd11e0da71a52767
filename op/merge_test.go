package op

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/merge"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// mergeCase is K random partials of rows x d, with some LSEs -inf (a
// masked partial, whose O is NaN to show it is never read) and some rows
// fully masked.
type mergeCase struct {
	k, rows, d int
	o          [][]float32 // values exactly representable in the dtype
	l          [][]float32
}

func newMergeCase(rng *rand.Rand, k, rows, d int, dt tensor.Dtype) mergeCase {
	mc := mergeCase{k: k, rows: rows, d: d}
	for i := 0; i < k; i++ {
		o, l := make([]float32, rows*d), make([]float32, rows)
		for r := range l {
			switch {
			case r%7 == 3: // fully masked row
				l[r] = float32(math.Inf(-1))
			case rng.IntN(4) == 0: // this partial masked
				l[r] = float32(math.Inf(-1))
			default:
				l[r] = float32(rng.NormFloat64() * 6)
			}
		}
		for j := range o {
			x := float32(rng.NormFloat64())
			if dt == BFloat16 {
				x = lowp.BF16(x).Float32()
			}
			if math.IsInf(float64(l[j/d]), -1) {
				x = float32(math.NaN())
			}
			o[j] = x
		}
		mc.o, mc.l = append(mc.o, o), append(mc.l, l)
	}
	return mc
}

func (mc mergeCase) tensors(dt tensor.Dtype) (outs, lses []tensor.Tensor) {
	for i := 0; i < mc.k; i++ {
		var o *tensor.Dense
		if dt == BFloat16 {
			o = tensor.New(tensor.WithShape(mc.rows, 1, mc.d), tensor.WithBacking(bf16s(mc.o[i])))
		} else {
			o = tensor.New(tensor.WithShape(mc.rows, 1, mc.d), tensor.WithBacking(append([]float32(nil), mc.o[i]...)))
		}
		outs = append(outs, o)
		lses = append(lses, tensor.New(tensor.WithShape(mc.rows, 1), tensor.WithBacking(append([]float32(nil), mc.l[i]...))))
	}
	return outs, lses
}

// reference merges in float64: the exact merge of the given partials.
// a[r] = sum_i w_i |O_i| per element bounds the float32 accumulation error.
func (mc mergeCase) reference() (o, a [][]float64, lse []float64) {
	for r := 0; r < mc.rows; r++ {
		m := math.Inf(-1)
		for i := 0; i < mc.k; i++ {
			m = math.Max(m, float64(mc.l[i][r]))
		}
		or, ar := make([]float64, mc.d), make([]float64, mc.d)
		o, a = append(o, or), append(a, ar)
		if math.IsInf(m, -1) {
			lse = append(lse, math.Inf(-1))
			continue
		}
		s := 0.0
		for i := 0; i < mc.k; i++ {
			s += math.Exp(float64(mc.l[i][r]) - m)
		}
		lse = append(lse, m+math.Log(s))
		for i := 0; i < mc.k; i++ {
			w := math.Exp(float64(mc.l[i][r])-m) / s
			if w == 0 {
				continue
			}
			for j := range or {
				x := float64(mc.o[i][r*mc.d+j])
				or[j] += w * x
				ar[j] += w * math.Abs(x)
			}
		}
	}
	return o, a, lse
}

// mergeTol is the bound of the merge's error against the float64 merge:
// each weight is rounded to float32 (relative 2^-24), each product w*x and
// each of the K-1 float32 additions rounds once more, so before the final
// rounding the error is within (K+1) * 2^-24 * a, a = sum_i w_i |O_i|,
// plus higher-order terms that the +1 absorbs: (K+2) * 2^-24 * a. The final
// rounding to the output dtype (unit roundoff u: 2^-24 float32, 2^-8 BF16, 8 significant bits) adds
// u * |value|, with |value| <= |ref| + that error.
func mergeTol(k int, ref, a float64, u float64) float64 {
	e := float64(k+2) * 0x1p-24 * a
	return e + u*(math.Abs(ref)+e)
}

// checkMerge returns the first element of got outside the tolerance of the
// float64 reference, or "" when all are within it (exact -inf and zero for
// fully masked rows).
func checkMerge(mc mergeCase, got []float32, gotLSE []float32, u float64) string {
	ro, ra, rl := mc.reference()
	for r := 0; r < mc.rows; r++ {
		if math.IsInf(rl[r], -1) {
			if !math.IsInf(float64(gotLSE[r]), -1) {
				return fmt.Sprintf("row %d: LSE %v, want -inf", r, gotLSE[r])
			}
			for j := 0; j < mc.d; j++ {
				if got[r*mc.d+j] != 0 || math.Signbit(float64(got[r*mc.d+j])) {
					return fmt.Sprintf("row %d: O[%d] = %v, want +0 (fully masked)", r, j, got[r*mc.d+j])
				}
			}
			continue
		}
		// The LSE is m + ln S in float64, rounded once to float32.
		if d := math.Abs(float64(gotLSE[r]) - rl[r]); d > 0x1p-24*math.Abs(rl[r])+1e-12 {
			return fmt.Sprintf("row %d: LSE %v, want %v (diff %g)", r, gotLSE[r], rl[r], d)
		}
		for j := 0; j < mc.d; j++ {
			g, want := float64(got[r*mc.d+j]), ro[r][j]
			if d := math.Abs(g - want); !(d <= mergeTol(mc.k, want, ra[r][j], u)) {
				return fmt.Sprintf("row %d: O[%d] = %v, want %v (diff %g, tolerance %g)", r, j, g, want, d, mergeTol(mc.k, want, ra[r][j], u))
			}
		}
	}
	return ""
}

func TestMergeStatesFuncReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []tensor.Dtype{BFloat16, tensor.Float32} {
		u := 0x1p-24
		if dt == BFloat16 {
			u = 0x1p-8
		}
		for _, k := range []int{1, 2, 3, 8} {
			mc := newMergeCase(rng, k, 29, 64, dt)
			outs, lses := mc.tensors(dt)
			res, err := MergeStatesFunc(outs, lses, MergeArgs{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := Float32s(res.Out)
			if err != nil {
				t.Fatal(err)
			}
			if msg := checkMerge(mc, got, validate.Backing[float32](res.LSE), u); msg != "" {
				t.Errorf("%s K=%d: %s", validate.DtypeName(dt), k, msg)
			}
			// The check catches an error of 2x its tolerance in one element.
			r := 0
			for math.IsInf(float64(mc.l[0][r]), -1) || math.IsInf(float64(mc.l[1%k][r]), -1) {
				r++
			}
			bad := append([]float32(nil), got...)
			bad[r*mc.d] += float32(2 * mergeTol(k, 4, 4, u))
			if checkMerge(mc, bad, validate.Backing[float32](res.LSE), u) == "" {
				t.Errorf("%s K=%d: a perturbed result passed the check", validate.DtypeName(dt), k)
			}
			// Run to run and with caller-owned outputs: identical bits.
			out := tensor.New(tensor.WithShape(mc.rows, 1, mc.d), tensor.Of(dt))
			lse := tensor.New(tensor.WithShape(mc.rows, 1), tensor.Of(tensor.Float32))
			if _, err := MergeStatesFunc(outs, lses, MergeArgs{Out: out, OutLSE: lse}); err != nil {
				t.Fatal(err)
			}
			if string(out.Header.Raw) != string(res.Out.Header.Raw) || string(lse.Header.Raw) != string(res.LSE.Header.Raw) {
				t.Errorf("%s K=%d: a second merge differs", validate.DtypeName(dt), k)
			}
		}
	}
}

// A merge of one partial returns it (O rounded from its own dtype is
// itself; the LSE is l + ln 1).
func TestMergeStatesFuncOne(t *testing.T) {
	mc := newMergeCase(rand.New(rand.NewPCG(3, 4)), 1, 9, 8, BFloat16)
	outs, lses := mc.tensors(BFloat16)
	res, err := MergeStatesFunc(outs, lses, MergeArgs{})
	if err != nil {
		t.Fatal(err)
	}
	for r := 0; r < mc.rows; r++ {
		l := mc.l[0][r]
		if g := validate.Backing[float32](res.LSE)[r]; g != l && !(math.IsInf(float64(l), -1) && math.IsInf(float64(g), -1)) {
			t.Fatalf("row %d: LSE %v, want %v", r, g, l)
		}
	}
}

func TestMergeStatesFuncErrors(t *testing.T) {
	f32 := func(shape ...int) *tensor.Dense {
		return tensor.New(tensor.WithShape(shape...), tensor.Of(tensor.Float32))
	}
	bf := func(shape ...int) *tensor.Dense { return tensor.New(tensor.WithShape(shape...), tensor.Of(BFloat16)) }
	o, l := bf(4, 2, 8), f32(4, 2)
	cases := []struct {
		name       string
		outs, lses []tensor.Tensor
		args       MergeArgs
		arg        string
	}{
		{"none", nil, nil, MergeArgs{}, "outs"},
		{"count", []tensor.Tensor{o, bf(4, 2, 8)}, []tensor.Tensor{l}, MergeArgs{}, "lses"},
		{"nil out", []tensor.Tensor{nil}, []tensor.Tensor{l}, MergeArgs{}, "outs[0]"},
		{"dtype", []tensor.Tensor{tensor.New(tensor.WithShape(4, 2, 8), tensor.Of(Float16))}, []tensor.Tensor{l}, MergeArgs{}, "outs[0]"},
		{"mixed dtype", []tensor.Tensor{o, f32(4, 2, 8)}, []tensor.Tensor{l, f32(4, 2)}, MergeArgs{}, "outs[1]"},
		{"shape", []tensor.Tensor{o, bf(4, 2, 16)}, []tensor.Tensor{l, f32(4, 2)}, MergeArgs{}, "outs[1]"},
		{"rank", []tensor.Tensor{bf(8)}, []tensor.Tensor{f32(1)}, MergeArgs{}, "outs[0]"},
		{"lse shape", []tensor.Tensor{o, bf(4, 2, 8)}, []tensor.Tensor{l, f32(4, 3)}, MergeArgs{}, "lses[1]"},
		{"lse dtype", []tensor.Tensor{o}, []tensor.Tensor{bf(4, 2)}, MergeArgs{}, "lses[0]"},
		{"out shape", []tensor.Tensor{o}, []tensor.Tensor{l}, MergeArgs{Out: bf(4, 2, 4)}, "out"},
		{"out dtype", []tensor.Tensor{o}, []tensor.Tensor{l}, MergeArgs{Out: f32(4, 2, 8)}, "out"},
		{"lse out", []tensor.Tensor{o}, []tensor.Tensor{l}, MergeArgs{OutLSE: f32(4)}, "lse"},
		{"aliased", []tensor.Tensor{o}, []tensor.Tensor{l}, MergeArgs{OutLSE: l}, "lse"},
	}
	for _, tc := range cases {
		_, err := MergeStatesFunc(tc.outs, tc.lses, tc.args)
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != tc.arg || ae.Func != "MergeStatesFunc" {
			t.Errorf("%s: got %v, want an ArgError naming %s", tc.name, err, tc.arg)
		}
	}
}

// The merge allocates nothing once its scratch is sized.
func TestMergeIntoAllocs(t *testing.T) {
	mc := newMergeCase(rand.New(rand.NewPCG(5, 6)), 4, 16, 64, BFloat16)
	srcs := make([][]lowp.BFloat16, mc.k)
	for i := range srcs {
		srcs[i] = bf16s(mc.o[i])
	}
	dst, lse := make([]lowp.BFloat16, mc.rows*mc.d), make([]float32, mc.rows)
	var sc merge.Scratch
	merge.Into(dst, lse, srcs, mc.l, mc.d, &sc)
	if n := testing.AllocsPerRun(10, func() { merge.Into(dst, lse, srcs, mc.l, mc.d, &sc) }); n != 0 {
		t.Fatalf("%v allocations per merge", n)
	}
}

func TestMergeStatesGraph(t *testing.T) {
	mc := newMergeCase(rand.New(rand.NewPCG(7, 8)), 3, 12, 16, tensor.Float32)
	outs, lses := mc.tensors(tensor.Float32)
	g := G.NewGraph()
	var on, ln []*G.Node
	for i := range outs {
		on = append(on, G.NewTensor(g, tensor.Float32, 3, G.WithShape(mc.rows, 1, mc.d), G.WithName(fmt.Sprint("o", i)), G.WithValue(outs[i])))
		ln = append(ln, G.NewTensor(g, tensor.Float32, 2, G.WithShape(mc.rows, 1), G.WithName(fmt.Sprint("l", i)), G.WithValue(lses[i])))
	}
	m, err := MergeStates(on, ln)
	if err != nil {
		t.Fatal(err)
	}
	lse, err := LSE(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TemperatureLSE(m); err == nil {
		t.Error("TemperatureLSE of a merge: no error")
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	want, err := MergeStatesFunc(outs, lses, MergeArgs{})
	if err != nil {
		t.Fatal(err)
	}
	gotO, gotL := m.Value().(*tensor.Dense), lse.Value().(*tensor.Dense)
	if string(gotO.Header.Raw) != string(want.Out.Header.Raw) || string(gotL.Header.Raw) != string(want.LSE.Header.Raw) {
		t.Error("graph merge differs from MergeStatesFunc")
	}
	// Construction errors name the argument.
	bad := G.NewTensor(g, tensor.Float32, 3, G.WithShape(mc.rows, 2, mc.d), G.WithName("bad"))
	for _, tc := range []struct {
		outs, lses []*G.Node
		arg        string
	}{
		{nil, nil, "outs"},
		{on, ln[:1], "lses"},
		{[]*G.Node{on[0], bad}, ln[:2], "outs[1]"},
		{on[:2], []*G.Node{ln[0], on[1]}, "lses[1]"},
	} {
		_, err := MergeStates(tc.outs, tc.lses)
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != tc.arg || !strings.HasPrefix(err.Error(), "MergeStates:") {
			t.Errorf("got %v, want an ArgError naming %s", err, tc.arg)
		}
	}
}

// bf16s rounds xs to BF16.
func bf16s(xs []float32) []lowp.BFloat16 {
	r := make([]lowp.BFloat16, len(xs))
	lowp.EncodeBF16(r, xs)
	return r
}

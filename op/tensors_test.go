package op

import (
	"errors"
	"math"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestNewBF16RoundTrip(t *testing.T) {
	data := []float32{1, -2.5, 3.14159, 1e-3, float32(math.Inf(1)), 65504}
	x, err := NewBF16(data, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if x.Dtype() != BFloat16 || !x.Shape().Eq(tensor.Shape{2, 3}) {
		t.Fatalf("dtype %v shape %v", x.Dtype(), x.Shape())
	}
	back, err := Float32s(x)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range data {
		if want := lowp.BF16(v).Float32(); back[i] != want {
			t.Errorf("element %d: %v, want %v", i, back[i], want)
		}
	}
	if back[2] != 3.140625 {
		t.Errorf("bf16(3.14159) = %v, want 3.140625", back[2])
	}
}

func TestNewE4M3Rules(t *testing.T) {
	data := []float32{1, 448, 449, 500, -1000, float32(math.Inf(-1))}
	nonsat, err := NewE4M3(data, 6)
	if err != nil {
		t.Fatal(err)
	}
	sat, err := NewE4M3Sat(data, 6)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Float32s(nonsat)
	b, _ := Float32s(sat)
	if a[0] != 1 || a[1] != 448 || a[2] != 448 {
		t.Errorf("non-saturating in range: %v", a[:3])
	}
	for i := 3; i < 6; i++ {
		if !math.IsNaN(float64(a[i])) {
			t.Errorf("non-saturating %v -> %v, want NaN", data[i], a[i])
		}
	}
	if b[3] != 448 || b[4] != -448 || b[5] != -448 {
		t.Errorf("saturating: %v", b[3:])
	}
}

func TestTensorConstructorErrors(t *testing.T) {
	var ae *ArgError
	for name, err := range map[string]error{
		"len":      second(NewBF16([]float32{1, 2, 3}, 2, 2)),
		"neg":      second(NewE4M3([]float32{}, -1)),
		"overflow": second(NewE4M3Sat([]float32{1}, math.MaxInt, 2)),
		"noshape":  second(NewBF16([]float32{1})),
		"nvfp4 d":  second(NewNVFP4(make([]float32, 8), 1, 1, 8)),
		"nvfp4 g":  second(NewNVFP4(make([]float32, 16), float32(math.NaN()), 1, 16)),
		"nil":      second(Float32s(nil)),
		"typednil": second(Float32s((*tensor.Dense)(nil))),
		"int32":    second(Float32s(tensor.New(tensor.WithBacking([]int32{1})))),
	} {
		if !errors.As(err, &ae) {
			t.Errorf("%s: got %v, want an *ArgError", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestNewNVFP4MatchesQuantizer(t *testing.T) {
	const rows, d = 3, 32 // [total_k=3, Hkv=1, D=32]
	data := make([]float32, rows*d)
	for i := range data {
		data[i] = float32(i%7) - 3.5
	}
	nv, err := NewNVFP4(data, 0.01, rows, 1, d)
	if err != nil {
		t.Fatal(err)
	}
	if !nv.Data.Shape().Eq(tensor.Shape{rows, 1, d / 2}) || !nv.Scale.Shape().Eq(tensor.Shape{128, 4}) || !nv.Global.Shape().Eq(tensor.Shape{1}) {
		t.Fatalf("shapes %v %v %v", nv.Data.Shape(), nv.Scale.Shape(), nv.Global.Shape())
	}
	packed, scales, _ := lowp.QuantizeNVFP4(data, rows, d, 0.01)
	if string(nv.Data.Data().([]uint8)) != string(packed) || string(nv.Scale.Data().([]uint8)) != string(scales) {
		t.Fatal("NewNVFP4 differs from lowp.QuantizeNVFP4")
	}
	row := make([]float32, d)
	lowp.DequantizeNVFP4Row(row, packed, scales, 1, d, 0.01)
	for i, v := range row {
		if want := data[d+i]; math.Abs(float64(v-want)) > 0.5 {
			t.Errorf("dequantised element %d = %v, want about %v", i, v, want)
		}
	}
}

func TestFloat32sView(t *testing.T) {
	x, _ := NewBF16([]float32{0, 1, 2, 3, 4, 5}, 2, 3)
	v, err := x.Slice(nil, tensor.S(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Float32s(v)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 2, 4, 5}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// TestFloat32sGorgoniaValue: Float32s takes a node's Value() as it is (a
// *tensor.Dense or a Gorgonia scalar), not only a tensor.Tensor.
func TestFloat32sGorgoniaValue(t *testing.T) {
	g := G.NewGraph()
	x := G.NodeFromAny(g, tensor.New(tensor.WithShape(2), tensor.WithBacking([]float32{1.5, -2})), G.WithName("x"))
	s := G.NewScalar(g, tensor.Float64, G.WithName("s"), G.WithValue(0.25))
	sum, err := G.Sum(x)
	if err != nil {
		t.Fatal(err)
	}
	if err := runOnce(g); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		v    G.Value
		want []float32
	}{{x.Value(), []float32{1.5, -2}}, {sum.Value(), []float32{-0.5}}, {s.Value(), []float32{0.25}}} {
		got, err := Float32s(c.v)
		if err != nil || len(got) != len(c.want) || got[0] != c.want[0] {
			t.Fatalf("Float32s(%v) = %v, %v; want %v", c.v, got, err, c.want)
		}
	}
	if _, err := Float32s(G.NewI(3)); err == nil {
		t.Fatal("Float32s of an int scalar: no error")
	}
}

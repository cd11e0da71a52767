package op

import (
	"math"
	"testing"

	"github.com/sparseattn/msa/internal/golden"
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// goldenTensor converts stored bit patterns to a tensor of the dtype and
// returns the decoded values (NVFP4: packed bytes, values nil).
func goldenTensor(t *testing.T, bits []uint16, dt string, shape []int) (*tensor.Dense, []float64) {
	t.Helper()
	vals := make([]float64, len(bits))
	switch dt {
	case golden.DtypeBF16:
		s := make([]lowp.BFloat16, len(bits))
		for i, b := range bits {
			s[i] = lowp.BFloat16(b)
			vals[i] = float64(s[i].Float32())
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(s)), vals
	case golden.DtypeE4M3:
		s := make([]lowp.Float8E4M3FN, len(bits))
		for i, b := range bits {
			s[i] = lowp.Float8E4M3FN(b)
			vals[i] = float64(s[i].Float32())
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(s)), vals
	}
	by, err := golden.Bytes(bits)
	if err != nil {
		t.Fatal(err)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(by)), nil
}

func flat2(x [][]int32) []int32 {
	var out []int32
	for _, r := range x {
		out = append(out, r...)
	}
	return out
}

func flat3(x [][][]int32) []int32 {
	var out []int32
	for _, r := range x {
		out = append(out, flat2(r)...)
	}
	return out
}

// TestGolden runs every golden case (outputs computed in float64 by PyTorch
// from the contract's definitions, see internal/golden) through the eager API
// with float32 partials, using the per-path tolerances of oTolerance.
func TestGolden(t *testing.T) {
	cases, err := golden.Load(golden.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("only %d golden cases", len(cases))
	}
	for i := range cases {
		c := &cases[i]
		t.Run(c.Name, func(t *testing.T) { runGolden(t, c) })
	}
}

func runGolden(t *testing.T, c *golden.Case) {
	q, _ := goldenTensor(t, c.Q, c.QDtype, c.QShape)
	kvShape := c.KVShape
	k, _ := goldenTensor(t, c.K, c.KDtype, kvShape)
	v, vvals := goldenTensor(t, c.V, c.VDtype, kvShape)
	maxV := 0.0
	for _, x := range vvals {
		maxV = math.Max(maxV, math.Abs(x))
	}
	var pt, su *tensor.Dense
	if c.PageTable != nil {
		pt = tensor.New(tensor.WithShape(len(c.PageTable), len(c.PageTable[0])), tensor.WithBacking(flat2(c.PageTable)))
	}
	if c.SequsedK != nil {
		su = tensor.New(tensor.WithShape(len(c.SequsedK)), tensor.WithBacking(append([]int32{}, c.SequsedK...)))
	}
	var q2k *tensor.Dense
	if c.Q2KIndices != nil {
		q2k = tensor.New(tensor.WithShape(c.Hkv, c.TotalQ, c.TopK), tensor.WithBacking(flat3(c.Q2KIndices)))
	}
	scale := c.SoftmaxScale
	if c.SoftmaxScaleIsDefault {
		scale = 0
	}
	var res *Result
	var err error
	pvFP8 := c.QDtype == golden.DtypeE4M3 && c.VDtype == golden.DtypeE4M3
	switch c.Kind {
	case golden.KindDecode:
		var qk tensor.Tensor
		if q2k != nil {
			qk = q2k
		}
		res, err = DecodeAttentionFunc(q, k, v, qk, DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: c.SeqlenQ,
			MaxSeqlenK: len(c.PageTable[0]) * c.PageSize, BlkKV: c.BlkKV, SoftmaxScale: scale, Workers: 2})
	default:
		cuQ := tensor.New(tensor.WithShape(len(c.CuSeqlensQ)), tensor.WithBacking(append([]int32{}, c.CuSeqlensQ...)))
		cuK := tensor.New(tensor.WithShape(len(c.CuSeqlensK)), tensor.WithBacking(append([]int32{}, c.CuSeqlensK...)))
		rp, qi, e := K2QCSRFunc(q2k, cuQ, cuK, c.BlkKV)
		if e != nil {
			t.Fatal(e)
		}
		args := SparseArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, BlkKV: c.BlkKV, Causal: c.Causal, SoftmaxScale: scale,
			Temperature: c.Temperature, ReturnTemperatureLSE: c.Temperature != 0,
			PartialDtype: tensor.Float32, PageTable: pt, SeqUsedK: su, Workers: 2}
		if pt == nil {
			args.PageTable, args.SeqUsedK = nil, nil
		}
		if c.Kind == golden.KindPrefillNVFP4 {
			by := func(x []uint8) *tensor.Dense {
				return tensor.New(tensor.WithShape(c.ScaleShape...), tensor.WithBacking(append([]uint8{}, x...)))
			}
			var kg, vg tensor.Tensor
			if c.KGlobalScale != 0 {
				kg = tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{float32(c.KGlobalScale)}))
			}
			if c.VGlobalScale != 0 {
				vg = tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{float32(c.VGlobalScale)}))
			}
			res, err = SparseAttentionNVFP4KVFunc(q, k, v, by(c.KScale), by(c.VScale), kg, vg, rp, qi, c.TopK, args)
			// FP8 Q runs P.V in FP8 (P rounded to e4m3), as the reference's
			// FP8 pair dequantisation does; BF16 Q leaves P to the call's
			// product precision (bf16 on the bf16 twin, attn.BF16Products).
			pvFP8 = c.QDtype == golden.DtypeE4M3
			rows, dd := len(c.V)*2/c.HeadDim, c.HeadDim
			vb, _ := golden.Bytes(c.V)
			row := make([]float32, dd)
			gs := float32(1)
			if c.VGlobalScale != 0 {
				gs = float32(c.VGlobalScale)
			}
			for r := 0; r < rows; r++ {
				lowp.DequantizeNVFP4Row(row, vb, c.VScale, r, dd, gs)
				for _, x := range row {
					maxV = math.Max(maxV, math.Abs(float64(x)))
				}
			}
		} else {
			res, err = SparseAttentionFunc(q, k, v, rp, qi, c.TopK, args)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	// Decode keeps the active tier's products; a prefill call takes the
	// bf16 twin's when its dtypes are exact in bf16 (attn.BF16Products).
	bf16 := tile.BF16Products()
	if c.Kind != golden.KindDecode {
		bf16 = attn.BF16Products(dtypeOf(c.QDtype), dtypeOf(c.KDtype), dtypeOf(c.VDtype))
	}
	rtol, atol := oTolerance(tensor.Float32, pvFP8, bf16)
	o := validate.Backing[lowp.BFloat16](res.Out)
	lse := validate.Backing[float32](res.LSE)
	bad := 0
	for i, want := range c.O {
		got := float64(o[i].Float32())
		if math.IsNaN(got) || math.Abs(got-want) > rtol*math.Abs(want)+atol*maxV {
			if bad < 5 {
				t.Errorf("O[%d] = %g, want %g", i, got, want)
			}
			bad++
		}
	}
	for i, want := range c.LSE {
		checkLSE(t, sparseSpec{}, "LSE", i, float64(lse[i]), want, bf16, &bad)
	}
	if c.LSETemperature != nil {
		tl := validate.Backing[float32](res.TemperatureLSE)
		for i, want := range c.LSETemperature {
			checkLSE(t, sparseSpec{}, "TemperatureLSE", i, float64(tl[i]), want, bf16, &bad)
		}
	}
	if bad > 0 {
		t.Fatalf("%d mismatches (%s)", bad, c.Description)
	}
}

package op

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// nvfp4Operands validates the NVFP4 block scales and global scales
// (_validate_csr_varlen_nvfp4_kv_inputs) and returns the K and V operands
// and the combine's output scale (the V global scale). rowsKV is the number
// of flattened scale rows: total_k*Hkv (dense) or num_pages*Hkv*page_size.
func nvfp4Operands(c *validate.Checker, nv *nvfp4Inputs, kd, vd *tensor.Dense, rowsKV, d int) (k, v attn.Operand, outScale float32, err error) {
	ks := c.Dense(nv.kScale, "k_scale_128x4")
	vs := c.Dense(nv.vScale, "v_scale_128x4")
	c.Dtype(ks, "k_scale_128x4", tensor.Uint8)
	c.Dtype(vs, "v_scale_128x4", tensor.Uint8)
	c.Rank(ks, "k_scale_128x4", "rank-2 128x4 tiled", 2)
	c.Rank(vs, "v_scale_128x4", "rank-2 128x4 tiled", 2)
	if c.Err != nil {
		return k, v, 0, c.Err
	}
	cols := d / 16
	pr, pc := lowp.Scale128x4Shape(rowsKV, cols)
	for _, s := range []struct {
		name string
		t    *tensor.Dense
	}{{"k_scale_128x4", ks}, {"v_scale_128x4", vs}} {
		// The tiling's offsets depend on its column-tile count, so a wider
		// (still valid) tiling would be read with the wrong stride.
		if s.t.Shape()[0] != pr || s.t.Shape()[1] != pc {
			c.Fail(s.name, fmt.Sprintf("shape exactly (%d, %d): the 128x4 layout of %d scale rows x D/16 = %d columns, padded to multiples of 128 and 4", pr, pc, rowsKV, cols), validate.ShapeStr(s.t))
		}
	}
	kg := globalScale(c, nv.kGlobal, "k_global_scale")
	vg := globalScale(c, nv.vGlobal, "v_global_scale")
	if c.Err != nil {
		return k, v, 0, c.Err
	}
	// Scales are read through the padded column count of the layout, so the
	// operands see exactly the tensor's storage.
	k = attn.Operand{Dtype: attn.NVFP4, D: d, Packed: validate.Backing[uint8](kd), Scales: validate.Backing[uint8](ks), Global: kg}
	v = attn.Operand{Dtype: attn.NVFP4, D: d, Packed: validate.Backing[uint8](vd), Scales: validate.Backing[uint8](vs), Global: 1}
	return k, v, vg, nil
}

// globalScale checks an optional NVFP4 global scale (absent: 1): a
// float32 tensor whose first element is finite. It formats a message only
// on failure (the CUDA path's warm runs call it as it is).
func globalScale(c *validate.Checker, t tensor.Tensor, arg string) float32 {
	if !validate.Present(t) {
		return 1
	}
	g := c.Dense(t, arg)
	if !c.Dtype(g, arg, tensor.Float32) {
		return 1
	}
	vals := validate.Backing[float32](g)
	if len(vals) < 1 {
		c.Fail(arg, "at least one element", validate.ShapeStr(g))
	}
	if c.Err != nil {
		return 1
	}
	x := vals[0]
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
		c.Fail(arg, "a finite global scale", x)
	}
	return x
}

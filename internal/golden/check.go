package golden

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

func prod(xs []int) int {
	p := 1
	for _, x := range xs {
		p *= x
	}
	return p
}

// Check verifies that the case is self-consistent: dtypes, head counts,
// sequence bookkeeping, page table, q2k lists, tensor lengths and value
// ranges, and the output shapes (O finite, O = 0 where LSE = -Inf).
func (c *Case) Check() error {
	if c.FormatVersion != 1 {
		return fmt.Errorf("format_version %d, want 1", c.FormatVersion)
	}
	switch c.Kind {
	case KindPrefill, KindDecode:
		if c.KDtype == DtypeNVFP4 || c.VDtype == DtypeNVFP4 {
			return fmt.Errorf("kind %q with NVFP4 K/V", c.Kind)
		}
	case KindPrefillNVFP4:
		if c.KDtype != DtypeNVFP4 || c.VDtype != DtypeNVFP4 {
			return fmt.Errorf("kind %q needs NVFP4 K/V, got %s/%s", c.Kind, c.KDtype, c.VDtype)
		}
	default:
		return fmt.Errorf("unknown kind %q", c.Kind)
	}
	if c.QDtype != DtypeBF16 && c.QDtype != DtypeE4M3 {
		return fmt.Errorf("q_dtype %q", c.QDtype)
	}
	if c.KDtype != c.VDtype {
		return fmt.Errorf("k_dtype %q != v_dtype %q", c.KDtype, c.VDtype)
	}
	if c.KDtype == DtypeBF16 && c.QDtype != DtypeBF16 {
		return errors.New("bf16 K/V with fp8 Q")
	}
	if c.Hkv <= 0 || c.Hq <= 0 || c.Hq%c.Hkv != 0 || c.QheadPerKV != c.Hq/c.Hkv {
		return fmt.Errorf("heads hq=%d hkv=%d qhead_per_kv=%d", c.Hq, c.Hkv, c.QheadPerKV)
	}
	d := c.HeadDim
	if d <= 0 || d%16 != 0 {
		return fmt.Errorf("head_dim %d", d)
	}
	if c.BlkKV != 128 {
		return fmt.Errorf("blk_kv %d", c.BlkKV)
	}
	if !(c.SoftmaxScale > 0) || (c.SoftmaxScaleIsDefault && math.Abs(c.SoftmaxScale-1/math.Sqrt(float64(d))) > 1e-15) {
		return fmt.Errorf("softmax_scale %v (default %v)", c.SoftmaxScale, c.SoftmaxScaleIsDefault)
	}
	if c.Temperature < 0 || math.IsInf(c.Temperature, 0) || math.IsNaN(c.Temperature) {
		return fmt.Errorf("temperature %v", c.Temperature)
	}
	B := c.Batch
	if B <= 0 || len(c.CuSeqlensQ) != B+1 || len(c.CuSeqlensK) != B+1 {
		return fmt.Errorf("batch %d with len(cu_seqlens_q)=%d len(cu_seqlens_k)=%d", B, len(c.CuSeqlensQ), len(c.CuSeqlensK))
	}
	if c.CuSeqlensQ[0] != 0 || c.CuSeqlensK[0] != 0 || int(c.CuSeqlensQ[B]) != c.TotalQ {
		return errors.New("cu_seqlens do not start at 0 or end at total_q")
	}
	for b := 0; b < B; b++ {
		if c.CuSeqlensQ[b+1] < c.CuSeqlensQ[b] || c.CuSeqlensK[b+1] < c.CuSeqlensK[b] {
			return fmt.Errorf("cu_seqlens not monotone at %d", b)
		}
	}
	if c.Kind == KindDecode {
		if c.SeqlenQ <= 0 || c.TotalQ != B*c.SeqlenQ || !c.Paged() || !c.Causal {
			return errors.New("decode case must be paged, causal, with total_q = B*seqlen_q")
		}
		for b := 0; b <= B; b++ {
			if int(c.CuSeqlensQ[b]) != b*c.SeqlenQ {
				return fmt.Errorf("decode cu_seqlens_q[%d] = %d", b, c.CuSeqlensQ[b])
			}
		}
	}
	dk := d
	if c.KDtype == DtypeNVFP4 {
		dk = d / 2
	}
	var rows int // K/V rows of the scale matrix
	if c.Paged() {
		if c.TotalK != 0 || c.NumPages <= 0 || c.PageSize <= 0 || len(c.PageTable) != B || len(c.SequsedK) != B {
			return errors.New("paged case needs num_pages, page_size, page_table [B] and seqused_k [B], no total_k")
		}
		for b := 0; b < B; b++ {
			row := c.PageTable[b]
			if len(row) != len(c.PageTable[0]) {
				return fmt.Errorf("page_table row %d length %d", b, len(row))
			}
			for j, p := range row {
				if p < 0 || int(p) >= c.NumPages {
					return fmt.Errorf("page_table[%d][%d] = %d out of range", b, j, p)
				}
			}
			s := c.SequsedK[b]
			if s < 0 || int(s) > len(row)*c.PageSize || c.CuSeqlensK[b+1]-c.CuSeqlensK[b] != s {
				return fmt.Errorf("seqused_k[%d] = %d inconsistent", b, s)
			}
		}
		want := []int{c.NumPages, c.Hkv, c.PageSize, dk}
		if !slices.Equal(c.KVShape, want) {
			return fmt.Errorf("kv_shape %v, want %v", c.KVShape, want)
		}
		rows = c.NumPages * c.Hkv * c.PageSize
	} else {
		if c.SequsedK != nil || c.NumPages != 0 || c.PageSize != 0 || c.TotalK != int(c.CuSeqlensK[B]) {
			return errors.New("dense case: seqused_k / num_pages / page_size set or total_k != cu_seqlens_k[B]")
		}
		want := []int{c.TotalK, c.Hkv, dk}
		if !slices.Equal(c.KVShape, want) {
			return fmt.Errorf("kv_shape %v, want %v", c.KVShape, want)
		}
		rows = c.TotalK * c.Hkv
	}
	if !slices.Equal(c.QShape, []int{c.TotalQ, c.Hq, d}) || len(c.Q) != c.TotalQ*c.Hq*d {
		return fmt.Errorf("q_shape %v, len(q) %d", c.QShape, len(c.Q))
	}
	if len(c.K) != prod(c.KVShape) || len(c.V) != prod(c.KVShape) {
		return fmt.Errorf("len(k)=%d len(v)=%d, want %d", len(c.K), len(c.V), prod(c.KVShape))
	}
	if err := checkRange("q", c.Q, c.QDtype); err != nil {
		return err
	}
	if err := checkRange("k", c.K, c.KDtype); err != nil {
		return err
	}
	if err := checkRange("v", c.V, c.VDtype); err != nil {
		return err
	}
	if c.KDtype == DtypeNVFP4 {
		want := []int{(rows + 127) / 128 * 128, (d/16 + 3) / 4 * 4}
		if !slices.Equal(c.ScaleShape, want) || len(c.KScale) != prod(want) || len(c.VScale) != prod(want) {
			return fmt.Errorf("scale_shape %v (want %v), len(k_scale)=%d len(v_scale)=%d", c.ScaleShape, want, len(c.KScale), len(c.VScale))
		}
		if c.KGlobalScale < 0 || c.VGlobalScale < 0 {
			return errors.New("negative global scale")
		}
	} else if c.KScale != nil || c.VScale != nil || c.ScaleShape != nil || c.KGlobalScale != 0 || c.VGlobalScale != 0 {
		return errors.New("block or global scales on a non-NVFP4 case")
	}
	if err := c.checkQ2K(); err != nil {
		return err
	}
	nq := c.TotalQ * c.Hq
	if len(c.O) != nq*d || len(c.LSE) != nq {
		return fmt.Errorf("len(o)=%d len(lse)=%d, want %d and %d", len(c.O), len(c.LSE), nq*d, nq)
	}
	if (c.Temperature != 0) != (c.LSETemperature != nil) || (c.LSETemperature != nil && len(c.LSETemperature) != nq) {
		return fmt.Errorf("temperature %v with %d temperature LSE values", c.Temperature, len(c.LSETemperature))
	}
	for i, l := range c.LSE {
		if math.IsNaN(l) || math.IsInf(l, 1) {
			return fmt.Errorf("lse[%d] = %v", i, l)
		}
		masked := math.IsInf(l, -1)
		if c.LSETemperature != nil && masked != math.IsInf(c.LSETemperature[i], -1) {
			return fmt.Errorf("lse[%d] and lse_temperature[%d] disagree on masking", i, i)
		}
		for _, o := range c.O[i*d : (i+1)*d] {
			if math.IsNaN(o) || math.IsInf(o, 0) || (masked && o != 0) {
				return fmt.Errorf("o row %d: %v with lse %v", i, o, l)
			}
		}
	}
	for _, hr := range c.FullyMaskedRows {
		h, r := hr[0], hr[1]
		if h < 0 || h >= c.Hkv || r < 0 || r >= c.TotalQ {
			return fmt.Errorf("fully_masked_rows entry %v out of range", hr)
		}
		for g := 0; g < c.QheadPerKV; g++ {
			if l := c.LSE[r*c.Hq+h*c.QheadPerKV+g]; !math.IsInf(l, -1) {
				return fmt.Errorf("fully masked row %v has lse %v", hr, l)
			}
		}
	}
	return nil
}

func checkRange(name string, x []uint16, dtype string) error {
	if dtype == DtypeBF16 {
		return nil
	}
	for i, v := range x {
		if v > 0xff {
			return fmt.Errorf("%s[%d] = %d does not fit a byte (%s)", name, i, v, dtype)
		}
		if dtype == DtypeE4M3 && v&0x7f == 0x7f {
			return fmt.Errorf("%s[%d] is the e4m3 NaN", name, i)
		}
	}
	return nil
}

func (c *Case) checkQ2K() error {
	if c.Q2KIndices == nil {
		if c.Kind != KindDecode || c.TopK != 0 {
			return errors.New("q2k_indices missing")
		}
		return nil
	}
	if c.TopK <= 0 || len(c.Q2KIndices) != c.Hkv {
		return fmt.Errorf("topk %d, q2k_indices has %d heads", c.TopK, len(c.Q2KIndices))
	}
	for h, lists := range c.Q2KIndices {
		if len(lists) != c.TotalQ {
			return fmt.Errorf("q2k_indices[%d] has %d rows, want %d", h, len(lists), c.TotalQ)
		}
		for b := 0; b < c.Batch; b++ {
			nb := (c.SeqlenK(b) + c.BlkKV - 1) / c.BlkKV
			for r := int(c.CuSeqlensQ[b]); r < int(c.CuSeqlensQ[b+1]); r++ {
				l := lists[r]
				if len(l) != c.TopK {
					return fmt.Errorf("q2k_indices[%d][%d] has %d entries", h, r, len(l))
				}
				seen := map[int32]bool{}
				pad := false
				for _, j := range l {
					switch {
					case j == -1:
						pad = true
					case j < 0 || int(j) >= nb || pad || seen[j]:
						return fmt.Errorf("q2k_indices[%d][%d] = %v invalid (blocks %d)", h, r, l, nb)
					}
					seen[j] = true
				}
			}
		}
	}
	return nil
}

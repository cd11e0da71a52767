package cuda

import (
	"fmt"
)

// Tensor-map geometry of the tensor-core kernels (kernels/cuda/shared/msa_tc_abi.h),
// in plain Go so it is validated and unit-tested without a GPU. The cgo
// launcher (build tag cuda) encodes a validated TensorMapSpec with
// cuTensorMapEncodeTiled.

// Limits of cuTensorMapEncodeTiled checked by TensorMapSpec.Validate.
const (
	TensorMapMaxRank   = 5
	TensorMapMaxBox    = 256     // elements per box dimension
	TensorMapAlignment = 16      // bytes: base address and strides
	tensorMapMaxStride = 1 << 40 // bytes
	tensorMapMaxDim    = 1 << 32 // elements
	// MaxSwizzleSpan is the widest swizzle (128B): the inner box of a row
	// wider than 128 bytes is loaded as several boxes.
	MaxSwizzleSpan = 128
)

// TensorMapSpec is one tiled tensor map before encoding: dims and box are
// innermost first, Strides are the byte strides of Dims[1:].
type TensorMapSpec struct {
	Name    string   // "q", "k" or "v" (for errors)
	Elem    Dtype    // BF16 (2-byte elements) or E4M3 / NVFP4 (1-byte elements)
	Base    uint64   // device address
	Dims    []uint64 // tensor extents in elements, innermost first
	Strides []uint64 // byte strides of Dims[1:]
	Box     []uint32 // extents of the box one TMA copy loads, innermost first
	Swizzle int      // swizzle span in bytes: 0 (none), 32, 64 or 128
}

// ElemBytes is the tensor-map element size: 2 for BF16, 1 for E4M3 and the
// packed NVFP4 bytes.
func (s *TensorMapSpec) ElemBytes() int {
	if s.Elem == BF16 || s.Elem == F16 {
		return 2
	}
	if s.Elem == F32 {
		return 4
	}
	return 1
}

// Validate checks what cuTensorMapEncodeTiled requires (and what the
// kernels assume) before any driver call: rank 1..5, a 16-byte aligned
// base, byte strides that are multiples of 16 and below 2^40, rows that do
// not overlap, box dims in [1, 256], an inner box of a multiple of 16 bytes
// that fits the swizzle span.
func (s *TensorMapSpec) Validate() error {
	r := len(s.Dims)
	es := uint64(s.ElemBytes())
	switch {
	case r < 1 || r > TensorMapMaxRank:
		return fmt.Errorf("cuda: tensor map %s: rank %d: must be in [1, %d]", s.Name, r, TensorMapMaxRank)
	case len(s.Strides) != r-1 || len(s.Box) != r:
		return fmt.Errorf("cuda: tensor map %s: rank %d needs %d strides and %d box dims, got %d and %d", s.Name, r, r-1, r, len(s.Strides), len(s.Box))
	case s.Base == 0:
		return fmt.Errorf("cuda: tensor map %s: null base address", s.Name)
	case s.Base%TensorMapAlignment != 0:
		return fmt.Errorf("cuda: tensor map %s: base address %#x is not %d-byte aligned", s.Name, s.Base, TensorMapAlignment)
	}
	switch s.Swizzle {
	case 0, 32, 64, 128:
	default:
		return fmt.Errorf("cuda: tensor map %s: swizzle span %d: must be 0, 32, 64 or 128 bytes", s.Name, s.Swizzle)
	}
	for i, d := range s.Dims {
		if d < 1 || d > tensorMapMaxDim {
			return fmt.Errorf("cuda: tensor map %s: dim %d = %d: must be in [1, 2^32]", s.Name, i, d)
		}
	}
	for i, b := range s.Box {
		if b < 1 || b > TensorMapMaxBox {
			return fmt.Errorf("cuda: tensor map %s: box dim %d = %d: must be in [1, %d]", s.Name, i, b, TensorMapMaxBox)
		}
	}
	row := s.Dims[0] * es // bytes of one innermost row
	for i, st := range s.Strides {
		if st%TensorMapAlignment != 0 {
			return fmt.Errorf("cuda: tensor map %s: stride %d = %d bytes: must be a multiple of %d", s.Name, i+1, st, TensorMapAlignment)
		}
		if st >= tensorMapMaxStride {
			return fmt.Errorf("cuda: tensor map %s: stride %d = %d bytes: must be below 2^40", s.Name, i+1, st)
		}
		if st < row {
			return fmt.Errorf("cuda: tensor map %s: stride %d = %d bytes is less than the %d bytes it steps over", s.Name, i+1, st, row)
		}
		row = st * s.Dims[i+1]
	}
	inner := uint64(s.Box[0]) * es
	if inner%16 != 0 {
		return fmt.Errorf("cuda: tensor map %s: inner box of %d bytes: must be a multiple of 16", s.Name, inner)
	}
	if s.Swizzle != 0 && inner > uint64(s.Swizzle) {
		return fmt.Errorf("cuda: tensor map %s: inner box of %d bytes exceeds the %d-byte swizzle span", s.Name, inner, s.Swizzle)
	}
	return nil
}

// rowBytes is the size in global memory of one head-dim row of d elements of
// dtype dt (NVFP4: packed bytes, d/2).
func rowBytes(dt Dtype, d int) int {
	switch dt {
	case BF16, F16:
		return 2 * d
	case NVFP4:
		return d / 2
	}
	return d
}

// InnerBox returns the inner box (elements) and swizzle span (bytes) of a
// row of d elements of dtype dt: min(128 bytes, row bytes), the swizzle
// whose span equals it (msa_tc_abi.h). ok is false when the row is not 32,
// 64 or a multiple of 128 bytes (no swizzle mode fits).
func InnerBox(dt Dtype, d int) (inner, swizzle int, ok bool) {
	rb := rowBytes(dt, d)
	es := 1
	if dt == BF16 || dt == F16 {
		es = 2
	}
	span := min(rb, MaxSwizzleSpan)
	if span != 32 && span != 64 && span != 128 || rb%span != 0 {
		return 0, 0, false
	}
	return span / es, span, true
}

// QMapSpec is the Q map: rank 3 {D, Hq, rows} (rows = total_q, or
// batch*seqlen_q for decode), box {inner, qhead_per_kv, 1}.
func QMapSpec(base uint64, dt Dtype, d, hq, qhpk, rows int) (TensorMapSpec, error) {
	s := TensorMapSpec{Name: "q", Elem: dt, Base: base}
	inner, swz, ok := InnerBox(dt, d)
	if !ok {
		return s, fmt.Errorf("cuda: tensor map q: %s rows of %d elements fit no swizzle span", dt, d)
	}
	rb := uint64(rowBytes(dt, d))
	s.Dims = []uint64{uint64(d), uint64(hq), uint64(rows)}
	s.Strides = []uint64{rb, rb * uint64(hq)}
	s.Box = []uint32{uint32(inner), uint32(qhpk), 1}
	s.Swizzle = swz
	return s, s.Validate()
}

// KVMapSpec is a K or V map. Dense (pageSize == 0): rank 3 {Dk, Hkv,
// totalK}, box {inner, 1, 128}. Paged HND ([numPages, Hkv, pageSize, Dk]):
// rank 4 {Dk, pageSize, Hkv, numPages}, box {inner, min(128, pageSize), 1,
// 1}. Dk = D, or D/2 packed bytes for NVFP4; n is totalK or numPages.
func KVMapSpec(name string, base uint64, dt Dtype, d, hkv, pageSize, n int) (TensorMapSpec, error) {
	s := TensorMapSpec{Name: name, Elem: dt, Base: base}
	inner, swz, ok := InnerBox(dt, d)
	if !ok {
		return s, fmt.Errorf("cuda: tensor map %s: %s rows of %d elements fit no swizzle span", name, dt, d)
	}
	dk := d
	if dt == NVFP4 {
		dk = d / 2
	}
	rb := uint64(rowBytes(dt, d))
	s.Swizzle = swz
	if pageSize == 0 {
		s.Dims = []uint64{uint64(dk), uint64(hkv), uint64(n)}
		s.Strides = []uint64{rb, rb * uint64(hkv)}
		s.Box = []uint32{uint32(inner), 1, 128}
	} else {
		s.Dims = []uint64{uint64(dk), uint64(pageSize), uint64(hkv), uint64(n)}
		s.Strides = []uint64{rb, rb * uint64(pageSize), rb * uint64(pageSize) * uint64(hkv)}
		s.Box = []uint32{uint32(inner), uint32(min(128, pageSize)), 1, 1}
	}
	return s, s.Validate()
}

// String names a dtype as the kernel variants do.
func (d Dtype) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	case E4M3:
		return "e4m3"
	case NVFP4:
		return "nvfp4"
	}
	return fmt.Sprintf("Dtype(%d)", int32(d))
}

// Key identifies the encoding of s (the tensor-map cache key): base
// address, element type, dims, strides, box and swizzle.
func (s *TensorMapSpec) Key() string {
	return fmt.Sprintf("%#x/%d/%v/%v/%v/%d", s.Base, s.ElemBytes(), s.Dims, s.Strides, s.Box, s.Swizzle)
}

package attn

import (
	"fmt"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
)

// PartialDtype is the storage dtype of per-slot partial outputs.
type PartialDtype uint8

const (
	// PartialF32 stores partials as float32.
	PartialF32 PartialDtype = iota + 1
	// PartialBF16 stores partials as bfloat16.
	PartialBF16
	// PartialF16 stores partials as IEEE float16.
	PartialF16
	// PartialE4M3 stores partials as float8 e4m3fn, cast directly without a
	// scale (saturating at +-448).
	PartialE4M3
)

// String returns the dtype's short name.
func (d PartialDtype) String() string {
	switch d {
	case PartialF32:
		return "f32"
	case PartialBF16:
		return "bf16"
	case PartialF16:
		return "f16"
	case PartialE4M3:
		return "e4m3"
	}
	return fmt.Sprintf("PartialDtype(%d)", uint8(d))
}

// Partials holds per-slot partial outputs of rows of D elements and their
// log-sum-exps. Row i of O starts at i*D.
type Partials struct {
	Dtype PartialDtype        // storage dtype of O; selects the slice below
	D     int                 // elements per row
	F32   []float32           // float32 partial O rows
	BF16  []lowp.BFloat16     // BF16 partial O rows
	F16   []lowp.Float16      // FP16 partial O rows
	E4M3  []lowp.Float8E4M3FN // FP8 E4M3 partial O rows
	LSE   []float32           // natural-log LSE of each partial row
	TLSE  []float32           // nil unless temperature LSE is computed
	// vec selects the SIMD epilogue kernels (set per run).
	vec vec
	// stream: storeRows writes BF16 rows with non-temporal stores (set per
	// run: prefill sets it when a window's partials exceed the caches).
	stream bool
	// mem holds the huge-page mappings behind F32, BF16, F16 and E4M3 (nil:
	// Go heap; growHuge). A Partials must not be copied once it holds one.
	mem [4]*hugeMem
}

// Size returns the storage size of one element of the dtype in bytes.
func (d PartialDtype) Size() int {
	switch d {
	case PartialF32:
		return 4
	case PartialBF16, PartialF16:
		return 2
	}
	return 1
}

// Ensure sizes the partial buffers for rows rows, reusing capacity.
func (p *Partials) Ensure(dt PartialDtype, d, rows int, temp bool) {
	p.Dtype, p.D = dt, d
	n := rows * d
	switch dt {
	case PartialF32:
		p.F32 = growHuge(p.F32, n, &p.mem[0])
	case PartialBF16:
		p.BF16 = growHuge(p.BF16, n, &p.mem[1])
	case PartialF16:
		p.F16 = growHuge(p.F16, n, &p.mem[2])
	case PartialE4M3:
		p.E4M3 = growHuge(p.E4M3, n, &p.mem[3])
	}
	p.LSE = grow(p.LSE, rows)
	if temp {
		p.TLSE = grow(p.TLSE, rows)
	} else {
		p.TLSE = p.TLSE[:0]
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// hugeMinBytes is the size from which growHuge asks for huge pages.
const hugeMinBytes = 8 << 20

// growHuge is grow for the partial rows: a new buffer of hugeMinBytes or
// more gets a mapping of its own backed by transparent huge pages where
// the system has them (mapHuge; *h holds it, and the previous buffer's
// mapping is unmapped, so its slice must not be used again). Prefill's
// work items write a tile's rows in eight 4 KiB runs scattered over a
// window's partials (256 MiB) and the combine reads each row's slots from
// as many places, so with 4 KiB pages most runs cost a TLB miss, which a
// huge page saves (the store% of `go test ./kernels/attn -run '^$' -bench
// PrefillPhases` shows it, with THP in its "madvise" or "always" mode).
// See hugeMem for why the mapping is not part of the Go heap.
func growHuge[T any](s []T, n int, h **hugeMem) []T {
	if cap(s) >= n {
		return s[:n]
	}
	(*h).release()
	*h = nil
	var z T // T is a pointer-free number type: the GC need not see the mapping
	if b := n * int(unsafe.Sizeof(z)); b >= hugeMinBytes {
		if m := mapHuge(b); m != nil {
			*h = m
			return unsafe.Slice((*T)(unsafe.Pointer(&m.b[0])), n)
		}
	}
	return make([]T, n)
}

// release frees the partial buffers now (their huge-page mappings are
// unmapped): the next Ensure allocates again. Nothing may use the old
// slices afterwards.
func (p *Partials) release() {
	for i, m := range p.mem {
		m.release()
		p.mem[i] = nil
	}
	p.F32, p.BF16, p.F16, p.E4M3 = nil, nil, nil, nil
	p.LSE, p.TLSE = nil, nil
}

// store writes row i = src * scale (len D), rounding to the partial dtype;
// scale is the row's normalisation factor (0: an empty row, stored as 0).
func (p *Partials) store(i int, src []float32, scale float32, tmp []float32) {
	d := p.D
	switch p.Dtype {
	case PartialF32:
		scaleF32(p.F32[i*d:(i+1)*d], src, scale, p.vec)
	case PartialBF16:
		storeBF16(p.BF16[i*d:(i+1)*d], src, scale, p.vec)
	case PartialF16:
		scaleF32(tmp[:d], src, scale, p.vec)
		lowp.EncodeF16(p.F16[i*d:(i+1)*d], tmp[:d])
	case PartialE4M3:
		scaleF32(tmp[:d], src, scale, p.vec)
		lowp.EncodeE4M3Sat(p.E4M3[i*d:(i+1)*d], tmp[:d])
	}
}

// storeRows is store for the rows of src (len(idx) rows of D values,
// contiguous): row r goes to row idx[r] times scales[r]; BF16 partials take
// one kernel call for all rows.
func (p *Partials) storeRows(idx []int32, src, scales, tmp []float32) {
	d := p.D
	if p.Dtype == PartialBF16 {
		storeRowsBF16(p.BF16, idx, src, scales, d, p.stream, p.vec)
		return
	}
	for r, i := range idx {
		p.store(int(i), src[r*d:(r+1)*d], scales[r], tmp)
	}
}

// axpy adds w * row i to acc.
func (p *Partials) axpy(acc []float32, w float32, i int, tmp []float32) {
	d := p.D
	switch p.Dtype {
	case PartialF32:
		axpyF32(acc, w, p.F32[i*d:(i+1)*d], p.vec)
	case PartialBF16:
		axpyBF16(acc, w, p.BF16[i*d:(i+1)*d], p.vec)
	case PartialF16:
		lowp.DecodeF16(tmp[:d], p.F16[i*d:(i+1)*d])
		axpyF32(acc, w, tmp[:d], p.vec)
	case PartialE4M3:
		lowp.DecodeE4M3(tmp[:d], p.E4M3[i*d:(i+1)*d])
		axpyF32(acc, w, tmp[:d], p.vec)
	}
}

// sumSlots sets acc (len D) to the sum over slots s with ws[s] != 0, in
// increasing s, of ws[s] times partial row first + s*stride: the combine of
// one output row before its output scale. With AVX-512 or AVX2 and BF16 or
// float32 partials of a D that is a multiple of 64 one kernel call sums
// every slot in registers, 64 columns at a time; otherwise acc is cleared
// and each slot added by axpy. Both compute the same FMAs in the same
// order: bit-identical results.
func (p *Partials) sumSlots(acc, ws []float32, first, stride int, tmp []float32) {
	d := p.D
	acc = acc[:d]
	fused := (p.vec == vecAVX512 || p.vec == vecAVX2) && d%64 == 0 && len(ws) > 0
	if fused {
		last := (first + (len(ws)-1)*stride + 1) * d // end of the last slot's row
		avx512 := p.vec == vecAVX512
		switch p.Dtype {
		case PartialBF16:
			_ = p.BF16[last-1]
			kern := sumSlotsBF16AVX2
			if avx512 {
				kern = sumSlotsBF16AVX512
			}
			kern(&acc[0], &p.BF16[first*d], uintptr(2*stride*d), &ws[0], len(ws), d)
			return
		case PartialF32:
			_ = p.F32[last-1]
			kern := sumSlotsF32AVX2
			if avx512 {
				kern = sumSlotsF32AVX512
			}
			kern(&acc[0], &p.F32[first*d], uintptr(4*stride*d), &ws[0], len(ws), d)
			return
		}
	}
	clear(acc)
	for s, w := range ws {
		if w != 0 {
			p.axpy(acc, w, first+s*stride, tmp)
		}
	}
}

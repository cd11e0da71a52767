package attn

import (
	"fmt"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// Dtype is the storage dtype of a Q, K or V operand.
type Dtype uint8

const (
	// BF16 is bfloat16 storage.
	BF16 Dtype = iota + 1
	// E4M3 is float8 e4m3fn storage.
	E4M3
	// NVFP4 is packed E2M1 nibbles with one E4M3 scale per 16 elements in
	// the cuBLAS 128x4 layout and an optional float32 global scale.
	NVFP4
)

// String returns the dtype's short name.
func (d Dtype) String() string {
	switch d {
	case BF16:
		return "bf16"
	case E4M3:
		return "e4m3"
	case NVFP4:
		return "nvfp4"
	}
	return fmt.Sprintf("Dtype(%d)", uint8(d))
}

// maxNVFP4Blocks bounds the block scales of one row the NVFP4 kernel
// decodes at once (D <= 512); longer rows use the portable decoder.
const maxNVFP4Blocks = 32

// Operand is a read-only matrix of rows of D elements in one storage dtype.
// Row r starts at element r*D (NVFP4: byte r*D/2). Exactly one of the slices
// matching Dtype is set.
type Operand struct {
	Dtype Dtype               // storage dtype; selects the slice below
	D     int                 // elements per row
	BF16  []lowp.BFloat16     // BF16 rows
	E4M3  []lowp.Float8E4M3FN // FP8 E4M3 rows
	// NVFP4 data: Packed holds D/2 bytes per row, Scales the 128x4-tiled
	// E4M3 block scales of a Rows x D/16 scale matrix.
	Packed []uint8
	Scales []uint8 // NVFP4 E4M3 block scales, one per 16 elements of a row, 128x4-tiled
	// Global is the NVFP4 global scale folded into decoding (1 when absent).
	Global float32
	// vec selects the SIMD decoders (set by the executors per run).
	vec vec
}

// Rows returns the number of rows the operand holds.
func (o *Operand) Rows() int {
	if o.D <= 0 {
		return 0
	}
	switch o.Dtype {
	case BF16:
		return len(o.BF16) / o.D
	case E4M3:
		return len(o.E4M3) / o.D
	case NVFP4:
		return len(o.Packed) / (o.D / 2)
	}
	return 0
}

// DecodeRow writes row r as float32 into dst[:D].
func (o *Operand) DecodeRow(dst []float32, r int) {
	d := o.D
	switch o.Dtype {
	case BF16:
		decodeBF16(dst[:d], o.BF16[r*d:(r+1)*d], o.vec)
	case E4M3:
		decodeE4M3(dst[:d], o.E4M3[r*d:(r+1)*d], o.vec)
	case NVFP4:
		var sc [maxNVFP4Blocks]float32
		decodeNVFP4Row(dst, o.Packed, o.Scales, r, d, o.Global, sc[:], o.vec == vecAVX512 && d <= 16*maxNVFP4Blocks)
	}
}

// DecodeRows writes rows r .. r+n-1 as float32 into dst[:n*D].
func (o *Operand) DecodeRows(dst []float32, r, n int) {
	d := o.D
	switch o.Dtype {
	case BF16:
		decodeBF16(dst[:n*d], o.BF16[r*d:(r+n)*d], o.vec)
	case E4M3:
		decodeE4M3(dst[:n*d], o.E4M3[r*d:(r+n)*d], o.vec)
	case NVFP4:
		var sc [maxNVFP4Blocks]float32
		avx512 := o.vec == vecAVX512 && d <= 16*maxNVFP4Blocks
		for i := 0; i < n; i++ {
			decodeNVFP4Row(dst[i*d:(i+1)*d], o.Packed, o.Scales, r+i, d, o.Global, sc[:], avx512)
		}
	}
}

// setQRows gives acc its query rows a .. a+n-1 from rows r .. r+n-1: a
// bf16 tier takes BF16 rows as they are (tile.Acc.SetQBF16, no round trip
// through float32), otherwise they are decoded into acc.QRows.
func (o *Operand) setQRows(acc *tile.Acc, a, r, n int) {
	if o.Dtype != BF16 || !acc.SetQBF16(a, o.BF16[r*o.D:(r+n)*o.D]) {
		o.DecodeRows(acc.QRows(a, n), r, n)
	}
}

// DecodeRowsMax is DecodeRows that also returns maxFiniteBits of the
// decoded values; for BF16 it is taken while decoding (decodeBF16Max).
func (o *Operand) DecodeRowsMax(dst []float32, r, n int) uint32 {
	d := o.D
	if o.Dtype == BF16 {
		return decodeBF16Max(dst[:n*d], o.BF16[r*d:(r+n)*d], o.vec)
	}
	o.DecodeRows(dst, r, n)
	return maxFiniteBits(dst[:n*d], o.vec)
}

// loadKV decodes tokens t0 .. t0+n-1 of sequence b, KV head h into kbuf and
// vbuf ([n][D] float32).
func loadKV(k, v *Operand, l *KVLayout, b, h, t0, n int, kbuf, vbuf []float32) {
	loadRows(k, l, b, h, t0, n, kbuf, false)
	loadRows(v, l, b, h, t0, n, vbuf, false)
}

// loadRows decodes tokens t0 .. t0+n-1 of sequence b, KV head h of o into
// dst ([n][D] float32), one contiguous run at a time.
func loadRows(o *Operand, l *KVLayout, b, h, t0, n int, dst []float32, fold bool) {
	d := o.D
	for i := 0; i < n; {
		r, c := l.Run(b, h, t0+i, n-i)
		if fold {
			decodeE4M3Fold(dst[i*d:(i+c)*d], o.E4M3[r*d:(r+c)*d], o.vec)
		} else {
			o.DecodeRows(dst[i*d:], r, c)
		}
		i += c
	}
}

// foldsE4M3 reports whether decode stages o's rows folded
// (decodeE4M3Fold): e4m3fn rows decoded by the AVX2 code.
func (o *Operand) foldsE4M3() bool { return o.Dtype == E4M3 && o.vec == vecAVX2 }

// loadRowsMax is loadRows that also returns maxFiniteBits of dst[:n*D]
// (DecodeRowsMax).
func loadRowsMax(o *Operand, l *KVLayout, b, h, t0, n int, dst []float32) uint32 {
	d := o.D
	var m uint32
	for i := 0; i < n; {
		r, c := l.Run(b, h, t0+i, n-i)
		m = max(m, o.DecodeRowsMax(dst[i*d:], r, c))
		i += c
	}
	return m
}

// storage returns the bytes that hold rows r..r+c-1 (nil for NVFP4, whose
// rows need their scales too, for an empty range, and for a negative r: a
// page-table slot of -1, such as a block the query-major block cache holds
// no copy of because no token of the window may see it, is never read, so
// a prefetch hint for it is dropped).
func (o *Operand) storage(r, c int) (unsafe.Pointer, int) {
	d := o.D
	switch {
	case c <= 0 || r < 0:
	case o.Dtype == E4M3 && (r+c)*d <= len(o.E4M3):
		return unsafe.Pointer(&o.E4M3[r*d]), c * d
	case o.Dtype == BF16 && (r+c)*d <= len(o.BF16):
		return unsafe.Pointer(&o.BF16[r*d]), 2 * c * d
	}
	return nil, 0
}

// prefetchNext hints to acc the storage of K/V rows t0..t0+n-1 of sequence
// b, KV head h: the first contiguous run of rows of each (a whole page
// block with the HND page layout or one dense sequence), to prefetch, and
// that run's keys, to widen ahead where the lane kernels can (foldK: the
// stager stages keys as value / e4m3Fold).
func prefetchNext(acc rowAcc, k, v *Operand, l *KVLayout, b, h, t0, n int, foldK bool) {
	if n <= 0 {
		acc.prefetchNext(nil, 0, nil, 0)
		acc.widenNext(nil, tile.RawNone, 0)
		return
	}
	r, c := l.Run(b, h, t0, n)
	kp, kb := k.storage(r, c)
	vp, vb := v.storage(r, c)
	acc.prefetchNext(kp, kb, vp, vb)
	acc.widenNext(kp, k.rawFormat(foldK), c) // dropped for nil kp or RawNone
}

// kvStager hands one K/V block (tokens t0.. of sequence b, KV head h) to a
// decode accumulator's updateStaged (tile.Lanes.UpdateStaged asks for a few
// rows at a time), decoded into the worker's block buffers: the rows of a
// request land at the start of kbuf / vbuf, so a small chunk stays in cache
// between its decoding and the kernel that reads it.
//
// V's overflow guard runs on each decoded V chunk when the V operand is not
// bounded (BF16, NVFP4 with a large global scale): the chunk's largest
// finite magnitude comes from its decoding (loadRowsMax; in registers for
// BF16), not from a separate pass over the narrow source, which would be
// the first touch of the block in DRAM. When it raises the shift, the O
// accumulated so far (this block's earlier chunks included) is rescaled;
// powers of two commute with alpha and the FMAs, so the result equals the
// whole-block guard (vScale.block) bit for bit, except where values become
// subnormal under the shift (the chunked form keeps more of those bits).
type kvStager struct {
	k, v       *Operand
	l          *KVLayout
	b, h, t0   int
	kbuf, vbuf []float32
	vs         *vScale // V's overflow guard shift, applied to each V chunk
	acc        oScaler // the accumulator vs rescales when it raises its shift
	scan       bool    // V is not bounded (vBounded): scan every chunk
	// foldK and foldV stage K or V rows as value / e4m3Fold
	// (decodeE4M3Fold); the accumulation that reads them puts the factor
	// back (decodeTile).
	foldK, foldV bool
}

// StageK decodes key rows [i0, i1) of the block.
func (s *kvStager) StageK(i0, i1 int) []float32 {
	d := s.k.D
	loadRows(s.k, s.l, s.b, s.h, s.t0+i0, i1-i0, s.kbuf, s.foldK)
	return s.kbuf[:(i1-i0)*d]
}

// RawK returns the storage of key rows [i0, i1) when they are one
// contiguous run of rows the lane kernels widen or read themselves
// (tile.WideningStager, rawFormat), else nil.
func (s *kvStager) RawK(i0, i1 int) (unsafe.Pointer, tile.RawFormat) {
	return s.rawRun(s.k, i0, i1, s.foldK)
}

// RawV is RawK for the value rows; scan when V's overflow guard scans each
// chunk (GuardV then applies it), nil when the guard's shift is raised on
// a V that is not scanned (it cannot be: bounded V never raises it).
func (s *kvStager) RawV(i0, i1 int) (unsafe.Pointer, tile.RawFormat, bool) {
	if !s.scan && s.vs.e != 0 {
		return nil, tile.RawNone, false
	}
	p, f := s.rawRun(s.v, i0, i1, s.foldV)
	return p, f, s.scan
}

// GuardV is StageV's guard on a V chunk the lane kernels widened: maxBits
// is its largest finite magnitude.
func (s *kvStager) GuardV(v []float32, maxBits uint32) {
	s.vs.raise(maxBits, s.acc)
	s.vs.apply(v)
}

// rawRun returns the storage of rows [i0, i1) of o and its format when
// they are one run of rows the lane kernels may widen (rawFormat; fold:
// the stager stages o's rows as value / e4m3Fold).
func (s *kvStager) rawRun(o *Operand, i0, i1 int, fold bool) (unsafe.Pointer, tile.RawFormat) {
	f := o.rawFormat(fold)
	if f == tile.RawNone {
		return nil, tile.RawNone
	}
	r, c := s.l.Run(s.b, s.h, s.t0+i0, i1-i0)
	if c < i1-i0 {
		return nil, tile.RawNone
	}
	p, _ := o.storage(r, c)
	return p, f
}

// rawFormat is the format in which the lane kernels may read o's rows
// themselves: e4m3fn rows decoded by the AVX-512 code (tile.Lanes reads
// them through its table or widens them with AVX512_VBMI, and has the
// stager stage them where it can do neither), bf16 rows decoded by the
// AVX-512 code, bf16 rows decoded by the AVX2 code (the AVX2 lane kernels
// read them in place), and e4m3fn rows the AVX2 code stages folded (fold:
// decodeE4M3Fold, whose values the AVX2 lane kernels look up in place);
// else tile.RawNone. Every e4m3fn and bf16 decoder widens exactly.
func (o *Operand) rawFormat(fold bool) tile.RawFormat {
	switch {
	case o.Dtype == BF16 && (o.vec == vecAVX512 || o.vec == vecAVX2):
		return tile.RawBF16
	case o.vec == vecAVX512 && o.Dtype == E4M3:
		return tile.RawE4M3
	case o.vec == vecAVX2 && o.Dtype == E4M3 && fold:
		return tile.RawE4M3Div256
	}
	return tile.RawNone
}

// StageV decodes value rows [i0, i1) of the block.
func (s *kvStager) StageV(i0, i1 int) []float32 {
	d := s.v.D
	v := s.vbuf[:(i1-i0)*d]
	if s.scan {
		// The guard's scan of the chunk happens while decoding it.
		s.vs.raise(loadRowsMax(s.v, s.l, s.b, s.h, s.t0+i0, i1-i0, v), s.acc)
	} else {
		loadRows(s.v, s.l, s.b, s.h, s.t0+i0, i1-i0, v, s.foldV)
	}
	s.vs.apply(v)
	return v
}

package lowp

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// table reads one file written by testdata/gen_tables.py (see its header
// for the format).
type table struct {
	t    testing.TB
	name string
	b    []byte
}

func openTable(t testing.TB, name string) *table {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !bytes.HasPrefix(b, []byte("LOWPTBL1")) {
		t.Fatalf("%s: bad magic", name)
	}
	tb := &table{t: t, name: name, b: b[8:]}
	n := tb.u32()
	ver := string(tb.bytes(int(n)))
	t.Logf("%s: generated with %s", name, ver)
	return tb
}

func (tb *table) bytes(n int) []byte {
	if n > len(tb.b) {
		tb.t.Fatalf("%s: truncated", tb.name)
	}
	p := tb.b[:n]
	tb.b = tb.b[n:]
	return p
}

func (tb *table) u32() uint32 { return binary.LittleEndian.Uint32(tb.bytes(4)) }

// u32s reads n byte-planar uint32s.
func (tb *table) u32s(n int) []uint32 {
	p := tb.bytes(4 * n)
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(p[i]) | uint32(p[n+i])<<8 | uint32(p[2*n+i])<<16 | uint32(p[3*n+i])<<24
	}
	return out
}

// u16s reads n byte-planar uint16s.
func (tb *table) u16s(n int) []uint16 {
	p := tb.bytes(2 * n)
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16(p[i]) | uint16(p[n+i])<<8
	}
	return out
}

func (tb *table) done() {
	if len(tb.b) != 0 {
		tb.t.Fatalf("%s: %d trailing bytes", tb.name, len(tb.b))
	}
}

func f32s(bits []uint32) []float32 {
	out := make([]float32, len(bits))
	for i, b := range bits {
		out[i] = math.Float32frombits(b)
	}
	return out
}

func isNaN32(f float32) bool { return f != f }

// maxErrs caps the failures reported per check.
const maxErrs = 20

type errCount struct {
	t *testing.T
	n int
}

func (e *errCount) errorf(format string, args ...any) {
	e.t.Helper()
	e.n++
	if e.n <= maxErrs {
		e.t.Errorf(format, args...)
	} else if e.n == maxErrs+1 {
		e.t.Errorf("... more errors suppressed")
	}
}

func TestDecodeTables(t *testing.T) {
	tb := openTable(t, "decode.bin.gz")
	bf, hf, e8, e4 := tb.u32s(65536), tb.u32s(65536), tb.u32s(256), tb.u32s(16)
	tb.done()
	ec := &errCount{t: t}

	bsrc := make([]BFloat16, 65536)
	hsrc := make([]Float16, 65536)
	for i := range bsrc {
		bsrc[i], hsrc[i] = BFloat16(i), Float16(i)
	}
	dst := make([]float32, 65536)
	// bfloat16 and float16: exact bits, NaN payloads included (ml_dtypes and
	// numpy keep them too).
	DecodeBF16(dst, bsrc)
	for i, want := range bf {
		if got := math.Float32bits(BFloat16(i).Float32()); got != want {
			ec.errorf("BFloat16(%#04x).Float32() = %#08x, want %#08x", i, got, want)
		}
		if got := math.Float32bits(dst[i]); got != want {
			ec.errorf("DecodeBF16 %#04x = %#08x, want %#08x", i, got, want)
		}
	}
	DecodeF16(dst, hsrc)
	for i, want := range hf {
		if got := math.Float32bits(Float16(i).Float32()); got != want {
			ec.errorf("Float16(%#04x).Float32() = %#08x, want %#08x", i, got, want)
		}
		if got := math.Float32bits(dst[i]); got != want {
			ec.errorf("DecodeF16 %#04x = %#08x, want %#08x", i, got, want)
		}
	}
	esrc := make([]Float8E4M3FN, 256)
	for i := range esrc {
		esrc[i] = Float8E4M3FN(i)
	}
	DecodeE4M3(dst, esrc)
	for i, want := range e8 {
		if got := math.Float32bits(Float8E4M3FN(i).Float32()); got != want {
			ec.errorf("Float8E4M3FN(%#02x).Float32() = %#08x, want %#08x", i, got, want)
		}
		if got := math.Float32bits(dst[i]); got != want {
			ec.errorf("DecodeE4M3 %#02x = %#08x, want %#08x", i, got, want)
		}
	}
	for i, want := range e4 {
		for _, hi := range []uint8{0, 0x50, 0xf0} {
			if got := math.Float32bits(E2M1Value(uint8(i) | hi)); got != want {
				ec.errorf("E2M1Value(%#02x) = %#08x, want %#08x", uint8(i)|hi, got, want)
			}
		}
	}
}

// TestRoundTrip checks that every finite pattern survives decode then encode.
func TestRoundTrip(t *testing.T) {
	ec := &errCount{t: t}
	for i := range 65536 {
		b, h := BFloat16(i), Float16(i)
		if f := b.Float32(); !isNaN32(f) && BF16(f) != b {
			ec.errorf("BF16(%v) = %#04x, want %#04x", f, BF16(f), b)
		}
		if f := h.Float32(); !isNaN32(f) && F16(f) != h {
			ec.errorf("F16(%v) = %#04x, want %#04x", f, F16(f), h)
		}
	}
	for i := range 256 {
		e := Float8E4M3FN(i)
		f := e.Float32()
		if isNaN32(f) {
			continue
		}
		if E4M3(f) != e || E4M3Sat(f) != e {
			ec.errorf("E4M3(%v) = %#02x, E4M3Sat = %#02x, want %#02x", f, E4M3(f), E4M3Sat(f), e)
		}
	}
	for i := range uint8(16) {
		if got := E2M1(E2M1Value(i)); got != i {
			ec.errorf("E2M1(%v) = %#x, want %#x", E2M1Value(i), got, i)
		}
	}
}

// encoder checks one encoder over inputs against ml_dtypes' results.
// nanOK decides the NaN inputs, for which the Go result deliberately
// differs or ml_dtypes' is unspecified; nil means compare bits exactly.
func checkEncoder(t *testing.T, name string, in []uint32, want []uint16,
	enc func(float32) uint16, slice func([]float32) []uint16, nanOK func(in uint32, got, want uint16) bool) {
	ec := &errCount{t: t}
	x := f32s(in)
	got := slice(x)
	nNaN := 0
	for i, f := range x {
		g := enc(f)
		if g != got[i] {
			ec.errorf("%s(%#08x): scalar %#x, slice %#x", name, in[i], g, got[i])
		}
		if isNaN32(f) {
			nNaN++
		}
		if isNaN32(f) && nanOK != nil {
			if !nanOK(in[i], g, want[i]) {
				ec.errorf("%s(NaN %#08x) = %#x (ml_dtypes %#x)", name, in[i], g, want[i])
			}
			continue
		}
		if g != want[i] {
			ec.errorf("%s(%#08x = %g) = %#x, want %#x", name, in[i], f, g, want[i])
		}
	}
	t.Logf("%s: %d inputs (%d NaN) checked", name, len(in), nNaN)
}

func bf16Enc(f float32) uint16 { return uint16(BF16(f)) }
func bf16Slice(x []float32) []uint16 {
	d := make([]BFloat16, len(x))
	EncodeBF16(d, x)
	out := make([]uint16, len(x))
	for i, v := range d {
		out[i] = uint16(v)
	}
	return out
}
func f16Enc(f float32) uint16 { return uint16(F16(f)) }
func f16Slice(x []float32) []uint16 {
	d := make([]Float16, len(x))
	EncodeF16(d, x)
	out := make([]uint16, len(x))
	for i, v := range d {
		out[i] = uint16(v)
	}
	return out
}

// f16NaN: a quiet NaN with the input's sign and top payload bits; numpy's
// result must be a NaN with the same sign.
func f16NaN(in uint32, got, want uint16) bool {
	wantGo := uint16(in>>16)&0x8000 | 0x7e00 | uint16(in>>13)&0x1ff
	return got == wantGo && want&0x7c00 == 0x7c00 && want&0x3ff != 0 && want&0x8000 == got&0x8000
}

func e4m3Enc(f float32) uint16    { return uint16(E4M3(f)) }
func e4m3SatEnc(f float32) uint16 { return uint16(E4M3Sat(f)) }
func e4m3Slice(sat bool) func([]float32) []uint16 {
	return func(x []float32) []uint16 {
		d := make([]Float8E4M3FN, len(x))
		if sat {
			EncodeE4M3Sat(d, x)
		} else {
			EncodeE4M3(d, x)
		}
		out := make([]uint16, len(x))
		for i, v := range d {
			out[i] = uint16(v)
		}
		return out
	}
}
func e2m1Enc(f float32) uint16 { return uint16(E2M1(f)) }
func e2m1Slice(x []float32) []uint16 {
	out := make([]uint16, len(x))
	for i, f := range x {
		out[i] = uint16(E2M1(f))
	}
	return out
}

// e2m1NaN: the documented Go behaviour, NaN -> +0.
func e2m1NaN(_ uint32, got, _ uint16) bool { return got == 0 }

func widen(b []byte) []uint16 {
	out := make([]uint16, len(b))
	for i, v := range b {
		out[i] = uint16(v)
	}
	return out
}

func TestEncodeBF16(t *testing.T) {
	tb := openTable(t, "enc_bf16.bin.gz")
	n := int(tb.u32())
	in, want := tb.u32s(n), tb.u16s(n)
	tb.done()
	checkEncoder(t, "BF16", in, want, bf16Enc, bf16Slice, nil)
}

func TestEncodeF16(t *testing.T) {
	tb := openTable(t, "enc_f16.bin.gz")
	n := int(tb.u32())
	in, want := tb.u32s(n), tb.u16s(n)
	tb.done()
	checkEncoder(t, "F16", in, want, f16Enc, f16Slice, f16NaN)
}

func TestEncodeE4M3(t *testing.T) {
	tb := openTable(t, "enc_e4m3.bin.gz")
	n := int(tb.u32())
	in, want, wantSat := tb.u32s(n), widen(tb.bytes(n)), widen(tb.bytes(n))
	tb.done()
	checkEncoder(t, "E4M3", in, want, e4m3Enc, e4m3Slice(false), nil)
	checkEncoder(t, "E4M3Sat", in, wantSat, e4m3SatEnc, e4m3Slice(true), nil)
}

func TestEncodeE2M1(t *testing.T) {
	tb := openTable(t, "enc_e2m1.bin.gz")
	n := int(tb.u32())
	in, want := tb.u32s(n), widen(tb.bytes(n))
	tb.done()
	checkEncoder(t, "E2M1", in, want, e2m1Enc, e2m1Slice, e2m1NaN)
}

func TestEncodeRandom(t *testing.T) {
	tb := openTable(t, "enc_random.bin.gz")
	n := int(tb.u32())
	in := tb.u32s(n)
	bf, hf := tb.u16s(n), tb.u16s(n)
	e8, e8s, e4 := widen(tb.bytes(n)), widen(tb.bytes(n)), widen(tb.bytes(n))
	tb.done()
	checkEncoder(t, "BF16", in, bf, bf16Enc, bf16Slice, nil)
	checkEncoder(t, "F16", in, hf, f16Enc, f16Slice, f16NaN)
	checkEncoder(t, "E4M3", in, e8, e4m3Enc, e4m3Slice(false), nil)
	checkEncoder(t, "E4M3Sat", in, e8s, e4m3SatEnc, e4m3Slice(true), nil)
	checkEncoder(t, "E2M1", in, e4, e2m1Enc, e2m1Slice, e2m1NaN)
}

type nvfp4Case struct {
	rows, d        int
	gs             float32
	x              []float32
	packed, scales []byte
}

func loadNVFP4(t testing.TB) []nvfp4Case {
	tb := openTable(t, "nvfp4.bin.gz")
	var cs []nvfp4Case
	for range tb.u32() {
		var c nvfp4Case
		c.rows, c.d = int(tb.u32()), int(tb.u32())
		c.gs = math.Float32frombits(tb.u32s(1)[0])
		c.x = f32s(tb.u32s(c.rows * c.d))
		c.packed = tb.bytes(c.rows * c.d / 2)
		pr, pc := Scale128x4Shape(c.rows, c.d/16)
		c.scales = tb.bytes(pr * pc)
		cs = append(cs, c)
	}
	tb.done()
	return cs
}

func TestNVFP4Tables(t *testing.T) {
	for i, c := range loadNVFP4(t) {
		t.Run(fmt.Sprintf("%d_%dx%d_gs%g", i, c.rows, c.d, c.gs), func(t *testing.T) {
			packed, scales, err := QuantizeNVFP4(c.x, c.rows, c.d, c.gs)
			if err != nil {
				t.Fatal(err)
			}
			ec := &errCount{t: t}
			if len(packed) != len(c.packed) || len(scales) != len(c.scales) {
				t.Fatalf("len(packed), len(scales) = %d, %d, want %d, %d", len(packed), len(scales), len(c.packed), len(c.scales))
			}
			for j := range packed {
				if packed[j] != c.packed[j] {
					ec.errorf("packed[%d] (row %d) = %#02x, want %#02x", j, j/(c.d/2), packed[j], c.packed[j])
				}
			}
			for j := range scales {
				if scales[j] != c.scales[j] {
					ec.errorf("scales[%d] = %#02x, want %#02x", j, scales[j], c.scales[j])
				}
			}
			// Dequantise the expected bytes: each value is the exact
			// product e2m1 * scale * gs rounded once to float32.
			cols := c.d / 16
			row := make([]float32, c.d)
			bs := make([]Float8E4M3FN, cols)
			row2 := make([]float32, c.d)
			for r := range c.rows {
				DequantizeNVFP4Row(row, c.packed, c.scales, r, c.d, c.gs)
				GatherScales128x4(bs, c.scales, r, cols)
				DecodeNVFP4Row(row2, c.packed[r*c.d/2:(r+1)*c.d/2], bs, c.gs)
				for j := range c.d {
					nib := c.packed[(r*c.d+j)/2] >> (4 * (j & 1)) & 15
					s := Float8E4M3FN(c.scales[Scale128x4Offset(r, j/16, cols)]).Float32()
					want := float32(float64(E2M1Value(nib)) * float64(s) * float64(c.gs))
					if math.Float32bits(row[j]) != math.Float32bits(want) || math.Float32bits(row2[j]) != math.Float32bits(want) {
						ec.errorf("row %d elem %d: Dequantize %g, Decode %g, want %g", r, j, row[j], row2[j], want)
					}
				}
				checkBound(ec, c.x[r*c.d:(r+1)*c.d], row, c.packed, c.scales, r, c.d, c.gs)
			}
		})
	}
}

// checkBound checks |dequantised - x| per element against the NVFP4 error
// bound: with u = scale*gs, an element of magnitude y = |x|/u <= 6 is off by
// at most half the E2M1 spacing at y (0.25, 0.5 or 1, times u); above 6 it
// saturates, off by |x| - 6u. A zero scale leaves the block's values
// <= 6 * 2^-10 * gs (the scale rounded to 0).
func checkBound(ec *errCount, x, deq []float32, packed, scales []byte, r, d int, gs float32) {
	ec.t.Helper()
	cols := d / 16
	for j, v := range x {
		s := float64(Float8E4M3FN(scales[Scale128x4Offset(r, j/16, cols)]).Float32())
		u := s * float64(gs)
		a := math.Abs(float64(v))
		var bound float64
		switch y := a / u; {
		case u == 0:
			bound = 6 * math.Ldexp(1, -10) * float64(gs)
			if a > bound*(1+1e-6) || deq[j] != 0 {
				ec.errorf("row %d elem %d: zero scale but x = %g, deq = %g", r, j, v, deq[j])
			}
			continue
		case y <= 2:
			bound = 0.25 * u
		case y <= 4:
			bound = 0.5 * u
		case y <= 6:
			bound = u
		default:
			bound = a - 6*u
		}
		// float32 rounding of the quotient and of the dequantised product.
		bound = bound*(1+1e-6) + 1e-6*a + 1e-45
		if e := math.Abs(float64(deq[j]) - float64(v)); !(e <= bound) {
			ec.errorf("row %d elem %d: x = %g, deq = %g, error %g > bound %g (scale %g)", r, j, v, deq[j], e, bound, s)
		}
	}
}

package lowp

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestScale128x4Bijection(t *testing.T) {
	for _, rows := range []int{1, 31, 32, 127, 128, 129, 300, 513} {
		for _, cols := range []int{1, 2, 3, 4, 5, 8, 9, 16} {
			pr, pc := Scale128x4Shape(rows, cols)
			if pr%128 != 0 || pc%4 != 0 || pr < rows || pr-rows >= 128 || pc < cols || pc-cols >= 4 {
				t.Fatalf("Scale128x4Shape(%d, %d) = %d, %d", rows, cols, pr, pc)
			}
			seen := make([]bool, pr*pc)
			for r := range pr {
				for c := range pc {
					o := Scale128x4Offset(r, c, cols)
					if o < 0 || o >= len(seen) || seen[o] {
						t.Fatalf("rows %d cols %d: offset(%d, %d) = %d is out of range or repeated", rows, cols, r, c, o)
					}
					seen[o] = true
				}
			}
		}
	}
	// Spot values straight from the formula in contract §6.
	for _, tc := range []struct{ r, c, cols, want int }{
		{0, 0, 4, 0}, {0, 3, 4, 3}, {1, 0, 4, 16}, {32, 0, 4, 4}, {127, 3, 4, 511},
		{128, 0, 4, 512}, {0, 4, 8, 512}, {128, 0, 8, 1024}, {33, 5, 8, 512 + 16 + 4 + 1},
	} {
		if got := Scale128x4Offset(tc.r, tc.c, tc.cols); got != tc.want {
			t.Errorf("Scale128x4Offset(%d, %d, %d) = %d, want %d", tc.r, tc.c, tc.cols, got, tc.want)
		}
	}
}

func TestQuantizeNVFP4Errors(t *testing.T) {
	x := make([]float32, 32)
	for _, tc := range []struct {
		x       []float32
		rows, d int
		gs      float32
	}{
		{x, -1, 32, 1},
		{x, 1, 0, 1},
		{x, 2, 8, 1},
		{x, 1, 24, 1},
		{x, 2, 32, 1},
		{x, 1, 32, 0},
		{x, 1, 32, -1},
		{x, 1, 32, float32(math.NaN())},
		{x, 1, 32, float32(math.Inf(1))},
	} {
		if p, s, err := QuantizeNVFP4(tc.x, tc.rows, tc.d, tc.gs); err == nil || p != nil || s != nil {
			t.Errorf("QuantizeNVFP4(len %d, %d, %d, %v): err = %v, want an error", len(tc.x), tc.rows, tc.d, tc.gs, err)
		} else {
			t.Log(err)
		}
	}
	p, s, err := QuantizeNVFP4(nil, 0, 16, 1)
	if err != nil || len(p) != 0 || len(s) != 0 {
		t.Errorf("QuantizeNVFP4 of 0 rows: %v, %v, %v", p, s, err)
	}
	// A tiny positive global scale is valid.
	if _, _, err := QuantizeNVFP4(x, 1, 32, math.SmallestNonzeroFloat32); err != nil {
		t.Error(err)
	}
}

func TestNVFP4Special(t *testing.T) {
	x := make([]float32, 64)
	for i := range x {
		x[i] = float32(i%16) - 7
	}
	x[3] = float32(math.NaN())          // block 0
	x[16+5] = float32(math.Inf(-1))     // block 1
	copy(x[32:48], make([]float32, 16)) // block 2: all zero
	x[48] = 1e-30                       // block 3: scale rounds to 0
	for i := 49; i < 64; i++ {
		x[i] = 0
	}
	packed, scales, err := QuantizeNVFP4(x, 1, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(scales) != 128*4 {
		t.Fatalf("len(scales) = %d", len(scales))
	}
	if s := scales[Scale128x4Offset(0, 0, 4)]; s != 0x7f {
		t.Errorf("NaN block scale = %#x, want 0x7f", s)
	}
	if s := scales[Scale128x4Offset(0, 1, 4)]; s != 0x7e {
		t.Errorf("-inf block scale = %#x, want 0x7e (448)", s)
	}
	for i, s := range scales {
		if i >= 4 && s != 0 {
			t.Fatalf("padding byte %d = %#x, want 0", i, s)
		}
	}
	for i := range 8 {
		if packed[i] != 0 {
			t.Errorf("NaN block packed[%d] = %#x, want 0", i, packed[i])
		}
	}
	if n := packed[8+2] >> 4; n != 0xf {
		t.Errorf("-inf element nibble = %#x, want 0xf (-6)", n)
	}
	for i := 16; i < 32; i++ {
		if packed[i] != 0 {
			t.Errorf("zero-scale block packed[%d] = %#x, want 0", i, packed[i])
		}
	}
	row := make([]float32, 64)
	DequantizeNVFP4Row(row, packed, scales, 0, 64, 1)
	for i := range 16 {
		if !isNaN32(row[i]) {
			t.Errorf("NaN block dequantised[%d] = %v, want NaN", i, row[i])
		}
	}
	if row[16+5] != -6*448 {
		t.Errorf("-inf element dequantised to %v, want %v", row[21], -6*448)
	}
	for i := 32; i < 64; i++ {
		if row[i] != 0 {
			t.Errorf("dequantised[%d] = %v, want 0", i, row[i])
		}
	}
}

// TestNVFP4ErrorBound quantises random matrices over a wide range of
// magnitudes and global scales and checks the round-trip error bound.
func TestNVFP4ErrorBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ec := &errCount{t: t}
	for trial := range 40 {
		rows, d := 1+rng.IntN(200), 16*(1+rng.IntN(12))
		x := make([]float32, rows*d)
		for b := 0; b < len(x); b += 16 { // block magnitudes 2^-40 .. 2^40, 10% zeros
			mag := math.Exp2(float64(rng.IntN(81) - 40))
			for i := b; i < b+16; i++ {
				switch rng.IntN(10) {
				case 0:
					x[i] = 0
				default:
					x[i] = float32(rng.NormFloat64() * mag)
				}
			}
		}
		gs := float32(math.Exp2(float64(rng.IntN(41) - 20)))
		if trial%2 == 0 {
			gs *= float32(1 + rng.Float64())
		}
		packed, scales, err := QuantizeNVFP4(x, rows, d, gs)
		if err != nil {
			t.Fatal(err)
		}
		row := make([]float32, d)
		for r := range rows {
			DequantizeNVFP4Row(row, packed, scales, r, d, gs)
			checkBound(ec, x[r*d:(r+1)*d], row, packed, scales, r, d, gs)
		}
	}
	// With the usual global scale amax/(6*448) (no saturation, no zero
	// scales) every element is within u = scale*gs of x, and u is at most
	// (1 + 1/16) * blockAmax/6 < blockAmax/4.
	x := make([]float32, 64*128)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 3)
	}
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	gs := amax / (6 * 448)
	packed, scales, err := QuantizeNVFP4(x, 64, 128, gs)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, 128)
	for r := range 64 {
		DequantizeNVFP4Row(row, packed, scales, r, 128, gs)
		for b := 0; b < 128; b += 16 {
			var bmax float64
			for _, v := range x[r*128+b : r*128+b+16] {
				bmax = math.Max(bmax, math.Abs(float64(v)))
			}
			for j := b; j < b+16; j++ {
				if e := math.Abs(float64(row[j] - x[r*128+j])); e > bmax/4 {
					ec.errorf("row %d elem %d: error %g > block amax/4 = %g", r, j, e, bmax/4)
				}
			}
		}
	}
}

func TestE2M1Ties(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		want uint8
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 8}, {0.25, 0}, {0.2500001, 1}, {0.75, 2}, {0.7499999, 1},
		{1.25, 2}, {1.2500001, 3}, {1.75, 4}, {1.7499999, 3}, {2.5, 4}, {2.5000002, 5}, {3.5, 6}, {3.4999998, 5},
		{5, 6}, {5.0000005, 7}, {6, 7}, {7, 7}, {1e30, 7}, {float32(math.Inf(1)), 7}, {float32(math.Inf(-1)), 15},
		{-0.1, 8}, {-5, 14}, {-5.0000005, 15}, {float32(math.NaN()), 0}, {-float32(math.NaN()), 0},
	} {
		if got := E2M1(tc.f); got != tc.want {
			t.Errorf("E2M1(%v) = %#x, want %#x", tc.f, got, tc.want)
		}
	}
}

func TestSpecialValues(t *testing.T) {
	nan := float32(math.NaN())
	negNaN := math.Float32frombits(0xffc00001)
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		name      string
		got, want uint32
	}{
		{"BF16(NaN)", uint32(BF16(nan)), 0x7fc0},
		{"BF16(-NaN)", uint32(BF16(negNaN)), 0xffc0},
		{"BF16(sNaN)", uint32(BF16(math.Float32frombits(0x7f800001))), 0x7fc0},
		{"BF16(max)", uint32(BF16(math.MaxFloat32)), 0x7f80},
		{"BF16(-inf)", uint32(BF16(-inf)), 0xff80},
		{"F16(65504)", uint32(F16(65504)), 0x7bff},
		{"F16(65519.998)", uint32(F16(math.Nextafter32(65520, 0))), 0x7bff},
		{"F16(65520)", uint32(F16(65520)), 0x7c00},
		{"F16(2^-24)", uint32(F16(0x1p-24)), 0x0001},
		{"F16(2^-25)", uint32(F16(0x1p-25)), 0x0000},
		{"F16(-2^-25-)", uint32(F16(-math.Nextafter32(0x1p-25, 1))), 0x8001},
		{"F16(sNaN)", uint32(F16(math.Float32frombits(0x7f800001))), 0x7e00},
		{"E4M3(448)", uint32(E4M3(448)), 0x7e},
		{"E4M3(464)", uint32(E4M3(464)), 0x7e},
		{"E4M3(464+)", uint32(E4M3(math.Nextafter32(464, 500))), 0x7f},
		{"E4M3(-inf)", uint32(E4M3(-inf)), 0xff},
		{"E4M3Sat(-inf)", uint32(E4M3Sat(-inf)), 0xfe},
		{"E4M3Sat(1e9)", uint32(E4M3Sat(1e9)), 0x7e},
		{"E4M3Sat(NaN)", uint32(E4M3Sat(nan)), 0x7f},
		{"E4M3Sat(-NaN)", uint32(E4M3Sat(negNaN)), 0xff},
		{"E4M3(2^-10)", uint32(E4M3(0x1p-10)), 0x00},
		{"E4M3(2^-10+)", uint32(E4M3(math.Nextafter32(0x1p-10, 1))), 0x01},
		{"E4M3(-2^-9)", uint32(E4M3(-0x1p-9)), 0x81},
		{"E4M3(15/1024)", uint32(E4M3(15.0 / 1024)), 0x08},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, tc.got, tc.want)
		}
	}
}

func TestDecodePanicsOnShortDst(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("DecodeBF16 into a short dst did not panic")
		}
	}()
	DecodeBF16(make([]float32, 1), make([]BFloat16, 2))
}

// TestDecodeTails checks the slice decoders against the scalar conversions
// for every length 0..9 (the unrolled loops and their tails).
func TestDecodeTails(t *testing.T) {
	for n := range 10 {
		b, h, e := make([]BFloat16, n), make([]Float16, n), make([]Float8E4M3FN, n)
		for i := range n {
			b[i], h[i], e[i] = BFloat16(0x3f81+i*7), Float16(0x3c01+i*13), Float8E4M3FN(0x31+i*5)
		}
		db, dh, de := make([]float32, n+1), make([]float32, n+1), make([]float32, n+1)
		DecodeBF16(db, b)
		DecodeF16(dh, h)
		DecodeE4M3(de, e)
		for i := range n {
			if db[i] != b[i].Float32() || dh[i] != h[i].Float32() || de[i] != e[i].Float32() {
				t.Errorf("n=%d i=%d: %v %v %v, want %v %v %v", n, i, db[i], dh[i], de[i], b[i].Float32(), h[i].Float32(), e[i].Float32())
			}
		}
		if db[n] != 0 || dh[n] != 0 || de[n] != 0 {
			t.Errorf("n=%d: decoder wrote past len(src)", n)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("DecodeNVFP4Row with len(packedRow) = 7 did not panic")
		}
	}()
	DecodeNVFP4Row(make([]float32, 14), make([]uint8, 7), make([]Float8E4M3FN, 1), 1)
}

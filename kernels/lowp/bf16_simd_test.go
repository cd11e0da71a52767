package lowp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBF16SIMD: EncodeBF16 and DecodeBF16 (the AVX-512 kernels where the
// CPU has them) equal the portable loops bit for bit on random bit
// patterns with NaNs of both signs and payloads, infinities, subnormals,
// zeros, ties and values that round up to infinity, for every length up to
// 100 (several 16-element kernel steps and every portable tail) at every
// start offset modulo 16 elements, and write nothing past len(src).
func TestBF16SIMD(t *testing.T) {
	t.Logf("AVX-512 kernels: %v", haveAVX512)
	rng := rand.New(rand.NewPCG(11, 12))
	const maxN, pad = 100, 16
	buf := make([]float32, maxN+pad)
	for i := range buf {
		b := rng.Uint32()
		switch i % 7 {
		case 1:
			b = b&0x8000ffff | 0x7f800000 // NaN (either sign, any payload) or infinity
		case 2:
			b &= 0x807fffff // subnormal or zero
		case 3:
			b = b&0xffff0000 | 0x8000 // a tie
		case 4:
			b = b&0x80000000 | 0x7f7f8000 + b&0x7fff // near the largest finite: rounds to it or to infinity
		case 5:
			b = b&0x80000000 | 0x7fc00000 | b&0x3fffff // quiet NaN with a payload
		}
		buf[i] = math.Float32frombits(b)
	}
	for off := range pad {
		for n := 0; n <= maxN; n++ {
			src := buf[off : off+n]
			got := make([]BFloat16, n+1)
			got[n] = 0x1234
			want := make([]BFloat16, n)
			EncodeBF16(got, src)
			encodeBF16Go(want, src)
			for i := range want {
				if got[i] != want[i] || got[i] != BF16(src[i]) {
					t.Fatalf("offset %d, n %d: EncodeBF16[%d] of %#08x = %#04x, portable loop %#04x, BF16 %#04x",
						off, n, i, math.Float32bits(src[i]), got[i], want[i], BF16(src[i]))
				}
			}
			if got[n] != 0x1234 {
				t.Fatalf("offset %d, n %d: EncodeBF16 wrote past len(src)", off, n)
			}
			dec := make([]float32, n+1)
			dec[n] = 7
			wantDec := make([]float32, n)
			DecodeBF16(dec, got[:n])
			decodeBF16Go(wantDec, got[:n])
			for i := range wantDec {
				if math.Float32bits(dec[i]) != math.Float32bits(wantDec[i]) || math.Float32bits(dec[i]) != uint32(got[i])<<16 {
					t.Fatalf("offset %d, n %d: DecodeBF16[%d] of %#04x = %#08x, portable loop %#08x",
						off, n, i, got[i], math.Float32bits(dec[i]), math.Float32bits(wantDec[i]))
				}
			}
			if dec[n] != 7 {
				t.Fatalf("offset %d, n %d: DecodeBF16 wrote past len(src)", off, n)
			}
		}
	}
}

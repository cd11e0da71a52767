package lowp

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestBF16Workers: the split conversions equal the element rules bit for
// bit on random bit patterns (NaNs, subnormals, infinities and ties
// included) for lengths around the split threshold and every worker
// count, so no chunk boundary drops or converts an element twice.
func TestBF16Workers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	rng := rand.New(rand.NewPCG(5, 9))
	for _, n := range []int{0, 7, minSplit - 1, 2*minSplit + 3, 4*minSplit + 5} {
		src := make([]float32, n)
		for i := range src {
			b := rng.Uint32()
			switch i % 4 {
			case 1:
				b = b&0x8000ffff | 0x7f800000 // NaN or infinity
			case 2:
				b &= 0x807fffff // subnormal or zero
			case 3:
				b = b&0xffff0000 | 0x8000 // a tie
			}
			src[i] = math.Float32frombits(b)
		}
		for _, w := range []int{0, 1, 2, 3, 99} {
			enc := make([]BFloat16, n+1)
			enc[n] = 0x1234 // past the end: untouched
			EncodeBF16Workers(enc, src, w)
			dec := make([]float32, n)
			DecodeBF16Workers(dec, enc[:n], w)
			for i, f := range src {
				if enc[i] != BF16(f) {
					t.Fatalf("n=%d workers=%d: EncodeBF16Workers[%d] = %#04x, BF16 %#04x", n, w, i, enc[i], BF16(f))
				}
				if math.Float32bits(dec[i]) != math.Float32bits(enc[i].Float32()) {
					t.Fatalf("n=%d workers=%d: DecodeBF16Workers[%d] = %#08x, want %#08x", n, w, i, math.Float32bits(dec[i]), math.Float32bits(enc[i].Float32()))
				}
			}
			if enc[n] != 0x1234 {
				t.Fatalf("n=%d workers=%d: wrote past len(src)", n, w)
			}
		}
	}
}

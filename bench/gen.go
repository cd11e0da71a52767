package main

import (
	"math"
	"math/rand/v2"
	"sync"

	"github.com/sparseattn/msa/internal/workload"
	"github.com/sparseattn/msa/kernels/lowp"
)

// Random inputs are drawn from workload.Normals' table of standard-normal
// values already rounded to the storage format, indexed by a fast
// splitmix64 stream (workload.SplitMix): filling a gigabyte of K/V takes
// well under a second this way.

var (
	tablesOnce sync.Once
	bf16Table  []lowp.BFloat16
	fp8Table   []lowp.Float8E4M3FN
)

func tables() {
	tablesOnce.Do(func() {
		n := workload.Normals()
		bf16Table = make([]lowp.BFloat16, len(n))
		fp8Table = make([]lowp.Float8E4M3FN, len(n))
		for i, x := range n {
			bf16Table[i] = lowp.BF16(x)
			fp8Table[i] = lowp.E4M3Sat(x)
		}
	})
}

// fillTable fills dst with entries of table picked by splitmix streams, in
// parallel over workers goroutines (each chunk has its own seed, so the
// result does not depend on the worker count).
func fillTable[T any](dst []T, table []T, seed uint64, workers int) {
	const chunk = 1 << 20
	nChunks := (len(dst) + chunk - 1) / chunk
	var wg sync.WaitGroup
	next := make(chan int, nChunks)
	for c := 0; c < nChunks; c++ {
		next <- c
	}
	close(next)
	mask := uint64(len(table) - 1)
	for w := 0; w < max(1, workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				r := workload.NewSplitMix(seed*0x632be59bd9b4e019 + uint64(c))
				s := dst[c*chunk : min(len(dst), (c+1)*chunk)]
				i := 0
				for ; i+5 <= len(s); i += 5 {
					x := r.Next()
					s[i] = table[x&mask]
					s[i+1] = table[(x>>12)&mask]
					s[i+2] = table[(x>>24)&mask]
					s[i+3] = table[(x>>36)&mask]
					s[i+4] = table[(x>>48)&mask]
				}
				for ; i < len(s); i++ {
					s[i] = table[r.Next()&mask]
				}
			}
		}()
	}
	wg.Wait()
}

// normals returns n float32 standard-normal values (for NVFP4 quantisation).
func normals(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 3))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// ---- Independent decoders used by the float64 reference (-verify). They
// re-implement the formats from docs/contract.md instead of calling the kernels'
// conversion code.

func bf16Val(b lowp.BFloat16) float64 { return float64(math.Float32frombits(uint32(b) << 16)) }

// e4m3Val decodes OCP E4M3FN: bias 7, no infinities, S.1111.111 = NaN.
func e4m3Val(x lowp.Float8E4M3FN) float64 {
	b := uint8(x)
	sign := 1.0
	if b&0x80 != 0 {
		sign = -1
	}
	e := int(b>>3) & 15
	m := float64(b & 7)
	switch {
	case e == 15 && m == 7:
		return math.NaN()
	case e == 0:
		return sign * m / 8 * math.Ldexp(1, -6)
	}
	return sign * (1 + m/8) * math.Ldexp(1, e-7)
}

var e2m1Mag = [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// e2m1Val decodes one E2M1 nibble: bit 3 sign, magnitudes e2m1Mag.
func e2m1Val(n uint8) float64 {
	v := e2m1Mag[n&7]
	if n&8 != 0 {
		return -v
	}
	return v
}

// scaleOffset is the cuBLAS 128x4 tiled layout of docs/contract.md §6.
func scaleOffset(r, c, cols int) int {
	return (r/128*((cols+3)/4)+c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + c%4
}

// rowSource decodes one stored row (flattened leading dims) of d values.
type rowSource interface {
	row(r, d int) []float64
}

type bf16Rows []lowp.BFloat16

func (s bf16Rows) row(r, d int) []float64 {
	out := make([]float64, d)
	for c := range out {
		out[c] = bf16Val(s[r*d+c])
	}
	return out
}

type fp8Rows []lowp.Float8E4M3FN

func (s fp8Rows) row(r, d int) []float64 {
	out := make([]float64, d)
	for c := range out {
		out[c] = e4m3Val(s[r*d+c])
	}
	return out
}

// nvfp4Rows holds packed E2M1 pairs ([rows][d/2]), E4M3 block scales in the
// 128x4 layout and a global scale.
type nvfp4Rows struct {
	packed, scales []uint8
	global         float64
}

func (s nvfp4Rows) row(r, d int) []float64 {
	out := make([]float64, d)
	cols := d / 16
	for c := range out {
		b := s.packed[r*d/2+c/2]
		n := b & 15
		if c%2 == 1 {
			n = b >> 4
		}
		sc := e4m3Val(lowp.Float8E4M3FN(s.scales[scaleOffset(r, c/16, cols)]))
		out[c] = e2m1Val(n) * sc * s.global
	}
	return out
}

package lowp

import (
	"math/rand/v2"
	"testing"
)

const benchN = 4096

func BenchmarkDecodeBF16(b *testing.B) {
	src := make([]BFloat16, benchN)
	for i := range src {
		src[i] = BFloat16(rand.Uint32())
	}
	dst := make([]float32, benchN)
	b.SetBytes(benchN * 2)
	for b.Loop() {
		DecodeBF16(dst, src)
	}
}

func BenchmarkDecodeF16(b *testing.B) {
	src := make([]Float16, benchN)
	for i := range src {
		src[i] = Float16(rand.Uint32())
	}
	dst := make([]float32, benchN)
	b.SetBytes(benchN * 2)
	for b.Loop() {
		DecodeF16(dst, src)
	}
}

func BenchmarkDecodeE4M3(b *testing.B) {
	src := make([]Float8E4M3FN, benchN)
	for i := range src {
		src[i] = Float8E4M3FN(rand.Uint32())
	}
	dst := make([]float32, benchN)
	b.SetBytes(benchN)
	for b.Loop() {
		DecodeE4M3(dst, src)
	}
}

func BenchmarkDecodeNVFP4Row(b *testing.B) {
	packed := make([]uint8, benchN/2)
	for i := range packed {
		packed[i] = uint8(rand.Uint32())
	}
	scales := make([]Float8E4M3FN, benchN/16)
	for i := range scales {
		scales[i] = Float8E4M3FN(rand.Uint32() & 0x7e)
	}
	dst := make([]float32, benchN)
	b.SetBytes(benchN / 2)
	for b.Loop() {
		DecodeNVFP4Row(dst, packed, scales, 0.5)
	}
}

func BenchmarkEncodeBF16(b *testing.B) {
	src := make([]float32, benchN)
	for i := range src {
		src[i] = float32(rand.NormFloat64())
	}
	dst := make([]BFloat16, benchN)
	b.SetBytes(benchN * 4)
	for b.Loop() {
		EncodeBF16(dst, src)
	}
}

func BenchmarkEncodeE4M3Sat(b *testing.B) {
	src := make([]float32, benchN)
	for i := range src {
		src[i] = float32(rand.NormFloat64())
	}
	dst := make([]Float8E4M3FN, benchN)
	b.SetBytes(benchN * 4)
	for b.Loop() {
		EncodeE4M3Sat(dst, src)
	}
}

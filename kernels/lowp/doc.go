// Package lowp implements the low-precision number formats used by the
// block-sparse attention kernels, with exact, bit-reproducible conversions.
//
// Formats:
//
//   - [BFloat16]: IEEE bfloat16 (8 exponent bits, 7 mantissa bits).
//   - [Float16]: IEEE binary16 (5 exponent bits, 10 mantissa bits).
//   - [Float8E4M3FN]: OCP float8 e4m3fn (bias 7, no infinities, NaN =
//     S.1111.111, largest finite magnitude 448).
//   - E2M1 (OCP float4 e2m1fn) nibbles: bit 3 is the sign, the magnitudes
//     are {0, 0.5, 1, 1.5, 2, 3, 4, 6}; two nibbles are packed per byte,
//     element 2i in the low nibble and element 2i+1 in the high nibble.
//   - NVFP4: E2M1 elements with one E4M3 scale per 16 consecutive elements
//     and a float32 global scale; the scales are stored in the cuBLAS
//     "128x4" tiled layout ([Scale128x4Offset]).
//
// Every encoder rounds to nearest, ties to even, directly from float32
// (a single rounding). The conversions are checked bit-exactly against the
// ml_dtypes Python package: testdata/gen_tables.py writes the tables
// (every bf16, float16, e4m3fn and e2m1 pattern, and for each encoder a
// hard set of float32 inputs: all representable values, all midpoints
// between neighbours and their float32 neighbours, the overflow
// thresholds, subnormals, zeros, infinities, NaNs and random bit
// patterns) and the Go tests compare against them. Deliberate
// differences from ml_dtypes, all documented on the functions concerned:
// [E4M3Sat] has no ml_dtypes counterpart (it is tested against ml_dtypes'
// cast of the input clamped to [-448, 448]); [F16] turns a NaN into a
// quiet NaN keeping the top payload bits (as x86 F16C and Arm do), where
// numpy keeps the payload without setting the quiet bit; [E2M1] maps NaN
// to +0, where ml_dtypes' result is unspecified.
//
// The slice decoders ([DecodeBF16], [DecodeF16], [DecodeE4M3],
// [DecodeNVFP4Row]) are the hot paths of the attention kernels: they are
// table lookups or shifts with no per-element branches.
//
// It imports only the standard library and must not depend on any package
// of this module: every other package builds on it.
package lowp

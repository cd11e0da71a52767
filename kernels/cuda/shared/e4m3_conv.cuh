// e4m3_conv.cuh - E4M3 conversions without conversion hardware: sm_80 has
// no cvt to or from e4m3, and the library conversions there go through an
// F64 emulation. Integer / fp32-bit forms, exact (E4M3 -> BF16 / FP32) or
// with the rounding of cvt.rn.satfinite (FP32 -> E4M3). Host-compilable as
// well (plain C++ without CUDA): hosttest/e4m3_conv_test.cpp checks them against a
// reference over every E4M3 value and millions of roundings.
#ifndef MSA_E4M3_CONV_CUH
#define MSA_E4M3_CONV_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define MSA_CONV_FN __host__ __device__ __forceinline__
#else
#define MSA_CONV_FN inline
#endif

namespace msa {
namespace tc {

MSA_CONV_FN uint32_t msa_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
MSA_CONV_FN float msa_u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// Leading zeros of a nonzero 32-bit value.
MSA_CONV_FN uint32_t msa_clz(uint32_t x) {
#if defined(__CUDA_ARCH__)
    return (uint32_t)__clz(x);
#else
    return (uint32_t)__builtin_clz(x);
#endif
}

// E4M3 byte -> BF16 bits, exact, integer only: a normal value (exponent field
// e != 0) keeps its 3 mantissa bits and rebiases the exponent (bias 7 -> 127:
// + 120); a subnormal m * 2^-9 (m = 1..7) is normalised with a count of the
// leading zeros of m; 0x7F / 0xFF (the only NaN) give a quiet NaN.
MSA_CONV_FN uint32_t e4m3_to_bf16_bits(uint32_t b) {
    const uint32_t s = (b & 0x80u) << 8, e = (b >> 3) & 15u, m = b & 7u;
    uint32_t mag;
    if ((b & 0x7Fu) == 0x7Fu) {
        mag = 0x7FC0u;
    } else if (e != 0u) {
        mag = ((e + 120u) << 7) | (m << 4);
    } else if (m != 0u) {
        const uint32_t lz = msa_clz(m) - 29u;  // leading zeros of m in 3 bits: 2, 1 or 0
        mag = ((120u - lz) << 7) | (((m << (lz + 1u)) & 7u) << 4);
    } else {
        mag = 0u;
    }
    return s | mag;
}
// Four E4M3 bytes of w -> two packed bf16x2 words (bytes 0,1 -> lo; 2,3 -> hi).
MSA_CONV_FN void e4m3x4_to_bf16x4(uint32_t w, uint32_t& lo, uint32_t& hi) {
    lo = e4m3_to_bf16_bits(w & 0xFFu) | (e4m3_to_bf16_bits((w >> 8) & 0xFFu) << 16);
    hi = e4m3_to_bf16_bits((w >> 16) & 0xFFu) | (e4m3_to_bf16_bits(w >> 24) << 16);
}
MSA_CONV_FN float e4m3_to_f32_int(uint32_t b) { return msa_u2f(e4m3_to_bf16_bits(b) << 16); }

// x rounded to the nearest E4M3 value (ties to even, saturating at +-448 like
// cvt.rn.satfinite), returned as a float: normal range (|x| >= 2^-6) rounds
// the fp32 mantissa to 3 bits; below it the E4M3 spacing is 2^-9 (exact
// scaling by powers of two, rintf rounds half to even). NaN stays NaN.
MSA_CONV_FN float round_e4m3_int(float x) {
    const float a = fabsf(x);
    if (!(a == a)) return x;
    float r;
    if (a >= 0.015625f) {
        uint32_t u = msa_f2u(a);
        u += 0x7FFFFu + ((u >> 20) & 1u);
        r = fminf(msa_u2f(u & 0xFFF00000u), 448.f);
    } else {
        r = rintf(a * 512.f) * (1.f / 512.f);
    }
    return copysignf(r, x);
}

// x -> E4M3 byte (cvt.rn.satfinite.e4m3x2.f32 semantics), integer encoding of
// round_e4m3_int's result: exponent e + 7 and 3 mantissa bits for a normal
// value, m = value * 2^9 for a subnormal one; NaN -> 0x7F with x's sign.
MSA_CONV_FN uint32_t f32_to_e4m3_int(float x) {
    const uint32_t sign = (msa_f2u(x) >> 24) & 0x80u;
    if (x != x) return sign | 0x7Fu;
    const float r = fabsf(round_e4m3_int(x));
    uint32_t mag;
    if (r >= 0.015625f) {
        const uint32_t u = msa_f2u(r);
        mag = ((((u >> 23) & 0xFFu) - 120u) << 3) | ((u >> 20) & 7u);
    } else {
        mag = (uint32_t)(r * 512.f);
    }
    return sign | mag;
}

}  // namespace tc
}  // namespace msa

#endif  // MSA_E4M3_CONV_CUH

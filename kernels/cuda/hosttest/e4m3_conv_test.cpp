// hosttest/e4m3_conv_test.cpp - host check of the integer E4M3 conversions of
// e4m3_conv.cuh (plain C++, no CUDA): decode of all 256 E4M3 bytes against
// the format's definition, encode round trip, and the rounding of 2 million
// random floats plus every midpoint between neighbouring E4M3 values against
// a brute-force nearest-value search (ties to even, satfinite at 448).
// Run by names_hopper_ampere_test.go when a C++ compiler is present:
//   c++ -O2 -std=c++17 -I kernels/cuda -o /tmp/conv kernels/cuda/hosttest/e4m3_conv_test.cpp && /tmp/conv
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
#include "shared/e4m3_conv.cuh"
using namespace msa::tc;
// reference decode of an e4m3fn byte
static double ref_val(int b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if ((b & 0x7F) == 0x7F) return NAN;
    double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return s ? -v : v;
}
int main() {
    int bad = 0;
    for (int b = 0; b < 256; ++b) {
        float f = e4m3_to_f32_int(b);
        double r = ref_val(b);
        if (std::isnan(r) ? !std::isnan(f) : (double)f != r || (std::signbit(f) != std::signbit(r))) { printf("decode %02x: %g vs %g\n", b, f, r); bad++; }
        // round trip
        if (!std::isnan(r)) { uint32_t e = f32_to_e4m3_int(f); if (e != (uint32_t)b) { printf("encode %g: %02x vs %02x\n", f, e, b); bad++; } }
    }
    // rounding: nearest e4m3 value, ties to even mantissa (even byte), saturate at 448
    uint32_t seed = 12345; long n = 0;
    auto test = [&](float x) {
        double best = 0; int bb = -1; double bd = 1e300;
        for (int b = 0; b < 0x7F; ++b) { double v = ref_val(b); double d = fabs(fabs((double)x) - v);
            if (d < bd || (d == bd && (b & 1) == 0)) { bd = d; bb = b; best = v; } }
        if (fabs((double)x) > 448) { best = 448; bb = 0x7E; }
        double want = x < 0 ? -best : best;
        float got = round_e4m3_int(x);
        uint32_t enc = f32_to_e4m3_int(x);
        uint32_t wenc = (x < 0 ? 0x80 : 0) | bb;
        if ((double)got != want || enc != wenc) { if (bad < 20) printf("round %.9g: got %.9g (%02x) want %.9g (%02x)\n", x, got, enc, want, wenc); bad++; }
        n++;
    };
    for (int i = 0; i < 2000000; ++i) {
        seed = seed * 1664525u + 1013904223u;
        float x = ldexp((double)(seed >> 8) / (1 << 24), (int)(seed % 24) - 14);
        if (seed & 1) x = -x;
        test(x);
    }
    for (int b = 0; b < 0x7F; ++b) { double v = ref_val(b), w = ref_val(b + 1); if (b + 1 < 0x7F) { test((float)((v + w) / 2)); test(nextafterf((float)((v + w) / 2), 0)); test(nextafterf((float)((v + w) / 2), 1000)); } }
    test(448); test(460); test(464); test(470); test(1e30f); test(INFINITY); test(0.0f); test(1e-30f); test(0.0009765625f); test(0.00097656251f);
    printf("%ld values, %d mismatches\n", n, bad);
    return bad != 0;
}

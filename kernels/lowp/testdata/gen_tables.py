#!/usr/bin/env python3
"""Generate the reference tables for the Go package kernels/lowp.

The expected values come from an implementation independent of the Go code:
ml_dtypes (bfloat16, float8_e4m3fn, float4_e2m1fn) and numpy (float16).

Generated with:  python 3.11.7, ml_dtypes 0.6.0, numpy 2.4.6
Install:         python3 -m pip install ml_dtypes==0.6.0 numpy==2.4.6
Run:             python3 kernels/lowp/testdata/gen_tables.py   (from the repo root,
                 or anywhere: it writes next to itself)

The output is deterministic for a given set of versions (fixed seeds). The
versions actually used are also written into every generated file.

File format. Every file is gzip-compressed and starts with
    b"LOWPTBL1", uint32 n, n bytes of ASCII (the versions line)
followed by sections. All integers are little-endian. An array of N uint32
(or uint16) is stored byte-planar to help gzip: first the N lowest bytes,
then the N next bytes, and so on. A "count" is a uint32.

  decode.bin.gz      bf16 -> f32 bits [65536] u32; f16 -> f32 bits [65536] u32;
                     e4m3fn -> f32 bits [256] u32; e2m1 nibble -> f32 bits [16] u32
  enc_bf16.bin.gz    count N; inputs [N] u32 (float32 bits); bf16 bits [N] u16
  enc_f16.bin.gz     count N; inputs [N] u32; float16 bits [N] u16
  enc_e4m3.bin.gz    count N; inputs [N] u32; E4M3 [N] u8; E4M3Sat [N] u8
  enc_e2m1.bin.gz    count N; inputs [N] u32; e2m1 nibble [N] u8
  enc_random.bin.gz  count N; inputs [N] u32 (uniform random bit patterns);
                     bf16 [N] u16; f16 [N] u16; E4M3 [N] u8; E4M3Sat [N] u8; e2m1 [N] u8
  nvfp4.bin.gz       count C; C cases of: rows u32; d u32; globalScale f32 bits u32;
                     x [rows*d] u32 (float32 bits); packed [rows*d/2] u8;
                     scales [paddedRows*paddedCols] u8 (128x4 layout)

Semantics notes:
  * ml_dtypes has no saturating float8 cast. The E4M3Sat expectation is
    ml_dtypes' float8_e4m3fn cast of the input clamped to [-448, 448]
    (np.clip keeps NaN), which is what CUDA's __NV_SATFINITE conversion does.
  * e2m1 has no NaN; ml_dtypes' result for a NaN input is unspecified (0.6.0
    gives 0x8 / 0x0). The table records it; the Go tests skip it and check the
    documented Go behaviour (NaN -> +0) instead.
  * NVFP4 recipe, per row and per 16-element block along d, all in float32:
        amax = max |x|;  scale = E4M3Sat(amax / 6 / gs)
        q = x / (float(scale) * gs)  (q := 0 where that denominator is 0)
        element = e2m1(q)
    The 128x4 layout is built the way torchao's to_blocked does it (reshape /
    permute of the padded matrix), not from the offset formula.
"""

import gzip
import os
import platform
import struct

import ml_dtypes
import numpy as np

F32 = np.float32
BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E2M1 = ml_dtypes.float4_e2m1fn
F16 = np.float16

VERSIONS = "python=%s ml_dtypes=%s numpy=%s" % (
    platform.python_version(), ml_dtypes.__version__, np.__version__)

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- writing
def planar(a):
    a = np.ascontiguousarray(a)
    if a.dtype.itemsize == 1:
        return a.view(np.uint8).tobytes()
    b = a.view(np.uint8).reshape(a.size, a.dtype.itemsize)
    return np.ascontiguousarray(b.T).tobytes()


def u32(n):
    return struct.pack("<I", n)


def write(name, parts):
    head = b"LOWPTBL1" + u32(len(VERSIONS)) + VERSIONS.encode("ascii")
    data = head + b"".join(parts)
    path = os.path.join(HERE, name)
    with open(path, "wb") as f:
        # mtime=0 keeps the output reproducible.
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=9, mtime=0) as g:
            g.write(data)
    print("%-18s %8d bytes raw, %8d gz" % (name, len(data), os.path.getsize(path)))


# ---------------------------------------------------------------- casts
def bits32(x):
    return np.asarray(x, dtype=F32).view(np.uint32)


def from_bits32(b):
    return np.asarray(b, dtype=np.uint32).view(F32)


def to_bf16(x):
    return x.astype(BF16).view(np.uint16)


def to_f16(x):
    return x.astype(F16).view(np.uint16)


def to_e4m3(x):
    return x.astype(E4M3).view(np.uint8)


def to_e4m3_sat(x):
    return np.clip(x, F32(-448), F32(448)).astype(E4M3).view(np.uint8)


def to_e2m1(x):
    return x.astype(E2M1).view(np.uint8) & np.uint8(0xF)


# ---------------------------------------------------------------- decode tables
def decode_tables():
    bf = np.arange(65536, dtype=np.uint16).view(BF16).astype(F32)
    hf = np.arange(65536, dtype=np.uint16).view(F16).astype(F32)
    e8 = np.arange(256, dtype=np.uint8).view(E4M3).astype(F32)
    e4 = np.arange(16, dtype=np.uint8).view(E2M1).astype(F32)
    write("decode.bin.gz", [planar(bits32(bf)), planar(bits32(hf)),
                            planar(bits32(e8)), planar(bits32(e4))])
    return bf, hf, e8, e4


# ---------------------------------------------------------------- hard inputs
SPECIAL_BITS = np.array([
    0x00000000, 0x80000000,              # zeros
    0x7f800000, 0xff800000,              # infinities
    0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7fffffff,
    0xffffffff, 0x7fe12345, 0xffa5a5a5, 0x7f808000, 0x7f80ffff,   # NaNs
    0x00000001, 0x80000001, 0x00000002, 0x007fffff, 0x807fffff,   # f32 subnormals
    0x00400000, 0x00800000, 0x80800000,
    0x7f7fffff, 0xff7fffff,              # float32 max
], dtype=np.uint32)


def neighbours(v, k=2):
    """v and its float32 neighbours up to k ulps away (both directions)."""
    out = [v]
    up, dn = v, v
    for _ in range(k):
        up = np.nextafter(up, F32(np.inf))
        dn = np.nextafter(dn, F32(-np.inf))
        out += [up, dn]
    return np.concatenate(out)


def hard_inputs(values, next_above_max, rng, n_range=60000, extra=()):
    """Every representable value, every midpoint between neighbours (and above
    the largest value), each with float32 neighbours, values around the
    overflow threshold, float32 subnormals, specials and random values within
    the format's range."""
    v = np.unique(np.abs(values[np.isfinite(values)]).astype(np.float64))
    top = float(v[-1])
    ext = np.append(v, next_above_max)
    mids64 = (ext[:-1] + ext[1:]) / 2
    mids = mids64.astype(F32)
    fin = np.isfinite(mids)
    assert np.all(mids[fin].astype(np.float64) == mids64[fin]), "midpoint not exact in float32"
    with np.errstate(over="ignore"):
        base = np.concatenate([v.astype(F32), mids])
    base = base[np.isfinite(base)]
    pts = neighbours(base, 2)
    # around the overflow threshold
    with np.errstate(over="ignore"):
        over = np.concatenate([
            np.linspace(top, min(2 * float(next_above_max), 3e38), 2001).astype(F32),
            neighbours(np.array([top, next_above_max, 2 * top, 3.4e38], dtype=F32), 8),
        ])
    over = over[np.isfinite(over)]
    # random values spanning the format's exponent range, a little beyond
    lo = np.log2(float(v[v > 0][0])) - 3
    hi = np.log2(top) + 2
    e = rng.uniform(lo, hi, n_range)
    with np.errstate(over="ignore"):
        r = (np.exp2(e) * rng.uniform(1, 2, n_range)).astype(F32)
    f32sub = from_bits32(rng.integers(1, 0x800000, 2000, dtype=np.uint32))
    allp = np.concatenate([pts, over, r, f32sub] + [np.asarray(x, dtype=F32) for x in extra])
    allp = np.concatenate([allp, -allp])
    b = np.unique(bits32(allp))
    return np.concatenate([SPECIAL_BITS, b])


def encoders(bf, hf, e8, e4, rng):
    # bfloat16: all values, all midpoints (low 16 bits = 0x8000) and neighbours.
    inp = hard_inputs(bf, 2.0 ** 128, rng)
    x = from_bits32(inp)
    with np.errstate(all="ignore"):
        write("enc_bf16.bin.gz", [u32(len(inp)), planar(inp), planar(to_bf16(x))])

    inp = hard_inputs(hf, 65536.0, rng)
    x = from_bits32(inp)
    with np.errstate(all="ignore"):
        write("enc_f16.bin.gz", [u32(len(inp)), planar(inp), planar(to_f16(x))])

    # e4m3fn and e2m1 are tiny; add the whole bf16 grid (float32 patterns with
    # the low 16 bits 0) for good measure.
    grid = from_bits32(np.arange(65536, dtype=np.uint32) << 16)
    inp = hard_inputs(e8, 480.0, rng, n_range=20000, extra=[grid])
    x = from_bits32(inp)
    with np.errstate(all="ignore"):
        write("enc_e4m3.bin.gz", [u32(len(inp)), planar(inp), planar(to_e4m3(x)),
                                  planar(to_e4m3_sat(x))])

    inp = hard_inputs(e4, 8.0, rng, n_range=20000, extra=[grid])
    x = from_bits32(inp)
    with np.errstate(all="ignore"):
        write("enc_e2m1.bin.gz", [u32(len(inp)), planar(inp), planar(to_e2m1(x))])

    n = 150000
    inp = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    x = from_bits32(inp)
    with np.errstate(all="ignore"):
        write("enc_random.bin.gz", [u32(n), planar(inp), planar(to_bf16(x)), planar(to_f16(x)),
                                    planar(to_e4m3(x)), planar(to_e4m3_sat(x)),
                                    planar(to_e2m1(x))])


# ---------------------------------------------------------------- NVFP4
def to_blocked(m):
    """cuBLAS 128x4 layout of a (rows, cols) uint8 matrix, as torchao's to_blocked."""
    rows, cols = m.shape
    pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
    p = np.zeros((pr, pc), dtype=np.uint8)
    p[:rows, :cols] = m
    blocks = p.reshape(pr // 128, 128, pc // 4, 4).transpose(0, 2, 1, 3)
    return blocks.reshape(-1, 4, 32, 4).transpose(0, 2, 1, 3).reshape(-1).copy()


def quantize_nvfp4(x, gs):
    rows, d = x.shape
    cols = d // 16
    gs = F32(gs)
    blk = x.reshape(rows, cols, 16).astype(F32)
    amax = np.abs(blk).max(axis=2)
    s_in = (amax / F32(6)).astype(F32) / gs
    assert s_in.dtype == F32
    scale = to_e4m3_sat(s_in)
    den = (scale.view(E4M3).astype(F32) * gs).astype(F32)
    with np.errstate(all="ignore"):
        q = (blk / den[:, :, None]).astype(F32)
    q = np.where(den[:, :, None] == 0, F32(0), q)
    el = to_e2m1(q)
    packed = (el[:, :, 0::2] | (el[:, :, 1::2] << np.uint8(4))).reshape(rows, d // 2)
    return packed.reshape(-1), to_blocked(scale)


def nvfp4(rng):
    def matrix(rows, d):
        cols = d // 16
        mag = 10.0 ** rng.uniform(-4, 4, (rows, cols, 1))
        x = (rng.standard_normal((rows, cols, 16)) * mag).astype(F32)
        x[rng.random(x.shape) < 0.05] = 0              # scattered zeros
        x[3, 1, :] = 0                                   # an all-zero block
        x[5] = 0                                         # an all-zero row
        x[7, 0, :] = F32(1e-6) * rng.standard_normal(16)  # scale below e4m3's normal range
        x[8, 0, :] = F32(1e-9)                           # scale rounds to 0
        x[9, 0, :] = F32(3e4)                            # scale saturates (with small gs)
        return x.reshape(rows, d)

    def grid_matrix(rows, d):
        # Exact e2m1 values, midpoints and neighbours times a power of two,
        # with amax = 6 * 2^k so that the scale is exactly 2^k (gs = 1).
        g = np.array([0, .25, .5, .75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6], dtype=F32)
        g = np.concatenate([g, np.nextafter(g, F32(9)), np.nextafter(g, F32(-1))])
        x = rng.choice(g, (rows, d // 16, 16)) * rng.choice([-1, 1], (rows, d // 16, 16))
        x[:, :, 0] = 6
        k = rng.integers(-6, 8, (rows, d // 16, 1))
        return (x * np.exp2(k)).astype(F32).reshape(rows, d)

    cases = []
    a = matrix(300, 64)
    cases.append((a, 1.0))
    cases.append((a, float(np.abs(a).max()) / (6 * 448)))
    cases.append((matrix(140, 32), 1e-3))
    cases.append((matrix(130, 160), 0.37))
    cases.append((grid_matrix(257, 64), 1.0))
    cases.append((rng.standard_normal((1, 16)).astype(F32), 2.0))
    parts = [u32(len(cases))]
    for x, gs in cases:
        rows, d = x.shape
        packed, scales = quantize_nvfp4(x, gs)
        pr, pc = -(-rows // 128) * 128, -(-(d // 16) // 4) * 4
        assert scales.size == pr * pc and packed.size == rows * d // 2
        parts += [u32(rows), u32(d), planar(bits32(np.array([gs], dtype=F32))),
                  planar(bits32(x.reshape(-1))), packed.tobytes(), scales.tobytes()]
    write("nvfp4.bin.gz", parts)


def main():
    print(VERSIONS)
    rng = np.random.default_rng(20240607)
    bf, hf, e8, e4 = decode_tables()
    encoders(bf, hf, e8, e4, rng)
    nvfp4(rng)
    with open(os.path.join(HERE, "VERSIONS"), "w") as f:
        f.write(VERSIONS + "\n")


if __name__ == "__main__":
    main()

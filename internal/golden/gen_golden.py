#!/usr/bin/python3
"""Generate golden sparse / decode attention outputs from the definition in docs/contract.md.

This script is independent of the Go code: it reads nothing from the Go
packages. It builds random inputs, rounds them to their storage dtype
(bf16, fp8 e4m3fn, NVFP4 e2m1 + e4m3 block scales), decodes the stored bit
patterns back to float64 with decoders written from contract §1 and §6
(cross-checked against ml_dtypes), and computes attention in float64 with
PyTorch directly from the definition in contract §2, §4, §5 and §7:

    for every query row q (batch-local index i of sequence b) and query head
    hq (KV head h = hq // qhead_per_kv):
      keys = union of the selected blocks j of q2k_indices[h, q] (-1 skipped),
             block j = batch-local tokens [j*blk_kv, (j+1)*blk_kv);
             every token of the sequence for a decode case without q2k;
      masked: t >= seqlen_k_b, and (causal) t > i + seqlen_k_b - seqlen_q_b
      s = softmax_scale * q . k              (float64)
      LSE = logsumexp(s)  (natural log), O = softmax(s) @ V   (float64)
      LSE_T = logsumexp(s / T)               (temperature cases)
      NVFP4: K decoded with its global scale; O multiplied by V's global
             scale (the combine's output_scale).
      no unmasked key: O = 0, LSE = LSE_T = -inf.

Deliberately NOT emulated: the FP8 P.V path's rounding of P to E4M3, the
float32 accumulation and the final BF16 rounding of O. Expected values are
the exact float64 results; the Go tests compare with a tolerance.

Pinned environment (Debian bookworm + PyPI), run with /usr/bin/python3:
    apt-get install -y python3-torch      # python3-torch 1.13.1+dfsg-4,
                                          # python3-numpy 1:1.24.2-1+deb12u1
    /usr/bin/python3 -m pip install --break-system-packages --no-deps \
        ml_dtypes==0.5.1                  # --no-deps keeps Debian's numpy 1.x
                                          # (numpy 2 breaks Debian's torch)
Usage:
    /usr/bin/python3 internal/golden/gen_golden.py [outdir]
The output is deterministic (fixed seeds; bzip2 has no timestamps). bzip2
(not gzip) because it packs the decimal JSON about 20% tighter; Go's
compress/bzip2 reads it.

File format: see README.md beside this script.
"""

import bz2
import hashlib
import json
import math
import os
import sys

import ml_dtypes
import numpy as np
import torch

PINNED_VERSIONS = {
    "python3-torch (Debian)": "1.13.1+dfsg-4",
    "python3-numpy (Debian)": "1:1.24.2-1+deb12u1",
    "ml_dtypes (PyPI)": "0.5.1",
}
FORMAT_VERSION = 1
BLK_KV = 128
O_SIG_DIGITS = 9  # O is written with 9 significant digits (rel. err <= 5e-10)

torch.set_default_dtype(torch.float64)

# ---------------------------------------------------------------------------
# Decoders written from docs/contract.md (storage bits -> float64).
# ---------------------------------------------------------------------------
E2M1_MAG = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def dec_bf16(bits):
    b = np.asarray(bits, dtype=np.uint32) << 16
    return b.view(np.float32).astype(np.float64)


def dec_e4m3_scalar(b):
    s = -1.0 if b & 0x80 else 1.0
    e = (b >> 3) & 0xF
    m = b & 7
    if e == 0xF and m == 7:
        return math.nan
    if e == 0:
        return s * m / 8.0 * 2.0 ** -6
    return s * (1.0 + m / 8.0) * 2.0 ** (e - 7)


E4M3_TABLE = np.array([dec_e4m3_scalar(i) for i in range(256)])
E2M1_TABLE = np.array([(-1.0 if n & 8 else 1.0) * E2M1_MAG[n & 7] for n in range(16)])


def dec_e4m3(bits):
    return E4M3_TABLE[np.asarray(bits, dtype=np.int64)]


def check_decoders():
    """Cross-check the decoders against ml_dtypes on every pattern."""
    allb16 = np.arange(65536, dtype=np.uint16)
    a = dec_bf16(allb16)
    b = allb16.view(ml_dtypes.bfloat16).astype(np.float64)
    assert np.array_equal(a, b, equal_nan=True)
    all8 = np.arange(256, dtype=np.uint8)
    assert np.array_equal(dec_e4m3(all8), all8.view(ml_dtypes.float8_e4m3fn).astype(np.float64), equal_nan=True)
    all4 = np.arange(16, dtype=np.uint8)
    assert np.array_equal(E2M1_TABLE, all4.view(ml_dtypes.float4_e2m1fn).astype(np.float64))


# ---------------------------------------------------------------------------
# Encoders (float64 -> storage bits), via ml_dtypes (round to nearest even).
# ---------------------------------------------------------------------------
def enc_bf16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def enc_e4m3(x):
    x = np.clip(np.asarray(x, dtype=np.float64), -448.0, 448.0)
    return x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def enc(x, dtype):
    if dtype == "bf16":
        return enc_bf16(x)
    if dtype == "e4m3":
        return enc_e4m3(x)
    raise ValueError(dtype)


def dec(bits, dtype):
    if dtype == "bf16":
        return dec_bf16(bits)
    if dtype == "e4m3":
        return dec_e4m3(bits)
    raise ValueError(dtype)


def sample(rng, shape, sigma, mode):
    """Random values in float64.

    mode "full": N(0, sigma^2), every bit kept (rounded later to the storage
    dtype, so every mantissa bit of bf16 / e4m3 occurs).
    mode "coarse": low-entropy data that bzip2 packs tightly (about 2 bits per
    element): m * 2^u * sigma with m in {0 (p 3/4), +-1 (p 3/32 each),
    +-1.5 (p 1/32 each)} and u uniform in {-2, -1, 0, 1}, one u per vector of
    the last dimension (one key/value row). Exact in bf16 and e4m3 for
    sigma = 1.
    """
    if mode == "full":
        return rng.standard_normal(shape) * sigma
    if mode != "coarse":
        raise ValueError(mode)
    m = rng.choice(np.array([0.0] * 24 + [1.0, -1.0] * 3 + [1.5, -1.5]), size=shape)
    u = rng.integers(-2, 2, size=tuple(shape[:-1]) + (1,))
    return m * np.ldexp(1.0, u) * sigma


def sample_nvfp4_src(rng, shape):
    """Source values for NVFP4 K/V: magnitudes {0 (p 5/8), 1, 2, 3
    (p 1/8 each)} with random signs, times 2^u per 16-element group, u in
    {-3..1}, so the e2m1 codes and the E4M3 block scales both vary while
    bzip2 still packs the bytes (about 3 bits per element)."""
    m = rng.choice(np.array([0.0] * 5 + [1.0, 2.0, 3.0]), size=shape)
    m = m * rng.choice(np.array([-1.0, 1.0]), size=shape)
    rows, d = shape
    u = rng.integers(-3, 2, size=(rows, d // 16, 1))
    return (m.reshape(rows, d // 16, 16) * np.ldexp(1.0, u)).reshape(rows, d)


def f32(x):
    return float(np.float32(x))


# ---------------------------------------------------------------------------
# NVFP4 (contract §6).
# ---------------------------------------------------------------------------
def scale_offset(r, c, cols):
    return (r // 128 * ((cols + 3) // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


def scale_shape(rows, cols):
    return ((rows + 127) // 128 * 128, (cols + 3) // 4 * 4)


def quant_nvfp4(x, global_scale):
    """x: float64 [rows, D]. Returns packed uint8 [rows, D/2], scales uint8 in
    128x4 layout (flat), decoded float64 values WITHOUT the global scale
    (e2m1 * block_scale)."""
    rows, d = x.shape
    cols = d // 16
    gs = 1.0 if global_scale is None else global_scale
    g = x.reshape(rows, cols, 16)
    amax = np.abs(g).max(axis=2)
    bs_bits = enc_e4m3(amax / 6.0 / gs)
    bs = dec_e4m3(bs_bits)
    denom = (bs * gs)[:, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(denom > 0, g / np.where(denom > 0, denom, 1.0), 0.0)
    y = np.clip(y, -6.0, 6.0)
    codes = y.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(rows, d) & 0xF
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    pr, pc = scale_shape(rows, cols)
    scales = np.zeros(pr * pc, dtype=np.uint8)
    for r in range(rows):
        for c in range(cols):
            scales[scale_offset(r, c, cols)] = bs_bits[r, c]
    return packed, scales


def dequant_nvfp4(packed, scales, rows, d):
    """contract §6 decode of the stored bytes, without the global scale."""
    cols = d // 16
    lo = E2M1_TABLE[packed & 0xF]
    hi = E2M1_TABLE[packed >> 4]
    vals = np.empty((rows, d))
    vals[:, 0::2] = lo
    vals[:, 1::2] = hi
    for r in range(rows):
        for c in range(cols):
            vals[r, c * 16:(c + 1) * 16] *= E4M3_TABLE[scales[scale_offset(r, c, cols)]]
    return vals


# ---------------------------------------------------------------------------
# Case construction.
# ---------------------------------------------------------------------------
def cumsum0(xs):
    out = [0]
    for x in xs:
        out.append(out[-1] + int(x))
    return out


def gen_q2k(rng, hkv, seqlens_q, seqlens_k, topk, causal, n_all_masked, partial_prob=0.25):
    """q2k_indices [Hkv][total_q][topK]: distinct batch-local block ids,
    random order, -1 padding only at the end of a list. For causal cases
    most lists pick blocks that hold at least one visible key; some pick
    anywhere; n_all_masked rows pick only fully masked (future) blocks."""
    total_q = sum(seqlens_q)
    q2k = np.full((hkv, total_q, topk), -1, dtype=np.int64)
    cu_q = cumsum0(seqlens_q)
    candidates = []  # (h, row, future blocks) for forced all-masked rows
    for h in range(hkv):
        for b, (sq, sk) in enumerate(zip(seqlens_q, seqlens_k)):
            nb = (sk + BLK_KV - 1) // BLK_KV
            for i in range(sq):
                row = cu_q[b] + i
                if nb == 0:
                    continue
                n = min(topk, nb)
                if rng.random() < partial_prob:
                    n = int(rng.integers(1, n + 1))
                pool = list(range(nb))
                if causal:
                    diag = i + sk - sq
                    visible = [j for j in pool if j * BLK_KV <= diag]
                    future = [j for j in pool if j * BLK_KV > diag]
                    if future:
                        candidates.append((h, row, future))
                    if rng.random() < 0.85 and visible:
                        pick = list(rng.permutation(visible)[:n])
                        rest = [j for j in rng.permutation(future)][: n - len(pick)]
                        pick += rest
                        pool = None
                if pool is not None:
                    pick = list(rng.permutation(pool)[:n])
                pick = [int(j) for j in rng.permutation(pick)]
                q2k[h, row, : len(pick)] = pick
    forced = []
    for k in range(min(n_all_masked, len(candidates))):
        h, row, future = candidates[int(rng.integers(0, len(candidates)))] if k else candidates[0]
        q2k[h, row, :] = -1
        f = [int(j) for j in rng.permutation(future)[:topk]]
        q2k[h, row, : len(f)] = f
        forced.append((h, row))
    return q2k, forced


def build_paged(rng, hkv, page_size, seqused, dtype_kv, shape_tail, extra_pages, max_pages=None):
    """Page table with a shuffled page order and spare (never valid) pages
    filling the unused table slots."""
    pages_b = [(s + page_size - 1) // page_size for s in seqused]
    if max_pages is None:
        max_pages = max(max(pages_b), 1)
    num_used = sum(pages_b)
    num_pages = num_used + extra_pages
    perm = [int(p) for p in rng.permutation(num_pages)]
    used, spare = perm[:num_used], perm[num_used:]
    table = []
    k = 0
    for b, nb in enumerate(pages_b):
        row = used[k:k + nb]
        k += nb
        while len(row) < max_pages:
            row.append(spare[len(row) % len(spare)] if spare else used[0])
        table.append(row)
    return table, num_pages


def logical_kv(kvals, vvals, b, t_count, cu_k, page_table, page_size):
    """Gather sequence b's tokens 0..t_count-1 -> float64 [t, Hkv, D]."""
    if page_table is None:
        return kvals[cu_k[b]:cu_k[b] + t_count], vvals[cu_k[b]:cu_k[b] + t_count]
    idx_p = [page_table[b][t // page_size] for t in range(t_count)]
    idx_i = [t % page_size for t in range(t_count)]
    # paged float arrays are [num_pages, Hkv, page_size, D]
    k = kvals[idx_p, :, idx_i, :]
    v = vvals[idx_p, :, idx_i, :]
    return k, v


def reference(qv, kv_get, seqlens_q, seqlens_k, hq, hkv, d, q2k, causal, scale, temperature, out_scale):
    """float64 attention from the definition. qv: [total_q, Hq, D]."""
    g = hq // hkv
    total_q = qv.shape[0]
    O = torch.zeros(total_q, hq, d)
    L = torch.full((total_q, hq), -math.inf)
    LT = torch.full((total_q, hq), -math.inf)
    cu_q = cumsum0(seqlens_q)
    for b, (sq, sk) in enumerate(zip(seqlens_q, seqlens_k)):
        if sq == 0 or sk == 0:
            continue
        K, V = kv_get(b, sk)
        K = torch.from_numpy(np.ascontiguousarray(K))
        V = torch.from_numpy(np.ascontiguousarray(V))
        for i in range(sq):
            row = cu_q[b] + i
            for h in range(hkv):
                if q2k is None:
                    toks = list(range(sk))
                else:
                    toks = []
                    for j in q2k[h][row]:
                        if j < 0:
                            continue
                        toks.extend(range(j * BLK_KV, min((j + 1) * BLK_KV, sk)))
                if causal:
                    toks = [t for t in toks if t <= i + sk - sq]
                if not toks:
                    continue
                ti = torch.tensor(toks, dtype=torch.long)
                kk = K[ti, h, :]
                vv = V[ti, h, :]
                qq = torch.from_numpy(np.ascontiguousarray(qv[row, h * g:(h + 1) * g, :]))
                s = scale * (qq @ kk.T)
                L[row, h * g:(h + 1) * g] = torch.logsumexp(s, dim=-1)
                O[row, h * g:(h + 1) * g] = torch.softmax(s, dim=-1) @ vv * out_scale
                if temperature is not None:
                    LT[row, h * g:(h + 1) * g] = torch.logsumexp(s / temperature, dim=-1)
    return O.numpy(), L.numpy(), (LT.numpy() if temperature is not None else None)


def fmt_o(x):
    return float("%.*g" % (O_SIG_DIGITS, x))


def lse_list(a):
    out = []
    for x in a.reshape(-1):
        if math.isinf(x) and x < 0:
            out.append(None)
        else:
            assert math.isfinite(x)
            out.append(float(x))
    return out


def make_case(c):
    rng = np.random.default_rng(c["seed"])
    kind = c["kind"]
    hq, hkv, d = c["hq"], c["hkv"], c.get("d", 128)
    qd, kd, vd = c["q_dtype"], c["k_dtype"], c["v_dtype"]
    causal = c["causal"]
    topk = c.get("topk")
    paged = c.get("paged", False)
    page_size = c.get("page_size") if paged else None
    kv_mode = c.get("kv_mode", "coarse")
    temperature = c.get("temperature")
    is_decode = kind == "decode"
    if is_decode:
        sq1 = c["seqlen_q"]
        seqused = c["seqused_k"]
        seqlens_q = [sq1] * len(seqused)
        seqlens_k = list(seqused)
    else:
        seqlens_q = c["seqlens_q"]
        seqlens_k = c["seqused_k"] if paged else c["seqlens_k"]
        seqused = c["seqused_k"] if paged else None
    total_q = sum(seqlens_q)
    cu_q = cumsum0(seqlens_q)
    cu_k = cumsum0(seqlens_k)
    scale = c.get("softmax_scale")
    scale_default = scale is None
    if scale_default:
        scale = 1.0 / math.sqrt(d)

    # Q
    q_bits = enc(sample(rng, (total_q, hq, d), c.get("q_sigma", 2.0), "full"), qd)
    qv = dec(q_bits, qd)

    # K/V layout
    if paged:
        page_table, num_pages = build_paged(rng, hkv, page_size, seqused, kd, None, c.get("spare_pages", 1), c.get("max_pages"))
        lead = (num_pages, hkv, page_size)
    else:
        page_table, num_pages = None, None
        lead = (cu_k[-1], hkv)
    rows = int(np.prod(lead))

    k_scale = v_scale = None
    kgs = vgs = None
    if kd == "nvfp4":
        kx = sample_nvfp4_src(rng, (rows, d))
        vx = sample_nvfp4_src(rng, (rows, d))
        if c.get("global_scales"):
            kgs = f32(np.abs(kx).max() / (448.0 * 6.0) * 1.25)
            vgs = f32(np.abs(vx).max() / (448.0 * 6.0) * 1.5)
        k_bits, k_scale = quant_nvfp4(kx, kgs)
        v_bits, v_scale = quant_nvfp4(vx, vgs)
        kvals = dequant_nvfp4(k_bits, k_scale, rows, d) * (1.0 if kgs is None else kgs)
        vvals = dequant_nvfp4(v_bits, v_scale, rows, d)
        assert np.all(np.isfinite(kvals)) and np.all(np.isfinite(vvals))
        k_shape = list(lead) + [d // 2]
        kvals = kvals.reshape(tuple(lead) + (d,))
        vvals = vvals.reshape(tuple(lead) + (d,))
        k_bits = k_bits.reshape(-1)
        v_bits = v_bits.reshape(-1)
        out_scale = 1.0 if vgs is None else vgs
    else:
        k_bits = enc(sample(rng, tuple(lead) + (d,), 1.0, kv_mode), kd)
        v_bits = enc(sample(rng, tuple(lead) + (d,), 1.0, kv_mode), vd)
        kvals, vvals = dec(k_bits, kd), dec(v_bits, vd)
        k_shape = list(lead) + [d]
        k_bits, v_bits = k_bits.reshape(-1), v_bits.reshape(-1)
        out_scale = 1.0

    if topk is not None:
        q2k, forced = gen_q2k(rng, hkv, seqlens_q, seqlens_k, topk, causal, c.get("all_masked_rows", 0))
    else:
        q2k, forced = None, []

    def kv_get(b, t):
        return logical_kv(kvals, vvals, b, t, cu_k, page_table, page_size)

    O, L, LT = reference(qv, kv_get, seqlens_q, seqlens_k, hq, hkv, d, q2k, causal, scale, temperature, out_scale)
    assert np.all(np.isfinite(O))
    n_masked = int(np.isneginf(L).sum())
    # rows with -inf LSE inside non-empty sequences: the all-masked rows
    out = {
        "format_version": FORMAT_VERSION,
        "name": c["name"],
        "description": c["desc"],
        "kind": kind,
        "seed": c["seed"],
        "batch": len(seqlens_q),
        "total_q": total_q,
        "total_k": None if paged else cu_k[-1],
        "num_pages": num_pages,
        "hq": hq,
        "hkv": hkv,
        "head_dim": d,
        "qhead_per_kv": hq // hkv,
        "q_dtype": qd,
        "k_dtype": kd,
        "v_dtype": vd,
        "causal": causal,
        "softmax_scale": scale,
        "softmax_scale_is_default": scale_default,
        "temperature": temperature,
        "topk": topk,
        "blk_kv": BLK_KV,
        "page_size": page_size,
        "seqlen_q": c["seqlen_q"] if is_decode else None,
        "kv_values": kv_mode if kd != "nvfp4" else "nvfp4_coarse",
        "cu_seqlens_q": cu_q,
        "cu_seqlens_k": cu_k,
        "seqused_k": None if seqused is None else list(seqused),
        "page_table": page_table,
        "q2k_indices": None if q2k is None else q2k.tolist(),
        "fully_masked_rows": [[int(h), int(r)] for h, r in forced],
        "q_shape": [total_q, hq, d],
        "kv_shape": k_shape,
        "q": [int(x) for x in q_bits.reshape(-1)],
        "k": [int(x) for x in k_bits],
        "v": [int(x) for x in v_bits],
        "k_scale": None if k_scale is None else [int(x) for x in k_scale],
        "v_scale": None if v_scale is None else [int(x) for x in v_scale],
        "scale_shape": None if k_scale is None else list(scale_shape(rows, d // 16)),
        "k_global_scale": kgs,
        "v_global_scale": vgs,
        "o": [fmt_o(x) for x in O.reshape(-1)],
        "lse": lse_list(L),
        "lse_temperature": None if LT is None else lse_list(LT),
    }
    if c.get("all_masked_rows", 0):
        assert forced, c["name"]
        for h, r in forced:
            g = hq // hkv
            assert all(math.isinf(x) for x in L[r, h * g:(h + 1) * g]), (c["name"], h, r)
    return out, n_masked


# ---------------------------------------------------------------------------
# The cases.
# ---------------------------------------------------------------------------
CASES = [
    # ----- sparse prefill, dense K/V -----
    dict(name="prefill_bf16_dense_causal_g1_top4_temp", seed=101, kind="prefill",
         desc="bf16 Q/K/V, dense K/V, causal, Hkv=1 Hq=1, topK 4, ragged batch with an empty sequence "
              "(q=[5,0,10] k=[520,0,130]), -1 padding, rows selecting only future blocks, temperature 2",
         q_dtype="bf16", k_dtype="bf16", v_dtype="bf16", hq=1, hkv=1, causal=True, topk=4,
         seqlens_q=[5, 0, 10], seqlens_k=[520, 0, 130], temperature=2.0, all_masked_rows=2),
    dict(name="prefill_bf16_dense_noncausal_g4_top5_scale", seed=102, kind="prefill",
         desc="bf16, dense, non-causal, Hkv=2 Hq=8, odd topK 5, custom softmax_scale 0.0625, "
              "sequence with keys but no queries (q=[3,0,2] k=[530,20,100]), temperature 2",
         q_dtype="bf16", k_dtype="bf16", v_dtype="bf16", hq=8, hkv=2, causal=False, topk=5,
         seqlens_q=[3, 0, 2], seqlens_k=[530, 20, 100], softmax_scale=0.0625, temperature=2.0),
    dict(name="prefill_e4m3_dense_causal_g4_top16", seed=103, kind="prefill",
         desc="fp8 e4m3 Q/K/V, dense, causal, Hkv=1 Hq=4, topK 16 (a sequence of 16 blocks), q=[3,2,0] k=[1930,129,0]",
         q_dtype="e4m3", k_dtype="e4m3", v_dtype="e4m3", hq=4, hkv=1, causal=True, topk=16,
         seqlens_q=[3, 2, 0], seqlens_k=[1930, 129, 0], temperature=2.0, all_masked_rows=1),
    dict(name="prefill_e4m3_dense_noncausal_g16_top4", seed=104, kind="prefill",
         desc="fp8 e4m3 Q/K/V, dense, non-causal, Hkv=1 Hq=16, topK 4, q=[2,0,1] k=[520,0,250]",
         q_dtype="e4m3", k_dtype="e4m3", v_dtype="e4m3", hq=16, hkv=1, causal=False, topk=4,
         seqlens_q=[2, 0, 1], seqlens_k=[520, 0, 250]),
    dict(name="prefill_bf16q_e4m3kv_dense_causal_g4_top4", seed=105, kind="prefill",
         desc="bf16 Q with fp8 e4m3 K/V, dense, causal, Hkv=1 Hq=4, topK 4, q=[3,4,0] k=[515,131,0]",
         q_dtype="bf16", k_dtype="e4m3", v_dtype="e4m3", hq=4, hkv=1, causal=True, topk=4,
         seqlens_q=[3, 4, 0], seqlens_k=[515, 131, 0], all_masked_rows=1),
    dict(name="prefill_bf16_dense_noncausal_g4_top4_d64", seed=106, kind="prefill",
         desc="bf16, dense, non-causal, head_dim 64, Hkv=1 Hq=4, topK 4, q=[3,0,2] k=[530,0,200]",
         q_dtype="bf16", k_dtype="bf16", v_dtype="bf16", hq=4, hkv=1, d=64, causal=False, topk=4,
         seqlens_q=[3, 0, 2], seqlens_k=[530, 0, 200]),
    # ----- sparse prefill, paged K/V (page_size = blk_kv = 128) -----
    dict(name="prefill_bf16_paged_causal_g4_top4_temp", seed=201, kind="prefill",
         desc="bf16, paged (shuffled pages, page 128, seqused_k trimmed, spare pages in unused table slots), "
              "causal, Hkv=1 Hq=4, topK 4, q=[4,0,6] seqused_k=[500,0,133], temperature 2",
         q_dtype="bf16", k_dtype="bf16", v_dtype="bf16", hq=4, hkv=1, causal=True, topk=4,
         paged=True, page_size=128, seqlens_q=[4, 0, 6], seqused_k=[500, 0, 133], temperature=2.0,
         all_masked_rows=1, spare_pages=1, max_pages=5),
    dict(name="prefill_e4m3_paged_noncausal_g16_top5_scale", seed=202, kind="prefill",
         desc="fp8 e4m3 Q/K/V, paged, non-causal, Hkv=1 Hq=16, topK 5, softmax_scale 0.1, q=[2,1,0] seqused_k=[600,200,0]",
         q_dtype="e4m3", k_dtype="e4m3", v_dtype="e4m3", hq=16, hkv=1, causal=False, topk=5,
         paged=True, page_size=128, seqlens_q=[2, 1, 0], seqused_k=[600, 200, 0], softmax_scale=0.1),
    dict(name="prefill_bf16q_e4m3kv_paged_causal_g1_top4", seed=203, kind="prefill",
         desc="bf16 Q with fp8 K/V, paged, causal, Hkv=2 Hq=2, topK 4, q=[4,0,3] seqused_k=[300,0,129]",
         q_dtype="bf16", k_dtype="e4m3", v_dtype="e4m3", hq=2, hkv=2, causal=True, topk=4,
         paged=True, page_size=128, seqlens_q=[4, 0, 3], seqused_k=[300, 0, 129], all_masked_rows=1),
    # ----- NVFP4 K/V -----
    dict(name="prefill_nvfp4_bf16q_dense_causal_g4_top4", seed=301, kind="prefill_nvfp4",
         desc="NVFP4 K/V (no global scales), bf16 Q, dense, causal, Hkv=1 Hq=4, topK 4, q=[3,0,4] k=[520,0,130], temperature 2",
         q_dtype="bf16", k_dtype="nvfp4", v_dtype="nvfp4", hq=4, hkv=1, causal=True, topk=4,
         seqlens_q=[3, 0, 4], seqlens_k=[520, 0, 130], temperature=2.0, all_masked_rows=1),
    dict(name="prefill_nvfp4_bf16q_dense_noncausal_g1_top4_gs", seed=302, kind="prefill_nvfp4",
         desc="NVFP4 K/V with fp32 global scales (V's multiplies O), bf16 Q, dense, non-causal, Hkv=2 Hq=2, topK 4, "
              "q=[2,2,0] k=[140,390,0]",
         q_dtype="bf16", k_dtype="nvfp4", v_dtype="nvfp4", hq=2, hkv=2, causal=False, topk=4,
         seqlens_q=[2, 2, 0], seqlens_k=[140, 390, 0], global_scales=True),
    dict(name="prefill_nvfp4_e4m3q_paged_causal_g16_top4_gs", seed=303, kind="prefill_nvfp4",
         desc="NVFP4 K/V with global scales, fp8 Q, paged (page 128), causal, Hkv=1 Hq=16, topK 4, "
              "q=[2,0,1] seqused_k=[390,0,120]",
         q_dtype="e4m3", k_dtype="nvfp4", v_dtype="nvfp4", hq=16, hkv=1, causal=True, topk=4,
         paged=True, page_size=128, seqlens_q=[2, 0, 1], seqused_k=[390, 0, 120], global_scales=True),
    dict(name="prefill_nvfp4_e4m3q_dense_noncausal_g4_top5", seed=304, kind="prefill_nvfp4",
         desc="NVFP4 K/V (no global scales), fp8 Q, dense, non-causal, Hkv=1 Hq=4, topK 5, q=[2,0,2] k=[530,10,140]",
         q_dtype="e4m3", k_dtype="nvfp4", v_dtype="nvfp4", hq=4, hkv=1, causal=False, topk=5,
         seqlens_q=[2, 0, 2], seqlens_k=[530, 10, 140]),
    # ----- paged decode -----
    dict(name="decode_e4m3_g16_ps128_sq1", seed=401, kind="decode",
         desc="decode, fp8 e4m3 Q/K/V, Hkv=1 Hq=16, page 128, seqlen_q 1, seqused_k=[128,129,11] "
              "(exactly one page, one past a page, under 16 tokens)",
         q_dtype="e4m3", k_dtype="e4m3", v_dtype="e4m3", hq=16, hkv=1, causal=True,
         paged=True, page_size=128, seqlen_q=1, seqused_k=[128, 129, 11]),
    dict(name="decode_e4m3_g16_ps128_sq4", seed=402, kind="decode",
         desc="decode, fp8 e4m3, Hkv=1 Hq=16, page 128, seqlen_q 4, seqused_k=[128,132,12] "
              "(satisfies the reference's seqused_k %% page in {0, multiple of seqlen_q})",
         q_dtype="e4m3", k_dtype="e4m3", v_dtype="e4m3", hq=16, hkv=1, causal=True,
         paged=True, page_size=128, seqlen_q=4, seqused_k=[128, 132, 12]),
    dict(name="decode_bf16_g4_ps16_sq4", seed=403, kind="decode",
         desc="decode, bf16, Hkv=1 Hq=4, page 16, seqlen_q 4, seqused_k=[64,49,7] "
              "(exactly 4 pages, one past 3 pages, under one page)",
         q_dtype="bf16", k_dtype="bf16", v_dtype="bf16", hq=4, hkv=1, causal=True,
         paged=True, page_size=16, seqlen_q=4, seqused_k=[64, 49, 7], spare_pages=2),
    dict(name="decode_bf16_g16_ps16_sq1_fullbits", seed=404, kind="decode",
         desc="decode, bf16 with full-entropy K/V values, Hkv=1 Hq=16, page 16, seqlen_q 1, seqused_k=[48,17,9]",
         q_dtype="bf16", k_dtype="bf16", v_dtype="bf16", hq=16, hkv=1, causal=True,
         paged=True, page_size=16, seqlen_q=1, seqused_k=[48, 17, 9], kv_mode="full"),
    dict(name="decode_e4m3_g4_ps16_sq1_fullbits", seed=405, kind="decode",
         desc="decode, fp8 e4m3 with full-entropy K/V values, Hkv=2 Hq=8, page 16, seqlen_q 1, seqused_k=[32,33,5]",
         q_dtype="e4m3", k_dtype="e4m3", v_dtype="e4m3", hq=8, hkv=2, causal=True,
         paged=True, page_size=16, seqlen_q=1, seqused_k=[32, 33, 5], kv_mode="full"),
    dict(name="decode_sparse_bf16_g4_ps128_sq4_top4", seed=406, kind="decode",
         desc="sparse decode (q2k_indices; block = blk_kv = 128 tokens = one page), bf16, Hkv=1 Hq=4, "
              "page 128, seqlen_q 4, topK 4, seqused_k=[640,129,11]",
         q_dtype="bf16", k_dtype="bf16", v_dtype="bf16", hq=4, hkv=1, causal=True, topk=4,
         paged=True, page_size=128, seqlen_q=4, seqused_k=[640, 129, 11]),
]


def versions():
    import platform
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "pinned": PINNED_VERSIONS,
    }


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
    os.makedirs(outdir, exist_ok=True)
    check_decoders()
    manifest = {"format_version": FORMAT_VERSION, "generator": "internal/golden/gen_golden.py",
                "versions": versions(), "cases": []}
    names = set()
    for c in CASES:
        assert c["name"] not in names
        names.add(c["name"])
        data, n_masked = make_case(c)
        raw = json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
        fn = c["name"] + ".case.json.bz2"
        with open(os.path.join(outdir, fn), "wb") as f:
            f.write(bz2.compress(raw, 9))
        size = os.path.getsize(os.path.join(outdir, fn))
        manifest["cases"].append({
            "file": fn, "kind": data["kind"], "description": data["description"],
            "sha256_json": hashlib.sha256(raw).hexdigest(), "bz2_bytes": size,
            "neg_inf_lse_entries": n_masked,
        })
        print(f"{fn}: {size} bytes (json {len(raw)}), -inf LSE entries {n_masked}")
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()

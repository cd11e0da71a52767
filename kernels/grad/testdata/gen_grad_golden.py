#!/usr/bin/python3
"""Generate golden gradients of block-sparse attention with PyTorch autograd.

Independent of the Go code (it reads nothing from the Go packages). For each
case it draws float32 inputs, builds the dense masked problem in float64 and
lets torch.autograd differentiate it (inputs are multiples of 1/256
in [-1, 1], exact in float32):

    for sequence b, KV head h, query head hq of h's group, batch-local query i:
      keys  = tokens t of the blocks j listed in q2k_indices[h, q] (-1 skipped),
              block j = tokens [j*blk_kv, (j+1)*blk_kv),
              minus t >= seqlen_k_b and (causal) t > i + seqlen_k_b - seqlen_q_b
      s     = softmax_scale * q . k_t          (float64)
      LSE   = logsumexp(s)  (natural log; -inf when no key is visible)
      O     = softmax(s) @ V                   (0 when no key is visible)
    loss = sum(dO * O) + sum over rows with finite LSE of dLSE * LSE
    expected dq, dk, dv = d loss / d (q, k, v)

Dense K/V is [total_k, Hkv, D]; paged K/V is a page pool
[num_pages, Hkv, page_size, D] read through a shuffled page table (rows are
gathered with index_select, so autograd accumulates the gradients of a page
shared by two sequences).

Pinned environment (Debian bookworm): apt-get install -y python3-torch
(python3-torch 1.13.1+dfsg-4, python3-numpy 1:1.24.2-1+deb12u1).
Usage: /usr/bin/python3 kernels/grad/testdata/gen_grad_golden.py [outdir]
Output is deterministic (fixed seeds; bzip2 has no timestamps).

File format (one bzip2 JSON object per case, flat row-major lists):
  name, seed, causal, softmax_scale, blk_kv, topk, total_q, hq, hkv, head_dim,
  cu_seqlens_q, cu_seqlens_k ([B+1]; paged: prefix sums of seqused_k),
  total_k (dense) or num_pages, page_size, page_table [B][cols], seqused_k (paged),
  q2k_indices [Hkv][total_q][topK],
  q, k, v, do, dlse: inputs (float32 values, written exactly),
  o, lse (null = -inf), dq, dk, dv: float64 results (13 significant digits).
"""

import bz2
import json
import math
import os
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)

CASES = [
    dict(name="dense_noncausal_g2_top3", seed=1, seq_q=[5, 0, 7], seq_k=[24, 8, 32],
         hq=2, hkv=1, d=64, topk=3, blk=8, causal=False, paged=False, pad=0.2),
    dict(name="dense_causal_g4_top4_d128", seed=2, seq_q=[6, 4], seq_k=[6, 24],
         hq=4, hkv=1, d=128, topk=4, blk=8, causal=True, paged=False, pad=0.1),
    dict(name="paged_causal_g16_top8_shared", seed=3, seq_q=[2, 3], seq_k=[20, 30],
         hq=16, hkv=1, d=64, topk=8, blk=8, causal=True, paged=True, page_size=8, pad=0.0),
    dict(name="paged_noncausal_g1_top2_shared", seed=4, seq_q=[6, 3, 0], seq_k=[20, 25, 8],
         hq=1, hkv=1, d=64, topk=2, blk=8, causal=False, paged=True, page_size=8, pad=0.3),
]


def f32list(x):
    return [float(np.float32(v)) for v in np.asarray(x, dtype=np.float32).ravel()]


def f64list(t):
    return [None if math.isinf(v) else float("%.13g" % v) for v in t.detach().reshape(-1).tolist()]


def make_case(c):
    rng = np.random.default_rng(c["seed"])
    nb = len(c["seq_q"])
    hq, hkv, d, topk, blk = c["hq"], c["hkv"], c["d"], c["topk"], c["blk"]
    qpk = hq // hkv
    cu_q = [0]
    cu_k = [0]
    for b in range(nb):
        cu_q.append(cu_q[-1] + c["seq_q"][b])
        cu_k.append(cu_k[-1] + c["seq_k"][b])
    total_q = cu_q[-1]
    out = dict(name=c["name"], seed=c["seed"], causal=c["causal"], blk_kv=blk, topk=topk,
               total_q=total_q, hq=hq, hkv=hkv, head_dim=d, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
               softmax_scale=1.0 / math.sqrt(d))
    if c["paged"]:
        ps = c["page_size"]
        cols = max((s + ps - 1) // ps for s in c["seq_k"]) + 1
        num_pages = nb * cols + 2
        perm = rng.permutation(num_pages)
        table = perm[: nb * cols].reshape(nb, cols).copy()
        table[1, 0] = table[0, 0]  # sequence 1 shares sequence 0's first page
        kv_shape = (num_pages, hkv, ps, d)
        out.update(num_pages=num_pages, page_size=ps, page_table=table.ravel().tolist(),
                   seqused_k=list(c["seq_k"]))
    else:
        total_k = cu_k[-1] + 3
        kv_shape = (total_k, hkv, d)
        out.update(total_k=total_k)

    q2k = -np.ones((hkv, total_q, topk), dtype=np.int64)
    for h in range(hkv):
        for b in range(nb):
            nblk = (c["seq_k"][b] + blk - 1) // blk
            for q in range(cu_q[b], cu_q[b + 1]):
                sel = rng.permutation(nblk)[: min(topk, nblk)]
                lst = [int(j) if rng.random() >= c["pad"] else -1 for j in sel]
                lst += [-1] * (topk - len(lst))
                rng.shuffle(lst)
                q2k[h, q] = lst
    out["q2k_indices"] = q2k.ravel().tolist()

    def draw(shape):  # multiples of 1/256 in [-1, 1]: exact in float32, short in JSON
        return (rng.integers(-256, 257, shape) / 256.0).astype(np.float32)

    qn = draw((total_q, hq, d))
    kn = draw(kv_shape)
    vn = draw(kv_shape)
    don = draw((total_q, hq, d))
    dlsen = draw((total_q, hq))
    out.update(q=f32list(qn), k=f32list(kn), v=f32list(vn), do=f32list(don), dlse=f32list(dlsen))

    q = torch.tensor(qn.astype(np.float64), requires_grad=True)
    k = torch.tensor(kn.astype(np.float64), requires_grad=True)
    v = torch.tensor(vn.astype(np.float64), requires_grad=True)
    do = torch.tensor(don.astype(np.float64))
    dlse = torch.tensor(dlsen.astype(np.float64))
    scale = out["softmax_scale"]

    o_rows = [None] * total_q
    lse_rows = [None] * total_q
    for b in range(nb):
        sq, sk = c["seq_q"][b], c["seq_k"][b]
        if sq == 0:
            continue
        for qi in range(sq):
            gq = cu_q[b] + qi
            o_heads, l_heads = [], []
            for hqi in range(hq):
                h = hqi // qpk
                # keys of sequence b, KV head h: [sk, d]
                if c["paged"]:
                    ps = out["page_size"]
                    tok = torch.arange(sk)
                    pages = torch.tensor([out["page_table"][b * (len(out["page_table"]) // nb) + t // ps] for t in range(sk)], dtype=torch.long)
                    flat = (pages * hkv + h) * ps + tok % ps
                    kb = k.reshape(-1, d).index_select(0, flat)
                    vb = v.reshape(-1, d).index_select(0, flat)
                else:
                    kb = k[cu_k[b]:cu_k[b + 1], h]
                    vb = v[cu_k[b]:cu_k[b + 1], h]
                sel = set(int(j) for j in q2k[h, gq] if j >= 0)
                mask = torch.tensor([(t // blk in sel) and t < sk and
                                     (not c["causal"] or t <= qi + sk - sq) for t in range(sk)], dtype=torch.bool)
                if not bool(mask.any()):
                    o_heads.append(torch.zeros(d))
                    l_heads.append(torch.tensor(float("-inf")))
                    continue
                s = scale * (kb @ q[gq, hqi])
                s = s.masked_fill(~mask, float("-inf"))
                lse = torch.logsumexp(s, 0)
                p = torch.exp(s - lse)
                o_heads.append(p @ vb)
                l_heads.append(lse)
            o_rows[gq] = torch.stack(o_heads)
            lse_rows[gq] = torch.stack(l_heads)
    o = torch.stack(o_rows) if total_q else torch.zeros(0, hq, d)
    lse = torch.stack(lse_rows) if total_q else torch.zeros(0, hq)
    fin = torch.isfinite(lse)
    loss = (do * o).sum() + (dlse * torch.where(fin, lse, torch.zeros_like(lse))).sum()
    loss.backward()
    out.update(o=f64list(o), lse=f64list(lse), dq=f64list(q.grad), dk=f64list(k.grad), dv=f64list(v.grad),
               torch_version=torch.__version__)
    return out


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for c in CASES:
        data = json.dumps(make_case(c), separators=(",", ":"), sort_keys=True).encode()
        path = os.path.join(outdir, c["name"] + ".grad.json.bz2")
        with open(path, "wb") as f:
            f.write(bz2.compress(data, 9))
        print(path, len(data))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""hosttest/sm80_frag_emu.py - emulation of the sm_80 fragment and address math.

Replays qk_chunk / pv_chunk of sm80_common.cuh (swizzled shared-memory rows,
the per-lane ldmatrix row addresses, the S register indices, the P.V A
fragments packed as softmax_block packs them, the column groups of the
D = 256 decode) for one warp with the PTX semantics of ldmatrix (.x4, .trans)
and mma.sync.m16n8k16 (row.col), and checks S = Q K^T and O = P V, read back
at the epilogue's (row, column) of every register, against direct products.
Pure Python (no numpy); run by names_hopper_ampere_test.go when python3 is
present. Keep it in step with sm80_common.cuh when the fragment code changes.
"""
import random
random.seed(1)
def randn(r, c): return [[random.gauss(0, 1) for _ in range(c)] for _ in range(r)]
def matmul(A, B): return [[sum(A[i][k] * B[k][j] for k in range(len(B))) for j in range(len(B[0]))] for i in range(len(A))]
def T(A): return [list(x) for x in zip(*A)]

def soff(D, r, u): return r * (2 * D) + ((u ^ (r & 7)) << 4)
def store(mem, D, M):  # M rows x D (float) -> bf16-ish element store at swizzled offsets
    for r in range(len(M)):
        for c in range(D):
            mem[soff(D, r, c // 8) + 2 * (c % 8)] = M[r][c]
def ldsm(mem, addrs, trans):
    # addrs[lane] = row address; returns regs[lane][i] = (lo, hi)
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        rows = [[mem[addrs[8 * i + j] + 2 * k] for k in range(8)] for j in range(8)]
        for t in range(32):
            if not trans: regs[t][i] = (rows[t // 4][2 * (t % 4)], rows[t // 4][2 * (t % 4) + 1])
            else: regs[t][i] = (rows[2 * (t % 4)][t // 4], rows[2 * (t % 4) + 1][t // 4])
    return regs
def mma(d, a, b):  # d[lane] 4 floats; a[lane] 4 pairs; b[lane] 2 pairs
    A = [[0.0] * 16 for _ in range(16)]; B = [[0.0] * 8 for _ in range(16)]
    for t in range(32):
        g, c = t // 4, t % 4
        for e in range(2):
            A[g][2*c+e] = a[t][0][e]; A[g+8][2*c+e] = a[t][1][e]; A[g][2*c+8+e] = a[t][2][e]; A[g+8][2*c+8+e] = a[t][3][e]
            B[2*c+e][g] = b[t][0][e]; B[2*c+8+e][g] = b[t][1][e]
    C = matmul(A, B)
    for t in range(32):
        g, c = t // 4, t % 4
        d[t][0] += C[g][2*c]; d[t][1] += C[g][2*c+1]; d[t][2] += C[g+8][2*c]; d[t][3] += C[g+8][2*c+1]
for D in (64, 128, 256):
    NC = 2 if D == 256 else 1
    Q = randn(64, D); K = randn(128, D); V = randn(128, D)
    memQ = {}; store(memQ, D, Q)
    for warp in range(4 if D == 64 else 1):
        s = [[0.0] * 64 for _ in range(32)]
        for c in range(2):
            memK = {}; store(memK, D, K[64 * c:64 * c + 64])
            for ks in range(D // 16):
                aaddr = [soff(D, 16 * warp + (l & 7) + 8 * ((l >> 3) & 1), 2 * ks + (l >> 4)) for l in range(32)]
                a = ldsm(memQ, aaddr, False)
                for np_ in range(4):
                    baddr = [soff(D, 16 * np_ + (l & 7) + 8 * (l >> 4), 2 * ks + ((l >> 3) & 1)) for l in range(32)]
                    b = ldsm(memK, baddr, False)
                    d0 = [[s[t][32*c+8*np_+e] for e in range(4)] for t in range(32)]
                    d1 = [[s[t][32*c+8*np_+4+e] for e in range(4)] for t in range(32)]
                    mma(d0, a, [(b[t][0], b[t][1]) for t in range(32)]); mma(d1, a, [(b[t][2], b[t][3]) for t in range(32)])
                    for t in range(32):
                        for e in range(4): s[t][32*c+8*np_+e] = d0[t][e]; s[t][32*c+8*np_+4+e] = d1[t][e]
        S = matmul(Q[16*warp:16*warp+16], T(K))
        for t in range(32):
            for j in range(16):
                for i in range(2):
                    for e in range(2):
                        row = t // 4 + 8 * i; key = 8 * j + 2 * (t % 4) + e
                        assert abs(s[t][4*j+2*i+e] - S[row][key]) < 1e-9, (D, warp, t, j, i, e)
        # P = S (any values), packed as softmax_block does: pa[2j+i] = (s[4j+2i], s[4j+2i+1])
        P = S
        pa = [[(s[t][4*j+2*i], s[t][4*j+2*i+1]) for j in range(16) for i in range(2)] for t in range(32)]
        pa = [[pa[t][2*j+i] for j in range(16) for i in range(2)] for t in range(32)]
        for cg in range(NC):
            DO = D // NC; col0 = cg * DO
            o = [[0.0] * (DO // 2) for _ in range(32)]
            for c in range(2):
                memV = {}; store(memV, D, V[64 * c:64 * c + 64])
                for ks in range(4):
                    kk = 4 * c + ks
                    a = [(pa[t][4*kk], pa[t][4*kk+1], pa[t][4*kk+2], pa[t][4*kk+3]) for t in range(32)]
                    for np_ in range(DO // 16):
                        vaddr = [soff(D, 16 * ks + (l & 7) + 8 * ((l >> 3) & 1), 2 * np_ + (l >> 4) + col0 // 8) for l in range(32)]
                        b = ldsm(memV, vaddr, True)
                        d0 = [[o[t][8*np_+e] for e in range(4)] for t in range(32)]
                        d1 = [[o[t][8*np_+4+e] for e in range(4)] for t in range(32)]
                        mma(d0, a, [(b[t][0], b[t][1]) for t in range(32)]); mma(d1, a, [(b[t][2], b[t][3]) for t in range(32)])
                        for t in range(32):
                            for e in range(4): o[t][8*np_+e] = d0[t][e]; o[t][8*np_+4+e] = d1[t][e]
            O = matmul(P, V)
            for t in range(32):
                for j in range(DO // 8):
                    for i in range(2):
                        for e in range(2):
                            row = t // 4 + 8 * i; col = col0 + 8 * j + 2 * (t % 4) + e  # epilogue's column
                            assert abs(o[t][4*j+2*i+e] - O[row][col]) < 1e-8, (D, warp, cg, t, j, i, e)
    print("D", D, "ok")

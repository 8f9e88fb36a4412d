"""CPU model of examples/attention_bf16/flash2.cu: the kernel's shared-memory addresses,
swizzle, ldmatrix / mma.m16n8k16 fragment layouts (written from the PTX ISA, not from the
kernel), masks, block order and output staging, emulated warp by warp over NumPy lane
vectors and compared with the workload's reference. No GPU; a wrong fragment or address
is off by the output's own size.

    PYTHONPATH=. python benchmarks/flash2_emulate.py
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

LANES = np.arange(32)


def bf16(x):
    """Round float32 to bfloat16 (nearest even), kept as float32."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return u.view(np.float32)


def swz(D, row, col):
    return row * D + (((col >> 3) ^ (row & 7)) << 3) + (col & 7)


class Smem:
    """Shared memory as bf16 elements; addresses in bytes like the kernel's u32 ones."""

    def __init__(self, elems):
        self.a = np.full(elems, np.nan, np.float32)

    def ldsm_x4(self, addr, trans=False):
        """ldmatrix .x4: lanes 8i..8i+7 address the rows of matrix i. Result register i,
        lane l: rows l//4, elements 2(l%4), +1 (trans: the transposed matrix's)."""
        assert addr.shape == (32,) and np.all(addr % 16 == 0)
        regs = []
        for i in range(4):
            rows = addr[8 * i: 8 * i + 8] // 2  # element index of each row's first element
            m = np.stack([self.a[r: r + 8] for r in rows])  # 8 x 8
            if trans:
                m = m.T
            g, t = LANES // 4, LANES % 4
            regs.append(np.stack([m[g, 2 * t], m[g, 2 * t + 1]], axis=1))  # 32 x 2
        return regs


def a_matrix(a):
    """16x16 A from its 4 registers (PTX m16n8k16 .bf16 A layout)."""
    A = np.zeros((16, 16), np.float32)
    g, t = LANES // 4, LANES % 4
    for r, (dr, dc) in enumerate([(0, 0), (8, 0), (0, 8), (8, 8)]):
        for e in range(2):
            A[g + dr, 2 * t + e + dc] = a[r][:, e]
    return A


def b_matrix(b0, b1):
    """16x8 B (k x n) from its 2 registers: b0 holds k = 2t, 2t+1 at n = g; b1 k + 8."""
    B = np.zeros((16, 8), np.float32)
    g, t = LANES // 4, LANES % 4
    for r, b in enumerate((b0, b1)):
        for e in range(2):
            B[2 * t + e + 8 * r, g] = b[:, e]
    return B


def mma(c, a, b0, b1):
    """c: 32 x 4 accumulators (c0,c1 at row g, cols 2t, 2t+1; c2,c3 at row g + 8)."""
    g, t = LANES // 4, LANES % 4
    C = np.zeros((16, 8), np.float32)
    C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1] = c[:, 0], c[:, 1], c[:, 2], c[:, 3]
    Dm = (a_matrix(a).astype(np.float64) @ b_matrix(b0, b1) + C).astype(np.float32)
    return np.stack([Dm[g, 2 * t], Dm[g, 2 * t + 1], Dm[g + 8, 2 * t], Dm[g + 8, 2 * t + 1]], axis=1)


def pack(lo, hi):
    return bf16(np.stack([lo, hi], axis=1))


def shfl_xor(x, m):
    return x[LANES ^ m]


def load_tile(sm, base, D, ROWS, g, row0, S, NT):
    """The kernel's load_tile: thread tid copies chunk tid % CH of rows tid / CH + i RSTEP."""
    CH = D // 8
    RSTEP = NT // CH
    assert NT % CH == 0 and RSTEP % 8 == 0 and ROWS % RSTEP == 0
    for tid in range(NT):
        r, ch = tid // CH, tid % CH
        dst = base + 2 * swz(D, r, ch * 8)
        for i in range(ROWS // RSTEP):
            row = row0 + r + i * RSTEP
            d = (dst + i * RSTEP * D * 2) // 2
            sm.a[d: d + 8] = g[row, ch * 8: ch * 8 + 8] if row < S else 0.0


def block(q, k, v, o, blk, BH, S, D, causal, WARPS, MT, BN, QREG, ORDER):
    BM, NT = 16 * MT * WARPS, 32 * WARPS
    QIN = QREG and (MT == 1 or D == 64)
    sm = Smem(D * (BM + 4 * BN))
    sQ, sK, sV = 0, 2 * BM * D, 2 * (BM + 2 * BN) * D  # byte addresses
    nqb = (S + BM - 1) // BM
    head, qi = (blk // nqb, blk % nqb) if ORDER == 0 else (blk % BH, blk // BH)
    qb = nqb - 1 - qi if causal else qi
    m0 = qb * BM
    kv_end = min(S, m0 + BM) if causal else S
    ntiles = (kv_end + BN - 1) // BN
    sl2 = np.float32(1 / np.sqrt(D) * 1.4426950408889634)
    lane = LANES

    load_tile(sm, sQ, D, BM, q[head], m0, S, NT)
    load_tile(sm, sK, D, BN, k[head], 0, S, NT)
    load_tile(sm, sV, D, BN, v[head], 0, S, NT)

    W = []
    for warp in range(WARPS):
        W.append(dict(
            w0=m0 + warp * MT * 16,
            q_lds=sQ + 2 * swz(D, warp * MT * 16 + (lane & 15), (lane >> 4) * 8),
            acc=np.zeros((MT, D // 8, 32, 4), np.float32),
            m=np.full((MT, 2, 32), -np.inf, np.float32), l=np.zeros((MT, 2, 32), np.float32), qf=None, pa=None))
    k_off = 2 * swz(D, (lane & 7) + ((lane >> 4) << 3), ((lane >> 3) & 1) * 8)
    v_off = 2 * swz(D, lane & 15, (lane >> 4) * 8)

    for j in range(ntiles):
        for warp, w in enumerate(W):
            if QIN and j == 0:
                w["qf"] = [[sm.ldsm_x4((w["q_lds"] ^ (kk * 32)) + mt * 16 * D * 2) for kk in range(D // 16)]
                           for mt in range(MT)]
        more = j + 1 < ntiles
        if more:
            load_tile(sm, sK + ((j + 1) & 1) * BN * D * 2, D, BN, k[head], (j + 1) * BN, S, NT)
        n0 = j * BN
        for warp, w in enumerate(W):
            w0 = w["w0"]
            w["active"] = w0 < S and (not causal or n0 <= w0 + MT * 16 - 1)
            if not w["active"]:
                continue
            kt = sK + (j & 1) * BN * D * 2 + k_off
            s = np.zeros((MT, BN // 8, 32, 4), np.float32)
            for kk in range(D // 16):
                a = [w["qf"][mt][kk] if QIN else sm.ldsm_x4((w["q_lds"] ^ (kk * 32)) + mt * 16 * D * 2)
                     for mt in range(MT)]
                for nn in range(BN // 16):
                    b0, b1, b2, b3 = sm.ldsm_x4((kt ^ (kk * 32)) + nn * 16 * D * 2)
                    for mt in range(MT):
                        s[mt, 2 * nn] = mma(s[mt, 2 * nn], a[mt], b0, b1)
                        s[mt, 2 * nn + 1] = mma(s[mt, 2 * nn + 1], a[mt], b2, b3)
            masked = n0 + BN > S or (causal and n0 + BN - 1 > m0)
            for mt, half in itertools.product(range(MT), range(2)):
                row = w0 + mt * 16 + (lane >> 2) + half * 8
                x = s[mt, :, :, 2 * half: 2 * half + 2]  # nt, lane, e
                if masked:
                    key = n0 + np.arange(BN // 8)[:, None, None] * 8 + (lane & 3)[None, :, None] * 2 + np.arange(2)
                    x = np.where((key >= S) | (bool(causal) & (key > row[None, :, None])), -np.inf, x)
                mx = x.max(axis=(0, 2))
                mx = np.maximum(mx, shfl_xor(mx, 1))
                mx = np.maximum(mx, shfl_xor(mx, 2))
                m_new = np.maximum(w["m"][mt, half], mx)
                ms = np.where(m_new == -np.inf, 0.0, m_new * sl2).astype(np.float32)
                with np.errstate(invalid="ignore"):
                    corr = np.exp2(w["m"][mt, half] * sl2 - ms)
                p = np.exp2(x * sl2 - ms[None, :, None]).astype(np.float32)
                s[mt, :, :, 2 * half: 2 * half + 2] = p
                w["l"][mt, half] = w["l"][mt, half] * corr + p.sum(axis=(0, 2))
                w["m"][mt, half] = m_new
                w["acc"][mt, :, :, 2 * half: 2 * half + 2] *= corr[None, :, None]
            w["pa"] = [[[pack(s[mt, 2 * kk, :, 0], s[mt, 2 * kk, :, 1]), pack(s[mt, 2 * kk, :, 2], s[mt, 2 * kk, :, 3]),
                         pack(s[mt, 2 * kk + 1, :, 0], s[mt, 2 * kk + 1, :, 1]),
                         pack(s[mt, 2 * kk + 1, :, 2], s[mt, 2 * kk + 1, :, 3])]
                        for kk in range(BN // 16)] for mt in range(MT)]
        if more:
            load_tile(sm, sV + ((j + 1) & 1) * BN * D * 2, D, BN, v[head], (j + 1) * BN, S, NT)
        for warp, w in enumerate(W):
            if not w["active"]:
                continue
            # V_j must still be in its buffer: the prefetch above went to the other one
            vt = sV + (j & 1) * BN * D * 2 + v_off
            if more:
                assert ((j + 1) & 1) != (j & 1)
            for kk in range(BN // 16):
                for dd in range(D // 16):
                    b0, b1, b2, b3 = sm.ldsm_x4((vt ^ (dd * 32)) + kk * 16 * D * 2, trans=True)
                    for mt in range(MT):
                        w["acc"][mt, 2 * dd] = mma(w["acc"][mt, 2 * dd], w["pa"][mt][kk], b0, b1)
                        w["acc"][mt, 2 * dd + 1] = mma(w["acc"][mt, 2 * dd + 1], w["pa"][mt][kk], b2, b3)

    CH = D // 8
    for warp, w in enumerate(W):
        for mt, half in itertools.product(range(MT), range(2)):
            lsum = w["l"][mt, half]
            lsum = lsum + shfl_xor(lsum, 1)
            lsum = lsum + shfl_xor(lsum, 2)
            inv = np.where(lsum > 0, 1 / np.where(lsum > 0, lsum, 1), 0).astype(np.float32)
            r = (warp * MT + mt) * 16 + (lane >> 2) + half * 8
            for dt in range(D // 8):
                e = swz(D, r, dt * 8 + (lane & 3) * 2)
                sm.a[e] = bf16(w["acc"][mt, dt, :, 2 * half] * inv)
                sm.a[e + 1] = bf16(w["acc"][mt, dt, :, 2 * half + 1] * inv)
        for c in range(32 * 0, MT * 16 * CH):
            r, ch = warp * MT * 16 + c // CH, c % CH
            if m0 + r < S:
                e = swz(D, r, ch * 8)
                assert np.isnan(o[head, m0 + r, ch * 8]), "output written twice"
                o[head, m0 + r, ch * 8: ch * 8 + 8] = sm.a[e: e + 8]


def run(BH, S, D, causal, **knobs):
    rng = np.random.default_rng(0)
    q, k, v = (bf16(rng.standard_normal((BH, S, D)).astype(np.float32)) for _ in range(3))
    o = np.full((BH, S, D), np.nan, np.float32)
    BM = 16 * knobs["MT"] * knobs["WARPS"]
    for blk in range(-(-S // BM) * BH):
        block(q, k, v, o, blk, BH, S, D, causal, **knobs)
    s = np.einsum("hid,hjd->hij", q.astype(np.float64), k) / np.sqrt(D)
    if causal:
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("hij,hjd->hid", p / p.sum(-1, keepdims=True), v)
    return float(np.abs(o - ref).max() / np.sqrt((ref ** 2).mean()))


if __name__ == "__main__":
    worst = 0.0
    cases = [(1, 1, 64, 0), (3, 33, 64, 1), (2, 200, 128, 0), (2, 129, 128, 1), (1, 300, 64, 1)]
    settings = [dict(WARPS=4, MT=2, BN=64, QREG=1, ORDER=0), dict(WARPS=4, MT=2, BN=32, QREG=0, ORDER=1),
                dict(WARPS=8, MT=1, BN=128, QREG=1, ORDER=0), dict(WARPS=4, MT=1, BN=64, QREG=0, ORDER=1)]
    for knobs in settings:
        for BH, S, D, causal in cases:
            err = run(BH, S, D, causal, **knobs)
            worst = max(worst, err)
            print(f"{knobs} {BH}x{S}-d{D}{'-causal' if causal else ''}: max |err| / rms(ref) = {err:.4f}", flush=True)
    sys.exit(0 if worst < 0.03 else 1)

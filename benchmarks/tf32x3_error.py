"""CPU checks of the 3xTF32 kernels (examples/sgemm/tf32x3.cu): no GPU needed.

1. Accuracy. Emulates the split (big = rna_tf32(x), small = rna_tf32(x - big), the
   kernel's integer rounding) and the tensor cores' accumulation on random inputs
   in [-1, 1] (the workloads' range), and prints the largest error in the
   workload's measure, |out - ref| / (|ref| + rms(ref)), against its fp32 rtol
   8 * 2^-24 * sqrt(K) (agent/spec/tolerance.py). An mma is modelled as the exact
   sum of its 8 products and the accumulator, then truncated to fp32 (round toward
   zero, as the tensor cores round; "exactRZ"), or with each addend first
   truncated to the largest one's fp32 ulp ("alignRZ"). Variants: plain TF32;
   3xTF32 accumulated in the tensor cores over all of K (FLUSH=0); 3xTF32 with each
   BK slice summed in a fresh accumulator and added with a round-to-nearest fp32
   add (FLUSH=1, the default); and the split-K program (K ranges, each FLUSH=1,
   added in order in fp32).

2. Fragments. A model of one warp of the default tile: the lanes' shared-memory
   reads written with the kernel's own index expressions, assembled into the
   m16n8k8 operands by the PTX ISA's fragment layout, multiplied, and scattered by
   the kernel's store expressions; it must equal the slice's product. It also
   counts shared-memory bank conflicts of every fragment load (32 banks of 4
   bytes; a 64-bit load is served a half-warp at a time).

3. Split-K indexing. The programs' K ranges (kchunk = ceil_div(ceil_div(K, SPLITK),
   BK) * BK, block z over [z*kchunk, min(K, (z+1)*kchunk))) and the reduces' index
   expressions (sgemm's, and gemm_bias_relu's with bias[(4q) % N] on the float4 path
   and bias[i % N] element by element), emulated on every correctness case of both
   workloads at each SPLITK: every K index is covered once, every C element is
   written once, and the result equals the (relu(... + bias)) reference.

    python benchmarks/tf32x3_error.py [--size 32]
"""

from __future__ import annotations

import argparse

import numpy as np

U32 = 2.0**-24  # float32 unit roundoff


def rna_tf32(x: np.ndarray) -> np.ndarray:
    """The kernel's split step: add half a TF32 ulp to the magnitude bits, clear the 13 low bits."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    big = rna_tf32(x)
    return big, rna_tf32(x - big)  # x - big is exact in float32


def to_fp32_rz(x: np.ndarray) -> np.ndarray:
    f = x.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f


def mma_exact_rz(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return to_fp32_rz(c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64))


def mma_align_rz(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    terms = np.concatenate([c[None].astype(np.float64),
                            a.T.astype(np.float64)[:, :, None] * b.astype(np.float64)[:, None, :]])
    ulp = np.ldexp(1.0, np.frexp(np.abs(terms).max(0))[1] - 24)
    return to_fp32_rz((np.trunc(terms / ulp) * ulp).sum(0))


def gemm_3x(a: np.ndarray, b: np.ndarray, mma, flush_bk: int, k0: int = 0, k1: int | None = None,
            terms: str = "3x") -> np.ndarray:
    """C over K range [k0, k1) as the kernel computes it: per 8-wide k step the small terms
    first, then big*big; with flush_bk, each BK slice in a fresh accumulator added in fp32."""
    k1 = a.shape[1] if k1 is None else k1
    ab, as_ = split(a[:, k0:k1])
    bb, bs = split(b[k0:k1])
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    part = acc
    for k in range(0, k1 - k0, 8):
        s = slice(k, k + 8)
        if flush_bk and k % flush_bk == 0:
            part = np.zeros_like(acc)
        if terms == "3x":
            part = mma(part, as_[:, s], bb[s])
            part = mma(part, ab[:, s], bs[s])
        part = mma(part, ab[:, s], bb[s])
        if flush_bk and (k + 8) % flush_bk == 0 or flush_bk and k + 8 >= k1 - k0:
            acc = (acc + part).astype(np.float32)
        elif not flush_bk:
            acc = part
    return acc


def accuracy(size: int) -> None:
    rng = np.random.default_rng(16)
    print(f"accuracy: {size}x{size} outputs, inputs uniform in [-1, 1], error = max |out - ref| / (|ref| + rms(ref))")
    print("K | variant | model | max error | rtol (8 u sqrt K) | error / rtol")
    for k in (4096, 131072):
        a = rng.uniform(-1, 1, (size, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, size)).astype(np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(ref) + np.sqrt(np.mean(ref**2))
        rtol = 8 * U32 * np.sqrt(k)

        def show(variant: str, model: str, out: np.ndarray) -> None:
            err = float(np.max(np.abs(out - ref) / scale))
            print(f"{k} | {variant} | {model} | {err:.3e} | {rtol:.3e} | {err / rtol:.3f}", flush=True)

        fp32 = np.zeros((size, size), np.float32)
        for i in range(k):  # a sequential fp32 dot product (FFMA), for scale
            fp32 = (fp32 + np.outer(a[:, i], b[i]).astype(np.float32)).astype(np.float32)
        show("fp32 FFMA, sequential", "-", fp32)
        for model_name, mma in (("exactRZ", mma_exact_rz), ("alignRZ", mma_align_rz)):
            show("plain TF32", model_name, gemm_3x(a, b, mma, 32, terms="1x"))
            show("3xTF32 FLUSH=0", model_name, gemm_3x(a, b, mma, 0))
            show("3xTF32 FLUSH=1 BK=32", model_name, gemm_3x(a, b, mma, 32))
            if k > 4096:
                splits = 32
                chunk = -(-k // splits)
                out = np.zeros((size, size), np.float32)
                for z in range(splits):  # the reduce adds the planes in order z = 0, 1, ...
                    out = (out + gemm_3x(a, b, mma, 32, z * chunk, min(k, (z + 1) * chunk))).astype(np.float32)
                show(f"3xTF32 split-K {splits}, FLUSH=1", model_name, out)


# ---- fragment model: the kernel's expressions for one warp (defaults BM=BN=128, BK=32, WM=64, WN=32) ----

def bank_conflicts(words_per_lane: list[list[int]], width: int) -> int:
    """Extra shared-memory wavefronts of one warp-wide load: lanes are served in groups of
    32 / width (width = 32-bit words per lane); within a group, distinct words in one bank
    serialise (the same word is a broadcast)."""
    extra = 0
    per_phase = 32 // width
    for p in range(0, 32, per_phase):
        banks: dict[int, set[int]] = {}
        for lane in range(p, p + per_phase):
            for w in words_per_lane[lane]:
                banks.setdefault(w % 32, set()).add(w)
        extra += max(len(ws) for ws in banks.values()) - 1
    return extra


def fragments(BM: int = 128, BN: int = 128, BK: int = 32, WM: int = 64, WN: int = 32) -> None:
    AS, BS = BK + 8, BN + 4
    MI, NI = WM // 16, WN // 8
    rng = np.random.default_rng(3)
    a_tile = np.zeros(BM * AS)  # one stage of As, flattened like the shared array
    b_tile = np.zeros(BK * BS)
    a_tile.reshape(BM, AS)[:, :BK] = rng.standard_normal((BM, BK))
    b_tile.reshape(BK, BS)[:, :BN] = rng.standard_normal((BK, BN))
    worst = 0.0
    conflicts = {"A float2": 0, "B": 0}
    for warp in range((BM // WM) * (BN // WN)):
        wm, wn = (warp // (BN // WN)) * WM, (warp % (BN // WN)) * WN
        c_warp = np.zeros((BM, BN))
        for kk in range(0, BK, 8):
            # Per lane: the kernel's base offsets `as` and `bs`, then its loads.
            a_reg = np.zeros((32, MI, 4))
            b_reg = np.zeros((32, NI, 2))
            a_words: list[list[list[int]]] = [[[] for _ in range(32)] for _ in range(2 * MI)]
            b_words: list[list[list[int]]] = [[[] for _ in range(32)] for _ in range(2 * NI)]
            for lane in range(32):
                g, t = lane // 4, lane % 4
                as_ = (wm + g) * AS + 2 * t
                bs = 2 * t * BS + wn + g
                for i in range(MI):
                    lo = as_ + i * 16 * AS + kk
                    hi = as_ + (i * 16 + 8) * AS + kk
                    a_words[2 * i][lane] = [lo, lo + 1]
                    a_words[2 * i + 1][lane] = [hi, hi + 1]
                    # lo.x -> a0, hi.x -> a1, lo.y -> a2, hi.y -> a3
                    a_reg[lane, i] = [a_tile[lo], a_tile[hi], a_tile[lo + 1], a_tile[hi + 1]]
                for j in range(NI):
                    b0, b1 = bs + kk * BS + j * 8, bs + (kk + 1) * BS + j * 8
                    b_words[2 * j][lane] = [b0]
                    b_words[2 * j + 1][lane] = [b1]
                    b_reg[lane, j] = [b_tile[b0], b_tile[b1]]
            conflicts["A float2"] += sum(bank_conflicts(w, 2) for w in a_words)
            conflicts["B"] += sum(bank_conflicts(w, 1) for w in b_words)
            # mma.m16n8k8 .tf32 by the PTX ISA's layout (g = lane / 4, t = lane % 4).
            for i in range(MI):
                for j in range(NI):
                    a16 = np.zeros((16, 8))
                    b8 = np.zeros((8, 8))
                    for lane in range(32):
                        g, t = lane // 4, lane % 4
                        a16[g, t], a16[g + 8, t], a16[g, t + 4], a16[g + 8, t + 4] = a_reg[lane, i]
                        b8[t, g], b8[t + 4, g] = b_reg[lane, j]
                    d = a16 @ b8
                    for lane in range(32):  # the kernel's store: c0,c1 (g, 2t+e), c2,c3 (g+8, 2t+e)
                        g, t = lane // 4, lane % 4
                        for h in range(2):
                            for e in range(2):
                                row, col = wm + i * 16 + g + h * 8, wn + j * 8 + 2 * t + e
                                c_warp[row, col] += d[g + 8 * h, 2 * t + e]
        want = a_tile.reshape(BM, AS)[wm:wm + WM, :BK] @ b_tile.reshape(BK, BS)[:, wn:wn + WN]
        worst = max(worst, float(np.max(np.abs(c_warp[wm:wm + WM, wn:wn + WN] - want))))
        assert not c_warp[:wm].any() and not c_warp[wm + WM:].any(), "a store outside the warp's rows"
    print(f"fragments: BM={BM} BN={BN} BK={BK} WM={WM} WN={WN}: every warp's piece vs the slice's product, "
          f"max |diff| = {worst:.2e}; extra bank-conflict wavefronts per slice: {conflicts}")
    assert worst < 1e-9, "fragment layout mismatch"
    assert not any(conflicts.values()), "shared-memory bank conflicts"


# ---- split-K indexing: the workload.toml args and the reduce kernels' expressions ----

SPLITK_CASES = [(97, 83, 61), (1, 257, 33), (513, 7, 129), (1000, 1030, 1001), (67, 4099, 130),
                (1000, 1028, 1056), (128, 256, 300)]


def splitk_reduce(partial: np.ndarray, mn: int, n: int, splits: int, bias: np.ndarray | None) -> np.ndarray:
    """The reduce kernel's loop body over every quad q, in its two paths (vec as the kernel decides it,
    with aligned buffers): plane z of element i is partial[z * mn + i]; the planes are added in order."""
    c = np.full(mn, np.nan, np.float32)
    written = np.zeros(mn, np.int64)
    vec = (n & 3) == 0 if bias is not None else (mn & 3) == 0
    q = np.arange((mn + 3) // 4)
    if vec:
        s = partial[4 * q[:, None] + np.arange(4)]  # float4 at quad q of plane 0
        for z in range(1, splits):
            s = (s + partial[z * mn + 4 * q[:, None] + np.arange(4)]).astype(np.float32)
        if bias is not None:
            b = bias[((4 * q) % n)[:, None] + np.arange(4)]  # one float4 of bias at (4q) % n
            s = np.maximum((s + b).astype(np.float32), np.float32(0))
        idx = (4 * q[:, None] + np.arange(4)).ravel()
        c[idx] = s.ravel()
        np.add.at(written, idx, 1)
    else:
        for j in range(4):
            i = 4 * q + j
            i = i[i < mn]
            s = partial[i]
            for z in range(1, splits):
                s = (s + partial[z * mn + i]).astype(np.float32)
            if bias is not None:
                s = np.maximum((s + bias[i % n]).astype(np.float32), np.float32(0))
            c[i] = s
            np.add.at(written, i, 1)
    assert (written == 1).all(), "a C element written twice or never"
    return c


def splitk_indexing() -> None:
    rng = np.random.default_rng(5)
    worst = 0.0
    checked = 0
    for m, n, k in SPLITK_CASES:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        bias = rng.uniform(-1, 1, n).astype(np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        for splits in (1, 2, 3, 4, 6, 8, 16, 32):
            for bk in (16, 32):
                kchunk = -(-(-(-k // splits)) // bk) * bk
                assert kchunk % 4 == 0, "a 16-byte chunk would straddle two K ranges"
                covered = np.zeros(k, np.int64)
                partial = np.empty(splits * m * n, np.float32)
                for z in range(splits):  # the partial kernel's clamped range of block z
                    kb = z * kchunk
                    kbeg, kend = min(kb, k), min(kb + kchunk, k)
                    covered[kbeg:kend] += 1
                    plane = (a[:, kbeg:kend].astype(np.float64) @ b[kbeg:kend].astype(np.float64)).astype(np.float32)
                    partial[z * m * n:(z + 1) * m * n] = plane.ravel()  # an empty range writes zeros
                assert (covered == 1).all(), f"K ranges miss or repeat an index: {m}x{n}x{k} SPLITK={splits} BK={bk}"
                for with_bias in (False, True):
                    c = splitk_reduce(partial, m * n, n, splits, bias if with_bias else None).reshape(m, n)
                    want = np.maximum(ref + bias, 0) if with_bias else ref
                    scale = np.abs(want) + np.sqrt(np.mean(ref**2))
                    worst = max(worst, float(np.max(np.abs(c - want) / scale)))
                    checked += 1
    print(f"split-K indexing: {checked} (case, SPLITK, BK, bias) programs, K covered once, C written once, "
          f"max error vs reference {worst:.2e} (fp32 partials and ordered fp32 adds)")
    assert worst < 1e-5, "split-K reduce indexing mismatch"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=32, help="M = N of the accuracy emulation (default 32)")
    args = parser.parse_args()
    for tile in ({}, {"BK": 16}, {"WM": 32, "WN": 64}, {"BM": 64, "BN": 64, "WM": 32, "WN": 32}):
        fragments(**tile)
    splitk_indexing()
    accuracy(args.size)


if __name__ == "__main__":
    main()

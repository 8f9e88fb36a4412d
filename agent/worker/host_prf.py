"""The keyed PRF on the host: the twin of cuda/prf.cuh's ws_prf, for the checks that mask
references and seal counts on the GPU and are verified here (tests/test_keyed_prf.py keeps
the two equal)."""

from __future__ import annotations

MASK64 = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & MASK64


def prf(k0: int, k1: int, m: int) -> int:
    """ws_prf on the host (PRF_SOURCE): SipHash-1-3 of the 8-byte word m under (k0, k1)."""
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573

    def rounds(n: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & MASK64; v1 = _rotl(v1, 13) ^ v0; v0 = _rotl(v0, 32)  # noqa: E702
            v2 = (v2 + v3) & MASK64; v3 = _rotl(v3, 16) ^ v2  # noqa: E702
            v0 = (v0 + v3) & MASK64; v3 = _rotl(v3, 21) ^ v0  # noqa: E702
            v2 = (v2 + v1) & MASK64; v1 = _rotl(v1, 17) ^ v2; v2 = _rotl(v2, 32)  # noqa: E702

    for block in (m, 8 << 56):
        v3 ^= block
        rounds(1)
        v0 ^= block
    v2 ^= 0xFF
    rounds(3)
    return v0 ^ v1 ^ v2 ^ v3

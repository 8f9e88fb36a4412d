"""The keyed PRF the GPU checks use (agent/worker/gpu_checks.py) and its host twin agree:
the device text compiled as plain C++ here, against `prf` in Python. The worker's host
verifies the seals of the timed checks with the twin, so a disagreement would fail every
honest kernel's timing on a GPU."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from warpsmith.agent.worker.gpu_checks import PRF_SOURCE
from warpsmith.agent.worker.host_prf import prf

MAIN = r"""
#include <cstdio>
int main() {
  u64 k0, k1, m;
  while (std::scanf("%llu %llu %llu", &k0, &k1, &m) == 3) std::printf("%llu\n", ws_prf(k0, k1, m));
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_the_host_twin_of_the_prf_gives_what_the_device_text_gives(tmp_path):
    src = tmp_path / "prf.cpp"
    src.write_text("#define __device__\n#define __forceinline__ inline\n" + PRF_SOURCE + MAIN)
    exe = tmp_path / "prf"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(src)], check=True)
    rng = random.Random(13)
    triples = [(rng.getrandbits(64), rng.getrandbits(64), rng.getrandbits(64)) for _ in range(200)]
    triples += [(0, 0, 0), (2**64 - 1, 2**64 - 1, 2**64 - 1), (1, 2, 0x7F0000001000)]
    out = subprocess.run([str(exe)], input="\n".join(" ".join(map(str, t)) for t in triples), text=True,
                         capture_output=True, check=True).stdout.split()
    assert [int(v) for v in out] == [prf(*t) for t in triples]


def test_the_prf_of_neighbouring_addresses_looks_unrelated():
    """Streams of adjacent words and of nearby keys share no structure a kernel could use:
    about half of the 64 bits differ between neighbours, never nearly none or all."""
    k0, k1 = 0x0123456789ABCDEF, 0xFEDCBA9876543210
    words = [prf(k0, k1, 0x7F0000000000 + 4 * i) for i in range(256)] + [prf(k0, k1 ^ 1, 0x7F0000000000)]
    flips = [bin(a ^ b).count("1") for a, b in zip(words, words[1:])]
    assert 12 <= min(flips) and max(flips) <= 52 and 30 <= sum(flips) / len(flips) <= 34

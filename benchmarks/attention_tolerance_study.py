"""How far a correct bf16 flash-attention kernel lands from the float64 reference, in the
harness's measure: max |out - ref| / (|ref| + rms(ref)) over the output.

attention_bf16 allows what flash attention (and PyTorch's SDPA flash backend) does:
the probabilities P are rounded to bfloat16 for the tensor-core product with V. Each
rounding is 2^-9 relative; a row with few keys (the first rows of a causal mask) has
large probabilities, so its output moves by about 2^-9 |v| where the output's RMS, over
a long causal sequence, is small. The harness's default bf16 tolerance (2 u of the
output plus the fp32 accumulation, 0.0078) is below that. This study simulates the
algorithm on the CPU (P rounded to bf16, fp32-exact sums, one final rounding to bf16;
inputs drawn like the harness's: bf16 values uniform in [-1, 1]) and prints the error
per case; attention_bf16's rtol is the worst of them with a 1.5x margin.

    python3 benchmarks/attention_tolerance_study.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agent.spec.half_float import round_to  # noqa: E402

CASES = [(2, 4096, 128, 0), (2, 4096, 128, 1), (4, 1024, 64, 0), (1, 16384, 128, 1)]
BLOCK = 512


def study(bh: int, s: int, d: int, causal: int, rng: np.random.Generator) -> float:
    worst_num, ref_sq, count, outs = 0.0, 0.0, 0, []
    for _ in range(bh):
        q, k, v = (round_to(rng.uniform(-1, 1, (s, d)), "bfloat16") for _ in range(3))
        for i0 in range(0, s, BLOCK):
            i1 = min(s, i0 + BLOCK)
            sc = q[i0:i1] @ k.T / np.sqrt(d)
            if causal:
                sc[np.arange(i0, i1)[:, None] < np.arange(s)[None, :]] = -np.inf
            p = np.exp(sc - sc.max(axis=1, keepdims=True))
            ref = (p @ v) / p.sum(axis=1, keepdims=True)
            got = round_to((round_to(p, "bfloat16") @ v) / p.sum(axis=1, keepdims=True), "bfloat16")
            outs.append((ref, got))
            ref_sq += float(np.sum(ref * ref))
            count += ref.size
    rms = np.sqrt(ref_sq / count)
    for ref, got in outs:
        worst_num = max(worst_num, float(np.max(np.abs(got - ref) / (np.abs(ref) + rms))))
    return worst_num


def main() -> None:
    rng = np.random.default_rng(0)
    worst = 0.0
    print("case | max rel err (harness measure)")
    for bh, s, d, causal in CASES:
        e = study(bh, s, d, causal, rng)
        worst = max(worst, e)
        print(f"{bh}x{s}-d{d}{'-causal' if causal else ''} | {e:.4f}", flush=True)
    print(f"worst {worst:.4f}; rtol with a 1.5x margin: {1.5 * worst:.4f}")


if __name__ == "__main__":
    main()

"""Which variant of a dispatch serves a shape no performance case had.

The winner of the single nearest case is a poor guess between regimes (a shape halfway
between a square case and a long-K one) and none at all where that winner cannot run
(a split-K workspace past its limit). The rule instead reads what was measured: every
variant was re-timed on every performance case it applies to when the dispatch was
built. Among the NEAREST performance cases, each weighted by 2^-distance (half per octave
away), a variant's cost is the weighted mean of
log(its median / the fastest median there); a case it was not timed on (not applicable
there) counts as UNMEASURED times the fastest. Variants come back cheapest first; the
caller takes the first one whose launch is valid for the shape, so a variant that cannot
serve it is never picked.

The distance is the Euclidean distance between the log2 of the sizes plus REGIME_OCTAVES for
each size on the other side of SMALL (or of zero) than the case's. A few rows (a decode
step), a narrow N, a tiny K, head dim 64 against 128, a causal flag: a size in another class
asks for another kernel, whatever the octaves say. 48 x 512 x 512 is 3.4 octaves from a
512^3 case and 5.9 from a 16 x 8192 x 8192 one, and the decode case's winner is the one
that suits it; with the regime term the decode case is the nearer (5.9 against 11.4). A
shape whose regime no case shares still gets the nearest cases, all equally penalised.

This module imports only `math` and `typing`: `warpsmith export` copies its functions into the
exported kernel.py, which must run without warpsmith.
"""

import math
from typing import Optional

NEAREST = 3
UNMEASURED = 4.0
SMALL = 64
REGIME_OCTAVES = 8.0


def log_distance(a: dict[str, int], b: dict[str, int]) -> float:
    """Euclidean distance between the log2 of two shapes' sizes (a missing size counts as 1)."""
    names = set(a) | set(b)
    return math.sqrt(sum((math.log2(max(1, a.get(n, 1))) - math.log2(max(1, b.get(n, 1)))) ** 2 for n in names))


def size_class(v: int) -> int:
    """0 for zero (a flag off), 1 up to SMALL (few rows, a narrow side, a flag on), 2 above."""
    return 0 if v <= 0 else 1 if v <= SMALL else 2


def shape_distance(a: dict[str, int], b: dict[str, int]) -> float:
    """log_distance plus REGIME_OCTAVES per size whose class (size_class) differs."""
    names = set(a) | set(b)
    crossed = sum(size_class(a.get(n, 1)) != size_class(b.get(n, 1)) for n in names)
    return log_distance(a, b) + REGIME_OCTAVES * crossed


def rank_variants(sizes: dict[str, int], cases: list[dict[str, int]],
                  times: list[list[Optional[float]]]) -> list[int]:
    """Variant indices, best first, for `sizes`. `cases`: each performance case's sizes;
    `times`: per variant, per case (in `cases`' order), its re-timed median in ms or None."""
    distance = [shape_distance(sizes, case) for case in cases]
    near = sorted(range(len(cases)), key=lambda i: distance[i])[:NEAREST]
    # relative to the nearest, so a shape of a regime no case shares keeps finite weights
    weights = {i: 2.0 ** -(distance[i] - distance[near[0]]) for i in near}

    def cost(variant: int) -> float:
        total = 0.0
        for i, w in weights.items():
            measured = [m for t in times if (m := t[i]) is not None]
            mine = times[variant][i]
            ratio = mine / min(measured) if mine is not None and measured else UNMEASURED
            total += w * math.log(ratio)
        return float(total / sum(weights.values()))
    return sorted(range(len(times)), key=lambda v: (cost(v), v))

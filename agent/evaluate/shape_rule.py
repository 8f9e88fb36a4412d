"""Which variant of a dispatch serves a shape no performance case had.

The winner of the single nearest case is a poor guess between regimes (a shape halfway
between a square case and a long-K one) and none at all where that winner cannot run
(a split-K workspace past its limit). The rule instead reads what was measured: every
variant was re-timed on every performance case it applies to when the dispatch was
built. Among the NEAREST performance cases (Euclidean distance between the log2 of the
sizes), each weighted by 2^-distance (half per octave away), a variant's cost is the weighted mean of
log(its median / the fastest median there); a case it was not timed on (not applicable
there) counts as UNMEASURED times the fastest. Variants come back cheapest first; the
caller takes the first one whose launch is valid for the shape, so a variant that cannot
serve it is never picked.

This module imports only `math` and `typing`: `warpsmith export` copies its functions into the
exported kernel.py, which must run without warpsmith.
"""

import math
from typing import Optional

NEAREST = 3
UNMEASURED = 4.0


def log_distance(a: dict[str, int], b: dict[str, int]) -> float:
    """Euclidean distance between the log2 of two shapes' sizes (a missing size counts as 1)."""
    names = set(a) | set(b)
    return math.sqrt(sum((math.log2(max(1, a.get(n, 1))) - math.log2(max(1, b.get(n, 1)))) ** 2 for n in names))


def rank_variants(sizes: dict[str, int], cases: list[dict[str, int]],
                  times: list[list[Optional[float]]]) -> list[int]:
    """Variant indices, best first, for `sizes`. `cases`: each performance case's sizes;
    `times`: per variant, per case (in `cases`' order), its re-timed median in ms or None."""
    near = sorted(range(len(cases)), key=lambda i: log_distance(sizes, cases[i]))[:NEAREST]
    weights = {i: 2.0 ** -log_distance(sizes, cases[i]) for i in near}

    def cost(variant: int) -> float:
        total = 0.0
        for i, w in weights.items():
            measured = [m for t in times if (m := t[i]) is not None]
            mine = times[variant][i]
            ratio = mine / min(measured) if mine is not None and measured else UNMEASURED
            total += w * math.log(ratio)
        return float(total / sum(weights.values()))
    return sorted(range(len(times)), key=lambda v: (cost(v), v))

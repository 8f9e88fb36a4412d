"""How `warpsmith import` has the workload draw each input of a KernelBench-style problem,
for the probe (kernelbench_probe.py): from the distribution get_inputs() drew it from
where the input is that draw itself (torch.rand: uniform on [0, 1); torch.randn: the
standard normal; torch.randint: its bounds), else uniformly from the range its values
had in a sample; with the structure get_inputs() built into it (symmetric, triangular,
rows that sum to 1, a 0/1 mask, +-1 signs), which the workload keeps in every case
(agent/spec/input_structure.py). Structure no workload key holds is named, one line.
"""

from __future__ import annotations

import math
from typing import Any, Optional

SAMPLE_UNIQUE = 1 << 20  # elements up to which a sample's distinct values are counted


def value_range(t) -> tuple[float, float]:
    """Where a tensor's values lie, rounded outwards: inputs are drawn uniformly from it
    (never zero). A constant tensor (ones) gets +-1 around its value."""
    if t.numel() == 0:
        return -1.0, 1.0
    low, high = float(t.min()), float(t.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        return -1.0, 1.0
    if t.is_floating_point():
        low, high = math.floor(low * 100) / 100, math.ceil(high * 100) / 100
    if high - low < 1e-3:
        low, high = low - 1, high + 1
    return low, high


def _structure(x) -> tuple[str, str]:
    """(the structure a workload keeps, or ''; what it cannot keep, or '') of a sample."""
    import torch
    values = torch.unique(x) if x.numel() <= SAMPLE_UNIQUE else x.new_zeros(3)
    two = values.tolist() if x.numel() >= 4 and len(values) <= 2 else []
    if x.is_floating_point() and x.dim() >= 2 and x.shape[-1] == x.shape[-2] >= 2:
        if torch.equal(x, x.mT):
            return "symmetric", ""
        if not torch.tril(x, -1).any() and x.any():
            return "upper_triangular", ""
        if not torch.triu(x, 1).any() and x.any():
            return "lower_triangular", ""
    if two == [0, 1]:
        return "mask", ""
    if two == [-1, 1]:
        return "sign", ""
    if two and x.is_floating_point():
        return "", f"of the values {' and '.join(f'{v:g}' for v in two)} only"
    if x.is_floating_point() and x.shape[-1] >= 2 and bool((x >= 0).all()) \
            and torch.allclose(x.double().sum(-1), torch.ones(1, dtype=torch.float64)):
        return "rows_sum_to_1", ""
    return "", ""


def _density(heads) -> dict[str, float]:
    """{"density": share of True in `heads`}, or {} where the sample does not tell it from
    0.5 (within three standard errors of a fair draw: a small sample's share is noise)."""
    n = heads.numel()
    share = float(heads.float().mean()) if n else 0.5
    if n == 0 or abs(share - 0.5) <= 3 * (0.25 / n) ** 0.5:
        return {}
    return {"density": min(0.99, max(0.01, round(share, 2)))}


def input_drawing(name: str, x, bounds: Optional[tuple[int, int]],
                  draw: Optional[tuple[str, float, float]]) -> tuple[dict[str, Any], str]:
    """The probe's keys for input `name` (low, high, distribution, structure) from a sample
    `x` of it, the torch.randint `bounds` that made it and the `draw` it is; and a note on
    structure lost ('' when nothing is)."""
    if str(x.dtype) == "torch.bool":
        return {"low": 0.0, "high": 1.0, **_density(x)}, ""
    structure, lost = _structure(x)
    keys: dict[str, Any] = {"structure": structure} if structure else {}
    if structure in ("mask", "sign"):
        keys.update(_density(x > 0))
        low, high = (0.0, 1.0) if structure == "mask" else (-1.0, 1.0)
    elif bounds:
        low, high = bounds
    elif draw and draw[0] == "normal":
        low, high = -1.0, 1.0
        keys["distribution"] = "normal"
    elif draw:
        low, high = draw[1], draw[2]
    else:
        low, high = value_range(x)
    note = f"{name}: get_inputs() makes it {lost}; the workload draws it uniformly, so that is lost" if lost else ""
    return {**keys, "low": low, "high": high}, note

"""How large a case's reference may be to compute on the CPU in seconds: the budget the
KernelBench import shrinks its correctness cases to, and that a second reference is
compared against (agent/drafting/reference_check.py)."""

from __future__ import annotations

import numpy as np

from .workload_model import Case, Workload

MAX_ELEMENTS = 4_000_000  # every array of a case together
MAX_FLOPS = 4e9


def cheap(w: Workload, case: Case) -> bool:
    """Whether the case's arrays and flops are within the budget."""
    elements = sum(int(np.prod(w.shape(p, case))) for p in w.arrays)
    flops = w.flops.evaluate(case.sizes) if w.flops is not None else 0
    return elements <= MAX_ELEMENTS and flops <= MAX_FLOPS

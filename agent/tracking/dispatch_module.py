"""A session's variant per shape as a module (kernel.py, written by `warpsmith export`
when the dispatch pays): `launch(...)` picks the variant for the arrays' sizes by the
dispatch's rule and launches it. Each variant is a module of its own beside it
(variant_0.py is the best single variant), written by launch_module.py; this one holds
only numbers and file names, and imports nothing of warpsmith."""

from __future__ import annotations

import re

from ..evaluate.dispatch import RULE, Dispatch

DISPATCH_FILE = "kernel.py"
_SHOWN = re.compile(r"[^A-Za-z0-9_@\[\],=.-]")  # a stored name is data: nothing else reaches the docstring


def variant_file(index: int) -> str:
    return f"variant_{index}.py"


def dispatch_module(workload_name: str, dispatch: Dispatch) -> str:
    cases = tuple(({str(k): int(v) for k, v in e.sizes.items()}, int(e.variant)) for e in dispatch.entries)
    files = tuple(variant_file(i) for i in range(len(dispatch.variants)))
    names = "\n".join(f"    {variant_file(i)}: {_SHOWN.sub('?', v.name)}" for i, v in enumerate(dispatch.variants))
    table = "\n".join(f"    {_SHOWN.sub('?', e.case)}: {variant_file(e.variant)}, {e.median_ms:.4f} ms"
                      for e in dispatch.entries)
    return f'''"""The {workload_name} kernels warpsmith found, one per shape: needs CuPy to launch, nothing of warpsmith.

    import kernel
    kernel.launch(...)  # arrays as for any variant; the variant is chosen by their sizes

Rule for every shape: {RULE}.
Dispatch {dispatch.score_ms:.4f} ms against the best single variant's {dispatch.single_score_ms:.4f} ms
(re-timed in the same rounds). Every variant passed every case of the workload.
Variants:
{names}
Performance cases:
{table}
A torch custom op: each variant module has register_torch_op().
"""
import importlib.util
import math
from pathlib import Path

CASES = {cases!r}  # (a performance case's sizes, the index of its variant)
VARIANTS = {files!r}
_LOADED = {{}}


def variant_for(**sizes):
    """The index of the variant for these sizes (missing sizes count as 1)."""
    def distance(case_sizes):
        names = set(sizes) | set(case_sizes)
        return math.sqrt(sum((math.log2(max(1, sizes.get(n, 1))) - math.log2(max(1, case_sizes.get(n, 1)))) ** 2
                             for n in names))
    return min(CASES, key=lambda c: distance(c[0]))[1]


def variant(index):
    """The module of variant `index`, loaded once from its file beside this one."""
    if index not in _LOADED:
        path = Path(__file__).with_name(VARIANTS[index])
        spec = importlib.util.spec_from_file_location(f"{{__name__}}_variant_{{index}}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _LOADED[index] = module
    return _LOADED[index]


def sizes_of(*arrays, **sizes):
    """The arrays checked as every variant checks them (they share the workload's parameters)."""
    return variant(0).sizes_of(*arrays, **sizes)


def launch(*arrays, **sizes):
    """Check the arrays, choose the variant for their sizes and launch it on the current stream."""
    return variant(variant_for(**sizes_of(*arrays, **sizes))).launch(*arrays, **sizes)
'''

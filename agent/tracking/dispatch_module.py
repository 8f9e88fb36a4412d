"""A session's variant per shape as a module (kernel.py, written by `warpsmith export`
when the dispatch pays): `launch(...)` picks the variant for the arrays' sizes by the
dispatch's rule and launches it. Each variant is a module of its own beside it
(variant_0.py is the best single variant), written by launch_module.py; this one holds
numbers, file names and the shape rule's source (agent/evaluate/shape_rule.py, which
imports only the standard library), and imports nothing of warpsmith."""

from __future__ import annotations

import inspect
import re

from ..evaluate import shape_rule
from ..evaluate.dispatch import RULE, Dispatch

DISPATCH_FILE = "kernel.py"
_SHOWN = re.compile(r"[^A-Za-z0-9_@\[\],=.-]")  # a stored name is data: nothing else reaches the docstring


def variant_file(index: int) -> str:
    return f"variant_{index}.py"


def dispatch_module(workload_name: str, dispatch: Dispatch) -> str:
    cases = tuple({str(k): int(v) for k, v in e.sizes.items()} for e in dispatch.entries)
    times = tuple(tuple(None if t is None else float(t) for t in row) for row in dispatch.times) or \
        tuple(tuple(e.median_ms if e.variant == i else None for e in dispatch.entries)
              for i in range(len(dispatch.variants)))  # stored before the rule kept every variant's times
    files = tuple(variant_file(i) for i in range(len(dispatch.variants)))
    names = "\n".join(f"    {variant_file(i)}: {_SHOWN.sub('?', v.name)}" for i, v in enumerate(dispatch.variants))
    table = "\n".join(f"    {_SHOWN.sub('?', e.case)}: {variant_file(e.variant)}, {e.median_ms:.4f} ms"
                      for e in dispatch.entries)
    single = f"the best single variant's {dispatch.single_score_ms:.4f} ms" if dispatch.single_score_ms \
        else "no single variant, none serving every case"
    rule = "\n\n".join(inspect.getsource(f) for f in (shape_rule.log_distance, shape_rule.size_class,
                                                            shape_rule.shape_distance, shape_rule.rank_variants))
    return f'''"""The {workload_name} kernels warpsmith found, one per shape: needs CuPy to launch, nothing of warpsmith.

    import kernel
    kernel.launch(...)  # arrays as for any variant; the variant is chosen by their sizes

Rule for every shape: {RULE}.
Dispatch {dispatch.score_ms:.4f} ms against {single}
(re-timed in the same rounds). Every variant passed every case of the workload it serves.
Variants:
{names}
Performance cases:
{table}
A torch custom op: each variant module has register_torch_op().
"""
import importlib.util
import math
from pathlib import Path
from typing import Optional

CASES = {cases!r}  # each performance case's sizes
TIMES = {times!r}  # per variant, per case: its re-timed median in ms (None: it does not serve that case)
VARIANTS = {files!r}
NEAREST = {shape_rule.NEAREST!r}
UNMEASURED = {shape_rule.UNMEASURED!r}
SMALL = {shape_rule.SMALL!r}
REGIME_OCTAVES = {shape_rule.REGIME_OCTAVES!r}
_LOADED = {{}}


{rule}


def variant_for(**sizes):
    """The index of the variant for these sizes: the rule's first choice whose launch is valid there."""
    problems = []
    for index in rank_variants(sizes, list(CASES), [list(t) for t in TIMES]):
        try:
            config = variant(index).program_config if variant(index).PROGRAM else variant(index).launch_config
            config(**sizes)
            return index
        except ValueError as e:
            problems.append(f"{{VARIANTS[index]}}: {{e}}")
    raise ValueError(f"no variant serves {{sizes}}: " + "; ".join(problems))


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

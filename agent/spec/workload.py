"""Workload specs: a directory with ``workload.toml`` and ``reference.py``.

The TOML names the kernel's parameters in order (arrays with dtype and shape,
scalars with a value), the cases with their role and sizes, the tolerance and
precision policy, the baseline, FLOP/byte formulas and the kernels that ship with
the workload. Every expression is checked against every case at load time, so a
broken spec fails here, with one line naming the file, the key and the problem,
before any GPU work.
"""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from .accumulation_probe import probe_name, probe_sizes
from .kernel_tables import parse_kernels
from .param_tables import parse_params
from .precision_policy import SPLITS
from .toml_reader import Table, TomlReader
from .torch_signature import signature_problem
from .workload_checks import check_against_cases
from .workload_model import (
    ACCUMULATE_DTYPES,
    ARRAY_ITEMSIZE,
    BASELINE_OPERANDS,
    FLOAT_DTYPES,
    ArrayParam,
    Baseline,
    Case,
    Param,
    SpecError,
    Tolerance,
    Workload,
    name_problem,
)

# The GPU worker and `warpsmith import` read these records from here.
__all__ = ["ARRAY_ITEMSIZE", "FLOAT_DTYPES", "Case", "SpecError", "Workload", "load_workload", "name_problem"]

CASE_ROLES = ("correctness", "performance")
REFERENCE_STATUSES = ("", "drafted", "reviewed")
DRAFT_MARKER = ".warpsmith-drafted"  # beside workload.toml while a model's reference is not reviewed
BASELINES = ("none", "cublas_sgemm", "cublas_sgemm_bias_relu", "cublas_gemm_bf16", "torch")
MAX_RTOL = 0.1  # a tolerance above 10 % judges nothing: a typo, not a policy


def probe_cases(params: tuple[Param, ...], cases: tuple[Case, ...], tolerance: Tolerance) -> tuple[Case, ...]:
    """The precision policy's probe case, when the workload gets one (agent/spec/accumulation_probe.py)."""
    if not tolerance.probe:
        return ()
    arrays = [p for p in params if isinstance(p, ArrayParam)]
    array_bytes = lambda sizes: sum(math.prod(e.evaluate_int(sizes) for e in a.shape) * ARRAY_ITEMSIZE[a.dtype]
                                    for a in arrays)
    sizes = probe_sizes([a.dtype for a in arrays], [a.dtype for a in arrays if a.role == "output"],
                        tolerance.accumulate, tolerance.reduction,
                        [(c.name, c.sizes) for c in cases if not c.timed], array_bytes)
    if sizes is None or tolerance.reduction is None:
        return ()
    return (Case(probe_name(tolerance.reduction.text.strip()), "correctness", sizes, probe=True),)


def load_workload(directory: Path | str, shapes: tuple[tuple[str, dict[str, int]], ...] = ()) -> Workload:
    """Parse and check a workload directory; raises SpecError (one line). `shapes`: (name,
    sizes) of performance cases that replace the workload's own (`bench --shapes`); its
    correctness cases stay, and the probes are drawn for the new ones."""
    directory = Path(directory)
    path = directory / "workload.toml" if directory.is_dir() else directory
    directory = path.parent
    if not path.is_file():
        raise SpecError(path, "workload.toml", "not found: a workload is a directory holding "
                        "workload.toml and reference.py")
    raw = path.read_bytes()
    try:
        doc = tomllib.loads(raw.decode("utf-8-sig"))  # an editor's byte-order mark is not a syntax error
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecError(path, "(syntax)", str(e)) from None
    if shapes:  # the user's performance cases instead of the workload's own (agent/spec/shapes.py)
        own = doc.get("cases")
        cases: list[Any] = own if isinstance(own, list) else []
        doc["cases"] = [c for c in cases if not (isinstance(c, dict) and c.get("role") == "performance")] + \
            [{"name": name, "role": "performance", "sizes": dict(sizes)} for name, sizes in shapes]
        raw += b"\0shapes:" + repr(list(shapes)).encode()  # the digest keys the reference cache
        return replace(_Parser(path, directory, doc, raw).parse(), shapes=tuple(shapes))
    return _Parser(path, directory, doc, raw).parse()



class _Parser(TomlReader):
    def parse(self) -> Workload:
        self.known(self.doc, "", {"workload", "params", "cases", "tolerance", "metrics", "baseline", "start", "kernels"})
        top = self.get(self.doc, "workload", "", dict)
        self.known(top, "workload.", {"name", "description", "reference", "reduction", "reference_status"})
        status = self.get(top, "reference_status", "workload.", str, "")
        if status not in REFERENCE_STATUSES:
            raise self.fail("workload.reference_status", f"'{status}' must be drafted or reviewed (or absent)")
        if (self.dir / DRAFT_MARKER).exists():  # written by warpsmith, not by the model: the TOML cannot undo it
            status = "drafted"
        name = self.name(top, "workload.")
        description = self.get(top, "description", "workload.", str)
        reference = self.file(self.get(top, "reference", "workload.", str, "reference.py"), "workload.reference")
        params = parse_params(self, self.get(self.doc, "params", "", list))
        cases = self.parse_cases()
        tolerance = self.parse_tolerance(top, params)
        metrics = self.get(self.doc, "metrics", "", dict, {})
        self.known(metrics, "metrics.", {"flops", "bytes"})
        flops = self.expr(metrics["flops"], "metrics.flops") if "flops" in metrics else None
        nbytes = self.expr(metrics["bytes"], "metrics.bytes") if "bytes" in metrics else None
        start_table = self.get(self.doc, "start", "", dict, {})
        self.known(start_table, "start.", {"kernel", "from_scratch", "tune"})
        from_scratch = self.get(start_table, "from_scratch", "start.", bool, False)
        kernels = parse_kernels(self, self.get(self.doc, "kernels", "", dict, {}), tolerance.allow_fast_math,
                                required=not from_scratch, sizes=frozenset(n for c in cases for n in c.sizes))
        if from_scratch and "kernel" in start_table:
            raise self.fail("start.kernel", "a workload starts from a kernel or from scratch "
                            "(from_scratch = true), not both")
        start = "" if from_scratch else self.get(start_table, "kernel", "start.", str, next(iter(kernels), ""))
        if not from_scratch and start not in kernels:
            raise self.fail("start.kernel", f"'{start}' is not one of the [kernels.*] tables "
                            f"({', '.join(kernels) or 'none defined'})")
        tune = self.get(start_table, "tune", "start.", str, "")
        if tune and tune not in kernels:
            raise self.fail("start.tune", f"'{tune}' is not one of the [kernels.*] tables ({', '.join(kernels)})")
        if tune and not kernels[tune].knobs():
            raise self.fail("start.tune", f"'{tune}' declares no knobs (// knob NAME: values): nothing to tune")
        baseline = self.parse_baseline(params)
        digest = hashlib.sha256(self.raw + b"\0" + reference.read_bytes()).hexdigest()[:16]
        cases = cases + probe_cases(params, cases, tolerance)
        w = Workload(name, self.dir, description.strip(), params, cases,
                     tolerance, baseline, flops, nbytes, kernels, start, reference, digest, status, tune)
        w = replace(w, not_applicable=check_against_cases(w, self.path))
        if w.baseline.torch is not None:  # last: a scalar's own error first, then what the baseline lacks
            scalars = [p.name for p in params if not isinstance(p, ArrayParam)]
            for function in ("baseline", *(f"baseline_{v}" for v in w.baseline.torch_variants)):
                problem = signature_problem(w.baseline.torch, [a.name for a in w.inputs], scalars, function)
                if problem:
                    raise self.fail("baseline.torch", problem)
        return w

    def parse_cases(self) -> tuple[Case, ...]:
        items = self.get(self.doc, "cases", "", list)
        cases, seen = [], set()
        for i, c in enumerate(items):
            where = f"cases[{i}]."
            if not isinstance(c, dict):
                raise self.fail(f"cases[{i}]", "each case is a table")
            self.known(c, where, {"name", "role", "sizes", "input_scale", "signed_zeros"})
            name = self.name(c, where)
            if name in seen:
                raise self.fail(where + "name", f"'{name}' is used twice")
            seen.add(name)
            role = self.get(c, "role", where, str)
            if role not in CASE_ROLES:
                raise self.fail(where + "role", f"'{role}' must be correctness or performance")
            sizes = self.get(c, "sizes", where, dict)
            for k, v in sizes.items():
                if not k.isidentifier():
                    raise self.fail(f"{where}sizes", f"'{k}' is not an identifier")
                # Zero is a size (a flag such as CAUSAL = 0); every array dimension is checked
                # to be >= 1 per case (check_against_cases), every launch to be launchable.
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise self.fail(f"{where}sizes.{k}", f"expected a non-negative integer, got {v!r}")
            scale = self.get(c, "input_scale", where, (int, float), 1.0)
            # a power of two: every float format holds the scaled values exactly
            if not (not isinstance(scale, bool) and 0 < scale < math.inf and math.frexp(scale)[0] == 0.5
                    and 2.0**-100 <= scale <= 2.0**100):
                raise self.fail(where + "input_scale", f"{scale!r} must be a power of two from 2^-100 to 2^100")
            zeros = self.get(c, "signed_zeros", where, bool, False)
            if (scale != 1.0 or zeros) and role != "correctness":
                raise self.fail(where + "input_scale" if scale != 1.0 else where + "signed_zeros",
                                "only a correctness case stresses its inputs: a performance case times ordinary ones")
            cases.append(Case(name, role, dict(sizes), input_scale=float(scale), signed_zeros=zeros))
        if not any(c.role == "performance" for c in cases):
            raise self.fail("cases", "no case has role = \"performance\": nothing would be timed")
        return tuple(cases)

    def parse_tolerance(self, top: Table, params: tuple[Param, ...]) -> Tolerance:
        t = self.get(self.doc, "tolerance", "", dict, {})
        self.known(t, "tolerance.", {"rtol", "allow_tf32", "allow_fast_math", "accumulate", "probe", "exact_probe",
                                     "splits", "scale"})
        accumulate = self.get(t, "accumulate", "tolerance.", str, None)
        if accumulate is not None and accumulate not in ACCUMULATE_DTYPES:
            raise self.fail("tolerance.accumulate", f"'{accumulate}' must be one of {', '.join(ACCUMULATE_DTYPES)}")
        rtol = self.get(t, "rtol", "tolerance.", (int, float), None)
        if rtol is not None and not 0 < rtol <= MAX_RTOL:  # NaN and inf fail here too
            raise self.fail("tolerance.rtol", f"{rtol!r} must be finite, > 0 and <= {MAX_RTOL}")
        allow = self.get(t, "allow_tf32", "tolerance.", bool, False)
        fast_math = self.get(t, "allow_fast_math", "tolerance.", bool, False)
        reduction = top.get("reduction")
        probe = self.get(t, "probe", "tolerance.", bool, True)
        if "exact_probe" in t:
            raise self.fail("tolerance.exact_probe", "no longer exists: the machine-code policy refuses narrower "
                                                     "tensor-core math than `splits` names; delete the line")
        splits = self.get(t, "splits", "tolerance.", list, [])
        unknown = [s for s in splits if s not in SPLITS]
        if unknown:
            raise self.fail("tolerance.splits", f"{unknown[0]!r} is not a split warpsmith knows "
                                                f"(those are: {', '.join(SPLITS)})")
        scale = self.get(t, "scale", "tolerance.", str, "case")
        if scale not in ("case", "row"):
            raise self.fail("tolerance.scale", f"{scale!r} must be \"case\" (one RMS for the output) or \"row\" "
                                               "(each row's own, along the last axis)")
        return Tolerance(None if rtol is None else float(rtol), allow,
                         self.expr(reduction, "workload.reduction") if reduction is not None else None, fast_math,
                         accumulate, probe, tuple(splits), scale == "row")

    def parse_baseline(self, params: tuple[Param, ...]) -> Baseline:
        b = self.get(self.doc, "baseline", "", dict, {"kind": "none"})
        kind = self.get(b, "kind", "baseline.", str)
        if kind not in BASELINES:
            raise self.fail("baseline.kind", f"'{kind}' must be one of {', '.join(BASELINES)}")
        torch = None
        if "torch" in b:
            torch = self.file(self.get(b, "torch", "baseline.", str), "baseline.torch")
        elif kind == "torch":
            raise self.fail("baseline.torch", "kind = \"torch\" needs torch = \"FILE.py\" defining baseline(**inputs, **scalars)")
        variants = self.get(b, "torch_variants", "baseline.", list, [])
        for v in variants:
            if not isinstance(v, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", v) or v in ("eager", "compile"):
                raise self.fail("baseline.torch_variants", f"{v!r}: a variant is a lower-case name (its function is "
                                "baseline_NAME), neither eager nor compile")
        if variants and torch is None:
            raise self.fail("baseline.torch_variants", "variants are functions of the torch file: name it (torch = ...)")
        bind = {k: v for k, v in b.items() if k not in ("kind", "torch", "torch_variants")}
        names = {p.name for p in params}
        needed = BASELINE_OPERANDS.get(kind, ())
        for operand in needed:
            if not isinstance(bind.get(operand), str) or bind.get(operand) not in names:
                raise self.fail(f"baseline.{operand}", f"must name a parameter (one of {', '.join(sorted(names))})")
        dtypes = {p.name: p.dtype for p in params if isinstance(p, ArrayParam)}
        for operand in ("a", "b", "c") if kind == "cublas_gemm_bf16" else ():
            if dtypes.get(bind[operand]) != "bfloat16":
                raise self.fail(f"baseline.{operand}", f"cublas_gemm_bf16 multiplies bfloat16 arrays; "
                                f"'{bind[operand]}' is not one")
        return Baseline(kind, bind, torch, tuple(dict.fromkeys(variants)))

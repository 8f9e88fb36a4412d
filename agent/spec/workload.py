"""Workload specs: a directory with ``workload.toml`` and ``reference.py``.

The TOML names the kernel's parameters in order (arrays with dtype and shape,
scalars with a value), the cases with their role and sizes, the tolerance and
precision policy, the baseline, FLOP/byte formulas and the kernels that ship with
the workload. Every expression is checked against every case at load time, so a
broken spec fails here, with one line naming the file, the key and the problem,
before any GPU work.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import stat
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..runtime.compile_policy import check_options, define_options
from .accumulation_probe import WIDE_ACCUMULATORS, probe_name, probe_sizes
from .exact_probe import exact_probe_name, exact_probe_problem
from .expr import Expr, ExprError
from .half_float import NARROW_FORMATS, is_fp8, is_narrow, round_to
from .kernel_source import Knob, parse_knobs
from .launch import Launch, LaunchJob, LaunchRule, MemsetStep, Program, xyz
from .precision_policy import SPLITS
from .torch_signature import signature_problem

__all__ = ["Launch", "LaunchRule"]  # defined in agent.spec.launch, imported from here by older code

ARRAY_ROLES = ("input", "output")
CASE_ROLES = ("correctness", "performance")
ARRAY_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "float8_e4m3fn", "float8_e5m2")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")
# What a kernel may accumulate in ([tolerance] accumulate): sets the default tolerance; the
# GPU-side enforcement is agent/spec/tolerance.py's docstring.
ACCUMULATE_DTYPES = ("float16", "bfloat16", "float32", "float64")
SCALAR_DTYPES = {"int32": "i32", "int64": "i64", "float32": "f32", "float64": "f64"}
REFERENCE_STATUSES = ("", "drafted", "reviewed")
DRAFT_MARKER = ".warpsmith-drafted"  # beside workload.toml while a model's reference is not reviewed
BASELINES = ("none", "cublas_sgemm", "cublas_sgemm_bias_relu", "cublas_gemm_bf16", "torch")
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")  # 1..64 characters, no leading . or -
MAX_RTOL = 0.1  # a tolerance above 10 % judges nothing: a typo, not a policy
MAX_CONFIGS = 32  # a kernel's listed knob settings: a handful of measured starts, not a search space
MAX_ARRAY_BYTES = 1 << 48  # 256 TiB: no product of dimensions near int64 can get through
ARRAY_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8,
                  "float8_e4m3fn": 1, "float8_e5m2": 1}
FLOAT32_MAX = 3.4028234663852886e38
SCALAR_RANGES = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
Table = dict[str, Any]  # a TOML table, checked key by key
BASELINE_OPERANDS = {"cublas_sgemm": ("a", "b", "c", "m", "n", "k"),
                     "cublas_sgemm_bias_relu": ("a", "b", "bias", "c", "m", "n", "k"),
                     "cublas_gemm_bf16": ("a", "b", "c", "m", "n", "k")}


def name_problem(name: str) -> Optional[str]:
    """Why `name` cannot name a workload, case or kernel (it builds paths: the session
    folder, the reference cache, the MLflow experiment), or None."""
    if NAME_PATTERN.fullmatch(name):
        return None
    return (f"'{name[:80]}{'...' if len(name) > 80 else ''}' must be 1 to 64 letters, digits, '.', '_' or '-', "
            "not starting with '.' or '-'")


class SpecError(ValueError):
    """A workload file that is wrong; the message is one line: file, key, problem."""

    def __init__(self, path: Path | str, key: str, problem: str):
        super().__init__(f"{path}: {key}: {problem}")
        self.path, self.key, self.problem = str(path), key, problem


@dataclass(frozen=True)
class ArrayParam:
    name: str
    role: str  # input | output
    dtype: str
    shape: tuple[Expr, ...]
    low: float = -1.0  # inputs are drawn uniformly from [low, high], never 0
    high: float = 1.0
    allow_nonfinite: bool = False  # outputs: the reference may hold NaN or inf (else refused)


@dataclass(frozen=True)
class ScalarParam:
    name: str
    dtype: str
    value: Expr

    role = "scalar"

    def arg(self, case: "Case") -> tuple[str, int | float]:
        """(launch kind, value) of this scalar for a case: ("i32", 4096), ("f32", 1e-5)."""
        kind = SCALAR_DTYPES[self.dtype]
        return kind, self.value.evaluate_int(case.sizes) if kind[0] == "i" else float(self.value.evaluate(case.sizes))


Param = ArrayParam | ScalarParam


@dataclass(frozen=True)
class Case:
    name: str
    role: str
    sizes: dict[str, int]
    probe: bool = False  # the precision policy's probe (agent/spec/accumulation_probe.py): constant inputs
    exact: bool = False  # an exact probe (agent/spec/exact_probe.py): inputs an fp32-accurate kernel sums exactly
    # A stress case's inputs (agent/spec/inputs.py), the float ones only (sizes and indices
    # keep their meaning): their range times `input_scale`, a power of two (large values
    # overflow a naive exp, tiny ones put a norm's epsilon in charge), and with
    # `signed_zeros` an eighth of their values +0 or -0.
    input_scale: float = 1.0
    signed_zeros: bool = False

    @property
    def timed(self) -> bool:
        return self.role == "performance"


@dataclass(frozen=True)
class KernelSpec:
    """A kernel that ships with the workload (starting kernel, tunable kernels)."""

    name: str
    path: Path
    entry: str
    launch: LaunchRule
    options: tuple[str, ...] = ()
    defines: dict[str, int] = field(default_factory=dict)
    program: Optional[Program] = None  # several launches and workspace; `launch` is then its first launch's
    # Knob settings the tuner tries right after the defaults (as Triton's autotune configs):
    # each a subset of the kernel's knobs, the rest at their defaults.
    configs: tuple[dict[str, int], ...] = ()

    def source(self) -> str:
        return _read_source(self.path)

    def knobs(self) -> dict[str, Knob]:
        return parse_knobs(self.source())


def _read_source(path: Path) -> str:
    """A kernel file's text, read again only when the file changed: the tuner asks for it
    several times per proposal (12% of the loop's own time in benchmarks/loop_overhead.py)."""
    st = path.stat()
    return _read_text(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _read_text(path: Path, mtime_ns: int, size: int) -> str:
    return path.read_text()


@dataclass(frozen=True)
class Tolerance:
    rtol: Optional[float]  # None: default from dtype and reduction length
    allow_tf32: bool
    reduction: Optional[Expr]  # reduction length, e.g. K for GEMM
    # Compile options that lower precision (--use_fast_math, -ftz=true, -prec-div=false,
    # -prec-sqrt=false): a key of its own, not allow_tf32 (TF32 relaxes matmul inputs;
    # fast math relaxes division, sqrt, transcendentals and denormals). The tolerance
    # itself does not change: a fast-math kernel must still pass it. agent/runtime/compile_policy.py
    allow_fast_math: bool = False
    # The precision policy's accumulation dtype (e.g. "float32" for bf16 inputs); None: the
    # output's own dtype, float32 for 16-bit outputs. agent/spec/tolerance.py
    accumulate: Optional[str] = None
    # The accumulation probe (agent/spec/accumulation_probe.py), on unless the workload says
    # `probe = false`: where the reduction's size cannot grow (a head dimension of 64 or 128).
    probe: bool = True
    # The exact probe (agent/spec/exact_probe.py), `exact_probe = true`: a correctness case
    # at each performance case's sizes whose inputs every fp32-accurate kernel sums exactly.
    exact_probe: bool = False
    # Error-compensated splits the kernels may use on the tensor cores (`splits = ["3xTF32"]`):
    # each lets the machine code use one narrower input type (agent/spec/precision_policy.py).
    splits: tuple[str, ...] = ()
    # `scale = "row"`: each element's error is measured on its own row's RMS (the output's
    # last axis), not the whole case's (agent/spec/tolerance.py): for outputs whose rows
    # differ in size by construction (attention's first causal rows against its last).
    per_row_scale: bool = False


@dataclass(frozen=True)
class Baseline:
    kind: str  # none | cublas_sgemm | cublas_sgemm_bias_relu | cublas_gemm_bf16 | torch (the loop's: PyTorch eager)
    bind: dict[str, str]  # baseline operand -> workload parameter (a -> A, m -> M, ...)
    torch: Optional[Path] = None  # PyTorch baseline file: eager and torch.compile, where PyTorch is installed
    # More functions of the torch file, each a baseline of its own timed eager: variant V is the file's
    # baseline_V(), baseline kind torch_V (attention: SDPA pinned to cuDNN beside its flash backend).
    torch_variants: tuple[str, ...] = ()

    @property
    def primary(self) -> Optional[str]:
        """The baseline the loop compares with."""
        return {"none": None, "torch": "torch_eager"}.get(self.kind, self.kind)

    def kinds(self) -> list[str]:
        """Every baseline this workload can be compared with, the loop's first."""
        extra = ["torch_eager", "torch_compile", *(f"torch_{v}" for v in self.torch_variants)] if self.torch else []
        return list(dict.fromkeys(([self.primary] if self.primary else []) + extra))


@dataclass(frozen=True)
class Workload:
    name: str
    directory: Path
    description: str
    params: tuple[Param, ...]
    cases: tuple[Case, ...]
    tolerance: Tolerance
    baseline: Baseline
    flops: Optional[Expr]
    bytes: Optional[Expr]
    kernels: dict[str, KernelSpec]
    start: str  # the starting kernel's name; "" when the workload starts from scratch
    reference_path: Path
    digest: str  # hash of the spec and the reference: keys the reference cache
    # "" (written by hand), "drafted" (by a model, not yet trusted) or "reviewed"
    # (the user agreed and an independent second draft matched it): agent/drafting/drafting.py
    reference_status: str = ""
    # [start] tune: the kernel the tuner searches first, before the starting kernel's own knobs
    # ("": the starting kernel if it has knobs, else the one with most knobs);
    # the other kernels with knobs still get their turns (agent/proposers/tune.py)
    tune: str = ""
    # (kernel, case, why): a shipped kernel that cannot serve a case at its defaults nor at any
    # listed config (its launch or workspace out of range there); others serve that case
    not_applicable: tuple[tuple[str, str, str], ...] = ()
    # (name, sizes) of the user's performance cases that replaced the workload's own (`bench --shapes`)
    shapes: tuple[tuple[str, dict[str, int]], ...] = ()

    @property
    def arrays(self) -> list[ArrayParam]:
        return [p for p in self.params if isinstance(p, ArrayParam)]

    @property
    def inputs(self) -> list[ArrayParam]:
        return [p for p in self.arrays if p.role == "input"]

    @property
    def outputs(self) -> list[ArrayParam]:
        return [p for p in self.arrays if p.role == "output"]

    @property
    def wide_accumulation(self) -> bool:
        """Whether the precision policy forbids 16-bit accumulation: a 16-bit or fp8 array and a
        float32 or float64 policy (the default). The PTX audit enforces it at compile time
        (agent/runtime/ptx_audit.py), the accumulation probe and the tolerance at run time."""
        return self.tolerance.accumulate in WIDE_ACCUMULATORS and any(is_narrow(a.dtype) for a in self.arrays)

    @property
    def start_kernel(self) -> Optional[KernelSpec]:
        """None for a workload that starts from scratch ([start] from_scratch = true)."""
        return self.kernels[self.start] if self.start else None

    @property
    def from_scratch(self) -> bool:
        """No starting kernel: the llm proposer writes the first one."""
        return not self.start

    def needs_start_kernel(self, what: str) -> Optional[str]:
        """Why `what` (a command that evaluates or tunes the starting kernel) cannot run on
        this workload, or None."""
        if not self.from_scratch:
            return None
        return (f"{what}: {self.name} has no starting kernel ([start] from_scratch = true); the llm proposer "
                "writes its first kernel: warpsmith run WORKLOAD --proposer llm (with OPENAI_API_KEY or --base-url)")

    def timing_only(self, names: list[str] | tuple[str, ...]) -> "Workload":
        """This workload with only `names` among its performance cases timed and
        scored (`run --cases`: tune for the shapes you ship). The other performance
        cases are still validated, like correctness cases. Raises ValueError naming
        the performance cases when a name is not one of them."""
        if not names:
            return self
        timed = [c.name for c in self.cases if c.timed]
        unknown = [n for n in names if n not in timed]
        if unknown:
            raise ValueError(f"--cases: {', '.join(unknown)} is not a performance case of {self.name} "
                             f"(those are: {', '.join(timed)})")
        return replace(self, cases=tuple(c if not c.timed or c.name in names else replace(c, role="correctness")
                                         for c in self.cases))

    def check_evaluable(self) -> None:
        """Raises SpecError (one line) for a workload `warpsmith check` passes but the GPU
        side cannot run as written: the cuBLAS SGEMM baselines read float32 operands, and
        would read a 16-bit array's bytes as float32 (cublas_gemm_bf16's bfloat16 operands
        are checked when the spec is parsed)."""
        kind = self.baseline.kind
        if not kind.startswith("cublas_sgemm"):
            return
        for operand in BASELINE_OPERANDS.get(kind, ()):
            p = next((p for p in self.params if p.name == self.baseline.bind[operand]), None)
            if isinstance(p, ArrayParam) and p.dtype != "float32":
                raise SpecError(self.directory / "workload.toml", f"baseline.{operand}",
                                f"{kind} reads float32 operands and '{p.name}' is {p.dtype}: "
                                "use kind = \"torch\" for other dtypes")

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"no case '{name}' in workload {self.name}")

    def shape(self, param: ArrayParam, case: Case) -> tuple[int, ...]:
        return tuple(e.evaluate_int(case.sizes) for e in param.shape)

    def array_bytes(self, param: ArrayParam, case: Case) -> int:
        """The array's bytes in this case (exact: Python ints, however large)."""
        return math.prod(self.shape(param, case)) * ARRAY_ITEMSIZE[param.dtype]

    def signature(self) -> str:
        """The kernel's parameter list as C, for people and models."""
        ctype = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
                 "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2", "int32": "int", "int64": "long long"}
        parts = []
        for p in self.params:
            if isinstance(p, ArrayParam):
                const = "const " if p.role == "input" else ""
                dims = " x ".join(str(e) for e in p.shape)
                parts.append(f"{const}{ctype[p.dtype]}* {p.name} /* [{dims}] {p.role} */")
            else:
                parts.append(f"{ctype[p.dtype]} {p.name} /* = {p.value} */")
        return ", ".join(parts)


def scalar_problem(dtype: str, value: int | float) -> Optional[str]:
    """Why `value` cannot be passed as a scalar of `dtype`, or None."""
    if dtype in SCALAR_RANGES:
        lo, hi = SCALAR_RANGES[dtype]
        return None if lo <= value <= hi else f"{value} is outside {dtype}'s range [{lo}, {hi}]"
    if not math.isfinite(value):
        return f"{value} is not finite"
    if dtype == "float32" and abs(value) > FLOAT32_MAX:
        return f"{value:g} is outside float32's range (+-{FLOAT32_MAX:.7g})"
    return None


def program_problem(w: Workload, program: Program, case: Case, env: dict[str, int]) -> Optional[str]:
    """Why `program` cannot run on `case` (names that do not resolve, a launch or a
    workspace size that cannot be), or None."""
    problem = program.problems({p.name: p.role for p in w.arrays}, {p.name for p in w.params if p.role == "scalar"})
    if problem:
        return problem
    try:
        job = program.resolve(env, {p.name: p.arg(case) for p in w.params if isinstance(p, ScalarParam)},
                              array_layouts(w, case))
    except ValueError as e:  # ExprError is a ValueError
        return str(e)
    for s in job.steps:
        if isinstance(s, LaunchJob):
            problem = step_problem(s)
            if problem:
                return problem
    return None


def step_problem(step: LaunchJob) -> Optional[str]:
    """Why one resolved launch of a program cannot be valid (its launch, a TMA descriptor), or None."""
    problem = step.launch.problems() or next(
        (f"tma:{a.array}: {a.tensor_map.problems()}" for a in step.args
         if a.tensor_map is not None and a.tensor_map.problems()), None)
    return f"{step.entry}: {problem}" if problem else None


def array_layouts(w: Workload, case: Case) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every array parameter's (dtype, shape) on `case`: what a program's TMA descriptors describe."""
    return {p.name: (p.dtype, w.shape(p, case)) for p in w.arrays}


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


def exact_probe_cases(cases: tuple[Case, ...]) -> tuple[Case, ...]:
    """One exact probe per performance case, at its sizes (agent/spec/exact_probe.py)."""
    return tuple(Case(exact_probe_name(c.name), "correctness", dict(c.sizes), exact=True) for c in cases if c.timed)


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


class _Parser:
    def __init__(self, path: Path, directory: Path, doc: Table, raw: bytes):
        self.path, self.dir, self.doc, self.raw = path, directory, doc, raw

    def fail(self, key: str, problem: str) -> SpecError:
        return SpecError(self.path, key, problem)

    def get(self, table: Table, key: str, where: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in table:
            if default is ...:
                raise self.fail(f"{where}{key}", "missing")
            return default
        value = table[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(f"{where}{key}", f"expected {names}, got {value!r}")
        return value

    def known(self, table: Table, where: str, allowed: set[str]) -> None:
        """Unknown keys are typos until proven otherwise."""
        for key in table:
            if key not in allowed:
                raise self.fail(f"{where}{key}", f"unknown key (expected one of {', '.join(sorted(allowed))})")

    def name(self, table: Table, where: str) -> str:
        """table["name"], checked before it builds any path."""
        value: str = self.get(table, "name", where, str)
        problem = name_problem(value)
        if problem:
            raise self.fail(where + "name", problem)
        return value

    def file(self, relative: str, key: str) -> Path:
        """A file the spec names: a regular file inside the workload directory once
        symlinks are resolved (a spec cannot make warpsmith read ../../secret)."""
        path = self.dir / relative
        root, real = self.dir.resolve(), path.resolve()
        if not real.is_relative_to(root):
            raise self.fail(key, f"'{relative}' resolves to {real}, outside the workload directory {root}")
        try:
            mode = real.stat().st_mode
        except OSError:
            raise self.fail(key, f"{path.name} not found beside workload.toml") from None
        if not stat.S_ISREG(mode):
            raise self.fail(key, f"'{relative}' is not a regular file")
        return path

    def expr(self, value: Any, key: str) -> Expr:
        try:
            return Expr.parse(value)
        except ExprError as e:
            raise self.fail(key, str(e)) from None

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
        params = self.parse_params()
        cases = self.parse_cases()
        tolerance = self.parse_tolerance(top, params)
        metrics = self.get(self.doc, "metrics", "", dict, {})
        self.known(metrics, "metrics.", {"flops", "bytes"})
        flops = self.expr(metrics["flops"], "metrics.flops") if "flops" in metrics else None
        nbytes = self.expr(metrics["bytes"], "metrics.bytes") if "bytes" in metrics else None
        start_table = self.get(self.doc, "start", "", dict, {})
        self.known(start_table, "start.", {"kernel", "from_scratch", "tune"})
        from_scratch = self.get(start_table, "from_scratch", "start.", bool, False)
        kernels = self.parse_kernels(tolerance.allow_fast_math, required=not from_scratch)
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
        cases = cases + probe_cases(params, cases, tolerance) + (exact_probe_cases(cases) if tolerance.exact_probe else ())
        w = Workload(name, self.dir, description.strip(), params, cases,
                     tolerance, baseline, flops, nbytes, kernels, start, reference, digest, status, tune)
        w = replace(w, not_applicable=self.check_against_cases(w))
        if w.baseline.torch is not None:  # last: a scalar's own error first, then what the baseline lacks
            scalars = [p.name for p in params if not isinstance(p, ArrayParam)]
            for function in ("baseline", *(f"baseline_{v}" for v in w.baseline.torch_variants)):
                problem = signature_problem(w.baseline.torch, [a.name for a in w.inputs], scalars, function)
                if problem:
                    raise self.fail("baseline.torch", problem)
        return w

    def parse_params(self) -> tuple[Param, ...]:
        items = self.get(self.doc, "params", "", list)
        params: list[Param] = []
        seen = set()
        for i, p in enumerate(items):
            where = f"params[{i}]."
            if not isinstance(p, dict):
                raise self.fail(f"params[{i}]", "each parameter is a table")
            self.known(p, where, {"name", "role", "dtype", "shape", "range", "value", "allow_nonfinite"})
            name = self.name(p, where)
            if not name.isidentifier() or name in seen:
                raise self.fail(where + "name", f"'{name}' is not a unique identifier")
            seen.add(name)
            role = self.get(p, "role", where, str)
            dtype = self.get(p, "dtype", where, str)
            if role == "scalar":
                if dtype not in SCALAR_DTYPES:
                    raise self.fail(where + "dtype", f"scalar dtype must be one of {', '.join(SCALAR_DTYPES)}")
                params.append(ScalarParam(name, dtype, self.expr(self.get(p, "value", where, (str, int, float)), where + "value")))
                continue
            if role not in ARRAY_ROLES:
                raise self.fail(where + "role", f"'{role}' must be input, output or scalar")
            if dtype not in ARRAY_DTYPES:
                raise self.fail(where + "dtype", f"'{dtype}' must be one of {', '.join(ARRAY_DTYPES)}")
            if is_fp8(dtype) and role == "output":
                # An output is poisoned in words the kernel cannot predict and compared on the GPU
                # in 16 or 32 bits; an 8-bit format has two NaNs and a handful of huge values.
                raise self.fail(where + "dtype", f"{dtype} is an input dtype here: write the output in bfloat16, "
                                "float16 or float32 (outputs are poisoned and checked in words of 16 bits or more)")
            shape = self.get(p, "shape", where, list)
            if not shape:
                raise self.fail(where + "shape", "needs at least one dimension")
            bounds = self.get(p, "range", where, list, [-1.0, 1.0]) if role == "input" else [-1.0, 1.0]
            if len(bounds) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool)
                                           and math.isfinite(b) for b in bounds) or not bounds[0] < bounds[1]:
                raise self.fail(where + "range", f"expected finite [low, high] with low < high, got {bounds!r}")
            low, high = bounds
            if is_narrow(dtype):
                self.check_half_range(dtype, low, high, where + "range")
            if dtype.startswith("int"):
                info = {"int32": 2**31, "int64": 2**63}[dtype]
                lo, hi = math.ceil(low), math.floor(high)
                if lo > hi or (lo == hi == 0) or lo < -info or hi >= info:
                    raise self.fail(where + "range", f"holds no non-zero {dtype} value (inputs are never zero)")
            nonfinite = self.get(p, "allow_nonfinite", where, bool, False)
            if nonfinite and (role != "output" or dtype not in FLOAT_DTYPES):
                raise self.fail(where + "allow_nonfinite", "only a float output's reference may hold NaN or inf")
            params.append(ArrayParam(name, role, dtype,
                                     tuple(self.expr(d, f"{where}shape[{j}]") for j, d in enumerate(shape)),
                                     float(low), float(high), nonfinite))
        if not any(isinstance(p, ArrayParam) and p.role == "output" for p in params):
            raise self.fail("params", "no parameter has role = \"output\"")
        return tuple(params)

    def check_half_range(self, dtype: str, low: float, high: float, key: str) -> None:
        """Inputs are drawn from [low, high] and rounded to `dtype`: the bounds must be
        finite there, and some non-zero value must survive the rounding."""
        fmt = NARROW_FORMATS[dtype]
        if max(abs(low), abs(high)) > fmt.max_finite:
            raise self.fail(key, f"[{low:g}, {high:g}] reaches beyond {dtype}'s largest value (+-{fmt.max_finite:.6g})")
        if not round_to(np.array([low, high]), dtype).any():
            raise self.fail(key, f"[{low:g}, {high:g}] holds no non-zero {dtype} value (inputs are never zero)")

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
        exact = self.get(t, "exact_probe", "tolerance.", bool, False)
        if exact:
            problem = exact_probe_problem([p.dtype for p in params if isinstance(p, ArrayParam) and p.role == "input"],
                                          allow, reduction is not None)
            if problem:
                raise self.fail("tolerance.exact_probe", problem)
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
                         accumulate, probe, exact, tuple(splits), scale == "row")

    def parse_kernels(self, allow_fast_math: bool, required: bool = True) -> dict[str, KernelSpec]:
        table = self.get(self.doc, "kernels", "", dict, {})
        kernels = {}
        for name, k in table.items():
            where = f"kernels.{name}."
            if not isinstance(k, dict):
                raise self.fail(f"kernels.{name}", "expected a table")
            if name_problem(name):
                raise self.fail(f"kernels.{name[:80]}", f"kernel name {name_problem(name)}")
            self.known(k, where, {"source", "entry", "grid", "block", "shared", "options", "defines", "steps",
                                  "workspace", "configs"})
            src = self.file(self.get(k, "source", where, str), where + "source")
            program = None
            if "steps" in k:  # a program of several launches (agent/spec/launch.py)
                for key in ("entry", "grid", "block", "shared"):
                    if key in k:
                        raise self.fail(where + key, "a kernel with `steps` gives entry, grid and block per step")
                try:
                    program = Program.from_data(k["steps"], k.get("workspace", []))
                except (ValueError, ExprError) as e:
                    raise self.fail(where[:-1], str(e)) from None
                rule, entry = program.launches[0].launch, program.launches[0].entry
            else:
                if "workspace" in k:
                    raise self.fail(where + "workspace", "workspace needs a program: give `steps`")
                grid, block = self.get(k, "grid", where, list), self.get(k, "block", where, list)
                for key, dims in (("grid", grid), ("block", block)):
                    if not 1 <= len(dims) <= 3:
                        raise self.fail(where + key, "expected 1 to 3 dimensions")
                rule = LaunchRule(
                    xyz([self.expr(g, f"{where}grid[{i}]") for i, g in enumerate(grid + [1] * (3 - len(grid)))]),
                    xyz([self.expr(b, f"{where}block[{i}]") for i, b in enumerate(block + [1] * (3 - len(block)))]),
                    self.expr(self.get(k, "shared", where, (int, str), 0), where + "shared"))
                entry = self.get(k, "entry", where, str)
            options = self.get(k, "options", where, list, [])
            defines = self.get(k, "defines", where, dict, {})
            for name, value in defines.items():
                if not isinstance(value, int) or isinstance(value, bool):
                    raise self.fail(f"{where}defines.{name}", f"expected an integer, got {value!r}")
            refusal = check_options([str(o) for o in options] + define_options(defines), allow_fast_math)
            if refusal:
                raise self.fail(where + "options", refusal)
            spec = KernelSpec(name, src, entry, rule, tuple(str(o) for o in options),
                              {str(a): int(b) for a, b in defines.items()}, program)
            try:
                knobs = spec.knobs()
            except ValueError as e:
                raise self.fail(where + "source", str(e)) from None
            configs = self.parse_configs(k, where, knobs)
            kernels[name] = replace(spec, configs=configs) if configs else spec
        if not kernels and required:
            raise self.fail("kernels", "no kernel defined: add a [kernels.NAME] table, or [start] from_scratch = true "
                            "(the llm proposer then writes the first kernel)")
        return kernels

    def parse_configs(self, k: Table, where: str, knobs: dict[str, Knob]) -> tuple[dict[str, int], ...]:
        """`configs = [{ SPLITK = 4, STAGES = 3 }, ...]`: each entry names declared knobs only,
        each value one of that knob's declared values; at most MAX_CONFIGS entries."""
        configs = self.get(k, "configs", where, list, [])
        if len(configs) > MAX_CONFIGS:
            raise self.fail(where + "configs", f"{len(configs)} entries; at most {MAX_CONFIGS}")
        out = []
        for i, c in enumerate(configs):
            at = f"{where}configs[{i}]"
            if not isinstance(c, dict) or not c:
                raise self.fail(at, "expected a non-empty table of knob = value")
            for knob, value in c.items():
                if knob not in knobs:
                    raise self.fail(f"{at}.{knob[:80]}", f"not a knob of the kernel's source (knobs: "
                                                        f"{', '.join(knobs) or 'none'})")
                if not isinstance(value, int) or isinstance(value, bool) or value not in knobs[knob].values:
                    raise self.fail(f"{at}.{knob}", f"{repr(value)[:80]} is not one of the knob's values "
                                                    f"{list(knobs[knob].values)}")
            out.append({str(a): int(b) for a, b in c.items()})
        return tuple(out)

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

    def check_against_cases(self, w: Workload) -> tuple[tuple[str, str, str], ...]:
        """Evaluate every expression for every case so errors surface now. Returns the
        (kernel, case, why) pairs where a kernel cannot serve a case; a case that no kernel
        serves is an error."""
        arrays = {p.name: p.role for p in w.params if isinstance(p, ArrayParam)}
        scalars = {p.name for p in w.params if isinstance(p, ScalarParam)}
        sizes = {n for c in w.cases for n in c.sizes}
        for kname, k in w.kernels.items():
            malformed = k.program.problems(arrays, scalars) if k.program else None
            if malformed:
                raise self.fail(f"kernels.{kname}", malformed)
            unknown = sorted(_rule_names(k) - sizes - set(k.knobs()) - set(k.defines))
            if unknown:  # wrong on every case, however many other kernels serve them
                raise self.fail(f"kernels.{kname}", f"launch for case '{w.cases[0].name}': '{unknown[0]}' is "
                                "neither a size nor one of the kernel's knobs or defines")
        not_applicable = []
        for case in w.cases:
            def check(expr: Expr, key: str, integer: bool = True) -> None:
                try:
                    value = expr.evaluate_int(case.sizes) if integer else expr.evaluate(case.sizes)
                except ExprError as e:
                    raise self.fail(key, f"for case '{case.name}': {e}") from None
                if integer and value < 1 and ".shape[" in key:
                    raise self.fail(key, f"for case '{case.name}': dimension {value} < 1")
            for j, p in enumerate(w.params):
                if isinstance(p, ArrayParam):
                    for d, e in enumerate(p.shape):
                        check(e, f"params[{j}].shape[{d}]")
                    nbytes = w.array_bytes(p, case)
                    if nbytes > MAX_ARRAY_BYTES:
                        raise self.fail(f"params[{j}].shape", f"for case '{case.name}': {p.name} would be "
                                        f"{nbytes} bytes, more than any machine ({MAX_ARRAY_BYTES})")
                else:
                    check(p.value, f"params[{j}].value", integer=p.dtype.startswith("int"))
                    try:
                        problem = scalar_problem(p.dtype, p.arg(case)[1])
                    except OverflowError:
                        problem = f"{p.value} overflows {p.dtype}"
                    if problem:
                        raise self.fail(f"params[{j}].value", f"for case '{case.name}': {p.name} = {problem}")
            for key, formula in (("metrics.flops", w.flops), ("metrics.bytes", w.bytes),
                                 ("workload.reduction", w.tolerance.reduction)):
                if formula is not None:
                    check(formula, key, integer=False)
            problems = {name: _kernel_problem(w, k, case) for name, k in w.kernels.items()}
            if problems and all(problems.values()):
                name, problem = next(iter(problems.items()))
                raise self.fail(f"kernels.{name}", f"launch for case '{case.name}': {problem}; and no other "
                                "kernel of the workload can serve that case either")
            not_applicable += [(name, case.name, problem) for name, problem in problems.items() if problem]
        for name in w.kernels:  # as the evaluator judges a candidate (agent/spec/applicability.py)
            skipped = {c: why for k, c, why in not_applicable if k == name}
            for timed, what in ((False, "correctness"), (True, "performance")):
                cases = [c for c in w.cases if c.timed == timed]
                if all(c.name in skipped for c in cases):
                    raise self.fail(f"kernels.{name}", f"launch for case '{cases[0].name}': "
                                    f"{skipped[cases[0].name]}; it serves no {what} case")
        return tuple(not_applicable)


def _rule_names(k: KernelSpec) -> set[str]:
    """Every name the kernel's launch arithmetic uses (each step's, its workspace sizes, its computed arguments)."""
    rules = [k.launch] + ([s.launch for s in k.program.steps if not isinstance(s, MemsetStep)] if k.program else [])
    exprs = [e for r in rules for e in (*r.grid, *r.block, r.shared, *r.cluster)]
    if k.program:
        exprs += [w.size for w in k.program.workspace]
        exprs += [a.expr for s in k.program.steps if not isinstance(s, MemsetStep) for a in s.args if a.expr is not None]
    return {n for e in exprs for n in e.names()}


def _kernel_problem(w: Workload, k: KernelSpec, case: Case) -> Optional[str]:
    """Why a shipped kernel cannot serve `case` at its defaults nor at any listed config, or None."""
    knobs = k.knobs()
    problem = None
    settings: tuple[dict[str, int], ...] = ({},) + k.configs
    for config in settings:
        env = {**case.sizes, **{n: kn.default for n, kn in knobs.items()}, **k.defines, **config}
        try:
            problem = (program_problem(w, k.program, case, env) if k.program else None) or k.launch.resolve(env).problems()
        except ExprError as e:
            problem = str(e)
        if problem is None:
            return None
    return problem

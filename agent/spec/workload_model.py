"""What a workload is: its parameters (arrays and scalars), its cases and their sizes,
its tolerance and baseline, and the kernels that ship with it; the records
agent/spec/workload.py builds from ``workload.toml`` once every expression in them has
been checked against every case.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from .accumulation_probe import WIDE_ACCUMULATORS
from .expr import Expr
from .half_float import is_narrow
from .kernel_source import Knob, parse_knobs
from .launch import LaunchJob, LaunchRule, Program

ARRAY_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "float8_e4m3fn", "float8_e5m2", "bool")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")
# What a kernel may accumulate in ([tolerance] accumulate): sets the default tolerance; the
# GPU-side enforcement is agent/spec/tolerance.py's docstring.
ACCUMULATE_DTYPES = ("float16", "bfloat16", "float32", "float64")
SCALAR_DTYPES = {"int32": "i32", "int64": "i64", "float32": "f32", "float64": "f64"}
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")  # 1..64 characters, no leading . or -
ARRAY_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8,
                  "float8_e4m3fn": 1, "float8_e5m2": 1, "bool": 1}
# Input dtypes only: an output is poisoned and compared in words of 16 bits or more
INPUT_ONLY_DTYPES = ("float8_e4m3fn", "float8_e5m2", "bool")
# How an input's values are drawn besides uniformly from its range (agent/spec/inputs.py)
DISTRIBUTIONS = ("uniform", "normal")
# Structure an input is drawn with in every case (agent/spec/input_structure.py)
SQUARE_STRUCTURES = ("symmetric", "upper_triangular", "lower_triangular")  # of the last two axes, which are equal
VALUE_STRUCTURES = ("mask", "sign")  # the structure gives the values (0 and 1, -1 and 1): no range
STRUCTURES = (*SQUARE_STRUCTURES, "rows_sum_to_1", *VALUE_STRUCTURES)
FLOAT32_MAX = 3.4028234663852886e38
SCALAR_RANGES = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
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
    # inputs are drawn uniformly from [low, high], never 0; an integer input's bounds may
    # be expressions of the sizes (indices below a size: Workload.bounds)
    low: Expr = Expr.parse(-1.0)
    high: Expr = Expr.parse(1.0)
    allow_nonfinite: bool = False  # outputs: the reference may hold NaN or inf (else refused)
    distribution: str = "uniform"  # inputs: "normal" draws from N(0, 1), torch.randn's, instead of the range
    structure: str = ""  # inputs: one of STRUCTURES, kept in every case
    density: float = 0.5  # bool, mask and sign inputs: the share of True, of 1 or of +1


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
    probe: bool = False  # the precision policy's probe (agent/spec/accumulation_probe.py): a 2^22-long reduction
    # A stress case's inputs (agent/spec/inputs.py), the float ones only (sizes and indices
    # keep their meaning): their range times `input_scale`, a power of two (large values
    # overflow a naive exp, tiny ones put a norm's epsilon in charge), and with
    # `signed_zeros` an eighth of their values +0 or -0.
    input_scale: float = 1.0
    signed_zeros: bool = False

    @property
    def timed(self) -> bool:
        return self.role == "performance"


SizeRanges = dict[str, tuple[int, int]]  # size name -> (lowest, highest), both included


def in_ranges(ranges: SizeRanges, sizes: dict[str, int]) -> bool:
    """Whether every named size lies in its range (a size the case lacks does not)."""
    return all(name in sizes and lo <= sizes[name] <= hi for name, (lo, hi) in ranges.items())


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
    # The sizes each config is written for (its `when`, beside it; {}: every case), and the
    # sizes the kernel itself is written for (`suits`): inclusive ranges by size name. The
    # tuner's turns for a case go first to the kernels and settings whose ranges hold it.
    config_when: tuple[SizeRanges, ...] = ()
    suits: SizeRanges = field(default_factory=dict)

    def _whens(self) -> list[tuple[dict[str, int], SizeRanges]]:
        """Each listed config beside its `when` ({}: written for every case, also where
        `config_when` is shorter than `configs`)."""
        return [(c, self.config_when[i] if i < len(self.config_when) else {}) for i, c in enumerate(self.configs)]

    def configs_written_for(self, sizes: Optional[dict[str, int]]) -> list[dict[str, int]]:
        """The listed configs whose `when` holds a case of these sizes (none with no case)."""
        return [c for c, w in self._whens() if w and sizes is not None and in_ranges(w, sizes)]

    def listed_for(self, sizes: Optional[dict[str, int]]) -> list[dict[str, int]]:
        """The listed configs for a case of these sizes: those written for it first, then the
        unconditional ones; those written for other sizes are left out."""
        return self.configs_written_for(sizes) + [c for c, w in self._whens() if not w]

    def written_for(self, sizes: Optional[dict[str, int]]) -> bool:
        """Whether the kernel (`suits`), or one of its listed configs, is written for these
        sizes: by a range that holds them, not by having none."""
        return sizes is not None and ((bool(self.suits) and in_ranges(self.suits, sizes))
                                      or bool(self.configs_written_for(sizes)))

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

    def bounds(self, param: ArrayParam, case: Case) -> tuple[float, float]:
        """The [low, high] an input is drawn from in this case."""
        return float(param.low.evaluate(case.sizes)), float(param.high.evaluate(case.sizes))

    def array_bytes(self, param: ArrayParam, case: Case) -> int:
        """The array's bytes in this case (exact: Python ints, however large)."""
        return math.prod(self.shape(param, case)) * ARRAY_ITEMSIZE[param.dtype]

    def signature(self) -> str:
        """The kernel's parameter list as C, for people and models."""
        ctype = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
                 "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2",
                 "int32": "int", "int64": "long long", "bool": "bool"}
        parts = []
        for p in self.params:
            if isinstance(p, ArrayParam):
                const = "const " if p.role == "input" else ""
                dims = " x ".join(str(e) for e in p.shape)
                structure = f", {p.structure.replace('_', ' ')}" if p.structure else ""
                parts.append(f"{const}{ctype[p.dtype]}* {p.name} /* [{dims}] {p.role}{structure} */")
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

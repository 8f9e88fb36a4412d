"""How a candidate runs on a case: one launch rule, or a program of several steps.

A launch rule is grid, block and dynamic shared memory as expressions of the case's
sizes and the kernel's knobs. A program (issue: candidates that can beat the library)
is an ordered sequence of launches and memsets over the workload's parameters and
workspace buffers the candidate declares:

    workspace = [{ name = "partial", dtype = "float32", size = "SPLITK * M * N", init = "poison" }]
    steps = [
      { entry = "splitk_partial", grid = ["ceil_div(N, 64)", "ceil_div(M, 64)", "SPLITK"], block = [256],
        args = ["A", "B", "partial", "M", "N", "K", "i32:ceil_div(K, SPLITK)"] },
      { entry = "splitk_reduce", grid = ["ceil_div(M * N, 256)"], block = [256],
        args = ["partial", "C", "i32:M * N", "i32:SPLITK"] },
    ]

An argument is a parameter's or a workspace buffer's name, or ``KIND:EXPR`` (KIND one
of i32, i64, f32, f64) for a scalar computed from sizes and knobs, or a TMA
descriptor of an array parameter (seen as 2-D: leading dimensions flattened into rows),
``tma:NAME:box=ROWSxCOLS[:swizzle=128B]``
(agent/spec/tensor_map.py). A launch step may carry
``cluster = [X, Y, Z]``, a thread block cluster (launched with cuLaunchKernelEx; the
grid must be a multiple of it, at most 8 blocks). A memset step
(``{ memset = "NAME" }``) zeroes a workspace buffer or an output. Workspace starts
each run zeroed (``init = "zero"``: a memset ahead of the first step, timed with the
program) or filled with the harness's unpredictable poison (``init = "poison"``): a
program must write it before it reads it. Every entry of a
program is ``extern "C"`` (its symbol is its name). The whole sequence is what is
validated and timed, between one pair of events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TypeVar, Union

from .expr import Expr, ExprError
from .tensor_map import TMA_KIND, TensorMap, TmaBox

ARG_KINDS = ("i32", "i64", "f32", "f64")
MAX_CLUSTER_BLOCKS = 8  # the portable cluster size; more needs a non-portable opt-in
WORKSPACE_DTYPES = {"float32": 4, "float64": 8, "int32": 4, "int64": 8}
WORKSPACE_INITS = ("zero", "poison")
MAX_STEPS = 16
MAX_WORKSPACES = 8
MAX_WORKSPACE_BYTES = 16 << 30  # one buffer; a size past this is a formula gone wrong
UNSIGNED = 2**32  # the runner passes grid, block and shared memory as 32-bit unsigned (a larger one: a TypeError)
ARG_RANGES = {"i32": (-2**31, 2**31 - 1), "i64": (-2**63, 2**63 - 1)}  # what the runner converts
T = TypeVar("T")


def xyz(dims: Sequence[T]) -> tuple[T, T, T]:
    """Three dimensions (x, y, z) of a list already padded to three."""
    x, y, z = dims
    return x, y, z


NO_CLUSTER = (Expr.parse(1), Expr.parse(1), Expr.parse(1))


@dataclass(frozen=True)
class LaunchRule:
    """Grid, block, dynamic shared memory and thread block cluster as expressions of sizes and knobs."""

    grid: tuple[Expr, Expr, Expr]
    block: tuple[Expr, Expr, Expr]
    shared: Expr = Expr.parse(0)
    cluster: tuple[Expr, Expr, Expr] = NO_CLUSTER

    def resolve(self, env: dict[str, int]) -> "Launch":
        return Launch(xyz([e.evaluate_int(env) for e in self.grid]), xyz([e.evaluate_int(env) for e in self.block]),
                      self.shared.evaluate_int(env), xyz([e.evaluate_int(env) for e in self.cluster]))

    @staticmethod
    def parse(grid: Sequence[Any], block: Sequence[Any], shared: Any = 0, cluster: Sequence[Any] = (1,)) -> "LaunchRule":
        """From 1-3 dimensions each (missing ones are 1); raises ValueError."""
        for key, dims in (("grid", grid), ("block", block), ("cluster", cluster)):
            if not isinstance(dims, (list, tuple)) or not 1 <= len(dims) <= 3:
                raise ValueError(f"{key}: expected 1 to 3 dimensions")
        def pad(dims: Sequence[Any]) -> tuple[Expr, Expr, Expr]:
            return xyz([Expr.parse(d) for d in (list(dims) + [1] * 3)[:3]])
        return LaunchRule(pad(grid), pad(block), Expr.parse(shared), pad(cluster))

    @property
    def clustered(self) -> bool:
        return any(str(e) != "1" for e in self.cluster)

    def text(self) -> dict[str, Any]:
        cluster = {"cluster": [str(e) for e in self.cluster]} if self.clustered else {}
        return {"grid": [str(e) for e in self.grid], "block": [str(e) for e in self.block], "shared": str(self.shared),
                **cluster}


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    cluster: tuple[int, int, int] = (1, 1, 1)

    def problems(self) -> Optional[str]:
        """A reason this launch cannot be valid on any GPU, or None."""
        if any(v < 1 for v in self.grid + self.block):
            return f"grid {self.grid} / block {self.block} has a dimension below 1"
        if any(v >= UNSIGNED for v in self.grid + self.block):
            return f"grid {self.grid} / block {self.block} has a dimension past 32 bits"
        threads = self.block[0] * self.block[1] * self.block[2]
        if threads > 1024:
            return f"block {self.block} has {threads} threads, more than 1024"
        if not 0 <= self.shared < UNSIGNED:
            return f"dynamic shared memory {self.shared} is negative or past 32 bits"
        if any(c < 1 for c in self.cluster):
            return f"cluster {self.cluster} has a dimension below 1"
        blocks = self.cluster[0] * self.cluster[1] * self.cluster[2]
        if blocks > MAX_CLUSTER_BLOCKS:
            return f"cluster {self.cluster} has {blocks} blocks, more than the portable {MAX_CLUSTER_BLOCKS}"
        if any(g % c for g, c in zip(self.grid, self.cluster)):
            return f"grid {self.grid} is not a multiple of cluster {self.cluster} in every dimension"
        return None


@dataclass(frozen=True)
class Arg:
    """One kernel argument, resolved: an array or workspace buffer by name, a scalar, or a
    TMA descriptor of an array (kind ``tma``, `tensor_map` set)."""

    array: Optional[str] = None
    kind: str = "ptr"  # ptr | i32 | i64 | f32 | f64 | tma
    value: Union[int, float] = 0
    tensor_map: Optional[TensorMap] = None

    def native(self, address: Callable[[str], int]) -> tuple[str, Any]:
        """The runner's (kind, value) pair; `address` gives a buffer's device address by name."""
        if self.tensor_map is not None and self.array:
            t = self.tensor_map
            return TMA_KIND, (address(self.array), t.dtype, t.rows, t.cols, t.box_rows, t.box_cols, t.swizzle)
        if self.array:
            return "ptr", address(self.array)
        return self.kind, self.value


@dataclass(frozen=True)
class StepArg:
    """One argument of a launch step as written: a name, KIND:EXPR, or tma:NAME:box=RxC[:swizzle=S]."""

    name: str = ""
    kind: str = ""
    expr: Optional[Expr] = None
    tma: Optional[TmaBox] = None  # kind tma: the descriptor of array `name`

    @staticmethod
    def parse(text: Any) -> "StepArg":
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"argument {text!r}: expected a name or KIND:EXPR")
        kind, sep, rest = text.partition(":")
        if sep and kind.strip() == TMA_KIND:
            tma = TmaBox.parse(text)
            return StepArg(name=tma.array, kind=TMA_KIND, tma=tma)
        if sep:
            if kind.strip() not in ARG_KINDS:
                raise ValueError(f"argument {text!r}: the kind before ':' must be one of "
                                 f"{', '.join(ARG_KINDS + (TMA_KIND,))}")
            return StepArg(kind=kind.strip(), expr=Expr.parse(rest.strip()))
        return StepArg(name=text.strip())

    def text(self) -> str:
        if self.tma is not None:
            return self.tma.text()
        return f"{self.kind}:{self.expr}" if self.expr is not None else self.name


@dataclass(frozen=True)
class LaunchStep:
    entry: str
    launch: LaunchRule
    args: tuple[StepArg, ...]


@dataclass(frozen=True)
class MemsetStep:
    target: str  # a workspace buffer or an output, zeroed


@dataclass(frozen=True)
class Workspace:
    name: str
    dtype: str
    size: Expr  # elements
    init: str  # zero | poison


@dataclass(frozen=True)
class WorkspaceJob:
    """A workspace buffer resolved for one case."""

    name: str
    dtype: str
    count: int
    init: str

    @property
    def nbytes(self) -> int:
        return self.count * WORKSPACE_DTYPES[self.dtype]


@dataclass(frozen=True)
class LaunchJob:
    entry: str
    launch: Launch
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class ProgramJob:
    """A program resolved for one case: what the worker builds and runs."""

    workspace: tuple[WorkspaceJob, ...]
    steps: tuple[Union[LaunchJob, MemsetStep], ...]


@dataclass(frozen=True)
class Program:
    workspace: tuple[Workspace, ...]
    steps: tuple[Union[LaunchStep, MemsetStep], ...]

    @property
    def entries(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.entry for s in self.steps if isinstance(s, LaunchStep)))

    @property
    def launches(self) -> tuple[LaunchStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, LaunchStep))

    @staticmethod
    def from_data(steps: Any, workspace: Any = ()) -> "Program":
        """From the TOML / JSON form (lists of tables); raises ValueError naming the element."""
        if not isinstance(steps, (list, tuple)) or not 1 <= len(steps) <= MAX_STEPS:
            raise ValueError(f"steps: expected a list of 1 to {MAX_STEPS} steps")
        if not isinstance(workspace, (list, tuple)) or len(workspace) > MAX_WORKSPACES:
            raise ValueError(f"workspace: expected a list of at most {MAX_WORKSPACES} buffers")
        spaces = []
        for i, w in enumerate(workspace):
            where = f"workspace[{i}]"
            _keys(w, where, {"name", "dtype", "size", "init"}, {"name", "size"})
            dtype, init = w.get("dtype", "float32"), w.get("init", "poison")
            if dtype not in WORKSPACE_DTYPES:
                raise ValueError(f"{where}.dtype: expected one of {', '.join(WORKSPACE_DTYPES)}, got {dtype!r}")
            if init not in WORKSPACE_INITS:
                raise ValueError(f"{where}.init: expected one of {', '.join(WORKSPACE_INITS)}, got {init!r}")
            spaces.append(Workspace(_name(w["name"], where), dtype, _expr(w["size"], f"{where}.size"), init))
        parsed: list[Union[LaunchStep, MemsetStep]] = []
        for i, s in enumerate(steps):
            where = f"steps[{i}]"
            if isinstance(s, dict) and "memset" in s:
                _keys(s, where, {"memset"}, {"memset"})
                parsed.append(MemsetStep(_name(s["memset"], f"{where}.memset")))
                continue
            _keys(s, where, {"entry", "grid", "block", "shared", "cluster", "args"}, {"entry", "grid", "block", "args"})
            try:
                rule = LaunchRule.parse(s["grid"], s["block"], s.get("shared", 0), s.get("cluster", [1]))
                args = s["args"]
                if not isinstance(args, (list, tuple)):
                    raise ValueError("args: expected a list")
                parsed.append(LaunchStep(_name(s["entry"], "entry"), rule, tuple(StepArg.parse(a) for a in args)))
            except (ValueError, ExprError) as e:
                raise ValueError(f"{where}.{e}") from None
        program = Program(tuple(spaces), tuple(parsed))
        if not program.launches:
            raise ValueError("steps: a program needs at least one launch")
        return program

    def to_data(self) -> dict[str, Any]:
        """The TOML / JSON form, as written back (MLflow, session files, exports)."""
        steps: list[dict[str, Any]] = []
        for s in self.steps:
            if isinstance(s, MemsetStep):
                steps.append({"memset": s.target})
            else:
                steps.append({"entry": s.entry, **s.launch.text(), "args": [a.text() for a in s.args]})
        return {"workspace": [{"name": w.name, "dtype": w.dtype, "size": str(w.size), "init": w.init}
                              for w in self.workspace], "steps": steps}

    def describe(self) -> list[str]:
        """One line per workspace buffer and per step, as a CUDA programmer reads a launch sequence."""
        lines = [f"workspace {w.name}: {w.dtype}[{w.size}], starts {'zeroed' if w.init == 'zero' else 'poisoned'}"
                 for w in self.workspace]
        for i, s in enumerate(self.steps, 1):
            if isinstance(s, MemsetStep):
                lines.append(f"step {i}: memset({s.target}, 0)")
            else:
                def dims(d: tuple[Expr, Expr, Expr]) -> str:
                    return "(" + ", ".join(str(e) for e in d) + ")"
                shared = f", {s.launch.shared}" if str(s.launch.shared) != "0" or s.launch.clustered else ""
                if s.launch.clustered:
                    shared += f", cluster {dims(s.launch.cluster)}"
                lines.append(f"step {i}: {s.entry}<<<{dims(s.launch.grid)}, {dims(s.launch.block)}{shared}>>>"
                             f"({', '.join(a.text() for a in s.args)})")
        return lines

    def problems(self, arrays: dict[str, str], scalars: set[str]) -> Optional[str]:
        """Names that do not resolve. `arrays`: array parameter name -> role; `scalars`: scalar names."""
        names = [w.name for w in self.workspace]
        for w in self.workspace:
            if names.count(w.name) > 1:
                return f"workspace '{w.name}' is declared twice"
            if w.name in arrays or w.name in scalars:
                return f"workspace '{w.name}' has the name of a parameter"
        for i, s in enumerate(self.steps):
            if isinstance(s, MemsetStep):
                if s.target not in names and arrays.get(s.target) != "output":
                    return f"steps[{i}]: memset '{s.target}' is neither a workspace buffer nor an output"
                continue
            for a in s.args:
                if a.tma is not None and a.name not in arrays:
                    return (f"steps[{i}] ({s.entry}): a TMA descriptor needs an array parameter, "
                            f"and '{a.name}' is not one")
                if a.expr is None and a.name not in arrays and a.name not in scalars and a.name not in names:
                    return (f"steps[{i}] ({s.entry}): argument '{a.name}' is not a parameter or workspace buffer "
                            "(a computed scalar is written KIND:EXPR, e.g. i32:ceil_div(K, SPLITK))")
        return None

    def resolve(self, env: dict[str, int], scalar_args: dict[str, tuple[str, Union[int, float]]],
                arrays: dict[str, tuple[str, tuple[int, ...]]]) -> ProgramJob:
        """For one case: `env` holds sizes and knobs, `scalar_args` the scalar parameters'
        (kind, value), `arrays` the array parameters' (dtype, shape), which TMA descriptors
        need (required, so that no caller resolves a TMA program without them). Raises ValueError (an ExprError) when an expression cannot be evaluated or
        a descriptor's array is not of two or more dimensions of a dtype TMA copies."""
        spaces = []
        for w in self.workspace:
            count = w.size.evaluate_int(env)
            if count < 1 or count * WORKSPACE_DTYPES[w.dtype] > MAX_WORKSPACE_BYTES:
                raise ValueError(f"workspace '{w.name}': {count} elements (expected 1 to "
                                 f"{MAX_WORKSPACE_BYTES // WORKSPACE_DTYPES[w.dtype]})")
            spaces.append(WorkspaceJob(w.name, w.dtype, count, w.init))
        steps: list[Union[LaunchJob, MemsetStep]] = []
        for s in self.steps:
            if isinstance(s, MemsetStep):
                steps.append(s)
                continue
            args = []
            for a in s.args:
                if a.tma is not None:
                    args.append(Arg(array=a.name, kind=TMA_KIND, tensor_map=a.tma.resolve(env, arrays)))
                elif a.expr is not None:
                    value = a.expr.evaluate_int(env) if a.kind[0] == "i" else float(a.expr.evaluate(env))
                    lo, hi = ARG_RANGES.get(a.kind, (value, value))
                    if not lo <= value <= hi:
                        raise ValueError(f"{s.entry}: argument {a.text()} is {value}, outside {a.kind}'s "
                                         f"range [{lo}, {hi}]")
                    args.append(Arg(kind=a.kind, value=value))
                elif a.name in scalar_args:
                    kind, value = scalar_args[a.name]
                    args.append(Arg(kind=kind, value=value))
                else:
                    args.append(Arg(array=a.name))
            steps.append(LaunchJob(s.entry, s.launch.resolve(env), tuple(args)))
        return ProgramJob(tuple(spaces), tuple(steps))


def _keys(table: Any, where: str, allowed: set[str], required: set[str]) -> None:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: expected a table")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key '{unknown[0]}' (allowed: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(table))
    if missing:
        raise ValueError(f"{where}: '{missing[0]}' is required")


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        raise ValueError(f"{where}: expected an identifier, got {value!r}")
    return value


def _expr(value: Any, where: str) -> Expr:
    try:
        return Expr.parse(value)
    except (ExprError, ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None

"""A workload's ``[kernels.NAME]`` tables: source file, entry and launch (or a program of
steps), compile options and defines, and the knob settings the tuner tries first.
"""

from __future__ import annotations

from dataclasses import replace

from ..runtime.compile_policy import check_options, define_options
from .expr import ExprError
from .kernel_source import Knob
from .launch import LaunchRule, Program, xyz
from .toml_reader import Table, TomlReader
from .workload_model import KernelSpec, SizeRanges, name_problem

MAX_CONFIGS = 32  # a kernel's listed knob settings: a handful of measured starts, not a search space


def parse_kernels(toml: TomlReader, table: Table, allow_fast_math: bool, required: bool = True,
                  sizes: frozenset[str] = frozenset()) -> dict[str, KernelSpec]:
    """`table`: the document's [kernels] table, each entry checked as it is read; `sizes`:
    the workload's size names, which `suits` and a config's `when` may name."""
    kernels = {}
    for name, k in table.items():
        where = f"kernels.{name}."
        if not isinstance(k, dict):
            raise toml.fail(f"kernels.{name}", "expected a table")
        if name_problem(name):
            raise toml.fail(f"kernels.{name[:80]}", f"kernel name {name_problem(name)}")
        toml.known(k, where, {"source", "entry", "grid", "block", "shared", "options", "defines", "steps",
                              "workspace", "configs", "suits"})
        src = toml.file(toml.get(k, "source", where, str), where + "source")
        program = None
        if "steps" in k:  # a program of several launches (agent/spec/launch.py)
            for key in ("entry", "grid", "block", "shared"):
                if key in k:
                    raise toml.fail(where + key, "a kernel with `steps` gives entry, grid and block per step")
            try:
                program = Program.from_data(k["steps"], k.get("workspace", []))
            except (ValueError, ExprError) as e:
                raise toml.fail(where[:-1], str(e)) from None
            rule, entry = program.launches[0].launch, program.launches[0].entry
        else:
            if "workspace" in k:
                raise toml.fail(where + "workspace", "workspace needs a program: give `steps`")
            grid, block = toml.get(k, "grid", where, list), toml.get(k, "block", where, list)
            for key, dims in (("grid", grid), ("block", block)):
                if not 1 <= len(dims) <= 3:
                    raise toml.fail(where + key, "expected 1 to 3 dimensions")
            rule = LaunchRule(
                xyz([toml.expr(g, f"{where}grid[{i}]") for i, g in enumerate(grid + [1] * (3 - len(grid)))]),
                xyz([toml.expr(b, f"{where}block[{i}]") for i, b in enumerate(block + [1] * (3 - len(block)))]),
                toml.expr(toml.get(k, "shared", where, (int, str), 0), where + "shared"))
            entry = toml.get(k, "entry", where, str)
        options = toml.get(k, "options", where, list, [])
        defines = toml.get(k, "defines", where, dict, {})
        for name, value in defines.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise toml.fail(f"{where}defines.{name}", f"expected an integer, got {value!r}")
        refusal = check_options([str(o) for o in options] + define_options(defines), allow_fast_math)
        if refusal:
            raise toml.fail(where + "options", refusal)
        spec = KernelSpec(name, src, entry, rule, tuple(str(o) for o in options),
                          {str(a): int(b) for a, b in defines.items()}, program)
        try:
            knobs = spec.knobs()
        except ValueError as e:
            raise toml.fail(where + "source", str(e)) from None
        configs, when = parse_configs(toml, k, where, knobs, sizes)
        suits = size_ranges(toml, k.get("suits", {}), where + "suits", sizes)
        kernels[name] = replace(spec, configs=configs, config_when=when, suits=suits)
    if not kernels and required:
        raise toml.fail("kernels", "no kernel defined: add a [kernels.NAME] table, or [start] from_scratch = true "
                        "(the llm proposer then writes the first kernel)")
    return kernels

def parse_configs(toml: TomlReader, k: Table, where: str, knobs: dict[str, Knob], sizes: frozenset[str]
                  ) -> tuple[tuple[dict[str, int], ...], tuple[SizeRanges, ...]]:
    """`configs = [{ SPLITK = 4, STAGES = 3 }, { BN = 32, when = { N = [1, 48] } }, ...]`: each
    entry names declared knobs only, each value one of that knob's declared values, and
    optionally `when`, the sizes it is written for; at most MAX_CONFIGS entries. The configs
    and their `when` ({} where none), in order."""
    configs = toml.get(k, "configs", where, list, [])
    if len(configs) > MAX_CONFIGS:
        raise toml.fail(where + "configs", f"{len(configs)} entries; at most {MAX_CONFIGS}")
    out, when = [], []
    for i, c in enumerate(configs):
        at = f"{where}configs[{i}]"
        if isinstance(c, dict):
            when.append(size_ranges(toml, c.get("when", {}), at + ".when", sizes))
            c = {knob: value for knob, value in c.items() if knob != "when"}
        if not isinstance(c, dict) or not c:
            raise toml.fail(at, "expected a non-empty table of knob = value")
        for knob, value in c.items():
            if knob not in knobs:
                raise toml.fail(f"{at}.{knob[:80]}", f"not a knob of the kernel's source (knobs: "
                                                    f"{', '.join(knobs) or 'none'})")
            if not isinstance(value, int) or isinstance(value, bool) or value not in knobs[knob].values:
                raise toml.fail(f"{at}.{knob}", f"{repr(value)[:80]} is not one of the knob's values "
                                                f"{list(knobs[knob].values)}")
        out.append({str(a): int(b) for a, b in c.items()})
    return tuple(out), tuple(when)


def size_ranges(toml: TomlReader, table: object, at: str, sizes: frozenset[str]) -> SizeRanges:
    """`{ M = [1, 64], N = [1024, 65536] }`: inclusive ranges of the workload's sizes."""
    if not isinstance(table, dict):
        raise toml.fail(at, "expected a table of size = [lowest, highest], e.g. { M = [1, 64] }")
    ranges = {}
    for name, bounds in table.items():
        if sizes and name not in sizes:
            raise toml.fail(f"{at}.{str(name)[:80]}", f"not a size of the workload (sizes: {', '.join(sorted(sizes))})")
        if not (isinstance(bounds, list) and len(bounds) == 2 and
                all(isinstance(b, int) and not isinstance(b, bool) for b in bounds) and 0 <= bounds[0] <= bounds[1]):
            raise toml.fail(f"{at}.{name}", f"expected [lowest, highest], two whole numbers with 0 <= lowest <= "
                                            f"highest, got {repr(bounds)[:80]}")
        ranges[str(name)] = (int(bounds[0]), int(bounds[1]))
    return ranges

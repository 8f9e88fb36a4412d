"""`warpsmith import PROBLEM.py DIR`: a KernelBench-style PyTorch problem becomes a
workload directory (agent/spec/kernelbench.py), with the starting kernel given by
--kernel, or none: then the llm proposer writes the first kernel."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from ..spec.reference_run import REFERENCE_TIMEOUT_S
from .errors import CliError

if TYPE_CHECKING:
    from ..spec.kernelbench import StartKernel
    from .help import Subcommands

_BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
_ENTRY = re.compile(rf'extern\s+"C"\s+__global__\s+{_BOUNDS}void\s+{_BOUNDS}([A-Za-z_]\w*)\s*\(')


def add_import_command(sub: Subcommands, dims: Callable[[str], list[str]]) -> None:
    i = sub.add_parser("import", help="turn a KernelBench-style PyTorch problem into a workload directory")
    i.add_argument("problem", type=Path, help="a .py file defining class Model(nn.Module), get_inputs(), get_init_inputs()")
    i.add_argument("dir", type=Path, help="the new workload directory (its name is the workload's)")
    i.add_argument("--kernel", type=Path, help="a starting kernel (.cu); without one the llm proposer writes the first")
    i.add_argument("--entry", help="the --kernel's extern \"C\" entry (default: its first)")
    i.add_argument("--grid", type=dims, help="the --kernel's grid, expressions of the sizes, e.g. 'ceil_div(N,16),M'")
    i.add_argument("--block", type=dims, help="the --kernel's block, e.g. 16,16")
    i.add_argument("--shared", default="0", help="the --kernel's dynamic shared memory bytes (an expression)")
    i.add_argument("--name", default="", help="the workload's name (default: DIR's name)")
    i.add_argument("--reference-timeout", type=float, default=REFERENCE_TIMEOUT_S, metavar="S",
                   help="seconds the problem may take to load, make its inputs and run its Model, in its own "
                        f"process, before it is killed (default {REFERENCE_TIMEOUT_S:g})")


def _start_kernel(args: argparse.Namespace) -> Optional[StartKernel]:
    from ..spec.kernelbench import StartKernel
    if args.kernel is None:
        if args.entry or args.grid or args.block:
            raise CliError("--entry, --grid and --block describe a --kernel FILE; give it too")
        return None
    if not args.kernel.is_file():
        raise CliError(f"--kernel {args.kernel}: no such file")
    if not (args.grid and args.block):
        raise CliError("--kernel needs --grid and --block: expressions of the sizes (warpsmith import without "
                       "--kernel prints them), e.g. --grid 'ceil_div(N, 16),ceil_div(M, 16)' --block 16,16")
    entry = args.entry or next(iter(_ENTRY.findall(args.kernel.read_text(errors="replace"))), "")
    if not entry:
        raise CliError(f"--kernel {args.kernel}: no extern \"C\" __global__ function found; name it with --entry")
    return StartKernel(args.kernel, entry, tuple(args.grid), tuple(args.block), args.shared)


def cmd_import(args: argparse.Namespace) -> int:
    from ..spec.kernelbench import ImportRefused, expected_arguments, import_problem, inputs_line, sizes_line
    kernel = _start_kernel(args)
    try:
        done = import_problem(args.problem, args.dir, args.reference_timeout, kernel, args.name)
    except ImportRefused as e:
        raise CliError(str(e))
    w, probe = done.workload, done.probe
    print(f"imported {args.problem.name} as {w.name} in {args.dir}")
    print(f"  kernel arguments: {expected_arguments(probe)}")
    print(f"  sizes: {sizes_line(probe)}")
    print(f"  inputs: {inputs_line(probe)}")
    print(f"  cases: {', '.join(f'{c.name} ({c.role})' for c in w.cases)}")
    for note in probe.notes:
        print(f"  not kept: {note}")
    print(f"  start: {'kernel ' + w.start if w.start else 'from scratch: the llm proposer writes the first kernel'}")
    print(f"next: warpsmith check {args.dir}")
    return 0

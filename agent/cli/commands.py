"""The `warpsmith` command: doctor, compile, eval (and the loop's commands, in cli_loop)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from ..drafting.drafting import refuse_drafted
from ..runtime.device_facts import DeviceFacts
from ..spec.inputs import ReferenceFailed
from ..spec.workload import load_workload
from ..spec.workload_model import SpecError
from ..tracking.store_schema import StoreUnreadable
from .check import add_check_command, add_reference_timeout, add_separate_judge, preflight
from .errors import CliError

if TYPE_CHECKING:
    from ..runtime import native
    from ..spec.candidate import Candidate
    from ..spec.workload_model import Workload
    from .sessions import FrontEnd


def _define(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    try:
        if not sep or not name.isidentifier():
            raise ValueError
        return name, int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=INTEGER, got '{text}'") from None


def _dims(text: str) -> list[str]:
    """'ceil_div(N, 16),M' -> ['ceil_div(N, 16)', 'M']: commas inside parentheses stay (or separate by ';')."""
    if ";" in text:
        parts = [p.strip() for p in text.split(";")]
    else:
        parts, depth, start = [], 0, 0
        for i, ch in enumerate(text + ","):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                parts.append(text[start:i].strip())
                start = i + 1
    if not 1 <= len(parts) <= 3:
        raise argparse.ArgumentTypeError("give 1 to 3 dimensions")
    return parts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="warpsmith", description="Fast, verified CUDA kernels, measured beside the vendor library.")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("doctor", help="what this machine has: GPU, driver, NVRTC, cuBLAS, ncu, API key")
    d.add_argument("--device", type=int, default=0)
    d.add_argument("--measure", action="store_true", help="measure the GPU's copy bandwidth and FMA rate again")

    c = sub.add_parser("compile", help="NVRTC-compile a .cu file; prints the log and resource report")
    c.add_argument("file", type=Path)
    c.add_argument("--arch", help="e.g. sm_90; needed without a GPU")
    c.add_argument("--entry", default="", help="kernel name (resources are reported for it)")
    c.add_argument("-D", dest="defines", action="append", type=_define, default=[], metavar="NAME=VALUE")
    c.add_argument("--option", action="append", default=[], help="extra NVRTC option (repeatable; from an allowlist)")
    c.add_argument("--allow-fast-math", action="store_true",
                   help="allow the options that lower precision (--use_fast_math, -ftz=true, ...)")

    e = sub.add_parser("eval", help="validate and time a kernel on a workload, beside the baseline")
    e.add_argument("workload", type=Path)
    e.add_argument("--kernel", help="a [kernels.NAME] of the workload, or a .cu file (default: the starting kernel)")
    e.add_argument("--entry", help="entry of --kernel FILE (default: the starting kernel's)")
    e.add_argument("--grid", type=_dims, help="launch grid for --kernel FILE, e.g. 'ceil_div(N,16),ceil_div(M,16)'")
    e.add_argument("--block", type=_dims, help="launch block for --kernel FILE, e.g. 16,16")
    e.add_argument("--shared", default=None, help="dynamic shared memory bytes (expression)")
    e.add_argument("-D", dest="defines", action="append", type=_define, default=[], metavar="NAME=VALUE")
    e.add_argument("--shapes", type=Path, metavar="FILE",
                   help="your own performance cases ([[NAME]] tables of name and sizes, as bench --shapes): "
                        "they replace the workload's")
    e.add_argument("--hot", action="store_true", help="no L2 flush before each timed launch")
    e.add_argument("--warmup", type=int, default=10)
    e.add_argument("--repetitions", type=int, default=100)
    e.add_argument("--seed", type=int, default=1)
    e.add_argument("--timeout", type=float, default=10.0, help="seconds a kernel may run before it is killed")
    e.add_argument("--no-baseline", action="store_true")
    e.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    e.add_argument("--device", type=int, default=0)
    add_separate_judge(e)
    add_reference_timeout(e)
    add_check_command(sub)
    from .import_problem import add_import_command
    from .loop_commands import add_loop_commands
    from .new import add_new_commands
    add_loop_commands(sub)
    add_new_commands(sub)
    add_import_command(sub, _dims)
    from .help import show_defaults
    show_defaults(p)
    return p


def main(argv: list[str] | None = None, front_end: Optional[FrontEnd] = None,
         review_front_end: Optional[Callable[[Workload, str], bool]] = None) -> int:
    """front_end(session, options) -> status runs a session in a full-screen app and
    ends it there; the `warpsmith` command (warpsmith.tui.cli) passes the Textual app. Without
    one, or with --headless, sessions print a progress bar."""
    from ..runtime.secrets import hide_environ_block
    hide_environ_block()  # before any child: /proc/<this pid>/environ shows no key to what they run
    args = build_parser().parse_args(argv)
    args.front_end = front_end
    args.review_front_end = review_front_end  # review(workload, question) -> bool, in a terminal
    try:
        from . import loop_commands as cli_loop
        from .bench import cmd_bench
        from .check import cmd_check
        from .diff import cmd_diff
        from .import_problem import cmd_import
        from .new import cmd_new, cmd_review
        commands = {"doctor": cmd_doctor, "compile": cmd_compile, "eval": cmd_eval, "run": cli_loop.cmd_run,
                    "resume": cli_loop.cmd_resume, "runs": cli_loop.cmd_runs, "export": cli_loop.cmd_export,
                    "ui": cli_loop.cmd_ui, "bench": cmd_bench,
                    "diff": cmd_diff, "new": cmd_new, "review": cmd_review, "check": cmd_check,
                    "import": cmd_import}
        return commands[args.command](args)
    except CliError as e:  # raised anywhere below a command: printed here, once
        print(f"warpsmith: error: {e}", file=sys.stderr)
        return e.exit_code
    except (SpecError, ReferenceFailed, StoreUnreadable) as e:  # bad input, found before any GPU work: one line
        print(f"warpsmith: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("warpsmith: interrupted", file=sys.stderr)
        return 130


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..runtime import native
    ok = True
    def line(label: str, value: str) -> None:
        print(f"{label:<14} {value}")
    try:
        where = native.nvrtc()
        line("NVRTC", "{}.{} from {}".format(*native.nvrtc_version(), where))
    except native.CudaError as e:
        line("NVRTC", f"missing: {e.text}")
        ok = False
    try:
        device = native.open_device(args.device)
        f = native.device_facts(device)
        line("GPU", f"{f.name} ({f.arch}, {f.sm_count} SMs, {f.total_memory / 2**30:.0f} GiB, L2 {f.l2_bytes / 2**20:.0f} MiB)")
        line("UUID", f.uuid)
        line("driver", f"CUDA {f.driver}")
        line("clocks", f"SM {f.sm_clock_khz / 1e3:.0f} MHz, memory {f.mem_clock_khz / 1e3:.0f} MHz, "
                       f"{f.mem_bus_bits}-bit bus, peak {f.peak_bandwidth_gbs:.0f} GB/s")
        _doctor_ceilings(device, f, line, args.measure)
        try:
            blas = native.open_cublas(device)
            line("cuBLAS", f"{blas.version} from {blas.path}")
        except native.CudaError as e:
            line("cuBLAS", f"missing ({e.text})")
    except (native.CudaError, RuntimeError) as e:
        line("GPU", f"none usable: {getattr(e, 'name', '')} {getattr(e, 'text', e)}".replace("  ", " "))
        ok = False
    ncu = shutil.which("ncu")
    line("ncu", ncu or "not on PATH (needed only for --use-nsight)")
    # Presence only: the value is never printed, logged or stored.
    line("OPENAI_API_KEY", "set" if os.environ.get("OPENAI_API_KEY") else "not set (the tune proposer needs none)")
    return 0 if ok else 1


def _doctor_ceilings(device: native.Device, facts: DeviceFacts, line: Callable[[str, str], None], again: bool) -> None:
    from ..spec.speed_of_light import save_ceilings
    from ..worker.ceilings_probe import ensure_ceilings, measure_ceilings
    try:
        if again:
            save_ceilings(facts, measure_ceilings(device, facts))
        c = ensure_ceilings(device, facts)
    except (RuntimeError, OSError) as e:  # CudaError is a RuntimeError
        line("ceilings", f"probe failed ({getattr(e, 'name', '')} {e}); % of floor uses datasheet figures")
        return
    tensor = f", 16-bit tensor core {c.tensor_tflops:.0f} TFLOP/s (peak at the top SM clock)" if c.tensor_tflops else ""
    read = f", read {c.read_gbs:.0f} GB/s" if c.read_gbs else ""
    line("ceilings", f"copy {c.bandwidth_gbs:.0f} GB/s{read}, fp32 FMA {c.fp32_tflops:.1f} TFLOP/s ({c.source}; "
                     f"`doctor --measure` measures again){tensor}")


def cmd_compile(args: argparse.Namespace) -> int:
    from ..runtime import native
    from ..runtime.compile_policy import define_options
    from ..runtime.compiler import compile_kernel
    if not args.file.is_file():
        raise CliError(f"{args.file}: no such file")
    arch = args.arch
    if not arch:
        try:
            arch = native.open_device().facts.arch
        except (native.CudaError, RuntimeError) as e:
            raise CliError(f"no GPU to take the architecture from ({getattr(e, 'name', e)}); "
                           "give --arch, e.g. --arch sm_90") from None
    options = args.option + define_options(dict(args.defines))
    r = compile_kernel(args.file.read_text(), args.entry, arch, options, filename=args.file.name, use_cache=False,
                       allow_fast_math=args.allow_fast_math)
    print(r.log.rstrip())
    if not r.ok:
        print(f"{r.error}: compilation failed", file=sys.stderr)
        return 1
    print(f"\n{args.file.name} -> {r.arch} CUBIN, {len(r.cubin)} bytes in {r.compile_ms:.0f} ms")
    if args.entry:
        print(f"{r.symbol}: {r.resources.text()}")
    return 0


def _candidate(args: argparse.Namespace, workload: Workload) -> Candidate:
    from ..spec.candidate import Candidate
    from ..spec.expr import Expr
    from ..spec.launch import LaunchRule
    defines = dict(args.defines)
    if not args.kernel and workload.from_scratch:
        raise CliError(f"{workload.name} has no starting kernel ([start] from_scratch = true): "
                       "give one with --kernel FILE --entry NAME --grid ... --block ...")
    if not args.kernel or args.kernel in workload.kernels:
        return Candidate.from_spec(workload.kernels[args.kernel or workload.start], defines)
    path = Path(args.kernel)
    if not path.is_file():
        raise SpecError(path, "--kernel", f"neither a file nor one of the workload's kernels ({', '.join(workload.kernels)})")
    start = workload.start_kernel
    if start is None and not (args.entry and args.grid and args.block):
        raise CliError(f"{workload.name} has no starting kernel to take the launch rule from: "
                       "--kernel FILE needs --entry, --grid and --block")
    def pad(dims: list[str]) -> tuple[Expr, Expr, Expr]:
        x, y, z = (Expr.parse(d) for d in (dims + ["1"] * 3)[:3])
        return x, y, z
    launch = start.launch if start is not None else None  # None: --grid and --block are given (above)
    try:
        rule = LaunchRule(pad(args.grid) if args.grid or launch is None else launch.grid,
                          pad(args.block) if args.block or launch is None else launch.block,
                          Expr.parse(args.shared) if args.shared else launch.shared if launch else Expr.parse(0))
    except ValueError as e:
        raise SpecError(path, "--grid/--block/--shared", str(e)) from None
    return Candidate(path.read_text(), args.entry or (start.entry if start else ""), rule, (), defines, path.stem)


def cmd_eval(args: argparse.Namespace) -> int:
    from ..evaluate.evaluator import Evaluator
    from ..tracking.report import render_table, to_json
    from ..worker.footprint import check_memory
    from ..worker.process import GpuUnavailable
    from ..worker.protocol import TimingConfig
    from .options import evaluation_options
    workload = load_workload(args.workload)
    if args.shapes is not None:
        from .bench import with_shapes
        workload = with_shapes([workload], args.shapes, named=True)[0]
    if refuse_drafted(workload):
        raise CliError(str(refuse_drafted(workload)))
    candidate = _candidate(args, workload)  # spec and kernel checked before any GPU work
    preflight(workload, (args.seed,), args.reference_timeout)  # memory, references: still no GPU
    timing = TimingConfig(args.warmup, args.repetitions, not args.hot)
    try:
        with Evaluator(workload, evaluation_options(args, timing)) as ev:
            facts, ceilings = ev.facts, ev.ceilings
            check_memory(workload, gpu_bytes=facts.total_memory or None, host=False)
            if not args.no_baseline:
                from ..worker.torch_baseline import note_torch_missing
                note_torch_missing([workload])
            result = ev.evaluate(candidate, seed=args.seed)
            baseline = None if args.no_baseline else ev.baseline(seed=args.seed)
    except GpuUnavailable as e:
        raise CliError(f"no usable GPU: {e}. `warpsmith doctor` says what is missing.", 3)
    except ReferenceFailed as e:
        raise CliError(str(e))
    if args.json:
        print(json.dumps(to_json(workload, result, baseline, facts), default=str))
    else:
        print(f"{workload.name} · {candidate.name} · {facts.name} · "
              f"{'cold' if timing.cold_l2 else 'hot'} L2 · median of {timing.repetitions}")
        print(render_table(workload, result, baseline, ceilings))
    return 0 if result.ok else 1

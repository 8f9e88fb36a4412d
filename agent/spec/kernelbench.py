"""`warpsmith import`: a KernelBench-style PyTorch problem (a file defining class
Model(nn.Module), get_inputs() and get_init_inputs()) becomes a workload directory.

The problem runs only in the probe child (kernelbench_probe.py: its own process, a
time limit, no secrets), which reports the arrays and sizes as data
(kernelbench_records.py); this module writes, from that data alone
(kernelbench_writers.py):

    workload.toml      forward's inputs (its Python numbers as scalars passed by
                       value), then the model's parameters and buffers (as
                       inputs), then its outputs, then every size as an int scalar;
                       the problem's sizes as the performance case, the smaller sizes
                       the Model ran at as correctness cases; baseline: PyTorch
    problem.py         the problem, copied
    problem_model.py   builds its Model for a case (kernelbench_model.py, copied)
    reference.py       the Model in float64 on the CPU, and the host memory that
                       takes besides the arrays (reference_memory)
    torch_baseline.py  the Model in PyTorch eager (and torch.compile) on the GPU
    KERNEL.cu          the starting kernel given with --kernel; without one the
                       workload starts from scratch: the llm proposer writes it

The directory is written beside DIR and renamed into place once the spec loads, so
a failure leaves nothing behind.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .kernelbench_records import ImportRefused, ProblemArray, ProblemProbe, ProblemScalar, StartKernel
from .kernelbench_writers import (
    expected_arguments,
    inputs_line,
    reference_py,
    sizes_line,
    torch_baseline_py,
    workload_toml,
)
from .reference_run import ChildDied, run_child
from .workload import SpecError, Workload, load_workload, name_problem

# The CLI and the tests read the records and the summary lines from here.
__all__ = ["ImportRefused", "Imported", "ProblemArray", "ProblemProbe", "ProblemScalar", "StartKernel",
           "expected_arguments", "import_problem", "inputs_line", "probe_problem", "sizes_line", "write_workload"]

MODEL_HELPER = Path(__file__).with_name("kernelbench_model.py")


@dataclass(frozen=True)
class Imported:
    workload: Workload
    probe: ProblemProbe


def probe_problem(problem: Path, timeout_s: float) -> ProblemProbe:
    """Run the probe child on `problem`; raises ImportRefused (one line)."""
    job = {"parent": os.getpid(), "problem": str(problem.resolve())}
    try:
        answer = run_child("warpsmith.agent.spec.kernelbench_probe", job, problem.resolve().parent, timeout_s)
    except subprocess.TimeoutExpired:
        raise ImportRefused(f"{problem.name} did not answer within {timeout_s:g} s (loading it, get_inputs(), "
                            "the Model on its inputs); raise --reference-timeout or make it faster") from None
    except ChildDied as e:
        raise ImportRefused(f"{problem.name}: its process ended ({e}) without an answer") from None
    if "error" in answer:
        raise ImportRefused(answer["error"])
    return ProblemProbe.from_json(answer["probe"])


def import_problem(problem: Path, directory: Path, timeout_s: float, kernel: Optional[StartKernel] = None,
                   name: str = "") -> Imported:
    """Probe `problem` and write the workload to `directory` (which must not hold anything).
    Raises ImportRefused or SpecError, one line, leaving nothing behind."""
    if not problem.is_file():
        raise ImportRefused(f"{problem}: no such file")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ImportRefused(f"{directory} exists and is not empty; choose a new directory")
    name = name or directory.name
    if name_problem(name):
        raise ImportRefused(f"workload name {name_problem(name)} (it comes from DIR; or give --name)")
    probe = probe_problem(problem, timeout_s)
    created = [p for p in reversed(directory.absolute().parents) if not p.exists()]
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.importing-", dir=directory.parent))
    try:
        write_workload(staging, name, probe, problem.read_text(), kernel)
        try:
            load_workload(staging)  # the same checks as a hand-written workload
        except SpecError as e:  # named as the file will be, not as the staging one
            raise SpecError(directory / "workload.toml", e.key, e.problem) from None
        if directory.exists():
            directory.rmdir()  # empty, checked above
        staging.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not directory.exists():  # it failed: the folders made for it go too
            for parent in reversed(created):
                try:
                    parent.rmdir()
                except OSError:
                    pass
    return Imported(load_workload(directory), probe)


def write_workload(directory: Path, name: str, probe: ProblemProbe, problem_text: str,
                   kernel: Optional[StartKernel]) -> None:
    """Every file of the workload, from the probe's data (nothing of the problem runs here)."""
    (directory / "problem.py").write_text(problem_text)
    shutil.copyfile(MODEL_HELPER, directory / "problem_model.py")
    (directory / "reference.py").write_text(reference_py(name, probe))
    (directory / "torch_baseline.py").write_text(torch_baseline_py(name, probe))
    stem = ""
    if kernel is not None:
        stem = re.sub(r"[^A-Za-z0-9_-]", "_", kernel.path.stem).lstrip("-")[:64] or "kernel"
        shutil.copyfile(kernel.path, directory / f"{stem}.cu")
    (directory / "workload.toml").write_text(workload_toml(name, probe, problem_text, kernel, stem))

"""The native runner is reached only through its facade, agent/runtime/native.py, and the
facade's view of it (the stub agent/_runner.pyi, DeviceFacts) matches the built module.
Imports are read with ast, as tests/test_layers.py reads them; no GPU needed."""

from __future__ import annotations

import ast
from pathlib import Path

from warpsmith.agent import _runner  # noqa: F401  (the built module, compared with its stub below)
from warpsmith.agent.runtime.device_facts import RUNNER_FACTS

ROOT = Path(__file__).resolve().parents[1]
FACADE = ROOT / "agent" / "runtime" / "native.py"
# Files other than the facade allowed to name the runner, each with its reason. Keep it short.
ALLOWED = {
    # Its install check imports the built module before any test runs: a question about
    # the install, not a use of the runner.
    ROOT / "tests" / "conftest.py": "install check",
    # Compares the stub with the built module.
    Path(__file__).resolve(): "stub check",
}


def _package(path: Path) -> list[str]:
    parts = ["warpsmith", *path.relative_to(ROOT).with_suffix("").parts]  # agent/x.py: warpsmith.agent.x
    return parts[:-1]


def runner_uses(source: str, path: Path) -> list[str]:
    """Where `source` (the file at `path`) imports warpsmith.agent._runner or reaches it as an attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.startswith("warpsmith.agent._runner")]
        elif isinstance(node, ast.ImportFrom):
            base = _package(path)[: len(_package(path)) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module.startswith("warpsmith.agent._runner") or (module == "warpsmith.agent" and any(a.name == "_runner" for a in node.names)):
                found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import ...")
        elif isinstance(node, ast.Attribute) and node.attr == "_runner":
            found.append(f"line {node.lineno}: .{node.attr}")
    return found


def test_only_the_facade_reaches_the_runner():
    """No file under agent/, tui/, benchmarks/ or tests/ but the facade imports warpsmith.agent._runner or reads `native._runner`."""
    bad = []
    for folder in ("agent", "tui", "benchmarks", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == FACADE or path in ALLOWED:
                continue
            bad += [f"{path.relative_to(ROOT)} {use}" for use in runner_uses(path.read_text(), path)]
    assert bad == []


def test_the_checker_sees_every_way_in():
    """The checker is not vacuous: absolute, relative and attribute routes to the runner are all found."""
    worker = ROOT / "agent" / "worker" / "x.py"
    for source in ("import warpsmith.agent._runner", "from warpsmith.agent import _runner", "from .. import _runner",
                   "from warpsmith.agent._runner import Cublas", "from ..runtime import native\nnative._runner.Cublas"):
        assert runner_uses(source, worker), source
    assert runner_uses("from . import _runner", ROOT / "agent" / "x.py")
    assert not runner_uses("from ..runtime import native\nnative.open_cublas", worker)
    assert not runner_uses("from . import _runner", worker)  # warpsmith.agent.worker._runner is another module


def _stub() -> dict[str, set[str]]:
    """The stub's public names: each class with its members, each function with none."""
    tree = ast.parse((ROOT / "agent" / "_runner.pyi").read_text())
    names: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | \
                {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
            names[node.name] = {m for m in members if not m.startswith("_")}
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = set()
    return names


def test_stub_names_what_the_built_runner_has():
    """agent/_runner.pyi declares exactly the built module's functions, classes and their members."""
    stub = _stub()
    built = {n for n in dir(_runner) if not n.startswith("_")}
    assert set(stub) == built
    for name, members in stub.items():
        cls = getattr(_runner, name)
        if not isinstance(cls, type) or name == "CudaError":  # CudaError's attributes are set when it is raised
            continue
        assert members == {m for m in vars(cls) if not m.startswith("_")}, name


def test_device_facts_hold_every_fact_of_the_runner():
    """DeviceFacts has a field for each fact the runner's own record exposes, no more (a new one is not dropped)."""
    assert set(RUNNER_FACTS) == {m for m in vars(_runner.DeviceFacts) if not m.startswith("_")}

"""The layers depend downward only: tui -> agent -> the native runner, and inside agent
cli -> loop -> {proposers, profiling, tracking, drafting} -> evaluate -> worker -> spec -> runtime;
and no module imports itself back through others. Every module's imports (lazy ones inside functions too) are read with ast; no GPU, no import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Lower rank = lower layer. A module may import its own subpackage or any lower rank;
# subpackages of one rank are siblings and import neither each other nor anything above.
RANK = {
    "runtime": 0,  # the facade over the native runner, NVRTC in its process, child-process plumbing
    "spec": 1,  # workloads, expressions, candidates, tolerances, inputs and references
    "worker": 2,  # the GPU process and its protocol
    "evaluate": 3,  # the evaluator, results, statistics, the records of an attempt
    "proposers": 4, "profiling": 4, "tracking": 4, "drafting": 4,
    "loop": 5,  # LangGraph: graph, state, session
    "cli": 6,
}
# (importer, imported) pairs allowed although upward, each with its reason. Keep it short.
ALLOWED: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = ["warpsmith", *path.relative_to(ROOT).with_suffix("").parts]  # agent/x.py: warpsmith.agent.x
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The absolute names of the modules `path` imports."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:  # `from . import native` imports a module
                sub = f"{module}.{a.name}"
                where = ROOT / Path(*sub.removeprefix("warpsmith.").split("."))
                is_module = where.with_suffix(".py").is_file() or where.is_dir()
                found.add(sub if is_module else module)
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["warpsmith", "tui"]:
        return "tui"
    if parts[:2] != ["warpsmith", "agent"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in RANK else "agent"  # warpsmith.agent, warpsmith.agent._runner


def _violations() -> list[str]:
    bad = []
    for path in sorted((ROOT / "agent").rglob("*.py")):
        importer = _module_name(path)
        mine = _layer(importer)
        for imported in sorted(_imports(path)):
            theirs = _layer(imported)
            if _upward(mine, theirs) and (mine, theirs) not in ALLOWED:
                bad.append(f"{importer} imports {imported} ({mine} -> {theirs})")
    return bad


def _upward(mine: str, theirs: str | None) -> bool:
    if theirs is None or theirs == mine or theirs == "agent":
        return False
    return theirs == "tui" or mine == "agent" or RANK[theirs] >= RANK[mine]


def test_every_subpackage_has_a_rank():
    """Each folder under agent/ is a package with a place in the order (a new one must say where it sits)."""
    folders = {p.name for p in (ROOT / "agent").iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    packages = {f for f in folders if (ROOT / "agent" / f / "__init__.py").is_file()}
    assert packages == set(RANK), f"ranked: {sorted(RANK)}, found: {sorted(packages)}"
    assert not [p.name for p in (ROOT / "agent").glob("*.py") if p.name != "__init__.py"], "agent/ holds only packages"


def test_agent_imports_only_downward():
    """No module under agent/ imports tui or a subpackage at its own rank or above (cli > loop > ... > runtime)."""
    assert _violations() == []


def test_the_checker_sees_upward_imports():
    """The checker is not vacuous: spec -> loop, worker -> evaluate, siblings and agent -> tui are refused."""
    imports = _imports(ROOT / "agent" / "loop" / "nodes" / "reflect.py")
    assert "warpsmith.agent.loop.events" in imports and "warpsmith.agent.evaluate.records" in imports  # relative imports resolved
    upward = [("warpsmith.agent.spec.workload", "warpsmith.agent.loop.session"), ("warpsmith.agent.worker.gpu_side", "warpsmith.agent.evaluate.stats"),
              ("warpsmith.agent.tracking.tracker", "warpsmith.agent.proposers.base"), ("warpsmith.agent.cli.commands", "warpsmith.tui.app")]
    assert all(_upward(_layer(a), _layer(b)) for a, b in upward)
    assert not _upward(_layer("warpsmith.agent.loop.graph"), _layer("warpsmith.agent.spec.expr"))


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle in `graph` (module -> the modules it imports), as a path, or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == 1:
                return path[path.index(imported):] + [imported]
            if imported not in state:
                found = visit(imported)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return []


def test_no_import_cycle():
    """No module of agent/ or tui/ imports itself back through others (lazy imports and TYPE_CHECKING ones count)."""
    paths = sorted(p for package in ("agent", "tui") for p in (ROOT / package).rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): {m for m in _imports(p) if m in modules and m != _module_name(p)} for p in paths}
    assert _cycle(graph) == []


def test_the_cycle_check_sees_a_cycle():
    """The cycle check is not vacuous: a -> b -> c -> a is found, a chain is not."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []

"""A shapes file: the user's own performance cases for workloads, so that `warpsmith bench
--shapes FILE` tunes and measures the shapes they bring, not the ones a workload ships with.

    # one table array per workload, named as its [workload] name
    [[sgemm]]
    name = "llm-qkv-4096x12288x4096"
    sizes = { M = 4096, N = 12288, K = 4096 }

Each entry becomes a performance case of that workload; the workload's correctness cases
stay, and its sizes' names are checked by the workload's own parser.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from .workload_model import SpecError, name_problem

Shapes = tuple[tuple[str, dict[str, int]], ...]


def load_shapes(path: Path) -> dict[str, Shapes]:
    """Workload name -> its (case name, sizes). Raises SpecError (one line) for a file that
    is not one."""
    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise SpecError(path, "(file)", "not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecError(path, "(syntax)", str(e)) from None
    out: dict[str, Shapes] = {}
    for workload, entries in doc.items():
        if not isinstance(entries, list) or not entries:
            raise SpecError(path, workload, "expected [[" + workload + "]] tables, one per shape")
        seen: list[tuple[str, dict[str, int]]] = []
        for i, entry in enumerate(entries):
            where = f"{workload}[{i}]"
            if not isinstance(entry, dict) or set(entry) != {"name", "sizes"}:
                raise SpecError(path, where, "each shape is a table with exactly name and sizes")
            name, sizes = entry["name"], entry["sizes"]
            problem = name_problem(name) if isinstance(name, str) else f"expected a name, got {name!r}"
            if problem:
                raise SpecError(path, f"{where}.name", problem)
            if name in (n for n, _ in seen):
                raise SpecError(path, f"{where}.name", f"'{name}' is used twice")
            if not isinstance(sizes, dict) or not sizes or not all(
                    isinstance(k, str) and k.isidentifier() and isinstance(v, int) and not isinstance(v, bool)
                    and v >= 0 for k, v in sizes.items()):
                raise SpecError(path, f"{where}.sizes", "expected a table of non-negative integers by size name")
            seen.append((name, dict(sizes)))
        out[workload] = tuple(seen)
    return out

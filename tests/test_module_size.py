"""Small rooms: no module under agent/ or tui/ over MAX_MODULE_LINES lines, no class over
MAX_CLASS_LINES (read with ast: no import, no GPU)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 300


def _sources() -> list[Path]:
    return sorted(p for package in ("agent", "tui") for p in (ROOT / package).rglob("*.py"))


def _long_classes(source: str) -> list[tuple[str, int]]:
    """(name, lines) of each class in `source` over MAX_CLASS_LINES, nested ones too."""
    sizes = [(n.name, (n.end_lineno or n.lineno) - n.lineno + 1) for n in ast.walk(ast.parse(source))
             if isinstance(n, ast.ClassDef)]
    return [(name, lines) for name, lines in sizes if lines > MAX_CLASS_LINES]


def test_no_module_is_over_the_limit():
    """Every module of agent/ and tui/ has at most MAX_MODULE_LINES lines: a bigger one is split by concern."""
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in _sources()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == []


def test_no_class_is_over_the_limit():
    """Every class of agent/ and tui/ has at most MAX_CLASS_LINES lines."""
    long = [f"{p.relative_to(ROOT)}: class {name}, {lines} lines" for p in _sources()
            for name, lines in _long_classes(p.read_text())]
    assert long == []


def test_the_class_check_sees_a_long_class():
    """The class check is not vacuous: a class one line over the limit is reported, one at the limit is not."""
    body = lambda n: "\n".join(f"    x{i} = {i}" for i in range(n))
    assert _long_classes(f"class Long:\n{body(MAX_CLASS_LINES)}\n") == [("Long", MAX_CLASS_LINES + 1)]
    assert _long_classes(f"class Fits:\n{body(MAX_CLASS_LINES - 1)}\n") == []

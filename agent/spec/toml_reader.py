"""Typed reads out of a parsed TOML document, each failure a SpecError of one line that
names the file and the key: the primitives the workload's parser is written in.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from .expr import Expr, ExprError
from .workload_model import SpecError, name_problem

Table = dict[str, Any]  # a TOML table, checked key by key


class TomlReader:
    """One workload.toml: its path (which every error names), its directory (which holds every
    file it names) and its parsed document."""

    def __init__(self, path: Path, directory: Path, doc: Table, raw: bytes):
        self.path, self.dir, self.doc, self.raw = path, directory, doc, raw

    def fail(self, key: str, problem: str) -> SpecError:
        return SpecError(self.path, key, problem)

    def get(self, table: Table, key: str, where: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in table:
            if default is ...:
                raise self.fail(f"{where}{key}", "missing")
            return default
        value = table[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(f"{where}{key}", f"expected {names}, got {value!r}")
        return value

    def known(self, table: Table, where: str, allowed: set[str]) -> None:
        """Unknown keys are typos until proven otherwise."""
        for key in table:
            if key not in allowed:
                raise self.fail(f"{where}{key}", f"unknown key (expected one of {', '.join(sorted(allowed))})")

    def name(self, table: Table, where: str) -> str:
        """table["name"], checked before it builds any path."""
        value: str = self.get(table, "name", where, str)
        problem = name_problem(value)
        if problem:
            raise self.fail(where + "name", problem)
        return value

    def file(self, relative: str, key: str) -> Path:
        """A file the spec names: a regular file inside the workload directory once
        symlinks are resolved (a spec cannot make warpsmith read ../../secret)."""
        path = self.dir / relative
        root, real = self.dir.resolve(), path.resolve()
        if not real.is_relative_to(root):
            raise self.fail(key, f"'{relative}' resolves to {real}, outside the workload directory {root}")
        try:
            mode = real.stat().st_mode
        except OSError:
            raise self.fail(key, f"{path.name} not found beside workload.toml") from None
        if not stat.S_ISREG(mode):
            raise self.fail(key, f"'{relative}' is not a regular file")
        return path

    def expr(self, value: Any, key: str) -> Expr:
        try:
            return Expr.parse(value)
        except ExprError as e:
            raise self.fail(key, str(e)) from None

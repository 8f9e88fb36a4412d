"""The environment of a test's child Python: it imports the same warpsmith as the
test itself (the installed package; no checkout can stand in for it). Children are also
started with ``-P``, so their working directory is not put on sys.path."""

from __future__ import annotations

import os
from pathlib import Path

import warpsmith

PACKAGE_ROOT = Path(warpsmith.__file__).resolve().parents[1]


def child_env(*extra_paths: Path | str, **variables: str) -> dict[str, str]:
    """os.environ with the test's package root (then `extra_paths`) first on PYTHONPATH."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [str(PACKAGE_ROOT), *map(str, extra_paths), *inherited]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **variables}

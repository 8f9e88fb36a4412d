"""The environment of a test's child Python: it imports the same warpsmith as the
test itself (the installed package, or a checkout that holds a built runner),
never the half-built source tree of a checkout without one. Children are also
started with ``-P``, so their working directory is not put on sys.path."""

from __future__ import annotations

import os
from pathlib import Path

import agent

PACKAGE_ROOT = Path(agent.__file__).resolve().parent.parent


def child_env(*extra_paths: Path | str, **variables: str) -> dict[str, str]:
    """os.environ with the test's package root (then `extra_paths`) first on PYTHONPATH."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [str(PACKAGE_ROOT), *map(str, extra_paths), *inherited]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **variables}

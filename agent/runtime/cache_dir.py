"""Where warpsmith keeps what it can recompute: references and compiled CUBINs."""

import os
from pathlib import Path


def cache_root() -> Path:
    """``$WARPSMITH_CACHE``, else ``$XDG_CACHE_HOME/warpsmith``, else ``~/.cache/warpsmith``."""
    if os.environ.get("WARPSMITH_CACHE"):
        return Path(os.environ["WARPSMITH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "warpsmith"

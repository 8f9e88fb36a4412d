"""Shared fixtures. GPU tests carry the marker `gpu` and skip cleanly without one."""

from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _import_the_built_package() -> None:
    """`python -m pytest` puts the checkout first on sys.path. Its agent/ is complete only
    with the built native module beside it (an editable or in-place build); otherwise the
    tests import the installed warpsmith, or stop here with one line."""
    built = [p for suffix in importlib.machinery.EXTENSION_SUFFIXES for p in (ROOT / "agent").glob(f"_runner{suffix}")]
    if not built:  # (the _runner.pyi type stub beside the sources is not a built module)
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
    try:
        import agent._runner  # noqa: F401
    except ImportError as e:
        pytest.exit(f"install warpsmith first: pip install '.[test]' ({e})", returncode=4)


_import_the_built_package()

def _gpu_reason() -> str | None:
    try:
        from agent.runtime import native
        native.open_device(0)
    except Exception as e:  # no driver, no device, mismatched NVRTC
        return f"no usable GPU: {getattr(e, 'name', type(e).__name__)}"
    return None


def pytest_collection_modifyitems(config, items):
    if not any("gpu" in item.keywords for item in items):
        return
    reason = _gpu_reason()
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Each test session gets its own reference/CUBIN cache."""
    monkeypatch.setenv("WARPSMITH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))

"""Shared fixtures. GPU tests carry the marker `gpu` and skip cleanly without one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _import_the_installed_package() -> None:
    """The tests run against the installed warpsmith (an editable install or not): the
    checkout holds no package of that name. `python -m pytest` puts its root on sys.path,
    taken off here so that no test imports a source folder (agent/, tui/) as a package of
    its own. Not installed: stop here with one line."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
    try:
        import warpsmith.agent._runner  # noqa: F401
    except ImportError as e:
        pytest.exit(f"install warpsmith first: pip install '.[test]' ({e})", returncode=4)


_import_the_installed_package()

def _gpu_reason() -> str | None:
    try:
        from warpsmith.agent.runtime import native
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

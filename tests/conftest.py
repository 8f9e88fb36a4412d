"""Shared fixtures. GPU tests carry the marker `gpu` and skip cleanly without one."""

from __future__ import annotations


import pytest

def _gpu_reason() -> str | None:
    try:
        from agent import native
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

"""Shared fixtures. GPU tests carry the marker `gpu` and skip cleanly without one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SGEMM = ROOT / "examples" / "sgemm"


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


SMALL_CASES = """
[[cases]]
name = "odd-97x83x61"
role = "correctness"
sizes = { M = 97, N = 83, K = 61 }

[[cases]]
name = "square-256"
role = "performance"
sizes = { M = 256, N = 256, K = 256 }
"""


def make_sgemm_workload(directory: Path, cases: str = SMALL_CASES, tolerance: str = "allow_tf32 = false") -> Path:
    """A copy of the sgemm example with small cases (and another tolerance if asked)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("reference.py", "naive.cu", "tiled.cu"):
        shutil.copy(SGEMM / name, directory / name)
    text = (SGEMM / "workload.toml").read_text()
    text = text.split("# Correctness:")[0] + cases
    text = text.replace("allow_tf32 = false", tolerance)
    (directory / "workload.toml").write_text(text)
    return directory

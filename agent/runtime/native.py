"""The native runner, with its libraries found: NVRTC from the nvidia-cuda-nvrtc
wheel (else a CUDA 13 toolkit on the loader path), cuBLAS from the nvidia-cublas
wheel (else the system). The driver comes from the system (libcuda.so.1)."""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path

from .. import _runner

CudaError = _runner.CudaError
Program = _runner.Program  # a sequence of launches and memsets, run and timed as one unit
CUDA_MAJOR = 13


def _wheel_lib_dirs() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [d for root in spec.submodule_search_locations for d in sorted(Path(root).glob("cu*/lib"))]


def _toolkit_lib_dirs() -> list[Path]:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return [Path(r) / sub for r in roots if r for sub in ("lib64", "lib")]


def library_candidates(soname: str) -> list[str]:
    """Full paths in the wheels and toolkits first, then the bare soname for the loader."""
    paths = [str(d / soname) for d in _wheel_lib_dirs() + _toolkit_lib_dirs() if (d / soname).exists()]
    return paths + [soname]


@lru_cache(maxsize=1)
def nvrtc() -> str:
    """Load NVRTC once; returns where it was found. Raises CudaError if missing."""
    builtins = [str(p) for d in _wheel_lib_dirs() + _toolkit_lib_dirs()
                for p in sorted(d.glob(f"libnvrtc-builtins.so.{CUDA_MAJOR}*"))]
    return _runner.load_nvrtc(library_candidates(f"libnvrtc.so.{CUDA_MAJOR}"), builtins)


def nvrtc_version() -> tuple[int, int]:
    nvrtc()
    return tuple(_runner.nvrtc_version())


def cublas_candidates() -> list[str]:
    return library_candidates(f"libcublas.so.{CUDA_MAJOR}")


def open_device(ordinal: int = 0) -> "_runner.Device":
    """Open a GPU and check its driver's CUDA major matches NVRTC's."""
    device = _runner.Device(ordinal)
    driver_major = device.facts.driver_version // 1000
    major, minor = nvrtc_version()
    if driver_major < major:
        raise RuntimeError(f"the driver supports CUDA {driver_major}.x but NVRTC is {major}.{minor}: "
                           f"CUBINs from this NVRTC may not load; install a CUDA {driver_major} "
                           f"nvidia-cuda-nvrtc wheel or update the driver")
    return device

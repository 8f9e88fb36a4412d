"""The native runner, with its libraries found: NVRTC from the nvidia-cuda-nvrtc
wheel (else a CUDA 13 toolkit on the loader path), cuBLAS from the nvidia-cublas
wheel (else the system). The driver comes from the system (libcuda.so.1).

The one door to ``warpsmith.agent._runner`` (tests/test_native_facade.py holds everyone else to
it): what the rest of the tool needs of the runner is named here."""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _runner
from .device_facts import RUNNER_FACTS, DeviceFacts

if TYPE_CHECKING:  # for annotations only: the stub's alias (agent/_runner.pyi), no object at run time
    KernelArg = _runner._Arg  # one launch argument, (kind, value), as Device.launch takes it

CudaError = _runner.CudaError
Program = _runner.Program  # a sequence of launches and memsets, run and timed as one unit
# The runner's types, for code that holds them (an open GPU, its buffers, a timing recipe).
Device = _runner.Device
Buffer = _runner.Buffer
Module = _runner.Module  # a loaded CUBIN, whose functions are launched
Function = _runner.Function
Cublas = _runner.Cublas
CompileResult = _runner.CompileResult
TimingSettings = _runner.TimingSettings
TimingResult = _runner.TimingResult
# CUDA IPC: an event or a buffer of one process opened in another process's context.
IpcEvent = _runner.IpcEvent
IpcMapping = _runner.IpcMapping
ipc_memory_handle = _runner.ipc_memory_handle
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
    major, minor = _runner.nvrtc_version()
    return major, minor


def nvrtc_compile(source: str, filename: str, entry: str, options: list[str], arch: str) -> CompileResult:
    """NVRTC in this process, for the compile child (agent/runtime/compile_child.py); the
    rest of the tool compiles through agent/runtime/compiler.py, which runs that child."""
    return _runner.compile(source, filename, entry, options, arch)


def cublas_candidates() -> list[str]:
    return library_candidates(f"libcublas.so.{CUDA_MAJOR}")


def open_cublas(device: Device) -> Cublas:
    """cuBLAS bound to the device's stream; raises CudaError if no library loads."""
    return _runner.Cublas(device, cublas_candidates())


def open_device(ordinal: int = 0) -> Device:
    """Open a GPU and check its driver's CUDA major matches NVRTC's."""
    device = _runner.Device(ordinal)
    driver_major = device.facts.driver_version // 1000
    major, minor = nvrtc_version()
    if driver_major < major:
        raise RuntimeError(f"the driver supports CUDA {driver_major}.x but NVRTC is {major}.{minor}: "
                           f"CUBINs from this NVRTC may not load; install a CUDA {driver_major} "
                           f"nvidia-cuda-nvrtc wheel or update the driver")
    return device


def device_facts(device: Device) -> DeviceFacts:
    """The open GPU's facts, with the driver's CUDA version and NVRTC's as text."""
    f = device.facts
    major, minor = nvrtc_version()
    driver = f.driver_version
    return DeviceFacts(**{name: getattr(f, name) for name in RUNNER_FACTS}, nvrtc=f"{major}.{minor}",
                       driver=f"{driver // 1000}.{driver % 1000 // 10}")

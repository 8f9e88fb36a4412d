"""The GPU's SM and memory clocks, read through NVML (libnvidia-ml, shipped with the
driver) before and after each timed case, so every timing says at what clocks it
ran. Read only: warpsmith never sets clocks. Without NVML the reading is empty."""

from __future__ import annotations

import ctypes
from typing import Optional

NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2


class Clocks:
    def __init__(self, uuid: str, library: str = "libnvidia-ml.so.1"):
        self._nvml, self._handle = None, ctypes.c_void_p()
        try:
            nvml = ctypes.CDLL(library)
            if nvml.nvmlInit_v2() != 0 or nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(self._handle)) != 0:
                return
            self._nvml = nvml
        except (OSError, AttributeError):  # no NVML here: timings go without clocks
            self._nvml = None

    def read(self) -> Optional[tuple[int, int]]:
        """(SM MHz, memory MHz) now, or None."""
        if self._nvml is None:
            return None
        sm, mem = ctypes.c_uint(), ctypes.c_uint()
        if (self._nvml.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_SM, ctypes.byref(sm)) != 0 or
                self._nvml.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_MEM, ctypes.byref(mem)) != 0):
            return None
        return sm.value, mem.value

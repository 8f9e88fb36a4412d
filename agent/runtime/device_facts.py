"""What the tool knows of a GPU: the runner's device facts (native/device.hpp) plus
the driver and NVRTC versions as text. One record from the worker to the proposer's
prompt, the report and the MLflow run; stored as its plain dict (``to_dict``) in
checkpoints and ``gpu.json``, and read back tolerantly (``from_dict``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Union

Fact = Union[int, float, str]


@dataclass(frozen=True)
class DeviceFacts:
    ordinal: int = 0
    name: str = ""
    uuid: str = ""
    arch: str = ""  # "sm_90"
    cc_major: int = 0
    cc_minor: int = 0
    sm_count: int = 0
    driver_version: int = 0  # 13000 = CUDA 13.0
    total_memory: int = 0  # bytes
    l2_bytes: int = 0
    smem_per_block: int = 0
    smem_per_block_optin: int = 0
    smem_per_sm: int = 0
    regs_per_block: int = 0
    regs_per_sm: int = 0
    max_threads_per_block: int = 0
    max_threads_per_sm: int = 0
    max_blocks_per_sm: int = 0  # resident blocks an SM holds at most (32 on sm_90)
    warp_size: int = 0
    sm_clock_khz: int = 0
    mem_clock_khz: int = 0
    mem_bus_bits: int = 0
    peak_bandwidth_gbs: float = 0.0  # from clock x bus width; a lead, not a measurement
    nvrtc: str = ""  # "13.0"
    driver: str = ""  # the driver's CUDA version, "13.0"

    @staticmethod
    def from_dict(stored: Mapping[str, Any]) -> DeviceFacts:
        """From a stored dict, as old sessions and runs hold it: unknown keys are ignored
        (a fact a later runner dropped), missing ones keep their defaults (a fact it added,
        or the few facts a test double wrote)."""
        return DeviceFacts(**{k: v for k, v in stored.items() if k in ALL_FACTS})

    def to_dict(self) -> dict[str, Fact]:
        """The stored form, unchanged since facts were a dict: the runner's facts by name in
        alphabetical order (the order ``dir()`` gave them), then ``nvrtc`` and ``driver``."""
        return {**{k: getattr(self, k) for k in RUNNER_FACTS}, "nvrtc": self.nvrtc, "driver": self.driver}


ALL_FACTS = frozenset(f.name for f in dataclasses.fields(DeviceFacts))
# The facts the runner's own record holds (native/device.hpp), in the stored order.
RUNNER_FACTS = tuple(sorted(ALL_FACTS - {"nvrtc", "driver"}))

"""The cold-L2 flush's kernels (cuda/l2_flush.cu), compiled and handed to a device: from
then on its timing loop flushes with them instead of a memset, so lines a kernel kept
under an evict_last policy do not survive into its next timed launch."""

from __future__ import annotations

from pathlib import Path

from . import compiler
from .native import Device

SOURCE = (Path(__file__).with_name("cuda") / "l2_flush.cu").read_text()


def install(device: Device) -> None:
    """Raises RuntimeError when the flush does not compile (a broken NVRTC install)."""
    compiled = compiler.compile_kernel(SOURCE, "", device.facts.arch, filename="warpsmith_l2_flush.cu")
    if not compiled.ok or not compiled.cubin:
        raise RuntimeError(f"the harness's L2 flush did not compile ({compiled.error}): "
                           "reinstall nvidia-cuda-nvrtc")
    device.load_l2_flush(compiled.cubin)

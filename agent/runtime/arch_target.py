"""Which CUBIN target a source compiles for: the device's architecture, or its
arch-specific variant (``sm_90`` -> ``sm_90a``) when the source asks for one.

Hopper's warpgroup MMA (``wgmma``), register reallocation (``setmaxnreg``) and
Blackwell's ``tcgen05`` exist only on the arch-specific targets; ptxas refuses them
for plain ``sm_90`` ("not supported on .target 'sm_90'"). A source asks by using one
of them, or by testing the feature macro the arch-specific target defines
(``__CUDA_ARCH_FEAT_SM90_ALL``). An arch-specific CUBIN runs only on that exact
compute capability, which is all warpsmith builds for (the device it times on), so
no other source pays for it; TMA (``cp.async.bulk.tensor``) and clusters work on
plain ``sm_90`` and do not ask.
"""

from __future__ import annotations

import re

_ARCH = re.compile(r"sm_(\d+)(a?)")
_ASKS = re.compile(r"\b(?:wgmma|setmaxnreg|tcgen05)\b|__CUDA_ARCH_FEAT_SM\d+_ALL")
FIRST_ARCH_SPECIFIC = 90  # sm_90a is the first arch-specific target


def asks_arch_specific(source: str) -> bool:
    """Whether the source uses an instruction (or feature macro) of an arch-specific target."""
    return _ASKS.search(source) is not None


def target_arch(arch: str, source: str) -> str:
    """`arch` (e.g. sm_90), made arch-specific (sm_90a) when the source asks and the
    architecture has such a target; an arch given as sm_90a already stays as it is."""
    m = _ARCH.fullmatch(arch)
    if m is None or m.group(2) or int(m.group(1)) < FIRST_ARCH_SPECIFIC or not asks_arch_specific(source):
        return arch
    return arch + "a"

"""What a CUBIN's machine code computes with: its tensor-core and narrow-float conversion
instructions, read from the SASS (nvdisasm, from the nvidia-cuda-nvdisasm wheel, else a
CUDA toolkit's).

The precision a kernel works in is decided by these instructions, not by its source or
its PTX: inline assembly, a library header or ptxas's own lowering all end here. A float32
kernel that splits its operands into bfloat16 pieces for the tensor cores shows
``F2FP.BF16.F32.PACK_AB`` and ``HMMA.16816.F32.BF16``; one that rounds attention's q and k
to fp8 shows ``F2FP.SATFINITE.E4M3.F32.PACK_AB`` and a ``QGMMA``. What a workload allows of
them is its precision policy (agent/spec/precision_policy.py).

Only code sections are read (``nvdisasm -c``), opcodes only: strings and other sections
of the image, where a source could plant text, never reach the parse. The same listing
(``disassemble``) is what agent/runtime/sass_memory.py reads for the launch's constant
bank and module data's addresses.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Optional

# Tensor-core matrix instructions (H: 16-bit and TF32 inputs, Q: fp8, I: integer, B: binary,
# O: fp4/fp6) in their warp (MMA) and warpgroup (GMMA) forms; conversions to narrower
# types (F2FP packs two floats, F2F converts one, I2F makes a float of an integer, F2I an
# integer of a float); and the integer dot products (IDP: dp4a, dp2a).
FAMILIES = ("HMMA", "HGMMA", "QMMA", "QGMMA", "IMMA", "IGMMA", "BMMA", "BGMMA", "OMMA", "F2FP", "F2F", "I2F",
            "F2I", "IDP",
            # reductions in memory, which add in their type (REDG.E.ADD.BF16x2.RN)
            "RED", "REDG", "REDAS", "ATOM", "ATOMG", "ATOMS", "UBLKRED")
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Za-z0-9_]+)*)",
                          re.MULTILINE)
VERSION = 4  # in the compile cache's key: a change to what is read (here, sass_memory.py, sass_flow.py) recompiles
TIMEOUT_S = 60.0  # a large kernel disassembles in well under a second


class SassUnavailable(RuntimeError):
    """No nvdisasm to read the machine code with, or it failed on this image."""


@lru_cache(maxsize=1)
def nvdisasm() -> Optional[str]:
    """The nvdisasm of the nvidia-cuda-nvdisasm wheel, else one on PATH or in CUDA_HOME."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        for candidate in sorted(Path(root).glob("cu*/bin/nvdisasm")):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    for home in homes:
        if home and os.access(Path(home) / "bin" / "nvdisasm", os.X_OK):
            return str(Path(home) / "bin" / "nvdisasm")
    return shutil.which("nvdisasm")


def disassemble(cubin: bytes) -> str:
    """nvdisasm's listing of the CUBIN's code sections (``-c``, no dataflow comments). Raises
    SassUnavailable."""
    tool = nvdisasm()
    if tool is None:
        raise SassUnavailable("nvdisasm not found: pip install nvidia-cuda-nvdisasm (a warpsmith dependency)")
    with tempfile.TemporaryDirectory(prefix="warpsmith-sass-") as tmp:
        image = Path(tmp) / "kernel.cubin"
        image.write_bytes(cubin)
        try:
            done = subprocess.run([tool, "-c", "-ndf", str(image)], capture_output=True, timeout=TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SassUnavailable(f"nvdisasm did not run: {type(e).__name__}") from None
    if done.returncode != 0:
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0][:200]
        raise SassUnavailable(f"nvdisasm failed on the CUBIN ({first})")
    return done.stdout.decode(errors="replace")


def math_instructions(cubin: bytes) -> tuple[str, ...]:
    """The distinct tensor-core and narrowing-conversion opcodes of the CUBIN's code, with
    their modifiers (``HMMA.16816.F32.BF16``), sorted. Raises SassUnavailable."""
    return math_in(disassemble(cubin))


def math_in(listing: str) -> tuple[str, ...]:
    """math_instructions of a listing already read (disassemble)."""
    found = {op + mods for op, mods in _INSTRUCTION.findall(listing) if op in FAMILIES}
    return tuple(sorted(found))

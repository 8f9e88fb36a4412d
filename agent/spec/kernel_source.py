"""What a kernel's source declares: its tunable knobs.

A knob is a ``#define`` the tuner may override with ``-D``, declared as::

    // knob BM: 32 64 128
    #ifndef BM
    #define BM 64
    #endif

The comment lists the values to search; the ``#define`` gives the default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_KNOB = re.compile(r"^\s*//\s*knob\s+([A-Za-z_]\w*)\s*:\s*(.+?)\s*$", re.MULTILINE)
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+(-?\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[int, ...]
    default: int


def parse_knobs(source: str) -> dict[str, Knob]:
    """Knobs in declaration order; a knob without a numeric ``#define`` default
    takes its first listed value."""
    defaults = {m.group(1): int(m.group(2)) for m in _DEFINE.finditer(source)}
    knobs = {}
    for m in _KNOB.finditer(source):
        name = m.group(1)
        try:
            values = tuple(int(v) for v in m.group(2).replace(",", " ").split())
        except ValueError:
            raise ValueError(f"knob {name}: values must be integers, got '{m.group(2)}'") from None
        knobs[name] = Knob(name, values, defaults.get(name, values[0]))
    return knobs

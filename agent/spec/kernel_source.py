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
from functools import lru_cache

# [ \t] rather than \s: a pattern that may cross lines backtracks quadratically over a
# model-written source of blank lines; one that stays on its line cannot.
_KNOB = re.compile(r"^[ \t]*//[ \t]*knob[ \t]+([A-Za-z_]\w*)[ \t]*:([^\n]*)$", re.MULTILINE)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(-?\d+)[ \t]*$", re.MULTILINE)
KNOB_LIMIT = 1 << 31  # a knob is a -D value in int's range
KNOB_NAME_MAX = 64  # characters: a knob's name is an MLflow param key (`knob.NAME`, 250 at most) and a -D name


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[int, ...]
    default: int


def parse_knobs(source: str) -> dict[str, Knob]:
    """Knobs in declaration order; a knob without a numeric ``#define`` default
    takes its first listed value."""
    return {k.name: k for k in _knobs(source)}


# The tuner asks for a candidate's knob values once per case for every neighbour it
# weighs (Candidate.launch_env): on the H100, re-reading the same source took 7 of the
# 12 s its proposing thread held the GIL in a 60 s sgemm session, time the thread that
# feeds the GPU waited for. A few sources are in play at once, so a small cache holds them.
@lru_cache(maxsize=64)
def _knobs(source: str) -> tuple[Knob, ...]:
    defaults = {m.group(1): int(m.group(2)) for m in _DEFINE.finditer(source) if len(m.group(2)) <= 12}
    knobs = {}
    for m in _KNOB.finditer(source):
        name, listed = m.group(1), m.group(2).strip()
        if len(name) > KNOB_NAME_MAX:
            raise ValueError(f"knob {name[:20]}...: a knob's name has at most {KNOB_NAME_MAX} characters")
        try:
            values = tuple(int(v) for v in listed.replace(",", " ").split())
        except ValueError:
            raise ValueError(f"knob {name}: values must be integers, got '{listed[:80]}'") from None
        if not values or any(abs(v) >= KNOB_LIMIT for v in values):
            raise ValueError(f"knob {name}: give one or more values, each within +-2^31")
        knobs[name] = Knob(name, values, defaults.get(name, values[0]))
    return tuple(knobs.values())

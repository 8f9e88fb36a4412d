"""What model- or user-written CUDA may ask of the compiler: which headers, which options.

NVRTC reads whatever a source names: ``#include "/proc/self/environ"`` puts the
environment (API keys included) into the compile log, which goes to the model,
MLflow and the app; ``__has_include("/some/path")`` answers whether a file exists;
options such as ``--time=FILE`` or ``--fdevice-time-trace=FILE`` write files.
So a source and its options pass these checks before NVRTC sees them; a refusal is
a one-line reason, which the compiler turns into a ``compile_failed`` result.

Headers: only :data:`ALLOWED_HEADERS`, by angle-bracket name. They are the CUDA and
CCCL headers NVRTC 13 bundles in libnvrtc-builtins; the compile process installs
them (``nvrtcInstallBundledHeaders``) and adds their directory with ``-I`` (see
compile_child.py). Without that ``-I`` NVRTC 13.5 resolves no header at all.
Thrust and ``<cub/cub.cuh>`` are left out: they do not compile under NVRTC, and
Thrust's own headers use computed includes steered by user macros.

The scan is conservative and reads the source as the preprocessor would see it
after line splicing, but without trusting its own idea of comments and strings: an
include-like directive *anywhere* (inside a comment or a string too) must name an
allowed header. Also refused: quoted, absolute, relative and computed includes,
``#include_next``, ``#import``, ``#embed``, ``__has_include`` of anything outside
the set, token pasting (``##`` can assemble ``__has_include`` where no scan sees
it; NVRTC evaluates a pasted one) and universal character names that spell ASCII.
Refusing odd but harmless code is the accepted cost.

Options: :func:`check_options` allows macros, register caps, line info, the
language standard, vectorisation, ``-restrict`` and the math flags; the math flags
that lower precision only when the workload's ``tolerance.allow_fast_math`` is true
(a key of its own, not ``allow_tf32``: TF32 relaxes matmul inputs, fast math
relaxes division, square roots, transcendentals and denormals). The architecture,
include paths, PTX assembler options and anything that writes a file are the
tool's to set, never the model's.
"""

from __future__ import annotations

import re
from array import array
from typing import Iterable, Iterator

# -- headers --------------------------------------------------------------------

CUDA_HEADERS = (
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_fp6.h", "cuda_fp4.h", "mma.h", "math_constants.h",
    "vector_types.h", "cuComplex.h", "cooperative_groups.h", "cooperative_groups/reduce.h",
    "cooperative_groups/scan.h", "cooperative_groups/memcpy_async.h", "cuda_pipeline.h",
    "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cuda_awbarrier_primitives.h",
)
CUDA_STD = (
    "algorithm", "array", "atomic", "barrier", "bit", "cassert", "cfloat", "climits", "cmath", "complex",
    "concepts", "cstddef", "cstdint", "cstdlib", "cstring", "expected", "functional", "initializer_list",
    "iterator", "latch", "limits", "mdspan", "memory", "numbers", "numeric", "optional", "ratio", "semaphore",
    "span", "tuple", "type_traits", "utility", "variant",
)
CUDA_EXT = ("annotated_ptr", "atomic", "barrier", "bit", "cmath", "functional", "memory", "pipeline", "ptx",
            "type_traits", "utility", "version", "warp")
# Not block_load / warp_load: through Thrust's device_system_tag.h they reach a computed
# include whose path a source's own macros spell (`#define h /../../proc/<pid>/environ`
# reads the session's key that way).
CUB = tuple(f"cub/block/block_{n}.cuh" for n in ("reduce", "scan", "store", "exchange", "radix_sort")) + \
    tuple(f"cub/warp/warp_{n}.cuh" for n in ("reduce", "scan", "store", "exchange"))
ALLOWED_HEADERS = frozenset(CUDA_HEADERS + tuple(f"cuda/std/{n}" for n in CUDA_STD)
                            + tuple(f"cuda/{n}" for n in CUDA_EXT) + ("nv/target",) + CUB)

_HASH = re.compile(r"#|%:|\?\?=")  # '#', its digraph, its trigraph (NVRTC disables trigraphs; refused all the same)
_DIRECTIVE_NAME = re.compile(r"(include_next|include|import|embed)(?![A-Za-z0-9_$])")
_BLANK = frozenset(" \t\f\v")
_HEADER_NAME = re.compile(r"[ \t]*<([^<>\n]*)>")
_HAS_INCLUDE = re.compile(r"__has_include(?:_next)?(?![A-Za-z0-9_$])")
_HAS_INCLUDE_OK = re.compile(r"__has_include[ \t]*\([ \t]*<([^<>\n]*)>[ \t]*\)")
_PASTE = re.compile(r"##|%:%:|\?\?=\?\?=")
_UCN = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")
_SPLICE = re.compile(r"(?:\\|\?\?/)[ \t\f\v]*\n")  # trailing blanks too: more joining only refuses more


def _logical(source: str) -> tuple[str, list[int]]:
    """The source after line splicing, and for each of its characters the physical line (1-based)."""
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    out, lines, line, pos = [], [], 1, 0
    for m in _SPLICE.finditer(text):
        chunk = text[pos:m.start()]
        for ch in chunk:
            out.append(ch)
            lines.append(line)
            line += ch == "\n"
        line += 1
        pos = m.end()
    for ch in text[pos:]:
        out.append(ch)
        lines.append(line)
        line += ch == "\n"
    return "".join(out), lines


def _directives(text: str) -> Iterator[tuple[int, str, int]]:
    """(start, name, end) of each include-like directive: a '#' (or its digraph, trigraph),
    blanks and block comments, then the name. Linear in the text: where each gap of blanks
    and comments ends is computed once for every position, right to left (a regular
    expression would rescan an unclosed comment from every '#': "#/*" x 16000 took 5 s in
    the session's process)."""
    n = len(text)
    close = array("q", [n]) * (n + 2)  # close[i]: where the first "*/" at or after i starts (n: none)
    for i in range(n - 2, -1, -1):
        close[i] = i if text[i] == "*" and text[i + 1] == "/" else close[i + 1]
    gap_end = array("q", range(n + 1))  # gap_end[i]: the first position at or after i past blanks and comments
    for i in range(n - 1, -1, -1):
        if text[i] in _BLANK:
            gap_end[i] = gap_end[i + 1]
        elif text.startswith("/*", i):
            end = close[i + 2] if i + 2 <= n else n
            gap_end[i] = n if end >= n else gap_end[end + 2]  # unclosed: the gap runs to the end
    for h in _HASH.finditer(text):
        start = gap_end[h.end()]
        m = _DIRECTIVE_NAME.match(text, start)
        if m:
            yield h.start(), m.group(1), m.end()


def _allowed_list() -> str:
    blocks = ",".join(n[len("cub/block/block_"):-4] for n in CUB if n.startswith("cub/block/"))
    warps = ",".join(n[len("cub/warp/warp_"):-4] for n in CUB if n.startswith("cub/warp/"))
    return (" ".join(f"<{h}>" for h in CUDA_HEADERS) + f" <cuda/std/{{{','.join(CUDA_STD)}}}>"
            f" <cuda/{{{','.join(CUDA_EXT)}}}> <nv/target> <cub/block/block_{{{blocks}}}.cuh>"
            f" <cub/warp/warp_{{{warps}}}.cuh>")


SOURCE_MAX = 1 << 20  # characters: the largest shipped kernel has 22 171


# Control characters other than blanks and line ends. NVRTC reads a lone carriage return as
# a blank where this scan once read a line end: `#\rinclude "/etc/passwd"` was no directive
# here and an include there, whose text NVRTC's log then quoted back. Refusing every control
# character the two could read differently keeps the scan and the compiler on one text.
_CONTROL = re.compile(r"\r(?!\n)|[\x00-\x08\x0e-\x1f\x7f-\x9f]")


def check_source(source: str) -> str:
    """'' when the source may be compiled, else why not (one line, with the line number)."""
    if len(source) > SOURCE_MAX:
        return f"the source has {len(source)} characters; a kernel's source may have at most {SOURCE_MAX}"
    control = _CONTROL.search(source)
    if control:
        return (f"U+{ord(control.group()):04X} (line {source.count(chr(10), 0, control.start()) + 1}): a kernel's source "
                "is plain text, with no control character but tabs and line ends")
    text, lines = _logical(source)

    def where(pos: int) -> str:
        return f"line {lines[pos] if pos < len(lines) else len(source.splitlines())}"

    def shown(start: int) -> str:
        return " ".join(text[start:start + 80].split("\n")[0].split())

    for start, name, end in _directives(text):
        if name != "include":
            return f"{shown(start)} ({where(start)}): #{name} is not allowed"
        h = _HEADER_NAME.match(text, end)
        if not h or h.group(1) not in ALLOWED_HEADERS:
            return (f"{shown(start)} ({where(start)}): only these headers may be included, "
                    f"by <name>: {_allowed_list()}")
    for m in _HAS_INCLUDE.finditer(text):
        ok = _HAS_INCLUDE_OK.match(text, m.start())
        if not ok or ok.group(1) not in ALLOWED_HEADERS:
            return (f"{shown(m.start())} ({where(m.start())}): __has_include may only ask about an allowed "
                    "header, written __has_include(<name>)")
    paste = _PASTE.search(text)
    if paste:
        return (f"{shown(max(0, paste.start() - 20))} ({where(paste.start())}): token pasting (##) is not allowed "
                "(it can assemble __has_include, a probe of the host's files)")
    for m in _UCN.finditer(text):
        if int(m.group(1) or m.group(2), 16) < 0x80:
            return f"{m.group(0)} ({where(m.start())}): a universal character name may not spell an ASCII character"
    return ""


# -- the entry ------------------------------------------------------------------

# NVRTC pastes an entry into the program's text (nvrtcAddNameExpression: after a
# `#pragma nv_mangled_name`), where no check_source scan sees it: a newline in it
# opens lines of source, `#include "/proc/<pid>/environ"` among them, which would put
# the session's environment into the compile log.
# So an entry is a name: an identifier, `::`-qualified, with at most one template
# argument list of names, numbers, commas and blanks (a templated __global__).
_ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*(?:<[A-Za-z0-9_:, ]*>)?")
ENTRY_MAX = 256


def check_entry(entry: str) -> str:
    """'' when the kernel's entry may be given to NVRTC (or there is none), else why not."""
    if not entry or (len(entry) <= ENTRY_MAX and _ENTRY.fullmatch(entry)):
        return ""
    return (f"entry {entry[:60]!r}{'...' if len(entry) > 60 else ''}: an entry is the kernel's name (an identifier, "
            "e.g. extern \"C\" __global__ void my_kernel(...) has entry my_kernel), nothing else")


# -- options --------------------------------------------------------------------

_IDENT = r"[A-Za-z][A-Za-z0-9_]*"  # no leading underscore: reserved names steer the headers' internals
_NUMBER = r"[+-]?(?:0[xX][0-9A-Fa-f]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)[uUlLfF]{0,3}"
_DEFINE = re.compile(rf"-D({_IDENT})(?:=({_NUMBER}|{_IDENT}))?")
_MATH = re.compile(r"--?(ftz|prec-div|prec-sqrt|fmad)=(true|false)")
_PLAIN = {"-lineinfo", "--generate-line-info", "--extra-device-vectorization", "-extra-device-vectorization",
          "-restrict", "--restrict", "-std=c++17", "-std=c++20", "--std=c++17", "--std=c++20"}
_FAST = {"--use_fast_math", "-use_fast_math"}
# The settings that give up IEEE behaviour: allowed only where the workload allows fast math.
_IMPRECISE = {("ftz", "true"), ("prec-div", "false"), ("prec-sqrt", "false")}
ALLOWED_OPTIONS = ("-DNAME", "-DNAME=VALUE", "-maxrregcount=N", "--maxrregcount=N", "-lineinfo",
                   "--generate-line-info", "-std=c++17", "-std=c++20", "--extra-device-vectorization",
                   "-restrict", "-fmad=true|false", "--use_fast_math*", "-ftz=true*|false",
                   "-prec-div=true|false*", "-prec-sqrt=true|false*")


def define_options(defines: dict[str, int]) -> list[str]:
    """-DNAME=VALUE per knob, in name order: the same configuration gives the same options,
    hence the same compile-cache key, however its dict was built. (In insertion order, the
    tuner's compile-ahead and an attempt's own compile keyed one configuration twice, and
    on the H200 the attempt's compile ran NVRTC for half a second while the GPU waited.)"""
    return [f"-D{k}={v}" for k, v in sorted(defines.items())]


def check_options(options: Iterable[str], allow_fast_math: bool = False) -> str:
    """'' when every option is allowed, else why the first one is not (one line).
    Options marked * in ALLOWED_OPTIONS need `allow_fast_math`."""
    for option in options:
        if not isinstance(option, str):
            return f"compile option {option!r} is not a string"
        if option in _PLAIN or _DEFINE.fullmatch(option):
            continue
        reg = re.fullmatch(r"--?maxrregcount=(\d{1,3})", option)
        if reg and 16 <= int(reg.group(1)) <= 255:
            continue
        math = _MATH.fullmatch(option)
        fast = option in _FAST or bool(math and (math.group(1), math.group(2)) in _IMPRECISE)
        if (math or option in _FAST) and (allow_fast_math or not fast):
            continue
        if fast:
            return (f"compile option {option} lowers floating-point precision; this workload does not allow it "
                    "(tolerance.allow_fast_math = false)")
        return (f"compile option {option!r} is not allowed; allowed: {', '.join(ALLOWED_OPTIONS)} "
                "(* only with tolerance.allow_fast_math; NAME an identifier not starting with '_', VALUE a number "
                "or identifier, N in 16..255)")
    return ""

"""The compile process: NVRTC behind a pipe, started by agent/runtime/compile_process.py.

Run as ``python -P -m warpsmith.agent.runtime.compile_child PARENT_PID HEADER_DIR``, with a minimal
environment and an empty private working directory. It dies with its parent, exits
on end of input, writes nothing but the headers it installs once at start, and
answers each request with the compile's result (the CUBIN as base64).

Messages both ways are length-prefixed JSON (:func:`write_message`,
:func:`read_message`), not pickle: the parent never unpickles what a process that
ran a model's source sends back. The protocol uses a private copy of stdout; fd 1
itself then points at stderr, so nothing NVRTC prints can corrupt a message.

Headers: NVRTC 13 bundles the CUDA and CCCL headers in libnvrtc-builtins but
searches no directory by default; ``nvrtcInstallBundledHeaders`` extracts them
(about 26 MB, 0.3 s, once per NVRTC version) into HEADER_DIR, and every compile
gets ``-I HEADER_DIR`` and ``-I HEADER_DIR/cccl``. compile_policy.py decides which
of them a source may name. NVRTC 13.0 predates the bundle (PyTorch's cu13 wheels
ship it): compiles then get the include directory beside that NVRTC's lib
directory (:func:`toolkit_include`). With neither, compiles get no ``-I``, and an
include fails as NVRTC's "cannot open source file" compile error.

Priority: the child lowers its own (nice +NICENESS) before it loads NVRTC. The tuner keeps
a compile process per spare core busy compiling ahead; at equal priority they take cores
from the GPU worker and the loop's threads, the work the GPU waits for (on an H100 host,
sixteen of them used 560 CPU seconds of a 77 s search). Niced, they use what
the critical path leaves, and still get every idle core. That holds for every compile, the
one the GPU waits for included: it yields only to work at normal priority (the worker, the
loop, whatever else the user runs), never to the other compiles.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import re
import struct
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Optional

from .compile_policy import check_entry
from .ptx_audit import audited
from .sass import SassUnavailable, disassemble, math_in
from .sass_memory import audit_memory

if TYPE_CHECKING:  # the child imports the runner only once it runs (main)
    from .native import CompileResult

_LENGTH = struct.Struct(">Q")
NICENESS = 10
LOG_MAX = 64 * 1024  # characters of NVRTC's log a compile returns (bounded_log)


def write_message(stream: IO[bytes], message: dict[str, Any]) -> None:
    body = json.dumps(message).encode()
    stream.write(_LENGTH.pack(len(body)) + body)
    stream.flush()


def read_message(stream: IO[bytes]) -> Optional[dict[str, Any]]:
    """The next message, or None at end of input."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    body = stream.read(_LENGTH.unpack(head)[0])
    message: dict[str, Any] = json.loads(body)
    return message


def install_headers(nvrtc_path: str, directory: str) -> list[str]:
    """Extract NVRTC's bundled headers once; the include options that find them. Without
    the bundle (NVRTC 13.0 has no nvrtcInstallBundledHeaders), the toolkit's own include
    directory that ships with that NVRTC; [] if neither exists."""
    try:
        install = ctypes.CDLL(nvrtc_path).nvrtcInstallBundledHeaders
    except (OSError, AttributeError):  # an NVRTC older than the bundle
        return toolkit_include(nvrtc_path)
    install.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_char_p)]
    error = ctypes.c_char_p()
    if install(directory.encode(), 0, ctypes.byref(error)) != 0:
        return toolkit_include(nvrtc_path)
    return [f"-I{directory}", f"-I{Path(directory) / 'cccl'}"]


def toolkit_include(nvrtc_path: str) -> list[str]:
    """The include directory of the toolkit this NVRTC came with: beside its lib directory
    (the nvidia-* wheels' nvidia/cu13/{lib,include}, a toolkit's lib64/include), else
    CUDA_HOME's or CUDA_PATH's. It must hold the 16-bit float headers; compile_policy.py
    still decides which headers a source may name."""
    lib = Path(nvrtc_path).resolve().parent
    homes = [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    for candidate in [lib.parent / "include", *(Path(h) / "include" for h in homes)]:
        if (candidate / "cuda_fp16.h").is_file() and (candidate / "cuda_bf16.h").is_file():
            cccl = candidate / "cccl"
            return [f"-I{candidate}"] + ([f"-I{cccl}"] if cccl.is_dir() else [])
    return []


def bounded_log(log: str) -> str:
    """NVRTC's log, at most LOG_MAX characters: its head and tail around a note of what was
    left out. A few-KB source of macros that double at each level makes a log of 1 GiB (a
    warning per expansion), which would go whole to the session, its checkpoint and
    MLflow."""
    if len(log) <= LOG_MAX:
        return log
    head, tail = log[:LOG_MAX * 3 // 4], log[-(LOG_MAX // 4):]
    return f"{head}\n[... {len(log) - len(head) - len(tail)} characters of NVRTC's log left out ...]\n{tail}"


# A diagnostic's file: `kern.cu(2): error: ...`, `/dir/cuda_fp16.hpp(5): warning ...`, at the
# start of a line (the source lines NVRTC quotes under a diagnostic are indented).
_DIAGNOSTIC = re.compile(r"^(\S[^\n]*?)\(\d+\): (?:catastrophic error|internal error|error|warning|remark)\b",
                         re.MULTILINE)
_NVRTC_OWN = ("__nv_name_map",)  # NVRTC's own text (the entry's name expression)


def foreign_file(log: str, filename: str, include: list[str]) -> str:
    """A file NVRTC's log quotes that is neither the kernel's source, nor under an include
    directory, nor NVRTC's own ('' when there is none). Its messages quote that file's lines
    back to whoever reads the log, and a model reads it: however an include got past
    compile_policy.py's scan, the host's files do not come back through the log."""
    directories = [o[2:].rstrip("/") + "/" for o in include if o.startswith("-I") and len(o) > 2]
    for m in _DIAGNOSTIC.finditer(log):
        path = m.group(1).strip()
        if path != filename and path not in _NVRTC_OWN and not any(path.startswith(d) for d in directories):
            return path
    return ""


def compile_request(nvrtc_compile: Callable[[str, str, str, list[str], str], CompileResult],
                    request: dict[str, Any], include: list[str]) -> dict[str, Any]:
    refusal = check_entry(request["entry"])  # the caller's policy checked it; NVRTC pastes it into the source
    if refusal:
        return {"ok": False, "error": "ENTRY_REFUSED", "log": refusal, "compile_ms": 0.0, "lowered_name": "",
                "cubin": "", "half_ops": []}
    try:
        r = nvrtc_compile(request["source"], request["filename"], request["entry"],
                          list(request["options"]) + include, request["arch"])
    except RuntimeError as e:  # CudaError from an NVRTC call other than the compile itself
        return {"ok": False, "error": getattr(e, "name", "NVRTC_ERROR"), "log": str(e), "compile_ms": 0.0,
                "lowered_name": "", "cubin": "", "half_ops": []}
    # The PTX audit here, off the session's process (a large kernel's PTX takes tens of ms to
    # read): only the instruction names go back. Bytes decoded leniently: inline assembly may
    # put any byte in the PTX.
    log = bounded_log(r.log)
    if foreign_file(r.log, request["filename"], include):  # the whole log: a cut line could read as a file
        return {"ok": False, "error": "SOURCE_REFUSED", "compile_ms": r.compile_ms, "lowered_name": "", "cubin": "",
                "half_ops": [], "log": "NVRTC read a file other than the kernel's source and the allowed headers "
                "(its messages are withheld): include only the allowed headers, by <name>"}
    half_ops, writes, reach, narrow = audited(bytes(r.ptx).decode(errors="replace")) if r.ok else ((), (), (), ())
    if reach:  # other launches' arguments (the checks' keys among them), whatever the workload
        return {"ok": False, "error": "PARAMETER_ADDRESS", "compile_ms": r.compile_ms, "lowered_name": "", "cubin": "",
                "half_ops": [], "log": "a kernel may use the address of a parameter only as a TMA descriptor "
                "(cp.async.bulk.tensor, prefetch.tensormap): through it a kernel reaches other launches' arguments "
                f"({', '.join(reach[:4])}); read parameters by value, and index a parameter array only by constants"}
    if writes:  # state that outlives the launch, whatever the workload: refused for every caller
        return {"ok": False, "error": "KERNEL_KEEPS_STATE", "compile_ms": r.compile_ms, "lowered_name": "", "cubin": "",
                "half_ops": [], "log": "kernels may not keep state between launches: the PTX takes a writable address "
                f"of __constant__ memory ({', '.join(writes)}); read __constant__ data directly, never through a "
                "pointer to it, and compute every output on every launch"}
    # The machine code (agent/runtime/sass.py), read here too: its math, what it reads of the
    # launch's constant bank and where module data's addresses go (agent/runtime/sass_memory.py).
    # Instruction and symbol names go back, judged for candidates (agent/evaluate/compile_audit.py);
    # warpsmith's own kernels read words of the bank a candidate may not (the reserved shared
    # memory on sm_100 at a register index).
    sass_ops: Optional[list[str]] = []
    param_ops: Optional[list[str]] = []
    state_ops: Optional[list[str]] = []
    sass_error = ""
    if r.ok:
        try:
            listing = disassemble(bytes(r.cubin))
        except SassUnavailable as e:
            sass_ops, param_ops, state_ops, sass_error = None, None, None, str(e)
        else:
            memory = audit_memory(bytes(r.cubin), listing)
            sass_ops, param_ops, state_ops = list(math_in(listing)), list(memory.parameters), list(memory.state)
    return {"ok": bool(r.ok), "error": r.error, "log": log, "compile_ms": r.compile_ms,
            "lowered_name": r.lowered_name or "", "cubin": base64.b64encode(bytes(r.cubin)).decode(),
            "half_ops": None if half_ops is None else list(half_ops), "sass_ops": sass_ops, "sass_error": sass_error,
            "narrow_ops": None if narrow is None else list(narrow), "param_ops": param_ops,
            "state_ops": state_ops}


def main(argv: list[str]) -> int:
    from .parent_watch import exit_with_parent
    exit_with_parent(int(argv[1]))
    try:
        os.nice(NICENESS)
    except OSError:  # a platform or sandbox that refuses: compile at the parent's priority
        pass
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    from . import native
    include = install_headers(native.nvrtc(), argv[2])
    write_message(out, {"ready": True, "headers": bool(include)})
    while True:
        request = read_message(inp)
        if request is None:
            return 0
        write_message(out, compile_request(native.nvrtc_compile, request, include))


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""NVRTC compilation with a disk cache and a parsed ptxas resource report.

Every source, model-written, user-written or warpsmith's own, takes one path:
compile_policy.py checks its includes and options (a refusal is a result with error
``SOURCE_REFUSED`` or ``OPTION_REFUSED`` and NVRTC is never called), then NVRTC
compiles it in the compile process (compile_process.py: own environment, own empty
directory, a time limit). warpsmith's own kernels pass the same checks; they pay the
process's start (~0.5 s) once per process that compiles.

The cache stays here, in the calling process: the compile process returns bytes
and writes nothing. The key is a hash of the source, the options, the architecture
and the NVRTC version, so a changed toolkit never serves a stale CUBIN.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

from . import native, ptx_audit, sass
from .arch_target import target_arch
from .cache_dir import cache_root
from .compile_policy import check_entry, check_options, check_source
from .compile_process import TIMEOUT_S, compile_pool


@dataclass(frozen=True)
class Resources:
    """What ptxas reported for the entry (``--ptxas-options=-v``)."""

    registers: int = 0
    shared_bytes: int = 0  # static shared memory
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    constant_bytes: int = 0

    def text(self) -> str:
        return (f"{self.registers} registers, {self.shared_bytes} B shared, {self.stack_bytes} B stack, "
                f"{self.spill_stores} B spill stores, {self.spill_loads} B spill loads")


@dataclass(frozen=True)
class CompiledKernel:
    """A compile's outcome in the parent: the runner's ``CompileResult`` as the compile
    process sent it back (JSON, never pickle: that process ran a model's source), or as
    the CUBIN cache kept it, with the ptxas report parsed."""

    ok: bool
    arch: str
    entry: str
    symbol: str  # the entry's name in the CUBIN (lowered)
    log: str
    error: str  # NVRTC error name when not ok
    compile_ms: float
    cached: bool
    resources: Resources = field(default_factory=Resources)
    cubin: bytes = b""
    # The 16-bit accumulating instructions of its PTX, by name (agent/runtime/ptx_audit.py);
    # None: no PTX came back to audit. The PTX itself is not kept: inline assembly in it is
    # the source's text.
    half_ops: Optional[tuple[str, ...]] = ()
    # Its machine code's tensor-core and narrowing-conversion opcodes (agent/runtime/sass.py);
    # None: they could not be read (sass_error says why).
    sass_ops: Optional[tuple[str, ...]] = ()
    sass_error: str = ""
    # Its PTX's arithmetic and conversions in narrower types (ptx_audit.narrow_math); None:
    # no PTX came back.
    narrow_ops: Optional[tuple[str, ...]] = ()
    # What its machine code reads of the launch's constant bank beyond its parameters and the
    # launch's sizes, and does with module data's addresses that keeps state between launches
    # (agent/runtime/sass_memory.py), one line each; None: the SASS could not be read.
    param_ops: Optional[tuple[str, ...]] = ()
    state_ops: Optional[tuple[str, ...]] = ()


def parse_resources(log: str, symbol: str) -> Resources:
    """Pick the entry's block out of the ptxas log (it lists every function)."""
    blocks = re.split(r"ptxas info\s*: (?:Compiling entry function|Function properties for) ", log)
    text = "\n".join(b for b in blocks if b.startswith(f"'{symbol}'") or b.startswith(symbol)) or log
    def num(pattern: str) -> int:
        m = re.search(pattern, text)
        return int(m.group(1)) if m else 0
    return Resources(
        registers=num(r"Used (\d+) registers"),
        shared_bytes=num(r"(\d+) bytes smem"),
        stack_bytes=num(r"(\d+) bytes stack frame"),
        spill_stores=num(r"(\d+) bytes spill stores"),
        spill_loads=num(r"(\d+) bytes spill loads"),
        constant_bytes=num(r"(\d+) bytes cmem\[0\]"),
    )


CACHE_FORMAT = 4  # 4: meta.json holds the SASS memory audit (param_ops, state_ops), 3: sass_ops, 2: the PTX audit; older entries are not read


def _cache_key(source: str, entry: str, options: list[str], arch: str, version: tuple[int, int]) -> str:
    blob = json.dumps([source, entry, options, arch, list(version), CACHE_FORMAT, ptx_audit.VERSION, sass.VERSION]).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def is_cached(source: str, entry: str, arch: str, options: list[str]) -> bool:
    """Whether compile_kernel would find this configuration in the cache, without compiling
    (agent/evaluate/ahead.py: which of a step's kernels the GPU can take at once)."""
    try:
        key = _cache_key(source, entry, list(options), target_arch(arch, source), native.nvrtc_version())
    except Exception:  # NVRTC not loadable here: nothing is known to be compiled
        return False
    return (cache_root() / "cubin" / key / "meta.json").is_file()


def header_dir(version: tuple[int, int]) -> Path:
    """Where the compile process installs NVRTC's bundled headers (one directory per NVRTC version)."""
    return cache_root() / "nvrtc-headers" / f"{version[0]}.{version[1]}"


def refused(source: str, entry: str, arch: str, options: list[str], allow_fast_math: bool = False) -> Optional[CompiledKernel]:
    """The compile_failed result for a source or options the policy refuses; None when allowed."""
    for error, reason in (("ENTRY_REFUSED", check_entry(entry)),
                          ("OPTION_REFUSED", check_options(options, allow_fast_math)),
                          ("SOURCE_REFUSED", check_source(source))):
        if reason:
            return CompiledKernel(False, arch, entry, entry, reason, error, 0.0, False)
    return None


# (source, filename, entry, options, arch, timeout_s) -> the compile process's JSON reply
Nvrtc = Callable[[str, str, str, list[str], str, Optional[float]], dict[str, Any]]


def run_nvrtc(source: str, filename: str, entry: str, options: list[str], arch: str,
              timeout_s: Optional[float]) -> dict[str, Any]:
    """NVRTC in this machine's compile process (the policy was checked by the caller)."""
    return compile_pool(header_dir(native.nvrtc_version())).compile(source, filename, entry, options, arch, timeout_s)


def compile_kernel(source: str, entry: str, arch: str, options: Optional[list[str]] = None,
                   filename: str = "kernel.cu", use_cache: bool = True, allow_fast_math: bool = False,
                   timeout_s: Optional[float] = None, nvrtc: Nvrtc = run_nvrtc) -> CompiledKernel:
    """Compile to a CUBIN for `arch`; compile errors are results (ok=False), with the log.
    `allow_fast_math`: the workload's tolerance.allow_fast_math (precision-lowering math
    flags); `timeout_s`: the compile's limit (compile_process.TIMEOUT_S by default);
    `nvrtc`: where NVRTC runs (the Ray backend sends it to a CPU worker); the policy
    and the cache stay here either way. A source that uses arch-specific instructions
    (wgmma, setmaxnreg) compiles for the arch-specific target (sm_90 -> sm_90a;
    agent/runtime/arch_target.py); the result's `arch` says which."""
    options = list(options or [])
    # NVRTC quotes the file name in every message (not in the program's text): a name is
    # shown as one plain token, whatever a candidate's name held
    filename = re.sub(r"[^A-Za-z0-9_.@\[\]=,+-]", "_", filename)[:160] or "kernel.cu"
    arch = target_arch(arch, source)
    refusal = refused(source, entry, arch, options, allow_fast_math)
    if refusal:
        return refusal
    version = native.nvrtc_version()
    key = _cache_key(source, entry, options, arch, version)
    directory = cache_root() / "cubin" / key
    if not use_cache:
        return _nvrtc_result(nvrtc, source, filename, entry, options, arch, timeout_s, None)
    cached = _cached(directory, arch, entry)
    if cached is not None:
        return cached
    # One compile per key at a time in this process: the tuner compiles its next candidates
    # ahead, and the evaluator may need one of them before its compile is done. It then
    # waits for that compile instead of running NVRTC a second time on a core the other
    # compiles need, and takes its CUBIN (the wait as its compile time). Only a success is
    # shared: after a failure, or an error in the other caller's compile (a stop, a lost
    # remote worker), the one that waited compiles for itself, so its result (log, file
    # name, time limit) is its own request's.
    t0 = time.perf_counter()
    limit = TIMEOUT_S if timeout_s is None else timeout_s
    owned: Optional[Future[CompiledKernel]] = None
    try:
        while True:
            with _flights_lock:
                flight = _flights.get(key)
                if flight is None or _failed(flight):
                    owned = Future()
                    _flights[key] = owned
                    break
            try:
                joined: CompiledKernel = flight.result(timeout=max(0.0, limit - (time.perf_counter() - t0)))
            except FutureTimeout:
                return CompiledKernel(False, arch, entry, entry, f"NVRTC took longer than {limit:g} s (the same "
                                      "configuration, compiling for another caller)", "COMPILE_TIMEOUT", limit * 1e3,
                                      False)
            except BaseException as e:
                if flight.done() and flight.exception() is e:
                    continue  # the other caller's error, not ours: the next round compiles for us
                raise
            if joined.ok:
                return replace(joined, compile_ms=(time.perf_counter() - t0) * 1e3, cached=False)
        result = _cached(directory, arch, entry) \
            or _nvrtc_result(nvrtc, source, filename, entry, options, arch, timeout_s, directory)
        owned.set_result(result)
        return result
    except BaseException as e:
        if owned is not None and not owned.done():
            owned.set_exception(e)  # whoever waits on it compiles for itself
        raise
    finally:
        if owned is not None:
            with _flights_lock:
                if _flights.get(key) is owned:
                    del _flights[key]


def _failed(flight: "Future[CompiledKernel]") -> bool:
    """A finished compile whose result is not to be shared (an error, or NVRTC's refusal)."""
    return flight.done() and (flight.exception() is not None or not flight.result().ok)


_flights: dict[str, "Future[CompiledKernel]"] = {}  # cache key -> the compile under way
_flights_lock = threading.Lock()


def _cached(directory: Path, arch: str, entry: str) -> Optional[CompiledKernel]:
    if not (directory / "meta.json").is_file():
        return None
    meta = json.loads((directory / "meta.json").read_text())
    return CompiledKernel(True, arch, entry, meta["symbol"], meta["log"], "", 0.0, True,
                          Resources(**meta["resources"]), (directory / "kernel.cubin").read_bytes(),
                          None if meta["half_ops"] is None else tuple(meta["half_ops"]),
                          None if meta["sass_ops"] is None else tuple(meta["sass_ops"]), meta["sass_error"],
                          None if meta["narrow_ops"] is None else tuple(meta["narrow_ops"]),
                          *(None if meta[k] is None else tuple(meta[k]) for k in ("param_ops", "state_ops")))


def _nvrtc_result(nvrtc: Nvrtc, source: str, filename: str, entry: str, options: list[str], arch: str,
                  timeout_s: Optional[float], directory: Optional[Path]) -> CompiledKernel:
    """NVRTC's answer as a result, stored in the cache at `directory` when it compiled."""
    r = nvrtc(source, filename, entry, options, arch, timeout_s)
    symbol = r["lowered_name"] or entry
    resources = parse_resources(r["log"], symbol) if r["ok"] else Resources()
    log = r["log"] if r["ok"] else _named_entry_missing(r["log"], entry, filename)
    result = CompiledKernel(r["ok"], arch, entry, symbol, log, r["error"], r["compile_ms"], False, resources,
                            base64.b64decode(r["cubin"]), _listed(r, "half_ops") if r["ok"] else (),
                            _listed(r, "sass_ops") if r["ok"] else (), str(r.get("sass_error", "")),
                            _listed(r, "narrow_ops") if r["ok"] else (), _listed(r, "param_ops") if r["ok"] else (),
                            _listed(r, "state_ops") if r["ok"] else ())
    if r["ok"] and directory is not None:
        _store(directory, result)
    return result


def _named_entry_missing(log: str, entry: str, filename: str) -> str:
    """NVRTC reports an entry the source does not define in its own pasted-in text
    ("__nv_name_map(2): error: identifier ... is undefined"): said first in the source's terms."""
    if "__nv_name_map" not in log or f'identifier "{entry}" is undefined' not in log:
        return log
    return (f'{filename}: error: the entry "{entry}" is not defined: the source needs '
            f'extern "C" __global__ void {entry}(...)\n' + log)


def _listed(reply: dict[str, Any], key: str) -> Optional[tuple[str, ...]]:
    """A list of instruction names in the compile process's reply (an audit's findings); None
    where it has none (no PTX, no nvdisasm, an older worker: nothing was audited)."""
    ops = reply.get(key)
    return None if ops is None else tuple(str(op) for op in ops)


def _store(directory: Path, result: CompiledKernel) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "kernel.cubin").write_bytes(result.cubin)
        meta = {"symbol": result.symbol, "log": result.log, "resources": result.resources.__dict__,
                "half_ops": None if result.half_ops is None else list(result.half_ops),
                "sass_ops": None if result.sass_ops is None else list(result.sass_ops), "sass_error": result.sass_error,
                "narrow_ops": None if result.narrow_ops is None else list(result.narrow_ops),
                "param_ops": None if result.param_ops is None else list(result.param_ops),
                "state_ops": None if result.state_ops is None else list(result.state_ops)}
        tmp = directory / f"meta.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, directory / "meta.json")  # meta last: its presence means complete
    except OSError:
        pass  # a read-only cache only costs a recompile

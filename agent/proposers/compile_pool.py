"""NVRTC's verdicts on a tuner's configurations, compiled before they are proposed: a pool
of threads compiling ahead (the points the next proposals look at first), a few more for the
points being proposed now, and each kernel's record of verdicts so far. The CUBINs land in
the compile cache (agent/runtime/compiler.py), where the evaluator's own compile finds them.

The compile processes run niced (agent/runtime/compile_child.py), so the worker driving the
GPU and the graph's threads come first; one NVRTC process per host core but COMPILE_NOW
goes to compiling ahead."""

from __future__ import annotations

import atexit
import functools
import hashlib
import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional, Union

from ..evaluate.records import CandidateSpec

DefinesKey = tuple[tuple[str, int], ...]  # a configuration's defines, sorted: hashable
CompileKey = tuple[str, str, DefinesKey]  # (source tag, arch, defines)
COMPILE_NOW = 2  # threads compiling the points proposed, beside the compile-ahead ones
CLEAN_RECORD = 8  # compiles of a kernel, none refused, before its points are proposed ahead of NVRTC's verdict


@functools.lru_cache(maxsize=1024)  # asked for the same few sources many times per proposal
def source_tag(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:8]


def defines_key(defines: dict[str, int]) -> DefinesKey:
    return tuple(sorted(defines.items()))


def compile_key(base: CandidateSpec, defines: dict[str, int], arch: str) -> CompileKey:
    """A configuration's key in CompilePool.compiles: (source tag, arch, every define)."""
    return source_tag(base.source), arch, defines_key({**base.defines, **defines})


def compile_config(base: CandidateSpec, defines: dict[str, int], arch: str, allow_fast_math: bool) -> bool:
    """NVRTC on a configuration (the CUBIN lands in the cache an attempt's compile reads)."""
    from ..runtime.compiler import compile_kernel
    cand = base.model_copy(update={"defines": {**base.defines, **defines}}).to_candidate()
    return compile_kernel(cand.source, cand.entry, arch, cand.compile_options(), allow_fast_math=allow_fast_math).ok


class CompilePool:
    def __init__(self, ahead: int):
        self.ahead = ahead  # threads compiling ahead (0: none, every verdict waited for)
        self.executor: Optional[ThreadPoolExecutor] = None
        self.now: Optional[ThreadPoolExecutor] = None  # the compiles of points proposed (take_now)
        self.record: dict[str, Counter[bool]] = {}  # source tag -> NVRTC's verdicts so far (clean)
        self._record_lock = threading.Lock()
        # (source tag, arch, defines) -> NVRTC accepted it, or the compile under way
        self.compiles: dict[CompileKey, Union[bool, Future[bool]]] = {}

    def submit(self, base: CandidateSpec, defines: dict[str, int], arch: str, allow_fast_math: bool) -> None:
        """Start compiling one configuration in the pool (a no-op when it is known or under way)."""
        key = compile_key(base, defines, arch)
        if key in self.compiles:
            return
        if self.executor is None:
            self.executor = ThreadPoolExecutor(max_workers=max(1, self.ahead), thread_name_prefix="compile-ahead")
            atexit.register(self.executor.shutdown, wait=False, cancel_futures=True)
        self.compiles[key] = self.executor.submit(self.verdict, base, defines, arch, allow_fast_math)

    def compiles_ok(self, base: CandidateSpec, defines: dict[str, int], arch: str, allow_fast_math: bool) -> bool:
        key = compile_key(base, defines, arch)
        if key not in self.compiles:
            self.compiles[key] = self.verdict(base, defines, arch, allow_fast_math)
        known = self.compiles[key]
        if isinstance(known, Future):
            # Still queued behind speculative compiles: compile it here, now, rather than wait
            # for the pool to reach it (the queue only grows while the GPU works); under way
            # or done: wait for it.
            if known.cancel():
                del self.compiles[key]  # (gone before NVRTC runs: an error there leaves no cancelled future)
                known = self.verdict(base, defines, arch, allow_fast_math)
            else:
                known = known.result()
            self.compiles[key] = known
        return known

    def may_compile(self, base: CandidateSpec, defines: dict[str, int], arch: str, allow_fast_math: bool) -> bool:
        """Whether to take a point as far as NVRTC goes. With the compile pool and a kernel
        with a clean record: not known to fail, its compile started now if it was not (the
        evaluator joins it; the proposal does not wait for it). Otherwise: NVRTC accepted it,
        waiting for the verdict."""
        if not self.ahead or not self.clean(base):
            return self.compiles_ok(base, defines, arch, allow_fast_math)
        return self.take_now(base, defines, arch, allow_fast_math)

    def verdict(self, base: CandidateSpec, defines: dict[str, int], arch: str, allow_fast_math: bool) -> bool:
        """NVRTC's yes or no on a configuration, counted for its kernel (clean)."""
        ok = compile_config(base, defines, arch, allow_fast_math)
        with self._record_lock:
            self.record.setdefault(source_tag(base.source), Counter())[ok] += 1
        return ok

    def clean(self, base: CandidateSpec) -> bool:
        """Whether this kernel's points may be proposed before NVRTC's verdict on them: at
        least CLEAN_RECORD compiles of it, none refused. Where NVRTC has refused one (a
        `static_assert` on the knobs, which knob_space.py does not read: bf16_gemm's
        wgmma_ws2 refuses 1280 of its 2304 launchable points), a proposal waits for the
        verdict, and a refused point never costs an attempt. With a clean record, the
        kernel's first refusal, if it has any, may: that attempt is compile_failed."""
        with self._record_lock:
            record = self.record.get(source_tag(base.source), Counter())
            return record[False] == 0 and record[True] >= CLEAN_RECORD

    def take_now(self, base: CandidateSpec, defines: dict[str, int], arch: str, allow_fast_math: bool) -> bool:
        """A point being proposed: not known to fail NVRTC, and its compile started now if it
        was not under way. One still queued behind the guesses leaves that queue for the
        compile-now threads (COMPILE_NOW of them, beside the `ahead` ones: the compile pool
        has a process per core), since the GPU will want it first."""
        key = compile_key(base, defines, arch)
        known = self.compiles.get(key)
        if known is None or (isinstance(known, Future) and known.cancel()):
            if self.now is None:
                self.now = ThreadPoolExecutor(max_workers=COMPILE_NOW, thread_name_prefix="compile-now")
                atexit.register(self.now.shutdown, wait=False, cancel_futures=True)
            self.compiles[key] = self.now.submit(self.verdict, base, defines, arch, allow_fast_math)
            return True
        if isinstance(known, Future):  # under way, or done: refused only if NVRTC said no
            # (a compile that broke is not a refusal: the evaluator's own compile reports it)
            return not known.done() or known.exception() is not None or known.result()
        return known

    def compiled_already(self, base: CandidateSpec, defines: dict[str, int], arch: str, allow_fast_math: bool) -> bool:
        """Compiled (ahead, or before) and accepted by NVRTC, known without waiting."""
        key = compile_key(base, defines, arch)
        known = self.compiles.get(key)
        if isinstance(known, Future):
            if not known.done() or known.cancelled() or known.exception() is not None:
                return False  # (a compile that broke: unknown, the evaluator's own compile reports it)
            known = self.compiles[key] = known.result()
        return bool(known)

    def known(self, key: CompileKey) -> bool:
        """Whether NVRTC's verdict on this key is in (a yes or a no, not a compile under way)."""
        return isinstance(self.compiles.get(key), bool)

    def drop_guesses(self, tag: str, keep: set[CompileKey], proposed: set[DefinesKey]) -> None:
        """Cancel this kernel's queued guesses (not started) that are not in `keep` and whose
        defines are not among the points `proposed` and not yet evaluated (the evaluator joins
        those compiles): the pool works on what the next proposals look at first."""
        for key, known in list(self.compiles.items()):
            if key[0] == tag and isinstance(known, Future) and key not in keep and key[2] not in proposed \
                    and known.cancel():
                del self.compiles[key]

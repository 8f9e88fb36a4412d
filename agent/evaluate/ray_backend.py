"""Evaluation over Ray (`--backend ray`): one actor per GPU, each holding a local
Evaluator and so its own GPU worker process, on this machine or a cluster
(`--ray-address`). NVRTC runs as Ray tasks on CPU workers; the compile policy, the
CUBIN cache and the audits stay in this process (agent/runtime/compiler.py), and a
kernel is compiled here before an actor is called with it: an attempt's job carries
the compiled kernel to its actor, and evaluate()'s actor finds the CUBIN in the cache on
this machine.

A session on Ray behaves as a local one. The session's own calls (a sequential
session's attempts, the re-timings of a challenge, fresh-seed validations, baselines)
all go to one actor, the preferred one, waiting for it when it is busy, so what they
compare was timed on one GPU. Attempts run ahead (agent/evaluate/ahead.py: jobs marked
`any_gpu`) run whole, one call each, on any free actor, several at once, one per GPU
(`lanes`); they take the preferred actor last, and never while a call of the session
waits for it. evaluate_many() spreads a batch over every free actor the same way. An
attempt's result names the GPU it ran on. An actor that dies costs the call in flight
(``crashed``); Ray restarts it with a fresh worker, and the session's calls move to the
next GPU. Which actor takes which call: agent/evaluate/actor_dispatch.py.

Ray is an optional extra: ``pip install 'warpsmith[ray]'``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from ..runtime.compiler import CompiledKernel, run_nvrtc
from ..runtime.device_facts import DeviceFacts
from ..spec import precision_policy
from ..spec.candidate import Candidate
from ..spec.speed_of_light import Ceilings
from ..spec.workload_model import Workload
from ..worker.process import GpuUnavailable
from .actor_dispatch import ActorDispatch
from .attempt import DEFAULT_SEED, AttemptJob, AttemptResult, EventSink, ignore
from .backend import ParallelBackend
from .compile_audit import compile_candidate
from .options import EvaluationOptions
from .ray_actor import EvaluatorFactory, GpuActor, local_evaluator
from .ray_cluster import anchored, init_ray, priority_warning, ray_module
from .results import EvaluationResult, Status
from .worker_channel import EvaluationAborted

REVIVE_S = 300.0  # how long a dead GPU actor may take to answer again (its restart starts a GPU worker)


def _nvrtc_task(source: str, filename: str, entry: str, options: list[str], arch: str,
                timeout_s: Optional[float]) -> dict[str, Any]:
    """On a CPU worker: NVRTC in that machine's compile process, the same sandbox as here."""
    return run_nvrtc(source, filename, entry, options, arch, timeout_s)


class RayBackend(ParallelBackend):
    def __init__(self, workload: Workload, options: EvaluationOptions = EvaluationOptions(),
                 log_dir: Optional[Path] = None, factory: EvaluatorFactory = local_evaluator):
        workload.check_evaluable()
        ray = ray_module()
        self._ray, self.workload = ray, workload
        self.timing = options.timing
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            init_ray(ray, options.ray_address)
        workload = anchored(workload)
        have = int(ray.cluster_resources().get("GPU", 0))
        count = options.ray_gpus or have
        if count < 1 or count > have:
            self._shutdown()
            raise GpuUnavailable(f"the Ray cluster has {have} GPU(s), {count or 'at least 1'} asked for")
        # num_cpus=0: Ray's scheduling count only (nothing is pinned); an actor holding a CPU would leave
        # none for the compile tasks on a machine with as many CPUs as GPUs
        actor = ray.remote(GpuActor).options(num_gpus=1, num_cpus=0, max_restarts=-1, max_task_retries=0,
                                             max_concurrency=2)
        self._actors = [actor.remote(i, factory, workload, options, log_dir.absolute() / f"worker-{i}.log" if log_dir else None)
                        for i in range(count)]
        self._labels = [f"actor {i}" for i in range(count)]
        self._nvrtc = ray.remote(_nvrtc_task).options(num_cpus=1)
        self.dispatch = ActorDispatch(count)
        self._facts: Optional[DeviceFacts] = None
        self._ceilings: Optional[tuple[Optional[Ceilings]]] = None  # (None,): asked, there are none
        self._kinds: Optional[list[str]] = None

    # -- the GPU's facts, from the first actor, once (it may be restarting later) ---------------
    @property
    def facts(self) -> DeviceFacts:
        if self._facts is None:
            facts: DeviceFacts = self._get(self._actors[0].facts.remote())
            self._facts = facts
            try:
                warning = priority_warning([self._get(a.niceness.remote()) for a in self._actors], os.nice(0))
            except Exception:  # noqa: BLE001 - an actor that cannot answer: its calls will say why, not this check
                warning = None
            if warning:
                print(warning, file=sys.stderr)
        return self._facts

    @property
    def ceilings(self) -> Optional[Ceilings]:
        if self._ceilings is None:
            ceilings: Optional[Ceilings] = self._get(self._actors[0].ceilings.remote())
            self._ceilings = (ceilings,)
        return self._ceilings[0]

    def baseline_kinds(self) -> list[str]:
        if self._kinds is None:
            kinds: list[str] = self._get(self._actors[0].baseline_kinds.remote())
            self._kinds = kinds
        return list(self._kinds)

    # -- evaluation ---------------------------------------------------------------------------
    def compile(self, candidate: Candidate) -> CompiledKernel:
        """NVRTC as a Ray task (one CPU); the policy, the cache and the CUBIN audit here."""
        return compile_candidate(candidate, self.facts.arch, self.workload.tolerance.allow_fast_math,
                                 nvrtc=self._remote_nvrtc, wide_accumulation=self.workload.wide_accumulation,
                                 narrow_allowed=precision_policy.allowed_types(self.workload))

    def _remote_nvrtc(self, source: str, filename: str, entry: str, options: list[str], arch: str,
                      timeout_s: Optional[float]) -> dict[str, Any]:
        reply: dict[str, Any] = self._get(self._nvrtc.remote(source, filename, entry, options, arch, timeout_s))
        return reply

    @property
    def lanes(self) -> int:
        return len(self._actors)

    def run_attempt(self, job: AttemptJob, on_event: EventSink = ignore) -> AttemptResult:
        """The whole attempt in one call on one actor (the local evaluator's run_attempt
        runs it there), the kernel compiled here first and shipped with the job: the
        actor compiles nothing and audits nothing again. On the session's GPU, or on any
        free one for a job marked `any_gpu` (a scheduler's lane). Safe from any thread:
        the replies come back with the result and go to this call's sink."""
        compiled, since = self._compile_first(job.candidate, job.compiled)
        on_event(compiled)
        if not compiled.ok:
            return AttemptResult(self._compile_failed(job.candidate.name, job.seed, compiled))
        arguments = (dataclasses.replace(job, compiled=compiled),)
        _, result, replies, label = self._call(job.candidate.name, "run_attempt", arguments, job.any_gpu, since)
        for event in replies:
            on_event(event)
        attempt = result if isinstance(result, AttemptResult) else AttemptResult(result)  # a dead actor: crashed
        for r in (attempt.validated, attempt.timed):
            if r is not None and label:
                r.gpu = label
        return attempt

    def evaluate(self, candidate: Candidate, seed: int = DEFAULT_SEED, revalidate: bool = True,
                 time_cases: bool = True, validate: bool = True, on_event: EventSink = ignore) -> EvaluationResult:
        return self._evaluate(candidate, seed, on_event, (revalidate, time_cases, validate), anywhere=False)

    def _evaluate(self, candidate: Candidate, seed: int, on_event: EventSink,
                  flags: tuple[bool, bool, bool] = (True, True, True), anywhere: bool = False) -> EvaluationResult:
        """evaluate() on an actor (`anywhere`: any free one), the kernel compiled here first
        (flags: revalidate, time_cases, validate)."""
        compiled, since = self._compile_first(candidate)
        on_event(compiled)
        if not compiled.ok:
            return self._compile_failed(candidate.name, seed, compiled)
        result: EvaluationResult = self._single(candidate.name, "evaluate", (candidate, seed, *flags), on_event,
                                                anywhere, since)
        return result

    def _compile_first(self, candidate: Candidate,
                       compiled: Optional[CompiledKernel] = None) -> tuple[CompiledKernel, int]:
        """The CUBIN compiled here before an actor is called (on a CPU worker, through this
        process's cache and single flight; `compiled`, a job's own, if it comes compiled):
        an attempt's actor gets it with the job, evaluate()'s finds it in the cache. Without
        this, an actor sent a candidate whose compile ahead was still in flight ran NVRTC
        again itself, in its own process, while its GPU waited. A failure is the result,
        as the local evaluator says it, without a GPU's time (failures are not cached).

        The call counts as waiting for an actor from here (ActorDispatch.begin), and the abort
        count taken now goes on to acquire: a "stop now" during the compile stops the call
        before any actor runs it, whatever the other actors are doing."""
        since = self.dispatch.begin()
        try:
            return (compiled if compiled is not None else self.compile(candidate)), since
        finally:
            self.dispatch.end_work()

    @staticmethod
    def _compile_failed(name: str, seed: int, compiled: CompiledKernel) -> EvaluationResult:
        return EvaluationResult(name, Status.COMPILE_FAILED, compiled, detail=compiled.log, seed=seed,
                                wall_ms={"compile": compiled.compile_ms})

    def evaluate_many(self, candidates: list[Candidate], seed: int = DEFAULT_SEED) -> list[EvaluationResult]:
        """Every candidate compiled on a CPU worker, then evaluated on the first free GPU."""
        with ThreadPoolExecutor(len(self._actors)) as pool:
            return list(pool.map(lambda c: self._evaluate(c, seed, ignore, anywhere=True), candidates))

    def baseline(self, seed: int = DEFAULT_SEED, kind: Optional[str] = None,
                 on_event: EventSink = ignore) -> Optional[EvaluationResult]:
        result: Optional[EvaluationResult] = self._single(kind or "baseline", "baseline", (seed, kind), on_event)
        return result

    # -- calls on the actors -------------------------------------------------------------------
    def _single(self, name: str, method: str, arguments: tuple[Any, ...], on_event: EventSink,
                anywhere: bool = False, since: Optional[int] = None) -> Any:
        """One result, its replies passed on to `on_event`, named with its GPU."""
        _, result, replies, label = self._call(name, method, arguments, anywhere, since)
        for event in replies:
            on_event(event)
        if result is not None and label:
            result.gpu = label
        return result  # None only from baseline(), which may have none

    def _call(self, name: str, method: str, arguments: tuple[Any, ...], anywhere: bool = False,
              since: Optional[int] = None) -> tuple[int, Any, list[object], str]:
        """Run `method` on an actor (ActorDispatch.acquire says which): its result, the replies
        and the GPU's label. An actor that dies makes the result ``crashed``; the session's
        calls move to the next GPU while Ray restarts it."""
        index = self.dispatch.acquire(anywhere, since)
        died = False
        try:
            try:
                t_call = time.perf_counter()
                result, replies, label = self._get(self._actors[index].call.remote(method, arguments))
                first = result.validated if isinstance(result, AttemptResult) else result
                if first is not None:  # the driver's wait against the evaluator's own "total": Ray's share
                    first.wall_ms["call"] = (time.perf_counter() - t_call) * 1e3
            except self._ray.exceptions.RayActorError as e:
                died = True
                self.dispatch.died(index)
                seed = arguments[0].seed if method == "run_attempt" else arguments[1] if method != "baseline" \
                    else arguments[0]
                crashed = EvaluationResult(
                    name, Status.CRASHED, None, seed=seed, gpu=self._labels[index],
                    detail=f"{self._labels[index]} died ({type(e).__name__}); Ray restarts it, the session goes on")
                return index, crashed, [], ""
            self._labels[index] = label
            return index, result, replies, label
        finally:
            if died:  # out of the pool until its restart answers (_revive releases it)
                self.dispatch.hold_reviving(index)
                threading.Thread(target=self._revive, args=(index,), name=f"warpsmith-revive-{index}",
                                 daemon=True).start()
            else:
                self.dispatch.release(index)

    def _revive(self, index: int) -> None:
        """Keep a dead actor busy until Ray's restart of it answers a call, then release it.
        The driver learns of a death from the broken call before Ray's record of the actor
        says it is restarting: a call sent in that window reaches the dead process and
        crashes too, an attempt that never ran (seen on the CPU cluster: two attempts
        crashed for one death). Meanwhile the other GPUs take the calls. After REVIVE_S
        without an answer, or at once when its restart failed (its constructor raised), the
        actor goes back to the pool anyway: its calls then crash and say so, rather than the
        session waiting on it."""
        deadline = time.monotonic() + REVIVE_S
        try:
            while self._actors and time.monotonic() < deadline:
                try:
                    self._labels[index] = self._ray.get(self._actors[index].label.remote(),
                                                        timeout=max(0.1, deadline - time.monotonic()))
                    return
                except self._ray.exceptions.RayActorError as e:
                    if e.actor_init_failed:  # its restart failed: Ray will not bring it back
                        return
                    time.sleep(0.2)  # the death is still reaching Ray's record of the actor
                except Exception:  # GetTimeoutError, a closed backend
                    time.sleep(0.2)
        finally:
            self.dispatch.revived(index)

    def _get(self, ref: Any) -> Any:
        """ray.get, with the exception raised in the actor or task raised here as itself."""
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, EvaluationAborted):
                raise EvaluationAborted("stopped by the user") from None
            if isinstance(e.cause, Exception):
                raise e.cause from None
            raise

    # -- stopping -----------------------------------------------------------------------------
    def abort(self) -> None:
        """Kill the GPU work in flight on every actor, from any thread ("stop now"); the
        calls waiting for an actor raise EvaluationAborted without starting, and so does
        the next call when none was in flight or waiting."""
        for i in self.dispatch.abort():
            self._actors[i].abort.remote()

    def close(self) -> None:
        """Each actor's worker closed, the actors ended; a cluster this backend started, shut down."""
        ray = self._ray
        try:
            ray.wait([a.close.remote() for a in self._actors], num_returns=len(self._actors), timeout=30)
        finally:
            for a in self._actors:
                ray.kill(a, no_restart=True)
            self._actors = []
            self._shutdown()

    def _shutdown(self) -> None:
        if self._owns_ray:
            self._ray.shutdown()
            self._owns_ray = False

    def __enter__(self) -> "RayBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


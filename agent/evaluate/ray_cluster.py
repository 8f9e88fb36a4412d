"""Ray itself for the `ray` backend: importing it (an optional extra), starting or joining
a cluster so that its workers import this very package and get none of this process's
secrets, the priority its GPU actors run at, and a workload whose paths hold on any node.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

from ..runtime.compile_child import NICENESS as COMPILE_NICENESS
from ..runtime.secrets import SECRET
from ..spec.workload_model import Workload

RAY_MISSING = "the ray backend needs Ray: pip install 'warpsmith[ray]'"
NICENESS_VARIABLE = "RAY_worker_niceness"  # Ray's config for its workers' priority (its default: 15)


def ray_module() -> Any:
    """Ray, or ImportError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ImportError(RAY_MISSING) from None
    return ray


def init_ray(ray: Any, address: str = "", **kwargs: Any) -> None:
    """ray.init, from the folder that holds the `warpsmith` package this process runs.

    Ray puts the driver's working directory first on every worker's sys.path: from
    PACKAGE_ROOT the workers import what this process imported, wherever it was
    started. The directory is changed back at once; the
    workload's paths are made absolute for the actors (anchored)."""
    from ..runtime.parent_watch import PACKAGE_ROOT
    here = os.getcwd()
    # A cluster started here runs its workers at this process's priority (NICENESS_VARIABLE)
    # unless the user chose one; the raylet reads it as it starts, so it is set only meanwhile.
    chosen = os.environ.get(NICENESS_VARIABLE)
    starts = address in ("", "local")  # ("local": Ray starts a new cluster too)
    if starts and chosen is None:
        os.environ[NICENESS_VARIABLE] = "0"
    # Ray starts its processes with a copy of os.environ, and the actors' evaluators start
    # the reference children (written code): a cluster started here gets no secrets (Ray's
    # own, RAY_*, stay: its token authentication reads them).
    secrets = {k: os.environ.pop(k) for k in list(os.environ) if starts and SECRET.search(k) and not k.startswith("RAY_")}
    os.chdir(PACKAGE_ROOT)
    try:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False, **kwargs)
    finally:
        os.chdir(here)
        os.environ.update(secrets)
        if chosen is None:
            os.environ.pop(NICENESS_VARIABLE, None)


def priority_warning(actor_niceness: list[int], mine: int) -> Optional[str]:
    """A line for stderr when a GPU actor runs at no higher a priority than the compile
    processes (this process's niceness + 10, agent/runtime/compile_child.py): Ray starts
    its workers at niceness 15 (its `worker_niceness`), and the compiles then take the CPU
    from the GPU workers whenever they are all busy, on a node they share (the check cannot
    tell which actors share this one). On one H100 with the actors at 15, the worker's
    timing of a case took 130 ms under Ray against 105 ms in a local session; at 0 the two
    agree (docs/performance.md, "The Ray backend against local")."""
    low = max(actor_niceness, default=mine)
    compiles = min(19, mine + COMPILE_NICENESS)
    if low < compiles:  # below this process's, but still above the compiles': they give way
        return None
    return (f"warpsmith: warning: the Ray cluster runs the GPU actors at niceness {low}, the compile processes run at "
            f"{compiles}: on a machine they share, the compiles take the CPU from the GPU workers; start the cluster "
            f"with {NICENESS_VARIABLE}=0 ray start ... (a cluster warpsmith starts itself does)")


def anchored(workload: Workload) -> Workload:
    """The workload with absolute paths: an actor runs in another working directory (and
    on a cluster, on another machine with the same layout)."""
    kernels = {name: dataclasses.replace(k, path=k.path.absolute()) for name, k in workload.kernels.items()}
    torch = workload.baseline.torch.absolute() if workload.baseline.torch else None
    return dataclasses.replace(workload, directory=workload.directory.absolute(), kernels=kernels,
                               reference_path=workload.reference_path.absolute(),
                               baseline=dataclasses.replace(workload.baseline, torch=torch))

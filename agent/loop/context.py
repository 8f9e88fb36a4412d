"""The run's context every node of the graph reaches: the workload, the GPU, the proposer,
the session's control and tracker, and the options of this run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..evaluate.backend import EvaluationBackend
from ..profiling.nsight import Nsight
from ..proposers.base import Proposer
from ..spec.workload_model import Workload
from ..tracking.session_tracker import SessionTracker
from .proposals_ahead import ProposalsAhead
from .session_control import SessionControl


@dataclass
class LoopContext:
    workload: Workload
    evaluator: EvaluationBackend
    proposer: Proposer
    control: SessionControl
    tracker: SessionTracker
    profiler: Optional[Nsight] = None  # --use-nsight
    archive: Optional[Path] = None  # where each attempt's kernel is kept (the session's attempts/ folder)
    run_started: float = field(default_factory=time.time)  # this stream() call's start: paused time never counts
    early_reject: bool = True  # --no-early-reject: every candidate timed in full
    batch: int = 1  # --batch: candidates proposed per step, each its own attempt
    # The tuner's next step, proposed in the background while this one runs (evaluated ahead only).
    proposals_ahead: ProposalsAhead = field(default_factory=ProposalsAhead)

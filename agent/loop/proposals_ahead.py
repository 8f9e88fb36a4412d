"""The next step's proposals, made in a background thread while the graph goes on.

With evaluation ahead (agent/evaluate/ahead.py) the GPU runs a step's candidates while
the graph reflects on them; proposing in the graph's own thread, an sgemm session spends
most of its time in the tuner's propose (about 1.3 s per step of four: picking
neighbours and waiting for NVRTC), and the GPU waits for it (on the H200, propose 39 s of
a 74 s session, the GPU's own share of an attempt about 0.2 s). So the propose node starts the next step here
once less than a step is left to run, and takes its proposals at a later propose node,
when they are ready, or waits for them when the queue has run dry.

One proposal at a time: the proposer is never called from two threads at once (the
graph asks it nothing while one is under way: an empty queue waits for this one). What
it was shown is the history at the start, the attempts proposed and not finished
counted as tried. Proposals not taken when a run ends (pause, stop, the budget's end)
are dropped: they were never in the checkpoint, and nothing of them was evaluated.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional

from ..proposers.base import Proposal, ProposalError


class ProposalsAhead:
    def __init__(self) -> None:
        self._executor: Optional[ThreadPoolExecutor] = None
        self._future: Optional[Future[list[Proposal]]] = None

    @property
    def under_way(self) -> bool:
        return self._future is not None

    def start(self, propose: Callable[[], list[Proposal]]) -> None:
        """Make the next step's proposals in the background (nothing if one is under way)."""
        if self._future is not None:
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="propose-ahead")
        self._future = self._executor.submit(propose)

    def ready(self) -> Optional[list[Proposal]]:
        """The proposals, if they are done (then taken); None while under way or none started."""
        if self._future is None or not self._future.done():
            return None
        return self.wait()

    def wait(self) -> list[Proposal]:
        """The proposals (taken), waiting for them; [] if none was started or the proposer
        found nothing (an ordinary step then asks again, and says why)."""
        future, self._future = self._future, None
        if future is None:
            return []
        try:
            return future.result()
        except ProposalError:  # SearchExhausted included
            return []

    def close(self) -> None:
        """Drop what is under way (its result unread) and end the thread once it is done."""
        self._future = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

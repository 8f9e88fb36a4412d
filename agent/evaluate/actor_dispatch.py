"""Which GPU actor of the Ray backend takes which call. The session's own calls go to one
actor, the preferred one, waiting for it when it is busy, so what they compare was timed
on one GPU; attempts evaluated ahead take any free actor, the least used first, the
preferred one last and never one a call of the session waits for. An abort ("stop now")
reaches every call waiting for an actor, and the next call when none was waiting. All of
it is guarded by one condition, `free`.
"""

from __future__ import annotations

import threading
from typing import Optional

from .worker_channel import EvaluationAborted


class ActorDispatch:
    def __init__(self, count: int):
        self.count = count
        self.free = threading.Condition()
        self.busy: set[int] = set()
        self.preferred = 0  # the session's own calls go to this actor (the next one once it died)
        self.waiting = 0  # the session's calls waiting for their actor: attempts leave it to them
        self.served = [0] * count  # calls each actor was given
        self.aborts = 0  # abort() calls so far: a call waiting for an actor when one came never starts
        self.aborted = False  # an abort() that found no call: the next one raises
        self.acquiring = 0  # calls waiting in acquire (or compiling before it: begin)
        self.reviving: set[int] = set()  # dead actors held busy until they answer: no call of ours in flight there

    def stop_between_calls(self) -> None:
        """Under `free`: a "stop now" that found no call in flight or waiting stops the next one."""
        if self.aborted:
            self.aborted = False
            raise EvaluationAborted("stopped by the user")

    def begin(self) -> int:
        """A call begins with work of its own (its compile): it counts as waiting for an actor
        from now, and the abort count taken now (returned) goes on to acquire, so a "stop now"
        meanwhile stops it before any actor runs it. end_work() when that work is done."""
        with self.free:
            self.stop_between_calls()
            self.acquiring += 1
            return self.aborts

    def end_work(self) -> None:
        with self.free:
            self.acquiring -= 1

    def acquire(self, anywhere: bool, since: Optional[int] = None) -> int:
        """A free actor: `anywhere` (an attempt ahead) any but the preferred one first, the
        least used of them first, and not the preferred one while a call of the session
        waits for it; else (the session's own call) the preferred one, waited for.
        `since`: the abort count when the call began (begin), else now."""
        with self.free:
            self.stop_between_calls()
            aborts = self.aborts if since is None else since
            self.acquiring += 1
            if not anywhere:
                self.waiting += 1
            try:
                while True:
                    if self.aborts != aborts:  # "stop now" while this call waited: it never starts
                        raise EvaluationAborted("stopped by the user")
                    free = [i for i in range(self.count) if i not in self.busy]
                    if anywhere:  # the least used first: a thin queue still spreads over the GPUs
                        free = sorted(free, key=lambda i: (i == self.preferred, self.served[i]))
                        free = [i for i in free if not (self.waiting and i == self.preferred)]
                    else:
                        free = [i for i in free if i == self.preferred]
                    if free:
                        self.busy.add(free[0])
                        self.served[free[0]] += 1
                        return free[0]
                    self.free.wait()
            finally:
                self.acquiring -= 1
                if not anywhere:
                    self.waiting -= 1
                if not anywhere:
                    self.free.notify_all()  # the actor it waited for may be an attempt's again

    def release(self, index: int) -> None:
        with self.free:
            self.busy.discard(index)
            self.free.notify_all()

    def died(self, index: int) -> None:
        """Actor `index` died in a call: the session's calls move to the next one."""
        with self.free:
            if index == self.preferred:
                self.preferred = (index + 1) % self.count

    def hold_reviving(self, index: int) -> None:
        """Out of the pool until its restart answers (revived releases it)."""
        with self.free:
            self.reviving.add(index)

    def revived(self, index: int) -> None:
        with self.free:
            self.reviving.discard(index)
        self.release(index)

    def abort(self) -> list[int]:
        """A "stop now": every call waiting for an actor raises; returns the actors whose call
        in flight is to be killed (none: the next call raises instead)."""
        with self.free:
            self.aborts += 1
            busy = sorted(self.busy - self.reviving)  # a reviving actor runs nothing to abort
            self.aborted = not busy and not self.acquiring
            self.free.notify_all()
        return busy

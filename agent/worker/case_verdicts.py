"""What a case's checks found, as the CaseCheck the worker reports: a library call's, and
the first trespass of an integrity sweep."""

from __future__ import annotations

from typing import Callable, Optional

from .case_buffers import CaseBuffers, Integrity
from .protocol import CaseCheck
from .status import Status


def library_check(run: Callable[[], None], check: Callable[[], CaseCheck]) -> CaseCheck:
    """One library call into the outputs, then its check. A library that cannot serve the
    case says so with NotImplementedError (a PyTorch without the backend a baseline pins):
    the case is not applicable to it, and not timed."""
    try:
        run()
    except NotImplementedError as e:
        return CaseCheck(Status.NOT_APPLICABLE, detail=f"the library cannot serve this case: {e}")
    return check()


def integrity_verdict(bufs: CaseBuffers, found: Integrity) -> Optional[CaseCheck]:
    """The first kind of trespass found, in the order a kernel's mistake makes them likely: a
    guard band (the last partial tile), a moat (a stray pointer: re-armed once seen), a
    reference, an input (both restored from the host before the next launch)."""
    if found.moat:
        bufs.rearm_moats()
    if found.overruns:
        return CaseCheck(Status.OUT_OF_BOUNDS, detail="writes outside the buffers of " + ", ".join(found.overruns)
                         + ": check bounds on the last partial tile")
    if found.moat:
        return CaseCheck(Status.OUT_OF_BOUNDS, detail=f"case '{bufs.job.case}': writes megabytes away from every "
                         "buffer (into the sentinel memory around them): a wrong pointer or index")
    if found.references:
        return CaseCheck(Status.REFERENCE_MODIFIED, detail=f"case '{bufs.job.case}': the reference of "
                         + ", ".join(found.references) + " was overwritten: a kernel wrote far outside its buffers")
    if found.inputs:
        return CaseCheck(Status.INPUT_MODIFIED, detail=f"case '{bufs.job.case}': the kernel modified its inputs: "
                         + ", ".join(found.inputs))
    return None

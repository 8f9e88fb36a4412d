"""`warpsmith new`: a workload drafted by a model from one sentence, and a reference
that must earn trust before any kernel is judged by it.

1. Draft: the model writes workload.toml, reference.py and a simple starting
   kernel. The same spec checker as for hand-written workloads validates the
   draft (without running any of it); a draft that fails goes back to the model
   with the error, a bounded number of times. The draft is marked
   `reference_status = "drafted"`, and `run` / `eval` refuse it.
2. Review: the reference and the cases are shown, and the user must agree.
   Only then does model-written Python run: a second, independent reference (a
   fresh prompt that sees only the description and the signature) is compared
   with the first on seeded random inputs for every case cheap enough on the CPU,
   in a separate process with a time limit (agent/drafting/reference_check.py).
   Agreement plus the user's yes marks the workload `reviewed`; disagreement is
   shown side by side and keeps it `drafted`.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

from pydantic import BaseModel, Field

from ..runtime.parent_watch import child_env, python_module
from ..spec.workload import DRAFT_MARKER, load_workload
from ..spec.workload_model import SpecError, Workload

if TYPE_CHECKING:
    from langchain_core.language_models import LanguageModelInput
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import Runnable

    Chat = Runnable[LanguageModelInput, BaseMessage]  # a chat model asked for a JSON schema (cli/new.py makes it)

Answer = TypeVar("Answer", bound=BaseModel)

CHECK_TIMEOUT_S = 300.0
EXAMPLE = Path(__file__).resolve().parent / "draft_example.toml"  # ships with the package


class WorkloadDraft(BaseModel):
    """The structured answer asked of the model for a new workload."""

    name: str = Field(description="short identifier, e.g. sgemm_rect")
    workload_toml: str = Field(description="the complete workload.toml, in the format of the example")
    reference_py: str = Field(description="reference.py: def reference(<inputs>, *, <sizes>) in NumPy, float64")
    kernel_cu: str = Field(description='a simple, correct starting kernel (extern "C" __global__), no #include')
    kernel_file: str = Field(default="naive.cu", description="the kernel's file name, as workload.toml names it")


class ReferenceDraft(BaseModel):
    reference_py: str = Field(description="reference.py: def reference(<inputs>, *, <sizes>) in NumPy, float64")


DRAFT_SYSTEM = """You write workload specifications for warpsmith, a tool that searches for fast CUDA
kernels and checks each against a NumPy reference. Answer with the JSON schema's fields only.
workload.toml must follow the example exactly (tables, keys, expressions over the size names);
add `reference_status = "drafted"` under [workload]. Correctness cases use awkward sizes (not
multiples of 32, 1, primes, rectangular); performance cases are sized to fill a large GPU. The
reference is plain NumPy computing in float64, with an explicit, independent formula."""

SECOND_SYSTEM = """You write NumPy reference implementations. Given a description of a computation
and the exact function signature, write reference.py defining that function, computing in float64
from first principles. Answer with the JSON schema's fields only."""


def draft_prompt(description: str) -> str:
    return (f"Describe this as a warpsmith workload: {description.strip()}\n\n"
            f"The example workload.toml (an SGEMM) shows the format:\n```toml\n{EXAMPLE.read_text()}\n```")


def reference_signature(w: Workload) -> str:
    inputs = ", ".join(p.name for p in w.inputs)
    sizes = sorted({n for c in w.cases for n in c.sizes})
    outputs = ", ".join(f"{p.name} of shape ({', '.join(str(e) for e in p.shape)})" for p in w.outputs)
    shapes = "; ".join(f"{p.name}: ({', '.join(str(e) for e in p.shape)})" for p in w.inputs)
    return (f"def reference({inputs}, *, {', '.join(sizes)}):  # inputs as float64 NumPy arrays ({shapes}); "
            f"return {outputs} (a tuple, in that order, if there are several)")


def _ask(chat: Chat, system: str, messages: list[tuple[str, str]], answer: type[Answer]) -> tuple[Answer, str]:
    reply = chat.invoke([("system", system), *messages])
    content = reply.content if isinstance(reply.content, str) else ""
    return answer.model_validate_json(content), content


STATUS_LINE = re.compile(r"""^[ \t]*reference_status[ \t]*=.*$""", re.M)


def write_draft(directory: Path, d: WorkloadDraft) -> None:
    """The draft's files, and the marker that keeps it drafted whatever its TOML says."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / DRAFT_MARKER).write_text("a model drafted this workload; `warpsmith review` removes this file\n")
    toml = d.workload_toml
    if STATUS_LINE.search(toml):
        toml = STATUS_LINE.sub('reference_status = "drafted"', toml)
    else:
        toml = re.sub(r"^\[workload\][^\n]*$", '[workload]\nreference_status = "drafted"', toml, count=1, flags=re.M)
    (directory / "workload.toml").write_text(toml)
    (directory / "reference.py").write_text(d.reference_py)
    (directory / Path(d.kernel_file).name).write_text(d.kernel_cu)


def draft_workload(chat: Chat, description: str, directory: Path, repairs: int = 3,
                   say: Callable[[str], None] = print) -> Workload:
    """Draft, check with the spec checker, send errors back; raises SpecError after `repairs`."""
    messages: list[tuple[str, str]] = [("human", draft_prompt(description))]
    for attempt in range(repairs + 1):
        try:
            draft, raw = _ask(chat, DRAFT_SYSTEM, messages, WorkloadDraft)
        except ValueError as e:
            problem, raw = f"the answer was not the JSON schema: {str(e).splitlines()[0]}", ""
        else:
            write_draft(directory, draft)
            try:
                w = load_workload(directory)
                if w.baseline.torch is not None:  # it would run model-written Python in the GPU worker
                    raise SpecError(directory / "workload.toml", "baseline.torch", "a draft may not name a PyTorch baseline file")
                return w
            except SpecError as e:
                problem = str(e)
        say(f"draft {attempt + 1}: {problem}" + ("; asking for a repair" if attempt < repairs else ""))
        messages += [("ai", raw or "(invalid)"), ("human", f"That draft fails the spec checker: {problem}\n"
                                                            "Send the whole draft again, fixed.")]
    raise SpecError(directory / "workload.toml", "(draft)", f"still invalid after {repairs} repairs: {problem}")


@dataclass
class CaseAgreement:
    case: str
    agree: bool
    max_error: float = 0.0
    detail: str = ""


@dataclass
class ReviewResult:
    status: str  # reviewed | drafted
    message: str
    cases: list[CaseAgreement] = field(default_factory=list)


def compare_references(directory: Path, second: Path, timeout_s: float = CHECK_TIMEOUT_S) -> list[CaseAgreement]:
    """Both references on the same seeded inputs, in a separate, time-limited process
    that dies with this one (a SIGKILLed warpsmith cannot enforce the time limit)."""
    try:
        done = subprocess.run(python_module("warpsmith.agent.drafting.reference_check", str(directory), str(second)),
                              capture_output=True, text=True, timeout=timeout_s, env=child_env())
    except subprocess.TimeoutExpired:
        return [CaseAgreement("(all)", False, detail=f"the comparison took longer than {timeout_s:.0f} s")]
    rows = [json.loads(l) for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode != 0 or not rows:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [CaseAgreement("(all)", False, detail=f"the comparison failed: {last[:300]}")]
    return [CaseAgreement(**r) for r in rows]


def side_by_side(a: str, b: str, width: int = 60) -> str:
    left, right = a.splitlines(), b.splitlines()
    rows = [f"{'first draft':<{width}} | second draft", f"{'-' * width}-+-{'-' * width}"]
    for i in range(max(len(left), len(right))):
        l = left[i] if i < len(left) else ""
        r = right[i] if i < len(right) else ""
        rows.append(f"{l[:width]:<{width}} | {r[:width]}")
    return "\n".join(rows)


def set_reviewed(directory: Path) -> None:
    path = directory / "workload.toml"
    path.write_text(STATUS_LINE.sub('reference_status = "reviewed"', path.read_text()))
    (directory / DRAFT_MARKER).unlink(missing_ok=True)


def review(directory: Path, chat: Chat, description: str, consent: Callable[[str, Workload], bool],
           say: Callable[[str], None] = print, timeout_s: float = CHECK_TIMEOUT_S) -> ReviewResult:
    """The review of a drafted reference: the user's yes first, then the independent second draft."""
    w = load_workload(directory)
    say(f"# reference.py (drafted)\n{w.reference_path.read_text()}")
    say("# cases\n" + "\n".join(f"- {c.name} ({c.role}): {c.sizes}" for c in w.cases))
    if not consent("Is this reference right for the description, and may it run on this machine?", w):
        return ReviewResult("drafted", f"not reviewed: {directory.name} stays drafted; "
                                       f"`warpsmith review {directory}` asks again")
    second, _ = _ask(chat, SECOND_SYSTEM, [("human", f"{description.strip()}\n\nSignature:\n{reference_signature(w)}")],
                     ReferenceDraft)
    check_dir = directory / ".review"
    check_dir.mkdir(exist_ok=True)
    second_path = check_dir / "reference_second_draft.py"
    second_path.write_text(second.reference_py)
    cases = compare_references(directory, second_path, timeout_s)
    compared = [c for c in cases if c.detail != "skipped"]
    if not compared:
        return ReviewResult("drafted", "no case is small enough to compare the two references on the CPU: add a "
                                       "small correctness case to workload.toml and review again", cases)
    if all(c.agree for c in compared):
        set_reviewed(directory)
        names = ", ".join(c.case for c in compared)
        return ReviewResult("reviewed", f"reviewed: an independent second reference agrees on {names}", cases)
    bad = [c for c in cases if not c.agree and c.detail != "skipped"] or cases
    lines = [f"- {c.case}: {c.detail}" for c in bad]
    return ReviewResult("drafted", "the two references disagree; the workload stays drafted:\n" + "\n".join(lines)
                        + "\n\n" + side_by_side(w.reference_path.read_text(), second.reference_py), cases)


def refuse_drafted(w: Workload) -> Optional[str]:
    """The one-line refusal for a workload whose reference is not trusted yet."""
    if w.reference_status == "drafted":
        return (f"{w.directory / 'workload.toml'}: the reference is a model's draft, not reviewed: "
                f"run `warpsmith review {w.directory}` first")
    return None

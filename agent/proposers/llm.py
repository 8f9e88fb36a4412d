"""The `llm` proposer: a chat model through langchain-openai's ChatOpenAI, asked
for a structured candidate (a pydantic model: source, entry, options, launch
rule, rationale). Any OpenAI-compatible server works through `base_url` (vLLM,
llama.cpp, Ollama). The key comes from OPENAI_API_KEY only and is never stored.

A 429 or 5xx is retried by the client; an answer that is not a valid candidate
becomes a failed attempt (proposal_invalid) whose error goes back to the model
as a repair request. A rejected key, or a server that refuses the connection
after the client's retries, ends the session, resumable (every attempt would fail
the same way); a call that times out is one failed attempt. "Stop now" abandons
the call in flight (model_client.invoke_abortable); its tokens are not counted.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Optional

from pydantic import BaseModel, Field

from ..evaluate.records import CandidateSpec
from .base import Proposal, ProposalContext, ProposalError
from .model_client import ModelUnavailable, client_kwargs, invoke_abortable, structured_chat, unreachable_text
from .pricing import PriceTable, Usage, load_prices, price_for
from .prompt import SYSTEM, latest_findings, user_message
from .web_research import WebGuidance

if TYPE_CHECKING:
    from .tune import TuneProposer

# The ideas a batch's parallel calls try, one each: different directions from the same parent.
HINTS = (
    "more work per thread: a larger register tile or more elements per thread",
    "memory access: coalesced, vectorised (float4) loads and stores, fewer global transactions",
    "shared memory: staging and double buffering, no bank conflicts",
    "occupancy and launch shape: block size, registers per thread (__launch_bounds__), grid size",
    "a different algorithm or a program of several launches (split-K, a two-pass reduction)",
    "instruction-level: unrolling, fewer index computations, warp shuffles instead of shared memory",
)


class ProposerUnavailable(RuntimeError):
    """The model cannot be used at all (no key, rejected key, unknown model)."""


class LlmWorkspace(BaseModel):
    name: str = Field(description="identifier, used as a step argument")
    dtype: str = Field(default="float32", description="float32 | float64 | int32 | int64")
    size: str = Field(description="number of elements, an expression over sizes and knobs")
    init: str = Field(default="poison", description="zero, or poison (unpredictable: write before you read)")


class LlmStep(BaseModel):
    """A launch (entry, grid, block, shared, args), or a memset (memset = a buffer to zero)."""

    entry: str = Field(default="", description='extern "C" __global__ kernel of the source')
    grid: list[str] = Field(default_factory=list, max_length=3)
    block: list[str] = Field(default_factory=list, max_length=3)
    shared: str = "0"
    args: list[str] = Field(default_factory=list, description=(
        "in the kernel's parameter order: parameter or workspace names, or KIND:EXPR (i32, i64, f32, f64) "
        "for a computed scalar, e.g. i32:ceil_div(K, SPLITK), or a TMA descriptor of a 2-D array parameter, "
        "tma:NAME:box=ROWS x COLS[:swizzle=128B] (the kernel takes const __grid_constant__ CUtensorMap)"))
    cluster: list[str] = Field(default_factory=list, max_length=3, description=(
        "thread block cluster dimensions (Hopper), e.g. [\"2\", \"1\", \"1\"]; empty for none"))
    memset: str = Field(default="", description="a workspace buffer or output to zero (then leave the rest empty)")

    def data(self) -> dict[str, Any]:
        if self.memset:
            return {"memset": self.memset}
        cluster = {"cluster": self.cluster} if self.cluster else {}
        return {"entry": self.entry, "grid": self.grid, "block": self.block, "shared": self.shared, "args": self.args,
                **cluster}


class LlmCandidate(BaseModel):
    """The structured answer asked of the model. Not ``CandidateSpec``: its field
    descriptions are the model's instructions, and it leaves out what the model does not
    choose (the name, the knob values, the proposer); ``propose`` builds the spec from it."""

    rationale: str = Field(description="one or two sentences: what changed and why it is faster, or what was fixed")
    source: str = Field(description="complete CUDA C++ source of the kernel file")
    entry: str = Field(default="", description='the extern "C" __global__ entry name (one launch)')
    grid: list[str] = Field(default_factory=list, description="1 to 3 launch expressions over sizes and knobs",
                            max_length=3)
    block: list[str] = Field(default_factory=list, description="1 to 3 launch expressions over sizes and knobs",
                             max_length=3)
    shared: str = Field(default="0", description="dynamic shared memory bytes, an expression")
    options: list[str] = Field(default_factory=list, description=(
        "extra NVRTC options, only: -DNAME[=VALUE], -maxrregcount=N, -lineinfo, -std=c++17|c++20, "
        "--extra-device-vectorization, -restrict, -fmad=, and where the workload allows fast math "
        "--use_fast_math, -ftz=true, -prec-div=false, -prec-sqrt=false; #include only CUDA headers by <name>"))
    workspace: list[LlmWorkspace] = Field(default_factory=list, description="scratch buffers of a program")
    steps: list[LlmStep] = Field(default_factory=list, description=(
        "a program of several launches (split-K, a reduction and its finish...); empty for one launch of "
        "entry/grid/block with the parameters in order"))

    def program(self) -> Optional[dict[str, Any]]:
        if not self.steps:
            return None
        return {"workspace": [w.model_dump() for w in self.workspace], "steps": [s.data() for s in self.steps]}


class LlmProposer:
    name = "llm"

    def __init__(self, model: str = "gpt-5-mini", reasoning_effort: Optional[str] = "medium",
                 base_url: Optional[str] = None, max_retries: int = 3, timeout_s: float = 600.0,
                 research: bool = False, web_search: bool = False, prices: Optional[PriceTable] = None):
        try:
            kwargs = client_kwargs(model, reasoning_effort, base_url, max_retries, timeout_s)
        except ModelUnavailable as e:
            raise ProposerUnavailable(f"{e}; without either, use --proposer tune") from None
        self.model, self.research, self.base_url = model, research, base_url
        self.web_search = research and web_search
        self.web: Optional[WebGuidance] = None  # fetched once before the first proposal
        self._client_kwargs = {k: v for k, v in kwargs.items() if k in ("api_key", "base_url", "max_retries", "timeout")}
        self.chat = structured_chat(kwargs, LlmCandidate)
        self.calls = 0
        self._lock = threading.Lock()
        self.usage, self.cost_usd, self._pending = Usage(), 0.0, Usage()
        self.price = price_for(model, base_url, prices if prices is not None else load_prices())

    def propose_batch(self, ctx: ProposalContext, n: int) -> list[Proposal]:
        """Up to `n` proposals from parallel calls, each from the best and with another idea
        (HINTS, taken in turn from the step's iteration), named for the attempts they become.
        A repair is one call. A call that fails is left out, its tokens charged to the
        batch; if every call fails, the first failure is the step's."""
        if n <= 1 or ctx.mode == "repair":
            return [self.propose(ctx)]
        from concurrent.futures import ThreadPoolExecutor
        if self.web_search and self.web is None:  # searched once, before the calls that share it
            return [self.propose(ctx)]
        hints = [HINTS[(ctx.iteration + i) % len(HINTS)] for i in range(n)]
        contexts = [dataclasses.replace(ctx, iteration=ctx.iteration + i, hint=h) for i, h in enumerate(hints)]

        def call(c: ProposalContext) -> Proposal | ProposalError:
            try:
                return self.propose(c)
            except ProposalError as e:
                return e
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="llm-batch") as pool:
            results = list(pool.map(call, contexts))
        good = [r for r in results if isinstance(r, Proposal)]
        failed = [r for r in results if isinstance(r, ProposalError)]
        if not good:
            first = failed[0]
            raise ProposalError(str(first), sum(e.tokens for e in failed), sum(e.cost_usd for e in failed))
        lost_tokens, lost_cost = sum(e.tokens for e in failed), sum(e.cost_usd for e in failed)
        good[0] = dataclasses.replace(good[0], tokens=good[0].tokens + lost_tokens, cost_usd=good[0].cost_usd + lost_cost)
        # Renamed in order: the queue gives them consecutive iterations whichever calls failed.
        return [dataclasses.replace(p, spec=p.spec.model_copy(update={"name": f"llm-{ctx.iteration + i}",
                                                                      "kernel": f"llm-{ctx.iteration + i}"}))
                for i, p in enumerate(good)]

    def propose(self, ctx: ProposalContext) -> Proposal:
        import openai
        from langchain_core.messages import AIMessage
        notes, notice = "", ""
        sources: tuple[str, ...] = ()
        if self.calls == 0 and self.price is None:
            notice = f"no price known for model '{self.model}': its cost counts as $0 (add it to prices.toml)"
        if self.web_search and self.web is None:
            notice = "; ".join(n for n in (notice, self._fetch_web(ctx)) if n)
        if self.research:  # --nvidia-research: the built-in knowledge base, by relevance
            from .research import guidance, retrieve, workload_kind
            w = ctx.workload
            found = retrieve(workload_kind(w.description, w.baseline.kind), ctx.facts.arch or "sm_90",
                             w.description, findings=latest_findings(ctx),
                             dtypes={p.dtype for p in w.arrays})
            notes, sources = guidance(found), tuple(n.cite() for n in found)
            if self.web is not None and self.web.text:
                notes += "\n\n[web] What NVIDIA's documentation says (searched for this workload)\n" + self.web.prompt_section()
                sources += tuple(f"[web{i + 1}] {s}" for i, s in enumerate(self.web.sources))
        messages = [("system", SYSTEM), ("human", user_message(ctx, guidance=notes))]
        try:
            answer = invoke_abortable(lambda: self.chat.invoke(messages), ctx.stopping)
        except openai.AuthenticationError as e:
            raise ProposerUnavailable(f"the model server rejected the API key ({e.status_code}); "
                                      "check OPENAI_API_KEY and resume the session") from None
        except openai.RateLimitError as e:
            if getattr(e, "code", None) == "insufficient_quota":
                raise ProposerUnavailable("the model account has no quota left (429 insufficient_quota)") from None
            raise ProposalError(f"rate limited after retries: {e}") from None
        except openai.NotFoundError as e:
            raise ProposerUnavailable(f"model '{self.model}' not found on the server ({e.status_code})") from None
        except openai.APITimeoutError as e:
            raise ProposalError(f"the model call timed out after retries: {e}") from None
        except openai.APIConnectionError as e:
            raise ProposerUnavailable(unreachable_text(e, self.base_url)) from None
        except openai.APIError as e:
            raise ProposalError(f"the model call failed after retries: {type(e).__name__}: {e}") from None
        with self._lock:
            self.calls += 1
            usage = answer.usage_metadata if isinstance(answer, AIMessage) else None  # what ChatOpenAI answers
            call = Usage.from_metadata(usage) + self._pending  # with the web search before it
            self._pending = Usage()
        used, cost = call.total, self._charge(call)
        try:
            parsed = LlmCandidate.model_validate_json(answer.content if isinstance(answer.content, str) else "")
        except ValueError as e:
            lines = str(e).splitlines()[:3]
            raise ProposalError(f"the model's answer was not a valid candidate: {' '.join(lines)[:500]}. "
                                "Answer with the JSON schema's fields only.", used, cost) from None
        first = next((step for step in parsed.steps if not step.memset), None)
        launch: LlmStep | LlmCandidate = first or parsed  # a program's record shows its first launch as the candidate's own
        if not launch.grid or not launch.block:
            raise ProposalError("the model's answer has no launch: give grid and block (or steps with one launch)",
                                used, cost)
        spec = CandidateSpec(name=f"llm-{ctx.iteration}", kernel=f"llm-{ctx.iteration}", source=parsed.source, entry=launch.entry,
                             grid=launch.grid, block=launch.block, shared=launch.shared, options=parsed.options,
                             rationale=parsed.rationale, proposer=self.name, program=parsed.program(),
                             parent=_parent(ctx))
        return Proposal(spec, used, sources, notice, cost)

    def _charge(self, call: Usage) -> float:
        cost = self.price.cost(call) if self.price else 0.0
        with self._lock:  # a batch's calls finish on several threads
            self.usage += call
            self.cost_usd += cost
        return cost

    def _fetch_web(self, ctx: ProposalContext) -> str:
        """Search NVIDIA's documentation once; returns a notice line (what happened)."""
        import openai

        from .web_research import WebResearchUnavailable, question, search_nvidia_docs
        w, f = ctx.workload, ctx.facts
        try:
            client, text = openai.OpenAI(**self._client_kwargs), question(w.description, f.arch or "sm_90", f.name or "GPU")
            web = invoke_abortable(lambda: search_nvidia_docs(client, self.model, text), ctx.stopping)
        except WebResearchUnavailable as e:
            self.web = WebGuidance("")  # asked once: not again this session
            return str(e)
        self.web = web
        self._pending = web.usage  # charged with the proposal's own call
        return f"web search of NVIDIA documentation: {len(web.sources)} pages cited"


def _parent(ctx: ProposalContext) -> Optional[int]:
    """What the model was shown to start from: the failed attempt it repairs, else the best."""
    if ctx.mode == "repair" and ctx.last is not None:
        return ctx.last.iteration
    return ctx.best.iteration if ctx.best else None


class HybridProposer:
    """The model writes kernels; when the best one declares knobs, the tuner
    searches them for a few iterations before the model is asked again."""

    name = "llm"

    def __init__(self, llm: LlmProposer, tuner: TuneProposer, tune_steps: int = 3):
        self.llm, self.tuner, self.tune_steps = llm, tuner, tune_steps

    def propose(self, ctx: ProposalContext) -> Proposal:
        if self._tuner_turn(ctx):
            try:
                return self.tuner.propose(ctx)
            except ProposalError:
                pass  # nothing left to tune there: back to the model
        return self.llm.propose(ctx)

    def propose_batch(self, ctx: ProposalContext, n: int) -> list[Proposal]:
        """The tuner's batch on its turn, else the model's parallel calls."""
        if self._tuner_turn(ctx):
            try:
                return self.tuner.propose_batch(ctx, n)
            except ProposalError:
                pass
        return self.llm.propose_batch(ctx, n)

    def _tuner_turn(self, ctx: ProposalContext) -> bool:
        from ..spec.kernel_source import parse_knobs
        streak = 0
        for a in reversed(ctx.history):
            if a.proposer != self.tuner.name:
                break
            streak += 1
        return bool(ctx.best and ctx.best.spec.proposer in ("llm", "tune") and parse_knobs(ctx.best.spec.source)
                    and streak < self.tune_steps
                    and (ctx.mode == "optimise" or (ctx.last and ctx.last.proposer == self.tuner.name)))

"""Which proposer a session uses and how it is set up; kept in session.json (no secret:
the API key comes from the environment only, and a `user:key@` part of --base-url is not
stored), so `resume` builds the same proposer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .base import Proposer


@dataclass(frozen=True)
class ProposerChoice:
    kind: str = "tune"  # tune | llm (llm: the model, with the tuner on its kernels' knobs)
    seed: int = 0  # the tuner's search
    kernel: str = ""  # the workload kernel the tuner searches ("" = the one with most knobs)
    model: str = ""
    reasoning_effort: str = ""
    base_url: str = ""  # an OpenAI-compatible server ("" = OpenAI's)
    research: bool = False  # --nvidia-research
    web_search: bool = False  # --web-search (with --nvidia-research)
    prices: str = ""  # --prices FILE ("" = the default price table)


def make_proposer(choice: ProposerChoice) -> Proposer:
    """Raises ProposerUnavailable (no key, ...) or ValueError (a broken price table)
    before any session is created."""
    from .tune import TuneProposer
    tuner = TuneProposer(seed=choice.seed, kernel=choice.kernel or None)
    if choice.kind == "tune":
        return tuner
    from .llm import HybridProposer, LlmProposer
    from .pricing import load_prices
    llm = LlmProposer(choice.model, choice.reasoning_effort or None, choice.base_url or None,
                      research=choice.research, web_search=choice.web_search,
                      prices=load_prices(Path(choice.prices) if choice.prices else None))
    return HybridProposer(llm, tuner)

"""--nvidia-research with --web-search: ask the model, once per session, to search
NVIDIA's documentation (the Responses API's web_search tool, restricted to NVIDIA
domains) for guidance on this workload and architecture. The answer and the pages
it cites go into the prompt, cited, and to MLflow with each attempt.

Where the server has no Responses API or no web search (a local server, an
offline machine), this says so in one line and the session goes on with the
built-in knowledge base alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .pricing import Usage

if TYPE_CHECKING:
    import openai

NVIDIA_DOMAINS = ["docs.nvidia.com", "developer.nvidia.com"]


class WebResearchUnavailable(RuntimeError):
    """No web search here; the run goes on without it."""


@dataclass(frozen=True)
class WebGuidance:
    text: str
    sources: list[str] = field(default_factory=list)  # "title <url>", in citation order
    usage: Usage = field(default_factory=Usage)

    def prompt_section(self) -> str:
        cites = "\n".join(f"[web{i + 1}] {s}" for i, s in enumerate(self.sources))
        return f"{self.text.strip()}\n\nSources (NVIDIA documentation):\n{cites}" if cites else self.text.strip()


def question(description: str, arch: str, gpu: str) -> str:
    return (f"Using only NVIDIA's documentation (CUDA C++ Programming Guide, Best Practices Guide, tuning "
            f"guides for {arch}), list the concrete optimisations that matter most for this CUDA kernel on "
            f"{gpu} ({arch}), each in one or two sentences with the page it comes from. No code.\n\n"
            f"Kernel to optimise: {description.strip()}")


def search_nvidia_docs(client: openai.OpenAI, model: str, text: str) -> WebGuidance:
    """One Responses API call with web search limited to NVIDIA domains. `client` is an
    openai.OpenAI; raises WebResearchUnavailable on any refusal."""
    import openai
    try:
        r = client.responses.create(model=model, input=text, tools=[
            {"type": "web_search", "filters": {"allowed_domains": NVIDIA_DOMAINS}}])
    except (openai.APIError, openai.APIConnectionError) as e:
        status = getattr(e, "status_code", None)
        raise WebResearchUnavailable(f"web search unavailable on this server ({status or type(e).__name__}); "
                                     "using the built-in notes only") from None
    sources: list[str] = []
    for item in r.output or []:
        for part in getattr(item, "content", None) or []:
            for a in getattr(part, "annotations", None) or []:
                url = getattr(a, "url", None)
                if url and not any(url in s for s in sources):
                    sources.append(f"{getattr(a, 'title', '') or url} <{url}>")
    answer = r.output_text or ""
    if not answer.strip():
        raise WebResearchUnavailable("web search returned nothing; using the built-in notes only")
    u = r.usage
    usage = Usage(u.input_tokens, getattr(u.input_tokens_details, "cached_tokens", 0) or 0, u.output_tokens,
                  getattr(u.output_tokens_details, "reasoning_tokens", 0) or 0) if u else Usage()
    return WebGuidance(answer, sources, usage)

"""One way to talk to a chat model: langchain-openai's ChatOpenAI bound to a
JSON-schema answer (a pydantic model), on OpenAI or any compatible server. The
key comes from OPENAI_API_KEY only and is never stored."""

from __future__ import annotations

import os
from typing import Optional

from pydantic import BaseModel


class ModelUnavailable(RuntimeError):
    """No key and no server: the model cannot be used at all."""


def client_kwargs(model: str, reasoning_effort: Optional[str], base_url: Optional[str], max_retries: int = 3,
                  timeout_s: float = 600.0, who: str = "the llm proposer") -> dict:
    key = os.environ.get("OPENAI_API_KEY")
    if not key and not base_url:
        raise ModelUnavailable(f"{who} needs OPENAI_API_KEY (or --base-url for a local OpenAI-compatible server)")
    kwargs = dict(model=model, api_key=key or "not-needed", max_retries=max_retries, timeout=timeout_s)
    if base_url:
        kwargs["base_url"] = base_url
    if reasoning_effort:
        kwargs["reasoning_effort"] = reasoning_effort
    return kwargs


def structured_chat(kwargs: dict, answer: type[BaseModel]):
    """ChatOpenAI asked for `answer`'s JSON schema; the caller parses the content, so a
    malformed answer still reports its token usage."""
    from langchain_openai import ChatOpenAI
    schema = {"name": answer.__name__, "schema": answer.model_json_schema(), "strict": False}
    return ChatOpenAI(**kwargs).bind(response_format={"type": "json_schema", "json_schema": schema})

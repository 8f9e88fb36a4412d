"""One way to talk to a chat model: langchain-openai's ChatOpenAI bound to a
JSON-schema answer (a pydantic model), on OpenAI or any compatible server. The
key comes from OPENAI_API_KEY only and is never stored.

Two things every caller needs, kept here:
- a call that "stop now" can abandon (:func:`invoke_abortable`): the blocking HTTP
  call runs in a daemon thread and the caller polls the stop flag, because a signal
  handler cannot interrupt a socket read (Python retries it) and the client has no
  cancel for a synchronous call;
- one line naming the server when it cannot be reached (:func:`unreachable_text`,
  :func:`check_reachable`), never a traceback and never the key.
"""

from __future__ import annotations

import contextvars
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel

if TYPE_CHECKING:
    from langchain_core.language_models import LanguageModelInput
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import Runnable

OPENAI_URL = "https://api.openai.com/v1"
POLL_S = 0.1  # how often a waiting caller looks at the stop flag
T = TypeVar("T")


class ModelUnavailable(RuntimeError):
    """No key and no server: the model cannot be used at all."""


class ModelUnreachable(ModelUnavailable):
    """The server did not accept a connection; the message is one line naming it."""


class ModelCallAborted(RuntimeError):
    """A stop-now arrived while the model was answering. Like the evaluator's
    EvaluationAborted: nothing is recorded as an attempt, the checkpoint stays where
    the step began, and the answer (and its tokens) of the abandoned call are dropped."""


def client_kwargs(model: str, reasoning_effort: Optional[str], base_url: Optional[str], max_retries: int = 3,
                  timeout_s: float = 600.0, who: str = "the llm proposer") -> dict[str, Any]:
    key = os.environ.get("OPENAI_API_KEY")
    if not key and not base_url:
        raise ModelUnavailable(f"{who} needs OPENAI_API_KEY (or --base-url for a local OpenAI-compatible server)")
    kwargs: dict[str, Any] = dict(model=model, api_key=key or "not-needed", max_retries=max_retries, timeout=timeout_s)
    if base_url:
        kwargs["base_url"] = base_url
    if reasoning_effort:
        kwargs["reasoning_effort"] = reasoning_effort
    return kwargs


def structured_chat(kwargs: dict[str, Any], answer: type[BaseModel]) -> Runnable[LanguageModelInput, BaseMessage]:
    """ChatOpenAI asked for `answer`'s JSON schema; the caller parses the content, so a
    malformed answer still reports its token usage."""
    from langchain_openai import ChatOpenAI
    schema = {"name": answer.__name__, "schema": answer.model_json_schema(), "strict": False}
    return ChatOpenAI(**kwargs).bind(response_format={"type": "json_schema", "json_schema": schema})


def invoke_abortable(call: Callable[[], T], stopping: Callable[[], bool], poll_s: float = POLL_S) -> T:
    """`call()` in a daemon thread; returns its value or raises its error, unless
    `stopping()` turns true first: then ModelCallAborted, within `poll_s`. The
    abandoned thread writes only into its own local box, never into the caller's
    state; its connection ends with the process (or when the server answers)."""
    value: list[T] = []  # the call's own boxes: the caller reads them only once `done` is set
    error: list[BaseException] = []
    done = threading.Event()  # set by the call's thread only: a signal handler never touches it

    def run() -> None:
        try:
            value.append(call())
        except BaseException as e:  # handed to the caller
            error.append(e)
        finally:
            done.set()

    context = contextvars.copy_context()  # callbacks and tracing see the caller's context
    threading.Thread(target=context.run, args=(run,), name="warpsmith-model-call", daemon=True).start()
    while not done.wait(poll_s):
        if stopping():
            raise ModelCallAborted("stopped by the user while the model was answering")
    if error:
        raise error[0]
    return value[0]


def server_url(base_url: Optional[str]) -> str:
    """The server a client talks to, as the user can check it: no credentials in it."""
    return without_credentials(base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL)


def without_credentials(url: str) -> str:
    """`url` less a `user:password@` part."""
    parts = urlsplit(url)
    if "@" in parts.netloc:  # the host and port as written (an IPv6 address keeps its brackets)
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    return urlunsplit(parts)


def _reason(error: BaseException) -> str:
    """What the connection failure was, from the exception chain (openai wraps httpx)."""
    seen: Optional[BaseException] = error
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "Connection refused" in str(seen):
            return "connection refused"
        text = str(seen)
        if "Name or service not known" in text or "nodename nor servname" in text or "Temporary failure in name" in text:
            return "unknown host"
        if "timed out" in text.lower() or type(seen).__name__.endswith("Timeout") or "Timeout" in type(seen).__name__:
            return "no answer in time"
        seen = seen.__cause__ or seen.__context__
    return str(error).strip().rstrip(".").lower() or type(error).__name__


def unreachable_text(error: BaseException, base_url: Optional[str]) -> str:
    """cannot reach the model server at URL (reason); what to do."""
    url = server_url(base_url)
    todo = "check --base-url or start the server" if base_url else "check the network (and OPENAI_BASE_URL)"
    return f"cannot reach the model server at {url} ({_reason(error)}); {todo}"


def check_reachable(base_url: Optional[str], timeout_s: float = 5.0) -> None:
    """A cheap GET of /models before a session spends minutes on the GPU: raises
    ModelUnreachable when no connection is made. Any HTTP answer (401, 404...) counts
    as reachable: the first model call reports those. No key is sent."""
    import httpx
    url = server_url(base_url).rstrip("/") + "/models"
    try:
        httpx.get(url, timeout=timeout_s)
    except httpx.TransportError as e:  # connect, DNS, timeout; not an HTTP status
        raise ModelUnreachable(unreachable_text(e, base_url)) from None

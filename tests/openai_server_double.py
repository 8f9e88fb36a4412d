"""OpenAIServerDouble: an OpenAI-compatible chat-completions server on 127.0.0.1
that replays scripted answers. It stands in for a paid model so the real
langchain-openai client (HTTP, retries, structured output) is exercised."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OpenAIServerDouble:
    STALL = "<stall>"  # a script item: take the request, never answer (a stalled server)

    def __init__(self, script: list):
        """script: items are dicts (a structured answer, sent as JSON content), str
        (raw content, e.g. garbage), int (an HTTP error status) or STALL."""
        self.script = list(script)
        self.stalled = threading.Event()  # a request is held by STALL: what a test waits for
        self._release = threading.Event()
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self.headers: list[dict] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                double.requests.append(body)
                double.headers.append({k.lower(): v for k, v in self.headers.items()})
                item = double.script.pop(0) if double.script else 500
                if item == OpenAIServerDouble.STALL:
                    double.stalled.set()
                    double._release.wait()  # until the double is shut down; the client gets no answer
                    return
                if isinstance(item, int):
                    payload = json.dumps({"error": {"message": f"scripted {item}", "type": "scripted"}}).encode()
                    self.send_response(item)
                    self.send_header("Content-Type", "application/json")
                    if item == 429:
                        self.send_header("retry-after-ms", "10")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                double.paths.append(self.path)
                if self.path.endswith("/responses"):  # the Responses API: item = {"text", "citations"}
                    self._reply(double.responses_payload(item, body))
                    return
                content = json.dumps(item) if isinstance(item, dict) else item
                payload = json.dumps({
                    "id": f"chatcmpl-double-{len(double.requests)}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "double"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
                }).encode()
                self._reply(payload)

            def _reply(self, payload: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def responses_payload(item: dict, body: dict) -> bytes:
        """A Responses API answer after a web search: output text with url_citation annotations."""
        text = item["text"]
        notes = [{"type": "url_citation", "url": url, "title": title, "start_index": 0, "end_index": len(text)}
                 for title, url in item.get("citations", [])]
        return json.dumps({
            "id": "resp_double", "object": "response", "created_at": 0, "model": body.get("model", "double"),
            "status": "completed", "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools", []),
            "output": [{"type": "web_search_call", "id": "ws_double", "status": "completed"},
                       {"type": "message", "id": "msg_double", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": notes}]}],
            "usage": {"input_tokens": 300, "output_tokens": 100, "total_tokens": 400,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
        }).encode()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "OpenAIServerDouble":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

"""A local OpenAI-compatible chat-completions server on 127.0.0.1 with scripted answers.

Tests point the real `openai` client at it (base_url), so the wire protocol, the client's retries,
timeouts and Retry-After handling are the real ones. Each request consumes the next script step:

    {"content": "<assistant message text>"}              200 with that message
    {"status": 429, "headers": {"retry-after": "0"}}     an error status (JSON error body)
    {"delay": 2.0, "content": "..."}                      answer after a delay (client timeouts)

When the script runs out, `default` (a step) answers. Every request is recorded in `requests`
(path, lower-cased headers, parsed body) for assertions.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    def __init__(
        self,
        script: list[dict[str, Any]] | None = None,
        default: dict[str, Any] | None = None,
        model: str = "fake-model",
    ) -> None:
        self.script = list(script or [])
        self.default = default or {"status": 500, "body": {"error": {"message": "script exhausted"}}}
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _next_step(self) -> dict[str, Any]:
        with self._lock:
            return self.script.pop(0) if self.script else self.default

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                with fake._lock:
                    fake.requests.append(
                        {
                            "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": body,
                        }
                    )
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                step = fake._next_step()
                if step.get("delay"):
                    time.sleep(float(step["delay"]))
                status = int(step.get("status", 200))
                if status != 200:
                    return self._send(
                        status,
                        step.get("body") or {"error": {"message": f"status {status}", "type": "fake"}},
                        step.get("headers") or {},
                    )
                content = step.get("content", "")
                reply = {
                    "id": f"chatcmpl-fake-{len(fake.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", fake.model),
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": content},
                        }
                    ],
                    "usage": {
                        "prompt_tokens": step.get("prompt_tokens", 50),
                        "completion_tokens": step.get("completion_tokens", 20),
                        "total_tokens": step.get("prompt_tokens", 50) + step.get("completion_tokens", 20),
                    },
                }
                self._send(200, reply)

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

"""A tiny threaded HTTP/1.1 server on 127.0.0.1 for wire-level fakes, with scripted faults.

Subclass FakeHTTPServer and implement `handle(request) -> Response`. Tests then script faults
(`server.fail(...)`: a status with headers such as 429 + Retry-After, or a truncated body) that
are served instead of the real answer for the next N matching requests, and read `server.requests`
to assert what the client actually sent. Reusable for any protocol (Hub API, an OpenAI endpoint).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    truncate: bool = False  # send Content-Length of the whole body but only half of it, then close

    @classmethod
    def json(cls, value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return cls(status, json.dumps(value).encode(), h)


@dataclass
class Fault:
    pattern: re.Pattern
    response: Response
    times: int
    method: str | None = None
    served: int = 0


class FakeHTTPServer:
    """Runs `handle` on a background thread; use as a context manager (`with Server(...) as s:`)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- to implement -------------------------------------------------------------------------
    def handle(self, request: Request) -> Response:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- scripting ----------------------------------------------------------------------------
    def fail(
        self,
        path_regex: str,
        status: int = 500,
        *,
        times: int = 1,
        method: str | None = None,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        truncate: bool = False,
    ) -> Fault:
        """Serve this response instead of the real one for the next `times` matching requests.

        With truncate=True the real answer is sent with its full Content-Length but half its body.
        """
        fault = Fault(
            re.compile(path_regex),
            Response(status, body, dict(headers or {}), truncate),
            times,
            method.upper() if method else None,
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def requests_to(self, path_regex: str, method: str | None = None) -> list[Request]:
        rx = re.compile(path_regex)
        return [
            r for r in list(self.requests) if rx.search(r.path) and (method is None or r.method == method)
        ]

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> FakeHTTPServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _serve(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                req = Request(
                    self.command, split.path, parse_qs(split.query), dict(self.headers.items()), body
                )
                with server._lock:
                    server.requests.append(req)
                fault = server._take_fault(req)
                if fault is not None and not fault.truncate:
                    resp = fault
                else:
                    try:
                        resp = server.handle(req)
                    except Exception as exc:  # noqa: BLE001 - a bug in the fake must be loud (a 599), not a hang
                        resp = Response(599, f"fake server error: {exc!r}".encode())
                    if fault is not None:
                        resp.truncate = True
                self._send(resp)

            def _send(self, resp: Response) -> None:
                self.send_response(resp.status)
                headers = {"Content-Length": str(len(resp.body)), **resp.headers}
                if resp.truncate:
                    headers["Connection"] = "close"
                    headers["Content-Length"] = str(len(resp.body))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command == "HEAD":
                    return
                if resp.truncate:
                    self.wfile.write(resp.body[: len(resp.body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self.wfile.write(resp.body)

            do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _serve

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name=type(self).__name__, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeHTTPServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _take_fault(self, req: Request) -> Response | None:
        with self._lock:
            for fault in self._faults:
                if fault.served >= fault.times:
                    continue
                if fault.method and fault.method != req.method:
                    continue
                if fault.pattern.search(req.path):
                    fault.served += 1
                    return fault.response
        return None

"""A local stand-in for the Hugging Face Hub API, for the real huggingface_hub client (HF_ENDPOINT).

Speaks the parts of the protocol the crawler uses:
- ``GET /api/models`` — listing sorted by downloads (descending), filtered by ``pipeline_tag`` and
  ``filter`` (tags, which include the library), paged with a ``Link: <...>; rel="next"`` header and
  a ``cursor`` query parameter, like the Hub.
- ``GET /api/models/{repo_id}`` — model info.
- ``HEAD``/``GET /{repo_id}/resolve/{revision}/{filename}`` — file download with ``X-Repo-Commit``,
  ``ETag`` and ``Content-Length``; gated repos answer 401 (no token) / 403 (token without access)
  with ``X-Error-Code: GatedRepo``, private ones 401 ``RepoNotFound``, a missing file 404
  ``EntryNotFound`` — the headers huggingface_hub maps to its typed errors.
Faults (429 + Retry-After, 500, truncated bodies) are scripted with ``fail()`` from FakeHTTPServer.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from tests.fakes.http_server import FakeHTTPServer, Request, Response

_RESOLVE = re.compile(r"^/(?P<repo>[^/]+(?:/[^/]+)?)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+(?:/[^/]+)?)$")


@dataclass
class HubModel:
    """One fixture repository. `config` is a dict (served as JSON), raw bytes (served as is), or None."""

    id: str
    downloads: int = 0
    likes: int = 0
    pipeline_tag: str | None = None
    library_name: str | None = "transformers"
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] | bytes | None = None
    gated: bool = False
    private: bool = False
    token_has_access: bool = True  # False: even a valid token gets 403 (access not granted yet)
    files: dict[str, bytes] = field(default_factory=dict)  # extra files (e.g. weights, *.py)
    sha: str = ""

    def __post_init__(self) -> None:
        if not self.sha:
            self.sha = hashlib.sha1(self.id.encode()).hexdigest()
        if self.library_name and self.library_name not in self.tags:
            self.tags = [self.library_name, *self.tags]

    def file_bytes(self, name: str) -> bytes | None:
        if name == "config.json" and self.config is not None:
            return self.config if isinstance(self.config, bytes) else json.dumps(self.config).encode()
        return self.files.get(name)

    def listing(self) -> dict[str, Any]:
        return {
            "_id": self.sha[:24],
            "id": self.id,
            "modelId": self.id,
            "downloads": self.downloads,
            "likes": self.likes,
            "pipeline_tag": self.pipeline_tag,
            "library_name": self.library_name,
            "tags": list(self.tags),
            "sha": self.sha,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "gated": "manual" if self.gated else False,
            "private": self.private,
        }


class HubServer(FakeHTTPServer):
    def __init__(self, models: list[HubModel], *, page_size: int = 50, tokens: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.models = {m.id: m for m in models}
        self.page_size = page_size
        self.tokens = set(tokens)  # tokens with access to every gated/private repo

    def handle(self, request: Request) -> Response:
        if request.path == "/api/models":
            return self._list(request)
        if m := _INFO.match(request.path):
            return self._info(request, m["repo"])
        if m := _RESOLVE.match(request.path):
            return self._resolve(request, m["repo"], m["file"])
        return Response.json({"error": "not found"}, 404)

    # -- routes --------------------------------------------------------------------------------
    def _list(self, request: Request) -> Response:
        q = request.query
        models = [m for m in self.models.values() if not m.private]
        if "pipeline_tag" in q:
            models = [m for m in models if m.pipeline_tag == q["pipeline_tag"][0]]
        for tag in q.get("filter", []):
            models = [m for m in models if tag in m.tags]
        models.sort(key=lambda m: (-m.downloads, m.id))
        start = int(q.get("cursor", ["0"])[0])
        size = min(int(q.get("limit", [self.page_size])[0]), self.page_size)
        page = models[start : start + size]
        headers = {}
        if start + size < len(models):
            params = {k: v for k, v in q.items() if k != "cursor"}
            params["cursor"] = [str(start + size)]
            headers["Link"] = f'<{self.url}/api/models?{urlencode(params, doseq=True)}>; rel="next"'
        return Response.json([m.listing() for m in page], headers=headers)

    def _denied(self, request: Request, model: HubModel) -> Response | None:
        token = request.headers.get("Authorization", request.headers.get("authorization", ""))
        token = token.removeprefix("Bearer ").strip()
        if not (model.gated or model.private) or (token in self.tokens and model.token_has_access):
            return None
        if model.private:
            return Response(
                401, b"", {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"}
            )
        return Response(
            403 if token else 401,
            b"",
            {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to model is restricted"},
        )

    def _info(self, request: Request, repo: str) -> Response:
        model = self.models.get(repo)
        if model is None:
            return Response(404, b"", {"X-Error-Code": "RepoNotFound"})
        denied = self._denied(request, model)
        if denied is not None:
            return denied
        info = model.listing()
        names = (["config.json"] if model.config is not None else []) + sorted(model.files)
        info["siblings"] = [{"rfilename": n} for n in names]
        return Response.json(info)

    def _resolve(self, request: Request, repo: str, filename: str) -> Response:
        model = self.models.get(repo)
        if model is None:
            return Response(
                404, b"", {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"}
            )
        denied = self._denied(request, model)
        if denied is not None:
            return denied
        data = model.file_bytes(filename)
        if data is None:
            return Response(404, b"", {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"})
        etag = hashlib.sha256(data).hexdigest()
        return Response(
            200,
            data,
            {"X-Repo-Commit": model.sha, "ETag": f'"{etag}"', "Content-Type": "application/octet-stream"},
        )

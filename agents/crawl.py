"""Crawl sources into the store: the Hub (resumable), the offline catalog, or a snapshot dump.

The Hub crawler lists models with huggingface_hub's HfApi.list_models (sorted by downloads, task and
library filters) and fetches only ``config.json`` per model with hf_hub_download — never weights,
never custom code. Rate limits and transient errors are first handled by huggingface_hub itself
(http_backoff: 429 + Retry-After, 5xx, timeouts, truncated bodies resumed); what still escapes is
retried here with exponential backoff honouring Retry-After, then recorded as ``fetch_failed``.
A broken model is a record with a reason code, never the end of a crawl.

Resume: records are checkpointed to ``DIR/.crawl_parts/*.parquet`` and ``DIR/crawl_state.json``;
a rerun with the same filters re-pages the (cheap) listing and skips every id already crawled, so a
crawl stopped at model 40,000 continues there without re-fetching a single config.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from agents.errors import CrawlError
from agents.store import SCHEMA, ModelRecord, records_to_table, store_path, write_table
from agents.triage import short_error, triage

STATE_FILE = "crawl_state.json"
PARTS_DIR = ".crawl_parts"
EXPAND = [
    "downloads",
    "likes",
    "pipeline_tag",
    "library_name",
    "tags",
    "sha",
    "lastModified",
    "gated",
    "private",
]

Progress = Callable[[ModelRecord], None]


@dataclass
class CrawlSummary:
    source: str
    out: str
    store: str
    total: int
    ok: int
    broken: int
    broken_by_reason: dict[str, int]
    resumed: int = 0  # records already in the out dir from an earlier, interrupted run
    duplicates: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HubOptions:
    limit: int | None = None
    task: str | None = None  # pipeline_tag filter
    library: str | None = None  # library filter (a Hub tag, e.g. "transformers")
    endpoint: str | None = None  # default: $HF_ENDPOINT, else huggingface_hub's default
    token: str | None = None  # default: $HF_TOKEN / the saved login; never logged
    cache_dir: str | None = None  # where config.json files are cached (default: the HF cache)
    workers: int = 4
    checkpoint_every: int = 200
    max_retries: int = 4
    retry_base: float = 1.0
    retry_max: float = 60.0
    fresh: bool = False
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)


# --------------------------------------------------------------------------------------------
# Offline sources
# --------------------------------------------------------------------------------------------


def write_records(
    out: str | os.PathLike,
    source: str,
    records: Iterable[ModelRecord],
    *,
    limit: int | None = None,
    progress: Progress | None = None,
) -> CrawlSummary:
    """Write a non-resumable source (catalog, snapshot) to DIR/models.parquet; first id wins."""
    start = time.monotonic()
    seen: set[str] = set()
    kept: list[ModelRecord] = []
    duplicates = 0
    for rec in records:
        if limit is not None and len(kept) >= limit:
            break
        if rec.id in seen:
            duplicates += 1
            continue
        seen.add(rec.id)
        kept.append(rec)
        if progress:
            progress(rec)
    path = write_table(store_path(out), records_to_table(kept), {source})
    return _summary(source, out, path, kept, duplicates=duplicates, seconds=time.monotonic() - start)


def _summary(source: str, out: Any, path: Path, records: list[ModelRecord], **extra: Any) -> CrawlSummary:
    reasons = Counter(r.broken_reason for r in records if r.status == "broken")
    ok = sum(1 for r in records if r.status == "ok")
    return CrawlSummary(
        source=source,
        out=str(out),
        store=str(path),
        total=len(records),
        ok=ok,
        broken=len(records) - ok,
        broken_by_reason=dict(sorted(reasons.items())),
        **extra,
    )


# --------------------------------------------------------------------------------------------
# Hub crawler
# --------------------------------------------------------------------------------------------


def hub_offline() -> bool:
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE", "")
    return value.upper() in {"1", "ON", "YES", "TRUE"} or bool(constants.HF_HUB_OFFLINE)


def crawl_hub(
    out: str | os.PathLike, opts: HubOptions | None = None, *, progress: Progress | None = None
) -> CrawlSummary:
    """Crawl the Hub into DIR/models.parquet, resuming from DIR's state; see module docstring."""
    return _HubCrawl(Path(out), opts or HubOptions(), progress).run()


class _HubCrawl:
    def __init__(self, out: Path, opts: HubOptions, progress: Progress | None) -> None:
        from huggingface_hub import constants, get_token

        if hub_offline():
            raise CrawlError(
                "HF_HUB_OFFLINE is set: --source hub needs the network "
                "(use --source catalog or --source snapshot:PATH offline)"
            )
        self.out, self.opts, self.progress = out, opts, progress
        self.endpoint = (opts.endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self._token = opts.token or os.environ.get("HF_TOKEN") or get_token() or None
        self.query = {
            "endpoint": self.endpoint,
            "sort": "downloads",
            "task": opts.task,
            "library": opts.library,
        }
        self.parts_dir = out / PARTS_DIR
        self.state_path = out / STATE_FILE

    # -- state ---------------------------------------------------------------------------------
    def _load_state(self) -> tuple[list[Path], set[str]]:
        if self.opts.fresh:
            self._clear()
            return [], set()
        if not self.state_path.exists():
            return [], set()
        state = json.loads(self.state_path.read_text())
        if state.get("query") != self.query:
            raise CrawlError(
                f"{self.out} holds a crawl with other filters {state.get('query')}; "
                "use another --out or --fresh to start over"
            )
        parts = [self.parts_dir / p for p in state.get("parts", []) if (self.parts_dir / p).exists()]
        done: set[str] = set()
        for p in parts:
            done.update(pq.read_table(p, columns=["id"]).column("id").to_pylist())
        return parts, done

    def _clear(self) -> None:
        for p in self.parts_dir.glob("*.parquet") if self.parts_dir.exists() else []:
            p.unlink()
        self.state_path.unlink(missing_ok=True)

    def _save_state(self, parts: list[Path], done: int, finished: bool) -> None:
        state = {
            "version": 1,
            "source": "hub",
            "query": self.query,
            "done": done,
            "finished": finished,
            "parts": [p.name for p in parts],
            "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.state_path)

    def _checkpoint(self, parts: list[Path], buffer: list[ModelRecord], done: int, finished: bool) -> None:
        if buffer:
            path = self.parts_dir / f"part-{len(parts):06d}.parquet"
            write_table(path, records_to_table(buffer), {"hub"})
            parts.append(path)
            buffer.clear()
        self._save_state(parts, done, finished)

    # -- main loop -----------------------------------------------------------------------------
    def run(self) -> CrawlSummary:
        from filelock import FileLock, Timeout

        self.out.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(str(self.out / ".crawl.lock"), timeout=0):
                return self._run()
        except Timeout:
            raise CrawlError(f"another crawl is running in {self.out}") from None

    def _run(self) -> CrawlSummary:
        from huggingface_hub import HfApi

        start = time.monotonic()
        parts, done = self._load_state()
        resumed = len(done)
        limit = self.opts.limit
        buffer: list[ModelRecord] = []
        count = resumed
        api = HfApi(endpoint=self.endpoint, token=self._token or False)
        listing = api.list_models(
            sort="downloads", pipeline_tag=self.opts.task, filter=self.opts.library, expand=EXPAND
        )
        try:
            with ThreadPoolExecutor(max_workers=max(1, self.opts.workers)) as pool:
                for batch in self._batches(listing, done, limit, resumed):
                    for rec in pool.map(self._record, batch):
                        buffer.append(rec)
                        done.add(rec.id)
                        count += 1
                        if self.progress:
                            self.progress(rec)
                    if len(buffer) >= self.opts.checkpoint_every:
                        self._checkpoint(parts, buffer, count, finished=False)
        except BaseException as exc:
            self._checkpoint(parts, buffer, count, finished=False)
            if isinstance(exc, (KeyboardInterrupt, CrawlError)):
                raise
            raise CrawlError(
                f"listing failed after {count} models ({self._scrub(short_error(exc))}); "
                f"rerun the same command to resume"
            ) from exc
        self._checkpoint(parts, buffer, count, finished=True)
        table = pa.concat_tables([pq.read_table(p) for p in parts]) if parts else SCHEMA.empty_table()
        path = write_table(store_path(self.out), table, {"hub"})
        from agents.store import table_to_records

        return _summary(
            "hub", self.out, path, table_to_records(table), resumed=resumed, seconds=time.monotonic() - start
        )

    def _batches(
        self, listing: Iterator[Any], done: set[str], limit: int | None, count: int
    ) -> Iterator[list[Any]]:
        batch: list[Any] = []
        size = max(1, self.opts.workers) * 4
        for info in listing:
            if limit is not None and count >= limit:
                break
            if info.id in done:
                continue
            done.add(info.id)  # a listing that repeats an id (rank shifted between pages) counts once
            batch.append(info)
            count += 1
            if len(batch) >= size:
                yield batch
                batch = []
        if batch:
            yield batch

    # -- one model -----------------------------------------------------------------------------
    def _record(self, info: Any) -> ModelRecord:
        try:
            return self._record_unsafe(info)
        except Exception as exc:  # noqa: BLE001 - one odd listing entry must not end the crawl
            return ModelRecord(
                id=str(getattr(info, "id", "?")),
                source="hub",
                status="broken",
                broken_reason="fetch_failed",
                broken_detail=self._scrub(f"unexpected: {short_error(exc)}"),
            )

    def _record_unsafe(self, info: Any) -> ModelRecord:
        tags = [str(t) for t in (info.tags or [])]
        base = dict(
            id=info.id,
            source="hub",
            downloads=info.downloads,
            likes=info.likes,
            pipeline_tag=info.pipeline_tag,
            library_name=info.library_name,
            tags=tags,
            sha=info.sha,
            last_modified=info.last_modified.isoformat() if getattr(info, "last_modified", None) else None,
        )
        pre = triage(info.id, None, tags=tags, instantiate=False)
        if pre.reason == "invalid_id":
            return ModelRecord(**base, status="broken", broken_reason="invalid_id", broken_detail=pre.detail)
        raw, reason, detail = self._fetch_config(info.id, info.sha)
        if reason:
            return ModelRecord(
                **base, status="broken", broken_reason=reason, broken_detail=self._scrub(detail)
            )
        decision = triage(info.id, raw, tags=tags)
        config_text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        return ModelRecord(
            **base,
            model_type=decision.model_type,
            architectures=decision.architectures,
            config=config_text,
            config_level="full",
            status=decision.status,
            broken_reason=decision.reason,
            broken_detail=decision.detail,
        )

    def _fetch_config(self, repo_id: str, sha: str | None) -> tuple[bytes | None, str | None, str]:
        """(config bytes, None, '') or (None, reason code, detail). Only ever fetches config.json."""
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            HFValidationError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )

        last = ""
        for attempt in range(self.opts.max_retries + 1):
            wait: float | None = None
            try:
                path = hf_hub_download(
                    repo_id,
                    "config.json",
                    revision=sha or None,
                    endpoint=self.endpoint,
                    token=self._token or False,
                    cache_dir=self.opts.cache_dir,
                )
                return Path(path).read_bytes(), None, ""
            except GatedRepoError as exc:
                return None, "gated_or_private", short_error(exc)
            except RepositoryNotFoundError as exc:
                status = getattr(getattr(exc, "response", None), "status_code", None)
                return None, "gated_or_private" if status in (401, 403) else "not_found", short_error(exc)
            except EntryNotFoundError as exc:
                if isinstance(exc, LocalEntryNotFoundError):  # network failed and nothing cached: retry
                    last = short_error(exc)
                else:
                    return None, "no_config", "config.json is not in the repository"
            except HFValidationError as exc:
                return None, "invalid_id", short_error(exc)
            except HfHubHTTPError as exc:
                response = getattr(exc, "response", None)
                status = getattr(response, "status_code", None)
                if status in (401, 403):
                    return None, "gated_or_private", short_error(exc)
                if status is not None and status < 500 and status not in (408, 429):
                    return None, "fetch_failed", short_error(exc)
                wait = _retry_after(response)
                last = short_error(exc)
            except (OSError, ValueError) as exc:  # transport errors, size/consistency checks
                last = short_error(exc)
            except Exception as exc:  # noqa: BLE001 - httpx transport errors and anything unforeseen
                last = short_error(exc)
            if attempt < self.opts.max_retries:
                backoff = min(self.opts.retry_max, self.opts.retry_base * (2**attempt))
                self.opts.sleep(min(self.opts.retry_max, wait) if wait is not None else backoff)
        return None, "fetch_failed", f"after {self.opts.max_retries + 1} attempts: {last}"

    def _scrub(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text


def _retry_after(response: Any) -> float | None:
    value = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None

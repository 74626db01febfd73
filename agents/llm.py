"""The optional LLM layer: an OpenAI-compatible endpoint consulted where rules run out.

Off unless configured (OPENAI_BASE_URL and/or OPENAI_API_KEY, plus HARNESS_LLM_MODEL;
contracts.settings.LLMSettings). This module is the client; three uses, each with a deterministic
rule default producing the same record type, live beside it:

1. agents.llm_traits `LLMClassifier.fill`: traits the rules leave unknown for a model_type
   transformers does not know;
2. agents.llm_triage `triage_broken`: explain and categorize why a model was filtered as broken;
3. agents.llm_groups `group_failures`: group failures by probable root cause for the nightly report.

Safety: configs, model cards and error messages are untrusted. They are sent as quoted data; the
answer must be JSON that validates against a pydantic schema whose values come from closed
vocabularies (trait values, reason codes, root-cause categories); anything else is rejected and the
rule result kept. Nothing an LLM returns is executed, evaluated, or used as a path, URL or command
(cache files are named by a hash of the input). The API key is never logged or written.

Every decision (input hash, model, prompt version, answer, accepted or rejected, fallback used) is
cached on disk keyed by its input, so reruns are reproducible and free, and logged to
DIR/llm_decisions.parquet. Transport failures (timeout, 429 after retries, 5xx) are logged but not
cached, so a later run may retry them. Retries with backoff are the openai client's own
(`max_retries`, honouring Retry-After); a run stops calling after a call or token budget, or
after `max_failures` transport failures in a row (a dead endpoint must not stall a nightly run).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from contracts.rulefiles import Rules, load_rules, resource
from contracts.settings import LLMSettings, current

DECISIONS_FILE = "llm_decisions.parquet"
_MAX_DATA_CHARS = 6000


# --------------------------------------------------------------------------------------------
# Settings, prompts, decisions
# --------------------------------------------------------------------------------------------


class Prompt(Rules):
    """A versioned prompt (agents/data/prompts/<name>.yaml): a decision records which one it used."""

    name: str
    version: int
    system: str
    user: str

    @property
    def tag(self) -> str:
        return f"{self.name}/v{self.version}"


@cache
def load_prompt(name: str) -> Prompt:
    """A versioned prompt from agents/data/prompts/<name>.yaml."""
    return load_rules(Prompt, resource("agents", f"data/prompts/{name}.yaml"))


@dataclass
class Decision:
    use: str  # classify | triage | group
    subject: str  # model id or group key the decision is about
    input_hash: str
    model: str
    prompt_version: str
    answer: str  # raw answer text (truncated), "" when no answer
    accepted: bool
    reason: str  # why rejected ("" when accepted)
    fallback_used: bool  # the rule result was kept
    cached: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    time: str = ""


def clip(text: Any, limit: int = _MAX_DATA_CHARS) -> str:
    s = text if isinstance(text, str) else json.dumps(text, sort_keys=True, default=str)
    s = "".join(ch for ch in s if ch in "\n\t" or ch.isprintable())
    return s if len(s) <= limit else s[:limit] + " …[truncated]"


def input_hash(use: str, model: str, prompt: Prompt, payload: Mapping[str, Any]) -> str:
    blob = json.dumps(
        {"use": use, "model": model, "prompt": prompt.tag, "payload": payload}, sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# Client
# --------------------------------------------------------------------------------------------


class LLMClient:
    """One run's connection to the endpoint: cache, budget and decision log."""

    def __init__(self, settings: LLMSettings, log_dir: str | Path | None = None) -> None:
        self.settings = settings
        self.log_dir = Path(log_dir) if log_dir else None
        self.cache = (settings.cache_dir or current().cache_dir) / "llm"
        self.decisions: list[Decision] = []
        self.calls = 0
        self.tokens = 0
        self.failures_in_row = 0
        self._client = None

    def __repr__(self) -> str:  # never show the key
        return f"LLMClient(model={self.settings.model!r}, base_url={self.settings.base_url!r})"

    def _openai(self):
        if self._client is None:
            from openai import OpenAI

            self._client = OpenAI(
                base_url=self.settings.base_url,
                api_key=self.settings.api_key or "unused",
                timeout=self.settings.timeout,
                max_retries=self.settings.max_retries,
            )
        return self._client

    def _cache_path(self, key: str) -> Path:
        return self.cache / key[:2] / f"{key}.json"  # named by hash only: no input reaches a path

    def ask(
        self,
        use: str,
        subject: str,
        prompt: Prompt,
        payload: Mapping[str, Any],
        fields: Mapping[str, str],
        schema: type[BaseModel],
        check: Callable[[BaseModel], str] | None = None,
    ) -> tuple[BaseModel | None, Decision]:
        """One question. Returns (validated answer or None, the decision). `fields` fills the prompt's
        user template; `check(answer)` returns a rejection reason ("" = fine) beyond the schema."""
        model = self.settings.model or ""
        key = input_hash(use, model, prompt, payload)
        base = dict(
            use=use,
            subject=subject,
            input_hash=key,
            model=model,
            prompt_version=prompt.tag,
            time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        cached = self._read_cache(key)
        if cached is not None:
            answer, reason = validate(cached["answer"], schema, check)
            d = Decision(
                **base,
                answer=cached["answer"],
                accepted=answer is not None,
                reason=reason,
                fallback_used=answer is None,
                cached=True,
            )
            return self._log(answer, d)
        if not self.settings.enabled:
            return self._log(
                None,
                Decision(**base, answer="", accepted=False, reason="llm not configured", fallback_used=True),
            )
        if self.calls >= self.settings.max_calls or self.tokens >= self.settings.max_tokens:
            return self._log(
                None,
                Decision(**base, answer="", accepted=False, reason="budget exhausted", fallback_used=True),
            )
        if self.failures_in_row >= self.settings.max_failures:  # a dead endpoint must not stall the run
            return self._log(
                None,
                Decision(
                    **base,
                    answer="",
                    accepted=False,
                    fallback_used=True,
                    reason=f"endpoint unavailable ({self.failures_in_row} failures in a row)",
                ),
            )
        self.calls += 1
        start = time.monotonic()
        try:
            resp = self._openai().chat.completions.create(
                model=model,
                temperature=0,
                response_format={"type": "json_object"},
                max_tokens=800,
                messages=[
                    {"role": "system", "content": prompt.system},
                    {"role": "user", "content": prompt.user.format(**fields)},
                ],
            )
        except Exception as exc:  # noqa: BLE001 - any transport failure falls back to the rule
            self.failures_in_row += 1
            return self._log(
                None,
                Decision(
                    **base,
                    answer="",
                    accepted=False,
                    reason=_transport_reason(exc),
                    fallback_used=True,
                    seconds=time.monotonic() - start,
                ),
            )
        self.failures_in_row = 0
        usage = getattr(resp, "usage", None)
        pt, ct = (getattr(usage, "prompt_tokens", 0) or 0), (getattr(usage, "completion_tokens", 0) or 0)
        self.tokens += pt + ct
        content = ""
        if resp.choices:
            content = resp.choices[0].message.content or ""
        content = clip(content, 4000)
        self._write_cache(key, {"answer": content, "model": model, "prompt_version": prompt.tag})
        answer, reason = validate(content, schema, check)
        return self._log(
            answer,
            Decision(
                **base,
                answer=content,
                accepted=answer is not None,
                reason=reason,
                fallback_used=answer is None,
                prompt_tokens=pt,
                completion_tokens=ct,
                seconds=time.monotonic() - start,
            ),
        )

    def _log(self, answer, decision: Decision):
        self.decisions.append(decision)
        return answer, decision

    def _read_cache(self, key: str) -> dict | None:
        try:
            data = json.loads(self._cache_path(key).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and isinstance(data.get("answer"), str) else None

    def _write_cache(self, key: str, data: dict) -> None:
        path = self._cache_path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
        except OSError:
            pass

    def write_log(self, directory: str | Path | None = None) -> Path | None:
        """Append this run's decisions to DIR/llm_decisions.parquet."""
        import pandas as pd

        d = Path(directory) if directory else self.log_dir
        if d is None or not self.decisions:
            return None
        path = d / DECISIONS_FILE
        frame = pd.DataFrame([asdict(x) for x in self.decisions])
        if path.exists():
            frame = pd.concat([pd.read_parquet(path), frame], ignore_index=True)
        tmp = path.with_suffix(".parquet.tmp")
        frame.to_parquet(tmp, index=False)
        tmp.replace(path)
        return path

    def close(self) -> None:
        self.write_log()
        self.decisions = []
        if self._client is not None:
            self._client.close()
            self._client = None


def _transport_reason(exc: Exception) -> str:
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limited (429)"
    if isinstance(exc, openai.APIStatusError):
        return f"http {exc.status_code}"
    if isinstance(exc, openai.APIConnectionError):
        return "connection error"
    return f"error: {type(exc).__name__}"


def validate(content: str, schema: type[BaseModel], check) -> tuple[BaseModel | None, str]:
    try:
        obj = json.loads(content)
    except ValueError:
        return None, "malformed JSON"
    try:
        answer = schema.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        return None, f"schema: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"[:300]
    reason = check(answer) if check else ""
    return (None, reason) if reason else (answer, "")


def run_with_llm(
    log_dir: str | os.PathLike, use: Callable[[LLMClient | None], Any], *, enabled: bool = True
) -> tuple[Any, str, bool]:
    """Run ``use(client)`` with the LLM client the environment configures, else ``use(None)``.

    The one place the product's callers (crawl triage, report grouping) get an LLM: a bad setting,
    an unforeseen failure on the LLM path or an unwritable decision log never stops the caller;
    the rules' answer is used and the reason returned. Returns (result, note, llm consulted).
    """
    client, note = None, ""
    if enabled:
        try:
            settings = LLMSettings.from_env()
        except ValueError as exc:  # a bad HARNESS_LLM_* number must not stop the caller
            note = f"llm settings ignored: {exc}"
        else:
            client = LLMClient(settings, log_dir=log_dir) if settings.enabled else None
    try:
        try:
            result = use(client)
        except Exception as exc:
            if client is None:
                raise
            note = f"llm failed, rules used: {type(exc).__name__}: {exc}"[:300]
            result = use(None)
    finally:
        if client is not None:
            try:
                client.close()  # writes the decision log
            except Exception as exc:  # noqa: BLE001 - an unwritable log is no failure of the caller
                note = note or f"llm decision log not written: {type(exc).__name__}: {exc}"[:300]
    return result, note, client is not None

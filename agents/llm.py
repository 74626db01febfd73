"""The optional LLM layer: an OpenAI-compatible endpoint consulted where rules run out.

Off unless configured (OPENAI_BASE_URL and/or OPENAI_API_KEY, plus HARNESS_LLM_MODEL). Three uses,
each with a deterministic rule default producing the same record type:

1. `LLMClassifier.fill`: traits the rules leave unknown for a model_type transformers does not know;
2. `triage_broken`: explain and categorize why a model was filtered as broken;
3. `group_failures`: group failures by probable root cause for the nightly report.

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
import re
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.traits import TRAIT_NAMES
from agents.vocabulary import UNKNOWN, allowed_values
from contracts.settings import LLMSettings, current

DECISIONS_FILE = "llm_decisions.parquet"
_MAX_DATA_CHARS = 6000


# --------------------------------------------------------------------------------------------
# Settings, prompts, decisions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    name: str
    version: int
    system: str
    user: str

    @property
    def tag(self) -> str:
        return f"{self.name}/v{self.version}"


@lru_cache(maxsize=None)
def load_prompt(name: str) -> Prompt:
    """A versioned prompt from agents/data/prompts/<name>.yaml."""
    text = resources.files("agents").joinpath("data", "prompts", f"{name}.yaml").read_text()
    d = yaml.safe_load(text)
    return Prompt(d["name"], int(d["version"]), d["system"], d["user"])


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


def _clip(text: Any, limit: int = _MAX_DATA_CHARS) -> str:
    s = text if isinstance(text, str) else json.dumps(text, sort_keys=True, default=str)
    s = "".join(ch for ch in s if ch in "\n\t" or ch.isprintable())
    return s if len(s) <= limit else s[:limit] + " …[truncated]"


def input_hash(use: str, model: str, prompt: Prompt, payload: Mapping[str, Any]) -> str:
    blob = json.dumps({"use": use, "model": model, "prompt": prompt.tag, "payload": payload}, sort_keys=True,
                      default=str)
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

            self._client = OpenAI(base_url=self.settings.base_url, api_key=self.settings.api_key or "unused",
                                  timeout=self.settings.timeout, max_retries=self.settings.max_retries)
        return self._client

    def _cache_path(self, key: str) -> Path:
        return self.cache / key[:2] / f"{key}.json"  # named by hash only: no input reaches a path

    def ask(self, use: str, subject: str, prompt: Prompt, payload: Mapping[str, Any], fields: Mapping[str, str],
            schema: type[BaseModel], check: Callable[[BaseModel], str] | None = None) -> tuple[BaseModel | None, Decision]:
        """One question. Returns (validated answer or None, the decision). `fields` fills the prompt's
        user template; `check(answer)` returns a rejection reason ("" = fine) beyond the schema."""
        model = self.settings.model or ""
        key = input_hash(use, model, prompt, payload)
        base = dict(use=use, subject=subject, input_hash=key, model=model, prompt_version=prompt.tag,
                    time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        cached = self._read_cache(key)
        if cached is not None:
            answer, reason = _validate(cached["answer"], schema, check)
            d = Decision(**base, answer=cached["answer"], accepted=answer is not None, reason=reason,
                         fallback_used=answer is None, cached=True)
            return self._log(answer, d)
        if not self.settings.enabled:
            return self._log(None, Decision(**base, answer="", accepted=False, reason="llm not configured", fallback_used=True))
        if self.calls >= self.settings.max_calls or self.tokens >= self.settings.max_tokens:
            return self._log(None, Decision(**base, answer="", accepted=False, reason="budget exhausted",
                                            fallback_used=True))
        if self.failures_in_row >= self.settings.max_failures:  # a dead endpoint must not stall the run
            return self._log(None, Decision(**base, answer="", accepted=False, fallback_used=True,
                                            reason=f"endpoint unavailable ({self.failures_in_row} failures in a row)"))
        self.calls += 1
        start = time.monotonic()
        try:
            resp = self._openai().chat.completions.create(
                model=model, temperature=0, response_format={"type": "json_object"}, max_tokens=800,
                messages=[{"role": "system", "content": prompt.system},
                          {"role": "user", "content": prompt.user.format(**fields)}])
        except Exception as exc:  # noqa: BLE001 - any transport failure falls back to the rule
            self.failures_in_row += 1
            return self._log(None, Decision(**base, answer="", accepted=False, reason=_transport_reason(exc),
                                            fallback_used=True, seconds=time.monotonic() - start))
        self.failures_in_row = 0
        usage = getattr(resp, "usage", None)
        pt, ct = (getattr(usage, "prompt_tokens", 0) or 0), (getattr(usage, "completion_tokens", 0) or 0)
        self.tokens += pt + ct
        content = ""
        if resp.choices:
            content = resp.choices[0].message.content or ""
        content = _clip(content, 4000)
        self._write_cache(key, {"answer": content, "model": model, "prompt_version": prompt.tag})
        answer, reason = _validate(content, schema, check)
        return self._log(answer, Decision(**base, answer=content, accepted=answer is not None, reason=reason,
                                          fallback_used=answer is None, prompt_tokens=pt, completion_tokens=ct,
                                          seconds=time.monotonic() - start))

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


def _validate(content: str, schema: type[BaseModel], check) -> tuple[BaseModel | None, str]:
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


# --------------------------------------------------------------------------------------------
# Use 1: traits the rules leave unknown
# --------------------------------------------------------------------------------------------


class TraitAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    traits: dict[str, str]


def _known_heads() -> set[str]:
    from agents.catalog import head_table

    return {h.head for h in head_table()}


def check_traits(answer: TraitAnswer, asked: Iterable[str]) -> str:
    """Rejection reason for an answer naming a trait not asked or a value outside the vocabulary."""
    asked = set(asked)
    for trait, value in answer.traits.items():
        if trait not in asked:
            return f"trait not asked: {_clip(trait, 60)}"
        allowed = allowed_values(trait) if trait != "head" else _known_heads() | {UNKNOWN}
        if allowed is None or value not in allowed:
            return f"out of vocabulary: {trait}={_clip(value, 60)}"
    return ""


class LLMClassifier:
    """Fills traits the rules left unknown; rule values are never overwritten."""

    def __init__(self, settings: LLMSettings | None = None, log_dir: str | Path | None = None,
                 client: LLMClient | None = None) -> None:
        self.client = client or LLMClient(settings or LLMSettings.from_env(), log_dir)

    def fill(self, row: Mapping[str, Any], traits: Mapping[str, str]) -> dict[str, str]:
        asked = [t for t in TRAIT_NAMES if traits.get(t) == UNKNOWN and t != "model_type"]
        out = dict(traits)
        if not asked:
            return out
        allowed = {t: sorted(allowed_values(t) or _known_heads() | {UNKNOWN}) for t in asked}
        archs = row.get("architectures")
        archs = [str(a) for a in archs] if archs is not None and not isinstance(archs, str) else []
        config = row.get("config") if isinstance(row.get("config"), str) else json.dumps(row.get("config") or {})
        card = row.get("card") or row.get("model_card") or ""
        payload = {"model_type": traits.get("model_type"), "architectures": archs, "config": config,
                   "card": card, "asked": asked}
        fields = {"model_type": _clip(traits.get("model_type"), 100), "architectures": _clip(archs, 300),
                  "allowed": "\n".join(f"  {t}: {', '.join(v)}" for t, v in allowed.items()),
                  "config": _clip(config), "card": _clip(card, 4000)}
        answer, _ = self.client.ask("classify", str(row.get("id", "")), load_prompt("classify_traits"), payload,
                                    fields, TraitAnswer, lambda a: check_traits(a, asked))
        if answer is not None:
            for t, v in answer.traits.items():
                if out.get(t) == UNKNOWN:
                    out[t] = v
        return out

    def close(self) -> None:
        self.client.close()


# --------------------------------------------------------------------------------------------
# Use 2: broken-model triage
# --------------------------------------------------------------------------------------------


@dataclass
class TriageRecord:
    id: str
    category: str  # a reason code of agents/triage_rules.yaml
    explanation: str
    source: str  # rules | llm


class TriageAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    category: str
    explanation: str = Field(max_length=600)


def _reason_codes() -> dict[str, str]:
    from agents.triage import describe, reason_codes

    return {c: describe(c) for c in reason_codes()}


def triage_broken(records: Iterable[Mapping[str, Any]], client: LLMClient | None = None) -> list[TriageRecord]:
    """Explain each broken record (id, broken_reason, broken_detail, config). Rule default: the
    reason code and its description; with an LLM, a validated category and a short explanation."""
    codes = _reason_codes()
    out = []
    for r in records:
        code = str(r.get("broken_reason") or "unspecified")
        detail = str(r.get("broken_detail") or "")
        rule = TriageRecord(str(r.get("id")), code, f"{codes.get(code, code)}{': ' + _clip(detail, 200) if detail else ''}",
                            "rules")
        if client is None or not client.settings.enabled:
            out.append(rule)
            continue
        payload = {"id": rule.id, "reason": code, "detail": detail, "config": _clip(r.get("config") or "", 1500)}
        fields = {"reason": code, "reason_description": codes.get(code, ""), "model_id": _clip(rule.id, 200),
                  "categories": "\n".join(f"  {c}: {d}" for c, d in codes.items()),
                  "detail": _clip(detail, 1500), "config": _clip(r.get("config") or "", 1500)}

        def check(a: TriageAnswer) -> str:
            return "" if a.category in codes else f"out of vocabulary: category={_clip(a.category, 60)}"

        answer, _ = client.ask("triage", rule.id, load_prompt("triage_broken"), payload, fields, TriageAnswer, check)
        out.append(TriageRecord(rule.id, answer.category, _clip(answer.explanation, 600), "llm") if answer else rule)
    return out


# --------------------------------------------------------------------------------------------
# Use 3: failure grouping
# --------------------------------------------------------------------------------------------


@dataclass
class FailureGroup:
    group_id: str
    root_cause: str  # a category of agents/data/failure_causes.yaml
    summary: str
    members: list[str]  # model / case ids
    source: str  # rules | llm


class GroupItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_ids: list[str] = Field(min_length=1)
    root_cause: str
    summary: str = Field(default="", max_length=400)


class GroupAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: list[GroupItem]


@lru_cache(maxsize=1)
def failure_causes() -> dict[str, dict[str, str]]:
    text = resources.files("agents").joinpath("data", "failure_causes.yaml").read_text()
    return yaml.safe_load(text)["categories"]


def normalize_message(message: str) -> str:
    """A message with addresses, numbers and paths blurred, so equal failures group together."""
    s = re.sub(r"0x[0-9a-fA-F]+", "0x?", message or "")
    s = re.sub(r"(/[\w.\-]+)+", "<path>", s)
    s = re.sub(r"\d+", "N", s)
    return " ".join(s.split())[:160]


def rule_root_cause(stage: str, error_class: str, failing_op: str, message: str) -> str:
    text = f"{stage} {error_class} {failing_op} {message}".lower()
    for name, spec in failure_causes().items():
        if re.search(spec["pattern"], text):
            return name
    return "other"


def group_failures(failures: Iterable[Mapping[str, Any]], client: LLMClient | None = None) -> list[FailureGroup]:
    """Group failures (id, stage, error_class, failing_op, message). Rule default: equal
    (stage, error class, op, normalized message) form a group, named by keyword rules; an LLM
    may merge groups and name their root cause from the closed category list."""
    buckets: dict[tuple, list[str]] = {}
    for f in failures:
        k = (str(f.get("stage") or ""), str(f.get("error_class") or ""), str(f.get("failing_op") or ""),
             normalize_message(str(f.get("message") or "")))
        buckets.setdefault(k, []).append(str(f.get("id")))
    rule_groups: dict[str, FailureGroup] = {}
    for n, (k, members) in enumerate(sorted(buckets.items(), key=lambda kv: (-len(kv[1]), kv[0]))):
        gid = f"g{n + 1}"
        rule_groups[gid] = FailureGroup(gid, rule_root_cause(*k), " / ".join(x for x in k if x)[:200], sorted(members),
                                        "rules")
    if client is None or not client.settings.enabled or not rule_groups:
        return list(rule_groups.values())
    causes = failure_causes()
    payload = {gid: [g.summary, len(g.members)] for gid, g in rule_groups.items()}
    fields = {"categories": "\n".join(f"  {c}: {s['doc']}" for c, s in causes.items()),
              "groups": _clip("\n".join(f"{gid}: {g.summary} ({len(g.members)} models)"
                                        for gid, g in rule_groups.items()))}

    def check(a: GroupAnswer) -> str:
        seen: set[str] = set()
        for item in a.groups:
            if item.root_cause not in causes:
                return f"out of vocabulary: root_cause={_clip(item.root_cause, 60)}"
            for gid in item.group_ids:
                if gid not in rule_groups:
                    return f"unknown group id: {_clip(gid, 40)}"
                if gid in seen:
                    return f"group id used twice: {gid}"
                seen.add(gid)
        return ""

    answer, _ = client.ask("group", "failures", load_prompt("group_failures"), payload, fields, GroupAnswer, check)
    if answer is None:
        return list(rule_groups.values())
    out, used = [], set()
    for n, item in enumerate(answer.groups):
        members = sorted(m for gid in item.group_ids for m in rule_groups[gid].members)
        out.append(FailureGroup(f"llm{n + 1}", item.root_cause, _clip(item.summary, 400), members, "llm"))
        used.update(item.group_ids)
    out.extend(g for gid, g in rule_groups.items() if gid not in used)
    return out


def run_with_llm(log_dir: str | os.PathLike, use: Callable[[LLMClient | None], Any], *,
                 enabled: bool = True) -> tuple[Any, str, bool]:
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
        except Exception as exc:  # noqa: BLE001 - the LLM path failed unforeseen: rules only
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

"""Broken-model triage: decide, from what a source saw, whether a model can be built, and why not.

The reason codes and their order live in triage_rules.yaml; this module implements one check per
code. Triage never raises on bad input: every outcome is a TriageDecision (not a comparison
verdict: contracts.status.Verdict is that). Custom code is never fetched:
a config that needs it (auto_map/custom_code for a type or class transformers lacks) is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from agents import catalog
from agents.quiet import quiet_transformers
from contracts.rulefiles import Rules, cached_rules, resource


@dataclass
class TriageDecision:
    """Whether a model can be built, and why not: the crawl store's status and broken_reason."""

    status: str  # ok | broken
    reason: str | None = None
    detail: str = ""
    model_type: str | None = None
    architectures: list[str] = field(default_factory=list)
    config: dict[str, Any] | None = None  # parsed config (None when absent or not JSON)
    inferred_model_type: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# Private control flow: raised by a triage check, caught in this module and recorded as a reason code.
class _Broken(Exception):
    def __init__(self, code: str, detail: str):
        super().__init__(code, detail)
        self.code, self.detail = code, detail


class ReasonCode(Rules):
    code: str
    description: str


class RemoteCodeMarkers(Rules):
    """Markers that a config wants remote code (they refuse a model only when transformers cannot
    build it natively)."""

    config_keys: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


class TriageRules(Rules):
    """agents/triage_rules.yaml: the config rules in the order they are checked, the codes a source
    sets while fetching, and the remote-code markers."""

    config_rules: tuple[ReasonCode, ...]
    fetch_codes: tuple[ReasonCode, ...] = ()
    remote_code: RemoteCodeMarkers = RemoteCodeMarkers()


def rules() -> TriageRules:
    return cached_rules(TriageRules, str(resource("agents", "triage_rules.yaml")))


def reason_codes() -> list[str]:
    """Every broken_reason the store may contain."""
    r = rules()
    return [x.code for x in (*r.config_rules, *r.fetch_codes)]


def describe(code: str) -> str:
    r = rules()
    return next((x.description for x in (*r.config_rules, *r.fetch_codes) if x.code == code), "")


def short_error(exc: BaseException, limit: int = 300) -> str:
    """Exception type + a one-line message, for broken_detail."""
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}"[:limit]


@dataclass
class _Ctx:
    model_id: str
    raw: Any
    model_type: str | None
    architectures: list[str]
    tags: list[str]
    instantiate: bool
    config: dict[str, Any] | None = None
    inferred: bool = False


def _check_invalid_id(c: _Ctx) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if c.model_id.startswith(catalog.CATALOG_PREFIX):
        return
    try:
        validate_repo_id(c.model_id)
    except HFValidationError as exc:
        raise _Broken("invalid_id", short_error(exc)) from None


def _check_config_not_json(c: _Ctx) -> None:
    raw = c.raw
    if raw is None:
        return
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Broken("config_not_json", short_error(exc)) from None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise _Broken("config_not_json", short_error(exc)) from None
    if not isinstance(raw, dict):
        raise _Broken("config_not_json", f"config is a JSON {type(raw).__name__}, not an object")
    c.config = raw
    if not c.model_type and isinstance(raw.get("model_type"), str):
        c.model_type = raw["model_type"]
    if not c.architectures and isinstance(raw.get("architectures"), list):
        c.architectures = [a for a in raw["architectures"] if isinstance(a, str)]


def _check_no_config(c: _Ctx) -> None:
    if c.config is None and not c.model_type and not c.architectures:
        raise _Broken("no_config", "no config.json, model_type or architectures known")


def _remote_code_markers(c: _Ctx) -> list[str]:
    spec = rules().remote_code
    found = [k for k in spec.config_keys if c.config and k in c.config]
    found += [f"tag {t}" for t in spec.tags if t in c.tags]
    return found


def _check_trust_remote_code(c: _Ctx) -> None:
    markers = _remote_code_markers(c)
    if not markers:
        return
    native_type = bool(c.model_type) and c.model_type in catalog.model_types()
    native_arch = all(catalog.is_known_architecture(a) for a in c.architectures)
    if native_type and native_arch:
        return  # transformers builds it natively; with trust_remote_code=False the markers are ignored
    missing = [a for a in c.architectures if not catalog.is_known_architecture(a)]
    what = (
        f"model_type {c.model_type!r} unknown"
        if not native_type
        else f"classes {missing} not in transformers"
    )
    raise _Broken("trust_remote_code", f"{', '.join(markers)}; {what}")


def _check_missing_model_type(c: _Ctx) -> None:
    if c.model_type:
        return
    inferred, candidates = catalog.infer_model_type(c.architectures)
    if inferred:
        c.model_type, c.inferred = inferred, True
        return
    detail = "config has no model_type"
    if candidates:
        detail += f"; architectures fit several types {candidates}"
    elif c.architectures:
        raise _Broken(
            "architecture_missing", f"{c.architectures} not in the installed transformers (and no model_type)"
        )
    raise _Broken("missing_model_type", detail)


def _check_unknown_model_type(c: _Ctx) -> None:
    if c.model_type not in catalog.model_types():
        raise _Broken("unknown_model_type", f"model_type {c.model_type!r} not in transformers CONFIG_MAPPING")


def _check_architecture_missing(c: _Ctx) -> None:
    missing = [a for a in c.architectures if not catalog.is_known_architecture(a)]
    if missing:
        raise _Broken("architecture_missing", f"{missing} not in the installed transformers")


def _check_config_not_instantiable(c: _Ctx) -> None:
    if not c.instantiate or not c.config:
        return
    error = instantiation_error(c.model_type, c.config)
    if error:
        raise _Broken("config_not_instantiable", error)


def instantiation_error(model_type: str, config: dict[str, Any]) -> str:
    """'' when the type's config class accepts `config`, else a one-line reason (memoized)."""
    try:
        key = json.dumps(config, sort_keys=True, default=str)
    except (TypeError, ValueError) as exc:
        return short_error(exc)
    return _instantiation_error(model_type, key)


@lru_cache(maxsize=65536)
def _instantiation_error(model_type: str, config_json: str) -> str:
    from transformers import CONFIG_MAPPING

    # cls(**dict) is what from_dict does, minus its eager repr() for a log line (half the cost).
    try:
        with quiet_transformers():
            CONFIG_MAPPING[model_type](**json.loads(config_json))
    except Exception as exc:  # noqa: BLE001 - a rejected config is data, not a crash
        return short_error(exc)
    return ""


_CHECKS: dict[str, Callable[[_Ctx], None]] = {
    "invalid_id": _check_invalid_id,
    "config_not_json": _check_config_not_json,
    "no_config": _check_no_config,
    "trust_remote_code": _check_trust_remote_code,
    "missing_model_type": _check_missing_model_type,
    "unknown_model_type": _check_unknown_model_type,
    "architecture_missing": _check_architecture_missing,
    "config_not_instantiable": _check_config_not_instantiable,
}


def triage(
    model_id: str,
    config: Any,
    *,
    model_type: str | None = None,
    architectures: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
    instantiate: bool = True,
) -> TriageDecision:
    """Run the config rules in order; the first that fires decides.

    `config` is raw text/bytes (as downloaded), a dict, or None. `model_type`/`architectures` are
    what a listing said when the config itself lacks them.
    """
    ctx = _Ctx(
        model_id,
        config,
        model_type or None,
        [a for a in (architectures or []) if isinstance(a, str)],
        list(tags or []),
        instantiate,
    )
    for rule in rules().config_rules:
        check = _CHECKS.get(rule.code)
        if check is None:
            raise KeyError(f"triage_rules.yaml names {rule.code!r} but triage.py has no check for it")
        try:
            check(ctx)
        except _Broken as b:
            return TriageDecision(
                "broken", b.code, b.detail, ctx.model_type, ctx.architectures, ctx.config, ctx.inferred
            )
    return TriageDecision("ok", None, "", ctx.model_type, ctx.architectures, ctx.config, ctx.inferred)

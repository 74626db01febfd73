"""Every HARNESS_* environment variable and harness default, resolved in one place.

    from contracts.settings import current
    current().registry         # $HARNESS_REGISTRY as a Path, or None
    current().baseline_dir     # $HARNESS_BASELINE_DIR, else ./baseline

`current()` reads the environment when called (tests and CLIs change it); each property applies
its rule (default, type, error message) here and nowhere else. A malformed value raises a
ValueError naming the variable when that setting is used, so a bad LLM timeout never stops a run
that does not use the LLM.

NEURON_* variables belong to the device: the bundled backend reads them all in backend/settings.py, and
the harness asks the backend adapter (contracts.backends: precision_mode(), describe()), never
the environment.

| variable | setting | default |
|---|---|---|
| HARNESS_REGISTRY | registry | None (the bundled registry) |
| HARNESS_BASELINE_DIR | baseline_dir | ./baseline |
| HARNESS_CACHE_DIR | cache_dir | the user cache dir (platformdirs) / neuron-coverage-harness |
| HARNESS_LISTING_CACHE | listing_cache | on (`0`/`off`/`false`: list every tier afresh; listing_cache) |
| HARNESS_EXPECTATIONS | expectations | None (the bundled expectations of the backend) |
| HARNESS_UPSTREAM_SKIPS | upstream_skips | None (the bundled upstream-tier skip list of the backend) |
| HARNESS_BACKEND | backend | neuron (the pytest unit-tier suite) |
| HARNESS_SHARED_DATA | shared_data | ../shared/data beside the checkout |
| HARNESS_REPLAY_MAX_NUMEL | replay_max_numel | 262,144 elements per replayed case (registry.scaling) |
| HARNESS_RECORD_FAKE_MIN_PARAMS | record_fake_min_params | 20,000,000 parameters |
| HARNESS_CASE_LIMIT_FACTOR | case_limit_factor | 3 (a case's limit: this x its baseline seconds) |
| HARNESS_CASE_LIMIT_FLOOR | case_limit_floor | 30 s (the least limit from baseline seconds: cold starts) |
| HARNESS_MARKED_OP_LIMIT | marked_op_limit | 5 s (the limit of a case labeled with an op known to hang) |
| HARNESS_STALL_SECONDS | stall_seconds | 10 s (journaled: a call this long with none after it is a hang) |
| HARNESS_CALL_JOURNAL | call_journal | on (`0`/`off`/`false`: a dead case is not re-run journaled) |
| HARNESS_ROOT_CAUSE | root_cause | on (`0`/`off`: backend-blamed rows are not localized; harness.rootcause) |
| HARNESS_ROOT_CAUSE_SECONDS | root_cause_seconds | 180 s per row: localize a failure, verify its repro |
| HARNESS_REPRO_SECONDS | repro_seconds | 120 s per run of a repro file (the first starts the verifier) |
| OPENAI_BASE_URL, OPENAI_API_KEY, HARNESS_LLM_* | LLMSettings.from_env() | off |

The five limits of a run (harness.engine.limits, docs/runner.md "Hangs and crashes"): a chunk's
limit is the factor times what its cases took in the baseline, at least the floor, at most the
tier's; a case killed at such a limit is re-run under the tier's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.tiers import Tier, tier_option

_ROOT = Path(__file__).resolve().parent.parent

#: Worker limits when neither the command line nor the tier says (harness.engine.workers, .runner).
DEFAULT_CASE_TIMEOUT = 600.0  # seconds per case (a chunk of cases gets one case's time)
DEFAULT_MAX_CASES_PER_WORKER = 100  # recycle the worker process after this many cases
DEFAULT_STARTUP_TIMEOUT = 300.0  # spawn + tier.setup (imports torch, transformers)
DEFAULT_WORKER_MEMORY = 8 << 30  # RSS watchdog, bytes


@dataclass(frozen=True)
class TierLimits:
    """A tier's declared defaults (overridden by --timeout / --max-cases-per-worker)."""

    timeout: float = DEFAULT_CASE_TIMEOUT
    max_cases_per_worker: int = DEFAULT_MAX_CASES_PER_WORKER


#: The built-in tiers' defaults: an op takes milliseconds (a chunk of 64 gets 120 s, and a worker
#: replays 20,000 before a restart costs a torch import); a model case takes seconds to minutes.
TIER_LIMITS: dict[str, TierLimits] = {
    "unit": TierLimits(timeout=120.0, max_cases_per_worker=20_000),
    "representative": TierLimits(timeout=900.0),
    "full": TierLimits(timeout=300.0),
    # an op_db sample takes milliseconds; a restart costs importing torch and op_db (~10 s)
    "upstream": TierLimits(timeout=120.0, max_cases_per_worker=200_000),
}


def resolve_limits(
    tier: Tier, timeout: float | None = None, max_cases: int | None = None
) -> tuple[float, int]:
    """(timeout, max_cases_per_worker) of a run: explicit values, else the tier's declared ones
    (options `timeout`, `max_cases_per_worker` of a tier plug-in), else the defaults."""
    return (
        float(timeout or tier_option(tier, "timeout") or DEFAULT_CASE_TIMEOUT),
        int(max_cases or tier_option(tier, "max_cases_per_worker") or DEFAULT_MAX_CASES_PER_WORKER),
    )


def _number(env: Mapping[str, str], name: str, default: Any, kind: type = float) -> Any:
    raw = env.get(name)
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name, default)
    if value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {env.get(name)!r}")
    return value


def _switch(env: Mapping[str, str], name: str) -> bool:
    """On unless the variable says 0, off, false or no."""
    return (env.get(name) or "on").strip().lower() not in ("0", "off", "false", "no")


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name)
    return Path(raw) if raw else None


@dataclass(frozen=True)
class Settings:
    """The harness's settings from one environment snapshot (see the module docstring)."""

    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        return cls(os.environ if env is None else dict(env))  # os.environ itself: read live, no copy

    @property
    def registry(self) -> Path | None:
        return _path(self.env, "HARNESS_REGISTRY")

    @property
    def baseline_dir(self) -> Path:
        return _path(self.env, "HARNESS_BASELINE_DIR") or Path.cwd() / "baseline"

    @property
    def cache_dir(self) -> Path:
        explicit = _path(self.env, "HARNESS_CACHE_DIR")
        if explicit:
            return explicit
        import platformdirs

        return Path(platformdirs.user_cache_dir("neuron-coverage-harness"))

    @property
    def listing_cache(self) -> bool:
        return (self.env.get("HARNESS_LISTING_CACHE") or "on").strip().lower() not in (
            "0",
            "off",
            "false",
            "no",
        )

    @property
    def expectations(self) -> Path | None:
        return _path(self.env, "HARNESS_EXPECTATIONS")

    @property
    def upstream_skips(self) -> Path | None:
        return _path(self.env, "HARNESS_UPSTREAM_SKIPS")

    @property
    def backend(self) -> str:
        return self.env.get("HARNESS_BACKEND") or "neuron"

    @property
    def shared_data(self) -> Path:
        return _path(self.env, "HARNESS_SHARED_DATA") or _ROOT.parent / "shared" / "data"

    @property
    def replay_max_numel(self) -> int:
        return _number(self.env, "HARNESS_REPLAY_MAX_NUMEL", 2**18, int)

    @property
    def record_fake_min_params(self) -> int:
        return _number(self.env, "HARNESS_RECORD_FAKE_MIN_PARAMS", 20_000_000, int)

    @property
    def case_limit_factor(self) -> float:
        return _positive(self.env, "HARNESS_CASE_LIMIT_FACTOR", 3.0)

    @property
    def case_limit_floor(self) -> float:
        return _positive(self.env, "HARNESS_CASE_LIMIT_FLOOR", 30.0)

    @property
    def marked_op_limit(self) -> float:
        return _positive(self.env, "HARNESS_MARKED_OP_LIMIT", 5.0)

    @property
    def stall_seconds(self) -> float:
        return _positive(self.env, "HARNESS_STALL_SECONDS", 10.0)

    @property
    def call_journal(self) -> bool:
        return _switch(self.env, "HARNESS_CALL_JOURNAL")

    @property
    def root_cause(self) -> bool:
        return _switch(self.env, "HARNESS_ROOT_CAUSE")

    @property
    def root_cause_seconds(self) -> float:
        return _positive(self.env, "HARNESS_ROOT_CAUSE_SECONDS", 180.0)

    @property
    def repro_seconds(self) -> float:
        return _positive(self.env, "HARNESS_REPRO_SECONDS", 120.0)

    def llm(self) -> LLMSettings:
        return LLMSettings.from_env(self.env)


def current() -> Settings:
    """The settings of the environment as it is now."""
    return Settings.from_env()


@dataclass
class LLMSettings:
    """The optional LLM layer (agents.llm): off unless a model and an endpoint or key are set."""

    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    timeout: float = 30.0
    max_retries: int = 2
    max_calls: int = 200
    max_tokens: int = 200_000
    max_failures: int = 3  # consecutive transport failures before the run stops calling
    cache_dir: Path | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.model) and bool(self.base_url or self.api_key)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LLMSettings:
        env = os.environ if env is None else env
        return cls(
            base_url=env.get("OPENAI_BASE_URL") or None,
            api_key=env.get("OPENAI_API_KEY") or None,
            model=env.get("HARNESS_LLM_MODEL") or None,
            timeout=_number(env, "HARNESS_LLM_TIMEOUT", 30.0),
            max_retries=_number(env, "HARNESS_LLM_MAX_RETRIES", 2, int),
            max_calls=_number(env, "HARNESS_LLM_MAX_CALLS", 200, int),
            max_tokens=_number(env, "HARNESS_LLM_MAX_TOKENS", 200_000, int),
            max_failures=_number(env, "HARNESS_LLM_MAX_FAILURES", 3, int),
            cache_dir=_path(env, "HARNESS_CACHE_DIR"),
        )

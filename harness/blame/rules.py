"""Whose failure is it: the rules that give every stage row that does not pass a `blame`.

    backend      the reference backend (cpu) passes what the device failed
    upstream     transformers itself fails, whatever the harness chose (harness.blame.probe)
    environment  an optional package is missing here
    harness      everything else that fails on the reference: the harness' own debt

This module holds the row-level rules (no torch): what is neutral (not applicable), what a
not-attempted row inherits, the tiers whose cases carry a CPU reference of their own (unit,
upstream), worker deaths, and blaming a device row by the same case's reference outcome. The
rules are data: harness/data/blame_rules.yaml; docs/blame.md explains them. The re-run on the
reference and the upstream probes, which need torch and transformers, are harness.blame.probe.

    complete_outcome(outcome, backend="neuron", reference=cpu_outcome)   # fills stage dicts in place
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, field_validator

from contracts.records import CaseOutcome
from contracts.rulefiles import Regex, Rules, cached_rules, resource
from contracts.status import FAILING_VALUES, STATUS_VALUES, Blame, Status

PASS = Status.PASS.value


def _statuses(value: tuple[str, ...]) -> tuple[str, ...]:
    bad = [s for s in value if s not in STATUS_VALUES]
    if bad:
        raise ValueError(f"unknown status {bad}")
    return value


class BuiltinRule(Rules):
    """A row rule of a tier whose cases carry their own CPU reference (`builtin_reference`)."""

    status: Annotated[tuple[str, ...], AfterValidator(_statuses)] = ()  # default: any status
    reason: Regex = ""  # default: any reason
    blame: Blame | None  # null: the row stays unjudged
    why: str = ""


class ReasonRule(Rules):
    """A row whose reason names the harness' own machinery (`harness_reasons`)."""

    reason: Regex
    why: str = ""


class WorkerDeathRule(Rules):
    reason: Regex = ""  # default: any reason
    blame: Blame
    why: str = ""


class UnsetConfigPattern(Rules):
    """A message saying the config does not set a field: group 1 names it, or `field` does (`in`: a
    dict field whose leaving the key out is unset too). A bare string is the pattern alone."""

    model_config = ConfigDict(populate_by_name=True)

    pattern: Regex
    field: str = ""
    in_: str = Field(default="", alias="in")


class OverflowConfig(Rules):
    patterns: tuple[Regex, ...] = ()  # group 1 names the type
    types: dict[str, str] = Field(default_factory=dict)  # the type -> a torch dtype's name


class SameWay(Rules):
    mask_numbers: bool = True
    compare_chars: int = Field(default=200, gt=0)
    same_failure: dict[str, tuple[Regex, ...]] = Field(default_factory=dict)


class SelectionTies(Rules):
    stages: tuple[str, ...] = ("compile", "numerics")
    relative_margin: float = Field(default=2.0**-8, gt=0)
    reproduce_share: float = Field(default=0.01, ge=0)


class DeviceGraph(Rules):
    enabled: bool = True
    reproduce_share: float = Field(default=0.01, ge=0)


class ProbeRules(Rules):
    timeout: float = Field(default=0.0, ge=0)  # seconds; 0: unbounded
    same_way: SameWay = SameWay()
    own_input_sources: tuple[str, ...] = ("processor",)
    selection_ties: SelectionTies = SelectionTies()
    device_graph: DeviceGraph = DeviceGraph()


class BlameRules(Rules):
    """harness/data/blame_rules.yaml (docs/blame.md explains each rule)."""

    reference_backend: str
    device_only_stages: tuple[str, ...]
    neutral_reasons: tuple[Regex, ...]
    blocked_reason: Regex
    timeout_margin: float = Field(gt=0)
    harness_reasons: tuple[ReasonRule, ...] = ()
    builtin_reference: dict[str, tuple[BuiltinRule, ...]] = Field(default_factory=dict)
    worker_death: tuple[WorkerDeathRule, ...]
    missing_package_patterns: tuple[Regex, ...] = ()
    optional_import_patterns: tuple[Regex, ...] = ()
    package_import_names: dict[str, str] = Field(default_factory=dict)
    unset_config_patterns: tuple[UnsetConfigPattern, ...] = ()
    overflow_config: OverflowConfig = OverflowConfig()
    probe: ProbeRules = ProbeRules()
    harness_messages: tuple[Regex, ...] = ()

    @field_validator("unset_config_patterns", mode="before")
    @classmethod
    def _bare_patterns(cls, value: Any) -> Any:
        return [{"pattern": v} if isinstance(v, str) else v for v in value or ()]


def rules() -> BlameRules:
    """The blame rules, read once per process."""
    return cached_rules(BlameRules, str(resource("harness", "data/blame_rules.yaml")))


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def reference_backend() -> str:
    return rules().reference_backend


def is_reference(backend: str | None) -> bool:
    """Is `backend` the reference itself (its failures are judged without a re-run)?"""
    return backend is None or backend == reference_backend()


def device_only(stage: str) -> bool:
    return stage in rules().device_only_stages


def is_neutral(row: dict[str, Any]) -> bool:
    """A skipped / not-attempted row that is nobody's failure (not applicable, cannot report)."""
    if row.get("status") not in (Status.SKIPPED.value, Status.NOT_ATTEMPTED.value):
        return False
    reason = str(row.get("reason") or "")
    return any(_compiled(p).search(reason) for p in rules().neutral_reasons)


def blocked_by(row: dict[str, Any]) -> str | None:
    """The stage a not-attempted row waited for ("forward error" -> "forward"), else None."""
    if row.get("status") != Status.NOT_ATTEMPTED.value:
        return None
    m = _compiled(rules().blocked_reason).match(str(row.get("reason") or ""))
    return m.group(1) if m else None


def builtin_rule(tier: str, row: dict[str, Any], backend: str | None) -> tuple[str, dict[str, Any]] | None:
    """Blame of a row of a tier whose cases carry their own CPU reference (unit, upstream), or None
    when the tier has no such rules. A rule with `blame: null` leaves the row unjudged."""
    entries = rules().builtin_reference.get(tier)
    if entries is None:
        return None
    status, reason = row.get("status"), str(row.get("reason") or "")
    for e in entries:
        if e.status and status not in e.status:
            continue
        if e.reason and not _compiled(e.reason).search(reason):
            continue
        blame = e.blame.value if e.blame else ""
        evidence = {"rule": f"builtin_reference.{tier}", "why": e.why}
        if blame == Blame.BACKEND.value and is_reference(backend):
            blame = Blame.HARNESS.value
            evidence["why"] = (
                "on the reference backend itself: the CPU disagreeing with itself is the harness' doing"
            )
        return blame, evidence
    return "", {}


def harness_reason(row: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """Blame of a row whose reason names the harness' own machinery (`harness_reasons`), else None."""
    reason = str(row.get("reason") or "")
    for e in rules().harness_reasons:
        if _compiled(e.reason).search(reason):
            return Blame.HARNESS.value, {"rule": "harness_reasons", "why": e.why}
    return None


def worker_death_blame(row: dict[str, Any], note: str = "") -> tuple[str, dict[str, Any]]:
    reason = str(row.get("reason") or "")
    for e in rules().worker_death:
        if e.reason and not _compiled(e.reason).search(reason):
            continue
        evidence = {"rule": "worker_death", "why": e.why, "worker": reason}
        if note:
            evidence["note"] = note
        return e.blame.value, evidence
    return Blame.HARNESS.value, {"rule": "worker_death", "worker": reason}


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("status", "reason", "error_class", "message", "failing_op")
    return {k: row[k] for k in keep if row.get(k)}


#: device statuses that say the stage did not finish (no answer of the device itself)
_UNFINISHED = (Status.TIMEOUT.value, Status.CRASH.value, Status.OOM.value)


def by_reference(
    stage: str,
    ref: dict[str, Any] | None,
    reference: str,
    device_status: str | None = None,
    timing: tuple[float, float] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Blame of a device row from the same stage of the same case on the reference backend.

    A device-only stage (on_device) that failed is the device's, unless it did not finish
    (`device_status` timeout / crash / oom): then it is judged by the reference like any stage,
    so a timeout on both is the reference's verdict, not evidence against the device. A device
    timeout whose reference passed but needed a large share of the limit (`timing`: reference
    seconds, limit seconds; `timeout_margin` of the rules) says the limit is too tight to tell a
    slow device from a hung one: the harness' (its limit), not the backend's."""
    evidence: dict[str, Any] = {"rule": "reference", "reference_backend": reference}
    if device_only(stage) and device_status not in _UNFINISHED:
        evidence["why"] = f"{stage} only exists on a device"
        return Blame.BACKEND.value, evidence
    if ref is None:
        evidence["why"] = "the reference did not report this stage"
        return Blame.HARNESS.value, evidence
    evidence["reference"] = _summary(ref)
    if ref.get("status") == PASS:
        if (
            device_status == Status.TIMEOUT.value
            and timing
            and timing[1] > 0
            and timing[0] >= rules().timeout_margin * timing[1]
        ):
            evidence.update(
                reference_seconds=round(timing[0], 1),
                limit_seconds=round(timing[1], 1),
                why=f"the reference needed {timing[0]:.0f} s of the {timing[1]:.0f} s limit: too tight "
                "a limit to tell a slow device from a hung one",
            )
            return Blame.HARNESS.value, evidence
        evidence["why"] = "the reference passes this stage"
        return Blame.BACKEND.value, evidence
    if ref.get("status") not in FAILING_VALUES and not blocked_by(ref):
        evidence["why"] = (
            "the reference finished where the device did not"
            if device_status in _UNFINISHED
            else "the reference does not fail this stage (it is not applicable there)"
        )
        return Blame.BACKEND.value, evidence
    if ref.get("blame"):
        evidence["why"] = "the reference fails this stage too"
        if ref.get("blame_evidence"):
            evidence["reference_evidence"] = ref["blame_evidence"]
        return str(ref["blame"]), evidence
    evidence["why"] = "the reference fails this stage too, and no rule pins it on anyone else"
    return Blame.HARNESS.value, evidence


def complete_stages(
    stages: list[dict[str, Any]],
    *,
    tier: str,
    backend: str | None,
    died: bool = False,
    reference: CaseOutcome | None = None,
    reference_note: str = "",
    timing: tuple[float, float] | None = None,
) -> list[dict[str, Any]]:
    """Fill `blame`/`blame_evidence` of stage dicts that lack one, in stage order (in place).

    Passing rows are cleared. Rows judged in the worker (harness.blame.probe) are kept."""
    ref_rows = {s["stage"]: s for s in (reference.stages if reference else [])}
    if reference is not None:
        complete_stages(
            reference.stages,
            tier=tier,
            backend=reference_backend(),
            died=bool((reference.worker or {}).get("died")),
        )
    done: dict[str, dict[str, Any]] = {}
    for row in stages:
        stage = row.get("stage", "")
        done[stage] = row
        if row.get("status") == PASS:
            row["blame"], row["blame_evidence"] = "", {}
            continue
        if row.get("blame"):
            continue
        blame, evidence = _judge_row(
            row, tier, backend, died, done, ref_rows, reference is not None, reference_note, timing
        )
        row["blame"], row["blame_evidence"] = blame, evidence
    return stages


def _judge_row(
    row: dict[str, Any],
    tier: str,
    backend: str | None,
    died: bool,
    done: dict[str, dict[str, Any]],
    ref_rows: dict[str, dict[str, Any]],
    have_reference: bool,
    note: str,
    timing: tuple[float, float] | None = None,
) -> tuple[str, dict[str, Any]]:
    stage = row.get("stage", "")
    if is_neutral(row):
        return "", {}
    prior = blocked_by(row)
    if prior and prior in done and done[prior] is not row:
        first = done[prior]
        if first.get("blame"):
            return str(first["blame"]), {"rule": "blocked", "blocked_by": prior}
        return "", {}
    if died and have_reference:
        return by_reference(stage, ref_rows.get(stage), reference_backend(), row.get("status"), timing)
    if died:
        if is_reference(backend):
            return worker_death_blame(row)
        return worker_death_blame(row, note or "the reference re-run was not available")
    builtin = builtin_rule(tier, row, backend)
    if builtin is not None:
        return builtin
    own = harness_reason(row)
    if own is not None:
        return own
    if row.get("status") not in FAILING_VALUES:
        return "", {}  # skipped / not attempted for a reason of the tier's own (e.g. no model class)
    if have_reference:
        return by_reference(stage, ref_rows.get(stage), reference_backend(), row.get("status"))
    return Blame.HARNESS.value, {"rule": "default", "why": note or "no rule pins this failure on anyone else"}


def complete_outcome(
    outcome: CaseOutcome, backend: str | None, reference: CaseOutcome | None = None, reference_note: str = ""
) -> CaseOutcome:
    """Blame every stage of a case's outcome that does not pass (in place; returns it)."""
    timing = None
    if reference is not None and (outcome.worker or {}).get("died") == "worker_timeout":
        timing = (
            float(reference.seconds or 0.0),
            float(outcome.seconds or 0.0),
        )  # a timed-out case's seconds: its limit
    complete_stages(
        outcome.stages,
        tier=outcome.tier,
        backend=backend,
        died=bool((outcome.worker or {}).get("died")),
        reference=reference,
        reference_note=reference_note,
        timing=timing,
    )
    return outcome


def needs_reference(outcome: CaseOutcome, backend: str | None) -> bool:
    """Does this device-backend outcome need the runner's re-run on the reference (a worker death,
    or a failing stage no in-worker judge blamed and no row rule decides)?"""
    if is_reference(backend):
        return False
    if (outcome.worker or {}).get("died"):
        return True
    for row in outcome.stages:
        if (
            row.get("status") in FAILING_VALUES
            and not row.get("blame")
            and builtin_rule(outcome.tier, row, backend) is None
            and harness_reason(row) is None
        ):
            return True
    return False


def counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Non-passing rows by blame ("" = not judged), in the Blame order."""
    out = {b.value: 0 for b in Blame}
    for r in rows:
        if r.get("status") != PASS:
            key = r.get("blame") or "unjudged"
            out[key] = out.get(key, 0) + 1
    return out

"""Which new failures gate a comparison: by default only the backend's, with `--gate all` every one.

`harness compare` (and the nightly's exit code) gates on regressions blamed on the backend: a
new FAIL verdict whose row's blame is `backend`, or has no blame (a run written before blame
existed, or a row nobody judged: not knowing whose it is must not let it through). New failures
blamed on the harness are listed as the harness' own debt; upstream and environment ones are
listed too. A FALLBACK_REGRESSION gates whatever the row's blame (a lost lowering is the device's).
`--gate all` gates on every new failure, whoever's.

    from reports.gate import gated, by_blame
    gated(comparison, "backend")   # the CaseVerdicts that make the exit code 1
"""

from __future__ import annotations

from typing import Any

from contracts.status import REGRESSION_VERDICTS, Blame, Verdict

GATES = ("backend", "all")
#: Verdicts that are regressions (may gate): a new or changed failure, a fallback regression.
REGRESSIONS = REGRESSION_VERDICTS


def _blame(v: Any) -> str:
    return str(getattr(v, "blame", None) or "")


def regressions(comparison: Any) -> list[Any]:
    return [v for v in comparison.verdicts if v.verdict in REGRESSIONS]


def gated(comparison: Any, gate: str = "backend") -> list[Any]:
    """The regressions that fail the comparison under `gate`."""
    if gate not in GATES:
        raise ValueError(f"unknown gate {gate!r}: use {', '.join(GATES)}")
    found = regressions(comparison)
    if gate == "all":
        return found
    # a fallback regression is the device's by definition (a lowering it lost), whatever the row's
    # blame says about the stage's own failure
    return [
        v for v in found if v.verdict is Verdict.FALLBACK_REGRESSION or _blame(v) in ("", Blame.BACKEND.value)
    ]


def by_blame(comparison: Any) -> dict[str, list[Any]]:
    """Regressions per blame ("none": not judged)."""
    out: dict[str, list[Any]] = {b.value: [] for b in Blame}
    out["none"] = []
    for v in regressions(comparison):
        out.setdefault(_blame(v) or "none", []).append(v)
    return out


def harness_debt(comparison: Any) -> list[Any]:
    """New failures the harness caused itself: listed, not gated by default."""
    return by_blame(comparison)[Blame.HARNESS.value]


def counts(comparison: Any) -> dict[str, int]:
    return {b: len(vs) for b, vs in by_blame(comparison).items()}


def summary(comparison: Any, gate: str) -> dict[str, Any]:
    """The gate's part of `harness compare --json`."""

    def rows(vs: list[Any]) -> list[dict[str, Any]]:
        return [
            {
                "tier": v.tier,
                "case_id": v.case_id,
                "stage": v.stage,
                "status": v.status,
                "baseline_status": v.baseline_status,
                "blame": _blame(v) or None,
                "detail": v.detail,
                "model_ids": list(v.model_ids),
                "root_cause": getattr(v, "root_cause", None),
            }
            for v in vs
        ]

    groups = by_blame(comparison)
    return {
        "gate": gate,
        "gated": rows(gated(comparison, gate)),
        "new_failures_by_blame": counts(comparison),
        "harness_debt": rows(groups[Blame.HARNESS.value]),
        "upstream": rows(groups[Blame.UPSTREAM.value]),
        "environment": rows(groups[Blame.ENVIRONMENT.value]),
    }

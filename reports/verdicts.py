"""The verdict rule: one (tier, case, stage) judged from its status now, in the baseline, and the
expectations and flaky rules that match it, in the one comparison vocabulary (contracts.status.Verdict).

reports.compare applies it to a run against a baseline; reports.expectations.check_run to a run
against the expectations alone (no baseline).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from contracts.status import FAILING_VALUES, Verdict

#: the detail of an XFAIL decided by the baseline alone, which reports.hidden_regressions turns into
#: FAIL when the failure changed (another error class or failing op)
BASELINE_XFAIL = "failed in the baseline too"


class Rule(Protocol):
    """What the rule needs of an expectation or flaky entry (reports.expectations.Rule)."""

    reason: str

    def expects(self, status: str) -> bool: ...


def verdict_of(
    status: str | None, base: str | None, known: Sequence[Rule], flaky: Rule | None
) -> tuple[Verdict, str]:
    """The verdict of one (tier, case, stage): its status now and in the baseline (None: absent),
    the expectations that match it and the flaky rule that matches it, if any."""
    if status is None:
        return Verdict.MISSING, f"was {base} in the baseline"
    if base is not None and status != base and flaky is not None:
        return Verdict.FLAKY, f"{base} -> {status}; flaky: {flaky.reason}"
    if status == "pass":
        if known:
            return (
                Verdict.IMPROVED,
                f"passes; was expected to fail ({known[0].reason}): remove the expectation",
            )
        if base is not None and base != "pass":
            return Verdict.IMPROVED, f"{base} -> pass"
        return Verdict.PASS, ""
    if status in FAILING_VALUES:
        expected = next((r for r in known if r.expects(status)), None)
        if expected:
            return Verdict.XFAIL, f"expected: {expected.reason}"
        if base in FAILING_VALUES:
            return Verdict.XFAIL, f"{BASELINE_XFAIL} ({base} -> {status})"
        return Verdict.FAIL, f"{base or 'new case'} -> {status}"
    # skipped / not_attempted
    if base == "pass":
        return Verdict.FAIL, f"pass -> {status}: coverage lost"
    return Verdict.PASS, f"unchanged: {status}" if base == status else f"{base or 'new case'} -> {status}"

"""The closed vocabularies: what a stage can end in, how a comparison judges it, whose failure it is.

One place each; every tier, table, report and CLI uses these names. `skipped` and
`not_attempted` always carry a reason, so a coverage figure can show its denominator: what
passed, what failed, and what was never tried and why.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Status(str, enum.Enum):
    """How one stage of one case ended (the `status` column of results.parquet)."""

    PASS = "pass"
    FAIL = "fail"  # ran, but the answer was wrong (numerics, gradients missing, fallback in strict)
    ERROR = "error"  # raised an exception
    TIMEOUT = "timeout"
    OOM = "oom"
    CRASH = "crash"  # the worker process died (signal)
    SKIPPED = "skipped"  # not applicable (reason says why), e.g. no loss for backward
    NOT_ATTEMPTED = (
        "not_attempted"  # could not be tried: an earlier stage failed, or the backend cannot report it
    )

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


#: Every status value, in the order reports list them.
STATUS_VALUES: tuple[str, ...] = tuple(s.value for s in Status)
#: Statuses that mean the stage did not run to an answer.
UNFINISHED = frozenset({Status.ERROR, Status.TIMEOUT, Status.OOM, Status.CRASH})
#: Statuses that count as a failure (a red row): a wrong answer or no answer.
FAILING = frozenset({Status.FAIL}) | UNFINISHED
#: Statuses that need a reason.
NEEDS_REASON = frozenset({Status.SKIPPED, Status.NOT_ATTEMPTED})
#: Neither pass nor failure: the stage was not applicable or could not be tried.
NEUTRAL = NEEDS_REASON
#: Statuses that do not stop a case's headline status from being `pass`.
OK = frozenset({Status.PASS, Status.SKIPPED})

#: The same sets as plain strings, for comparing with table columns.
FAILING_VALUES = frozenset(s.value for s in FAILING)
UNFINISHED_VALUES = frozenset(s.value for s in UNFINISHED)
NEUTRAL_VALUES = frozenset(s.value for s in NEUTRAL)
OK_VALUES = frozenset(s.value for s in OK)

#: Model stages in the order they run. `on_device` passes when no op fell back to the CPU.
MODEL_STAGES: tuple[str, ...] = ("load", "forward", "backward", "compile", "numerics", "on_device")
#: The full tier's stages (the whole population: does it load, compute and train).
FULL_STAGES: tuple[str, ...] = ("load", "forward", "backward")
#: The unit tier's one stage (an op replayed on the device against the CPU).
UNIT_STAGES: tuple[str, ...] = ("op",)
#: The upstream tier's stages (an op_db sample on the device against the CPU, then its gradients).
UPSTREAM_STAGES: tuple[str, ...] = ("forward", "backward")


def stage_order(stage: str) -> int:
    """Sort key of a stage: model stages in run order, anything else after them."""
    return MODEL_STAGES.index(stage) if stage in MODEL_STAGES else len(MODEL_STAGES)


def is_failing(status: str | Status) -> bool:
    return getattr(status, "value", status) in FAILING_VALUES


def headline_status(statuses: Iterable[str | Status]) -> str:
    """A case's one status from its stages' (in stage order): the first that is neither pass nor
    skipped; else pass if any stage passed (or there are none), else skipped."""
    values = [getattr(s, "value", s) for s in statuses]
    bad = next((s for s in values if s not in OK_VALUES), None)
    if bad:
        return bad
    return Status.PASS.value if Status.PASS.value in values or not values else Status.SKIPPED.value


class Verdict(str, enum.Enum):
    """A (tier, case, stage) of a run judged against a baseline and the expectations (reports.compare).

    Separate from Status, which says how a stage ended."""

    PASS = "PASS"  # as good as the baseline: passes (or is unchanged and not failing)
    # new failure: failing now, neither failing in the baseline nor expected; or a changed failure:
    # failing in both, but the error class or the failing op is not the baseline's (another bug)
    FAIL = "FAIL"
    XFAIL = "XFAIL"  # known failure: matches an expectation, or failed the same way in the baseline
    IMPROVED = (
        "IMPROVED"  # passes now but failed / was not attempted in the baseline, or was expected to fail
    )
    MISSING = "MISSING"  # in the baseline, absent from the run
    FLAKY = "FLAKY"  # status changed, and the case is on the flaky list
    # same status as the baseline, but the stage gained a CPU-fallback op or its fallback count
    # rose: a regression of its own, hidden by neither a pass nor an older failure
    FALLBACK_REGRESSION = "FALLBACK_REGRESSION"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


#: Verdicts that are regressions: any of them makes `harness compare` exit 1 (reports.gate may
#: keep only those blamed on the backend).
REGRESSION_VERDICTS = (Verdict.FAIL, Verdict.FALLBACK_REGRESSION)


class Blame(str, enum.Enum):
    """Whose failure a red row is (the `blame` column of results.parquet; docs/blame.md)."""

    BACKEND = "backend"  # the device under test: a wrong answer, a missing lowering, a crash in its kernels
    UPSTREAM = "upstream"  # PyTorch or transformers themselves (fails the same way on the CPU)
    ENVIRONMENT = "environment"  # the machine: out of memory, a missing optional library, a killed worker
    HARNESS = "harness"  # the harness's own doing: a bad shrink, invalid inputs, a bug in a tier

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


class UpstreamSkip(str, enum.Enum):
    """Why an upstream-tier sample (an op_db OpInfo sample) was not run: the `reason` of its
    skipped / not_attempted row (docs/upstream.md)."""

    PYTORCH_APPLICABILITY = "pytorch-applicability"  # PyTorch's own skips/xfails for this device or dtype
    BACKEND_UNSUPPORTED = "backend-unsupported"  # the backend declares the op or dtype unsupported
    NO_NATIVE_LOWERING = (
        "no-native-lowering"  # the op has no lowering: it would only measure the CPU fallback
    )
    REFERENCE_ERROR = "reference-error"  # the CPU reference itself raised: nothing to compare against

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value

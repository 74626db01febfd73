"""The harness' public errors, one place: each derives from `HarnessError` and the built-in it is
a kind of, so a caller may catch either (`except ValueError` still sees a `ShrinkError`).

Every subpackage of the pipeline may import this module; it imports nothing of the harness.
Private control-flow exceptions that never leave their module stay there.
"""

from __future__ import annotations

from typing import Any

from contracts.errors import HarnessError
from contracts.status import Status

# ------------------------------------------------------------------------------------------ build


class FormulaError(HarnessError, ValueError):
    """A formula outside the language, or one that fails on its values; the message names it."""


class MissingName(HarnessError, NameError):
    """A name the scope does not have (or holds as None): the formula does not apply."""


class UnknownArchitecture(HarnessError, LookupError):
    """The spec names a class the installed transformers does not ship."""


class ShrinkError(HarnessError, ValueError):
    """No shrink level produced a config the model accepts."""

    def __init__(self, model_type: str, errors: dict[str, str]):
        self.model_type = model_type
        self.errors = errors
        last = next(reversed(errors.values()), "")
        super().__init__(f"{model_type}: cannot shrink: {last}")


# ----------------------------------------------------------------------------------------- stages


class NoLoss(HarnessError):
    """No output depends on a trainable parameter: there is nothing to differentiate."""


class StageFailed(HarnessError):
    """A stage ran to an answer and the answer was wrong (status fail, with a reason)."""

    def __init__(self, reason: str, metrics: dict[str, Any] | None = None):
        super().__init__(reason)
        self.reason = reason
        self.metrics = metrics or {}


class StageSkipped(HarnessError):
    """A stage did not run (skipped, or another status it names), with the reason."""

    def __init__(self, reason: str, status: Status = Status.SKIPPED):
        super().__init__(reason)
        self.reason = reason
        self.status = status


# ------------------------------------------------------------------------------------------ blame


class ProbeTimeout(HarnessError, TimeoutError):
    """A probe took longer than blame_rules.yaml's probe.timeout: inconclusive."""


# ----------------------------------------------------------------------------------------- engine


class WorkerDied(HarnessError):
    """A case's worker ended without an answer (crash, timeout, out of memory): its status and why."""

    def __init__(
        self, status: Status, reason: str, error_class: str, message: str, seconds: float = 0.0
    ) -> None:
        super().__init__(message)
        self.status, self.reason, self.error_class, self.message = status, reason, error_class, message
        self.seconds = seconds  # how long the case ran (a timeout: its limit)


class RunDirMismatch(HarnessError, ValueError):
    """The run directory was started with other settings (backend, shard): refuse to mix them."""


# -------------------------------------------------------------------------------------------- cli


class TargetError(HarnessError, LookupError):
    """MODEL could not be resolved to something to check."""

"""The outcome vocabulary: the one place that says what a stage can end in.

Every tier (unit cases, representative and full model checks) ends each stage in exactly one
`Status`. `skipped` and `not_attempted` always carry a reason, so a coverage figure can show its
denominator: what passed, what failed, and what was never tried and why.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"  # ran, but the answer was wrong (numerics, gradients missing, fallback in strict)
    ERROR = "error"  # raised an exception
    TIMEOUT = "timeout"
    OOM = "oom"
    CRASH = "crash"  # the worker process died (signal)
    SKIPPED = "skipped"  # not applicable (reason says why), e.g. no loss for backward
    NOT_ATTEMPTED = "not_attempted"  # could not be tried: an earlier stage failed, or the backend cannot report it

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


#: Statuses that mean the stage did not run to an answer.
UNFINISHED = {Status.ERROR, Status.TIMEOUT, Status.OOM, Status.CRASH}
#: Statuses that need a reason.
NEEDS_REASON = {Status.SKIPPED, Status.NOT_ATTEMPTED}

#: Model stages in the order they run. `on_device` passes when no op fell back to the CPU.
MODEL_STAGES = ("load", "forward", "backward", "compile", "numerics", "on_device")


@dataclass
class StageResult:
    stage: str
    status: Status
    reason: str = ""  # why skipped / not attempted / failed, short and stable
    error_class: str = ""  # exception type, e.g. "RuntimeError"
    message: str = ""  # normalized error message (no addresses, no temp paths)
    failing_op: str = ""  # aten op that raised, where known
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        if self.status in NEEDS_REASON and not self.reason:
            raise ValueError(f"stage {self.stage!r}: status {self.status.value} needs a reason")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


@dataclass
class ModelCheck:
    """The result of checking one model on one backend, stage by stage."""

    model_id: str
    backend: str
    stages: dict[str, StageResult] = field(default_factory=dict)
    model_type: str = ""
    architecture: str = ""  # transformers class name, e.g. "BertForMaskedLM"
    parameters: int = 0
    fallback_count: int = 0
    fallback_ops: list[str] = field(default_factory=list)  # distinct op overloads that fell back
    fallback_events: list[dict[str, Any]] = field(default_factory=list)
    graphs: int = 0
    recompiles: int = 0
    peak_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stages"] = {name: r.to_dict() for name, r in self.stages.items()}
        return d

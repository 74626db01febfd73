"""The root cause of a backend failure: the one aten call that broke it, and its checked repro.

A row blamed on the backend says *that* the device failed; its root cause says *where*: the first
op call whose device result differs from the reference computing the same call on the same
inputs (a mismatch), the call that raised (an error), or the last call entered before the worker
died (a crash or hang). It rides on the stage (`StageResult.root_cause`, a dict) and lands in two
results columns: `root_cause_op` (the overload) and `root_cause` (this record as JSON).

    rc = RootCause(found=True, op="aten.gelu.default", phase="forward", kind="mismatch",
                   route="eager_shadow", call_index=41, ...)
    row["root_cause"] = rc.to_dict()
    RootCause.from_dict(json.loads(results.root_cause[i]))

A localization that could not name a call is a record too (`found=False` with `why`): a row says
when it gave up (a time limit, a backend it cannot shadow) and why, never nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: where in a training step the call ran
PHASES = ("forward", "backward", "compiled")
#: what went wrong at the call
KINDS = ("mismatch", "error", "crash", "hang")
#: how the call was found
ROUTES = (
    "eager_shadow",  # every device call of an eager step re-run on the reference with the same inputs
    "compiled_shadow",  # the compiled graph's calls, where the backend runs them op by op
    "accuracy_minifier",  # PyTorch's repro-after-AOT minifier at the accuracy level (a dynamo backend)
    "call_journal",  # the last call the worker entered before it died (per-call journal on disk)
    "exception",  # a call the shadow did not see raise: the op the exception names, placed by its traceback
    "function_shadow",  # a function-level call (above the dispatcher) that lost its autograd history
)


@dataclass(frozen=True)
class Mismatch:
    """How far the device's result of the call is from the reference's, against the op's tolerance."""

    output: str  # which output of the call, e.g. "0" or "out"
    max_abs: float
    max_rel: float
    atol: float
    rtol: float
    tolerance_class: str  # the class of harness/data/numerics.yaml the output was judged by
    shape: list[int] = field(default_factory=list)
    dtype: str = ""


@dataclass(frozen=True)
class Repro:
    """The root cause reduced to a standalone test, and whether it was checked."""

    path: str = ""  # the pytest file written for it ("" when none was written)
    registry_key: str = ""  # op + signature of its registry entry
    verified: bool | None = None  # True: fails on the backend and passes on the reference
    why: str = ""  # why it is not verified (or how it was)
    # the registry case (op, signature, constraints with the concrete values, outputs) the
    # standalone test and `harness registry add-repros` are made from ({} when none was made)
    case: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RootCause:
    found: bool
    why: str = ""  # found: one sentence; not found: why not (time limit, route unavailable...)
    # the overload, e.g. "aten.gelu.default"; a call above the dispatcher has none: its torch
    # function, e.g. "torch.nn.functional.linear"; from an exception's message: the op it names
    op: str = ""
    phase: str = ""  # one of PHASES
    kind: str = ""  # one of KINDS
    route: str = ""  # one of ROUTES
    call_index: int | None = None  # the call's index in its phase, in dispatch order
    input_shapes: list[list[int] | None] = field(default_factory=list)  # None for a non-tensor argument
    input_dtypes: list[str | None] = field(default_factory=list)
    input_strides: list[list[int] | None] = field(default_factory=list)
    mismatch: Mismatch | None = None
    error_class: str = ""  # kind == "error": the exception's class
    message: str = ""  # kind == "error": its normalized message
    module_path: str = ""  # the nn.Module the call ran in, e.g. "encoder.layer.3.attention.self"
    source_line: str = ""  # the model code's line, e.g. "modeling_bert.py:255 in forward"
    repro: Repro | None = None
    seconds: float = 0.0  # time spent localizing
    gave_up: str = ""  # non-empty when a limit stopped the search (what was searched is still reported)
    extra: dict[str, Any] = field(default_factory=dict)  # route-specific evidence

    @property
    def repro_verified(self) -> bool | None:
        return None if self.repro is None else self.repro.verified

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["repro_verified"] = self.repro_verified
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RootCause:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in d.items() if k in known}
        if isinstance(data.get("mismatch"), dict):
            data["mismatch"] = Mismatch(**data["mismatch"])
        if isinstance(data.get("repro"), dict):
            data["repro"] = Repro(**data["repro"])
        return cls(**data)

    @classmethod
    def not_found(cls, why: str, seconds: float = 0.0, gave_up: str = "", **extra: Any) -> RootCause:
        return cls(found=False, why=why, seconds=seconds, gave_up=gave_up, extra=dict(extra))


def root_cause_op(record: dict[str, Any] | None) -> str | None:
    """The `root_cause_op` column of a stage's root-cause dict: the overload when one was found."""
    if not record or not record.get("found"):
        return None
    return str(record.get("op") or "") or None

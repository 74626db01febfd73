"""The harness' error base and the one exception classifier: an exception -> status, error class,
normalized message, failing op.

`HarnessError` is the base of every error the packages above the device raise on purpose (each
also inherits the built-in it is a kind of, so callers may catch either). Each layer keeps its
public errors in one module: this one (contracts), `agents/errors.py`, `registry/errors.py`,
`reports/errors.py`, `harness/errors.py`; the device's own errors live in `backend/errors.py`.

Used wherever an exception becomes a row (a stage in harness.stages.check, a case in a worker, a replay):
MemoryError / an allocator's out-of-memory error is ``oom``, TimeoutError is ``timeout``, anything
else ``error``. Normalized messages drop what changes from run to run (addresses, temp paths,
object ids) so the same failure in two nights compares equal.
"""

from __future__ import annotations

import re
import sys
import traceback
from dataclasses import dataclass

from contracts.status import Status

_OP_RE = re.compile(r"\baten(?:::|\.)([A-Za-z0-9_]+)(?:\.([A-Za-z0-9_]+))?")
_SUBS = [
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"(/tmp|/var/folders|/private/var)/[^\s'\"]+"), "<tmp>"),
    (re.compile(r"/[^\s'\"]*site-packages/"), "<site>/"),
    (re.compile(r" at \d+\b"), " at ?"),
    (re.compile(r"\s+"), " "),
]
_OOM_WORDS = ("out of memory", "cannot allocate memory", "can't allocate memory", "oom-kill")


class HarnessError(Exception):
    """Base of the errors the harness, its agents, registry and reports raise on purpose."""


class AdapterError(HarnessError, TypeError):
    """An adapter that does not implement the protocol (names the missing members)."""


class RuleFileError(HarnessError, ValueError):
    """A rule file that cannot be used: unreadable, not YAML/TOML, or an entry with an unknown
    or invalid key. The message names the file, the entry and the key:

        harness/data/numerics.yaml: entry classes.float32: unknown key 'atoll'
    """

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path, self.problems = path, problems
        super().__init__(f"{path}: " + "; ".join(problems))


@dataclass(frozen=True)
class ErrorInfo:
    status: Status
    error_class: str
    message: str
    failing_op: str = ""


def normalize(message: str, limit: int = 400) -> str:
    """The message's first line, stable across runs. A first line that ends in a colon only
    announces the error on the next line (Dynamo's "backend='neuron' raised:"): both are kept."""
    lines = [line for line in message.strip().splitlines() if line.strip()]
    msg = lines[0] if lines else ""
    if msg.rstrip().endswith(":") and len(lines) > 1:
        msg = f"{msg.rstrip()} {lines[1].strip()}"
    for pattern, repl in _SUBS:
        msg = pattern.sub(repl, msg)
    return msg.strip()[:limit]


def _op_overload_type() -> type | None:
    torch = sys.modules.get("torch")  # an OpOverload can only exist once torch is imported
    return getattr(getattr(torch, "_ops", None), "OpOverload", None) if torch is not None else None


def _op_in_traceback(exc: BaseException) -> str:
    """The innermost frame holding an OpOverload (a device's fallback or dispatch code) names it."""
    overload = _op_overload_type()
    if overload is None:
        return ""
    tb, frames = exc.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in list(frame.f_locals.values()):
            if isinstance(value, overload):
                return f"{value.namespace}.{value._opname}.{value._overloadname}"
    return ""


def failing_op(exc: BaseException) -> str:
    """The aten op that raised, where known: an `op` attribute (backend errors), the message, or
    the traceback's innermost OpOverload."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        op = getattr(e, "op", None)
        if isinstance(op, str) and op:
            return op
        m = _OP_RE.search(str(e))
        if m:
            return f"aten.{m.group(1)}" + (f".{m.group(2)}" if m.group(2) else "")
        e = e.__cause__ or e.__context__
    return _op_in_traceback(exc)


def status_of(exc: BaseException) -> Status:
    """oom for MemoryError and allocator out-of-memory errors, timeout for TimeoutError, else error."""
    torch = sys.modules.get("torch")
    torch_oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    text = str(exc).lower()
    if (
        isinstance(exc, MemoryError)
        or (torch_oom is not None and isinstance(exc, torch_oom))
        or "OutOfMemory" in type(exc).__name__
        or any(w in text for w in _OOM_WORDS)
    ):
        return Status.OOM
    if isinstance(exc, TimeoutError):
        return Status.TIMEOUT
    return Status.ERROR


def classify(exc: BaseException) -> ErrorInfo:
    return ErrorInfo(
        status_of(exc), type(exc).__name__, normalize(str(exc)) or type(exc).__name__, failing_op(exc)
    )


def short_traceback(exc: BaseException, frames: int = 3) -> str:
    return "".join(traceback.format_exception(exc)[-frames:])[-1500:]

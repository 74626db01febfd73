"""CPU-fallback events: what ran on the host instead of the device, where, and how often.

Both execution paths report here: the eager device (``backend.kernels``) and the compiled path
(``backend.compile`` calls :func:`record_fallback` for graph nodes it leaves to the CPU), so a
fallback looks the same whichever path hit it::

    with backend.collect_fallbacks() as events:
        model(x)
    for e in events:
        print(e.op, e.reason, e.frame, e.count)

Mode (``NEURON_FALLBACK_MODE`` or :func:`set_fallback_mode`): ``record`` (default), ``warn``
(a warning once per op) or ``error`` (the op raises :class:`~backend.errors.NeuronFallbackError`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from backend import settings
from backend.errors import NeuronFallbackError, NeuronFallbackWarning

MODES = settings.FALLBACK_MODES


@dataclass
class FallbackEvent:
    """One kind of fallback: the same op, input signature, reason and user frame. ``count`` grows."""

    op: str  # op overload, e.g. "aten.nonzero.default"
    input_shapes: list[list[int]]
    input_dtypes: list[str]
    reason: str  # "no-lowering" | "dtype" | "data-dependent-shape"
    frame: str  # first user frame outside torch/transformers/backend: "path/to/file.py:123"
    count: int = 1
    # first frame in the model's own code: "transformers/models/llama/modeling_llama.py:412"
    model_frame: str | None = None

    def key(self) -> tuple:
        return (
            self.op,
            tuple(tuple(s) for s in self.input_shapes),
            tuple(self.input_dtypes),
            self.reason,
            self.frame,
            self.model_frame,
        )


# ---------------------------------------------------------------- mode
_mode = settings.current().fallback_mode  # read at import; set_fallback_mode changes it


def fallback_mode() -> str:
    return _mode


def set_fallback_mode(mode: str) -> str:
    """Set the mode; returns the previous one (so tests and callers can restore it)."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"fallback mode must be one of {MODES}, got {mode!r}")
    previous, _mode = _mode, mode
    return previous


# ---------------------------------------------------------------- frames
def _skip_dirs() -> tuple[str, ...]:
    dirs = [Path(torch.__file__).parent, Path(__file__).parent]
    try:
        import transformers

        dirs.append(Path(transformers.__file__).parent)
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass
    for key in ("stdlib", "platstdlib"):
        with contextlib.suppress(KeyError):
            dirs.append(Path(sysconfig.get_paths()[key]))
    return tuple(str(d) + os.sep for d in dirs)


_SKIP: tuple[str, ...] | None = None

#: Where a model's own code lives: a frame under one of these is the event's model frame. The
#: default finds the modeling files of transformers; NEURON_MODEL_CODE_ROOTS (os.pathsep-separated
#: directories, read at import) or :func:`set_model_code_roots` add roots of other model code.
MODEL_CODE_MARKER = f"{os.sep}transformers{os.sep}models{os.sep}"
_model_roots: tuple[str, ...] = tuple(
    os.path.abspath(p) + os.sep for p in settings.current().model_code_roots
)


def set_model_code_roots(roots: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Directories whose files count as model code (besides transformers/models/); returns the old ones."""
    global _model_roots
    previous, _model_roots = _model_roots, tuple(os.path.abspath(str(p)) + os.sep for p in roots)
    return previous


def _model_location(filename: str, lineno: int) -> str | None:
    """``transformers/models/x/modeling_x.py:LINE`` or ``ROOTNAME/rel/path.py:LINE``; None if not
    model code."""
    at = filename.find(MODEL_CODE_MARKER)
    if at >= 0:
        return f"{filename[at + 1 :]}:{lineno}"
    for root in _model_roots:
        if filename.startswith(root):
            return f"{os.path.basename(root[:-1])}{os.sep}{filename[len(root) :]}:{lineno}"
    return None


#: the autograd engine's entry (torch/autograd/graph.py): below it on a stack, an op is a backward op
_BACKWARD_ENTRY = "_engine_run_backward"


def _frames_of(frame) -> tuple[str | None, str | None, bool]:
    """(user frame, model frame, in backward) from one walk up the stack: the model frame is the
    innermost frame in model code, the user frame the first outside torch/transformers/backend/
    stdlib; in backward when the autograd engine was entered below the user frame."""
    global _SKIP
    if _SKIP is None:
        _SKIP = _skip_dirs()
    model, backward = None, False
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        if model is None:
            model = _model_location(filename, frame.f_lineno)
        if not filename.startswith(_SKIP) and not filename.startswith("<"):
            return f"{filename}:{frame.f_lineno}", model, backward
        backward = backward or code.co_name == _BACKWARD_ENTRY
        frame = frame.f_back
    return None, model, backward


def _user_frame_of(frame) -> str | None:
    return _frames_of(frame)[0]


def user_frame() -> str:
    """First frame outside torch/transformers/backend/stdlib, as ``file:line``.

    For backward ops it is the user line that started backward, marked ``(backward)``: found on
    this thread's stack when the engine runs the device's backward on the calling thread
    (backend.autograd_thread), else on the thread waiting for the engine's device thread, whose
    own stack has no user frame.
    """
    return frames()[0]


def frames() -> tuple[str, str | None]:
    """(user frame, model frame) of the current op call: see :func:`user_frame`. The model frame
    (first frame in model code, see MODEL_CODE_MARKER) is None when no model code is on the
    stack, e.g. for most backward ops."""
    found, model, backward = _frames_of(sys._getframe(1))
    if found:
        return (f"{found} (backward)" if backward else found), model
    # (this thread's own frame is dropped at once: a local naming it would be a reference cycle
    # that keeps the fallback op's arguments, and their device memory, alive until a GC pass)
    others = sys._current_frames()
    others.pop(threading.get_ident(), None)
    for frame in others.values():
        f, in_autograd = frame, False
        while f is not None:
            if "autograd" in f.f_code.co_filename or f.f_code.co_name == "backward":
                in_autograd = True
                break
            f = f.f_back
        if in_autograd:
            other = _user_frame_of(frame)
            if other:
                return f"{other} (backward)", model
    return "<unknown>", model


# ---------------------------------------------------------------- recording
_lock = threading.Lock()
_events: dict[tuple, FallbackEvent] = {}
_executed: Counter = Counter()
_collectors: list[dict[tuple, FallbackEvent] | None] = []
_collector_lists: list[list[FallbackEvent]] = []
_warned: set[str] = set()


def _describe(args: Any, kwargs: dict | None) -> tuple[list[list[int]], list[str]]:
    shapes: list[list[int]] = []
    dtypes: list[str] = []

    def visit(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            shapes.append([int(s) for s in x.shape])
            dtypes.append(str(x.dtype).removeprefix("torch."))
        elif isinstance(x, (list, tuple)):
            for y in x:
                visit(y)

    for a in args:
        visit(a)
    for v in (kwargs or {}).values():
        visit(v)
    return shapes, dtypes


def note_executed(op: str) -> None:
    """Count an op that ran on the device (natively or through the fallback)."""
    _executed[op] += 1


def record_fallback(
    op: str, args: Any = (), kwargs: dict | None = None, reason: str = "no-lowering", frame: str | None = None
) -> FallbackEvent:
    """Record one fallback of ``op`` and apply the mode (warn once per op; raise in error mode).

    Called by the eager fallback and by the compiled path, so both produce identical events.
    ``args``/``kwargs`` are only inspected for tensor shapes and dtypes (real or fake tensors).
    """
    if getattr(_suspension, "depth", 0):
        return FallbackEvent(op, [], [], str(reason), "<suspended>", 0)
    shapes, dtypes = _describe(args, kwargs)
    # the stack is walked only here, when a fallback is recorded (never on the native path)
    where, model_where = (frame, None) if frame is not None else frames()
    event = FallbackEvent(op, shapes, dtypes, str(reason), where, 1, model_where)
    key = event.key()
    with _lock:
        existing = _events.get(key)
        if existing is None:
            _events[key] = event
        else:
            existing.count += 1
        for store, out in zip(_collectors, _collector_lists):
            mine = store.get(key)
            if mine is None:
                mine = FallbackEvent(op, shapes, dtypes, str(reason), where, 1, model_where)
                store[key] = mine
                out.append(mine)
            else:
                mine.count += 1
    mode = _mode
    if mode == "error":
        raise NeuronFallbackError(op, str(reason), where)
    if mode == "warn" and op not in _warned:
        _warned.add(op)
        warnings.warn(
            f"neuron: {op} runs on the CPU (reason: {reason}) at {where}",
            NeuronFallbackWarning,
            stacklevel=2,
        )
    return existing or event


_suspension = threading.local()


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Neither record nor raise fallbacks in this block (this thread): compile-time work such as
    AOTAutograd constant folding runs real ops that are not fallbacks of the program."""
    _suspension.depth = getattr(_suspension, "depth", 0) + 1
    try:
        yield
    finally:
        _suspension.depth -= 1


def fallback_events() -> list[FallbackEvent]:
    """Every fallback event since the last clear (one per op/signature/reason/frame)."""
    with _lock:
        return [FallbackEvent(**vars(e)) for e in _events.values()]


def fallback_ops() -> dict[str, int]:
    """Op overload -> number of times it fell back to the CPU, since the last clear."""
    counts: Counter = Counter()
    with _lock:
        for e in _events.values():
            counts[e.op] += e.count
    return dict(sorted(counts.items()))


def executed_ops() -> dict[str, int]:
    """Op overload -> number of times it ran on the device (native or fallback), since the last clear."""
    counts = Counter(_executed)
    fast = _native_counts()
    if fast:
        counts.update(dict(fast))
    return dict(sorted(counts.items()))


def _native_counts() -> list[tuple[str, int]]:
    """Ops the native fast path ran (it counts in C++; see backend.native)."""
    from backend import native

    mod = native.module()
    return mod.executed_counts() if mod is not None and mod.is_installed() else []


def clear_op_tracking() -> None:
    """Forget recorded fallbacks and executed ops (warn mode warns again afterwards)."""
    with _lock:
        _events.clear()
        _executed.clear()
        _warned.clear()
    from backend import native

    mod = native.module()
    if mod is not None and mod.is_installed():
        mod.clear_executed()


@contextlib.contextmanager
def collect_fallbacks() -> Iterator[list[FallbackEvent]]:
    """Yield a list that receives the fallback events of the block (aggregated, live)."""
    events: list[FallbackEvent] = []
    store: dict[tuple, FallbackEvent] = {}
    with _lock:
        _collectors.append(store)
        _collector_lists.append(events)
    try:
        yield events
    finally:
        with _lock:
            for i in range(len(_collectors) - 1, -1, -1):
                if _collectors[i] is store:
                    del _collectors[i]
                    del _collector_lists[i]
                    break

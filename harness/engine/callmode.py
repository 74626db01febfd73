"""The call journal's writer in the worker: a TorchDispatchMode that records each aten call first.

    with journaled(path, device_type="neuron"):
        tier.execute(case, backend)

Below autograd every aten call reaches the mode, forward and backward alike (autograd's backward
ops pass through the dispatcher too, on the calling thread or a device thread, which inherits the
mode with the thread state). Each call is written to the journal (harness.engine.calljournal)
before it runs, with its phase, its index among the phase's calls that touch the device, its
inputs' shapes, dtypes and strides, and where it ran: the module whose forward is on the stack
(named as the outermost module's `named_modules` names it) and the innermost frame of code that is
neither torch nor the harness (the model's line). A backward call takes the place of the forward
call that made its autograd node (each node is tagged as the next call starts, as
harness.rootcause's shadow does).

The mode ignores torch.compile's internals (`ignore_compile_internals`): compilation runs without
it and the compiled artifacts run under it, so a compiled step compiles as it does unjournaled;
calls made while a compiled graph runs (AOTAutograd's runtime on the stack, or a compiled
function's backward node) are in phase `compiled`. Nothing here may fail a case: an entry that
cannot be described is written shorter, and a journal that cannot be written is given up.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.engine.calljournal import JournalWriter

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_AOT_RUNTIME = os.path.join(_TORCH_DIR, "_functorch", "_aot_autograd") + os.sep
_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the harness' own code: never "the model's line"
_PROJECT_DIRS = tuple(
    d + os.sep for d in (_HARNESS_DIR, os.path.join(os.path.dirname(_HARNESS_DIR), "contracts"))
)
_CALL_IMPL = torch.nn.Module._call_impl.__code__
_TAG = "harness.engine.callmode.where"
#: tensor inputs described per call (a cat of hundreds of tensors keeps the first ones)
MAX_INPUTS = 16


def _leaves(args: Any, kwargs: Any) -> list[Any]:
    """The call's inputs in argument order, lists of tensors (cat, index) opened one level: aten
    schemas nest no deeper, so pytree's generality is not paid for each call."""
    out: list[Any] = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            out.extend(value)
        else:
            out.append(value)
        if len(out) >= MAX_INPUTS:
            break
    return out[:MAX_INPUTS]


def _tensor_facts(args: Any, kwargs: Any) -> tuple[list, list, list, list[str], bool]:
    """(shapes, dtypes, strides, device types, any fake) of the call's inputs in argument order;
    None in the lists for a non-tensor input."""
    shapes, dtypes, strides, devices, fake = [], [], [], [], False
    for leaf in _leaves(args, kwargs):
        if isinstance(leaf, torch.Tensor):
            shapes.append([int(s) for s in leaf.shape])
            dtypes.append(str(leaf.dtype).removeprefix("torch."))
            try:
                strides.append([int(s) for s in leaf.stride()])
            except (RuntimeError, NotImplementedError):  # sparse and other layouts without strides
                strides.append(None)
            if leaf.device.type not in devices:
                devices.append(leaf.device.type)
            fake = fake or type(leaf).__name__ == "FakeTensor"
        else:
            shapes.append(None)
            dtypes.append(None)
            strides.append(None)
    return shapes, dtypes, strides, devices, fake


class CallJournalMode(TorchDispatchMode):
    """Journal every aten call (see the module docstring). `device_type`: the device under test;
    only calls touching it are counted in a phase's `index` (None: every call is)."""

    supports_higher_order_operators = True

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # no torch._disable_dynamo wrapper: it imports Dynamo (seconds) at the first call of a
        # worker that never compiles, and compilation never sees this mode anyway (above)
        return False

    def __init__(self, writer: JournalWriter, device_type: str | None = None) -> None:
        super().__init__()
        self.writer = writer
        self.device_type = device_type
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._names: dict[int, tuple[Any, dict[int, str]]] = {}
        self._pending = threading.local()
        self.broken = ""  # why the journal stopped writing ("" while it writes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        offset = None
        if not self.broken:
            try:
                offset = self.writer.enter(self._entry(func, args, kwargs))
            except OSError as exc:  # a full disk: the case runs on unjournaled
                self.broken = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # noqa: BLE001 - describing a call must never fail it
                offset = self._minimal(func, exc)
        try:
            out = func(*args, **kwargs)
        finally:
            if offset is not None:
                with contextlib.suppress(OSError):
                    self.writer.done(offset)
        self._pend(out)
        return out

    # ------------------------------------------------------------------ the entry

    def _entry(self, func: Any, args: Any, kwargs: Any) -> dict[str, Any]:
        self._tag_pending()
        shapes, dtypes, strides, devices, fake = _tensor_facts(args, kwargs)
        node = torch._C._current_autograd_node()
        module, source, compiled = self._where(node)
        if node is None:
            self._pending.where = (module, source)
        node_name = node.name() if node is not None else ""
        if compiled or "CompiledFunction" in node_name:
            phase = "compiled"
        else:
            phase = "backward" if node is not None else "forward"
        index = None
        if not fake and (self.device_type is None or self.device_type in devices):
            with self._lock:
                index = self.counts[phase]
                self.counts[phase] += 1
        entry: dict[str, Any] = {
            "phase": phase,
            "index": index,
            "op": str(func),
            "shapes": shapes,
            "dtypes": dtypes,
            "strides": strides,
            "devices": devices,
            "module": module,
            "source": source,
        }
        if node_name:
            entry["node"] = node_name
        if fake:
            entry["fake"] = True
        thread = threading.current_thread()
        if thread is not threading.main_thread():
            entry["thread"] = thread.name
        return entry

    def _minimal(self, func: Any, exc: BaseException) -> int | None:
        try:
            return self.writer.enter({"op": str(func), "note": f"not described: {type(exc).__name__}"})
        except OSError as err:
            self.broken = f"{type(err).__name__}: {err}"
            return None

    # ------------------------------------------------------------------ where

    def _where(self, node: Any) -> tuple[str, str, bool]:
        """(module path, source line, inside a compiled graph) of the call being dispatched."""
        if node is not None:  # a backward call: where the forward call that made its node ran
            try:
                tag = node.metadata.get(_TAG)
            except (RuntimeError, AttributeError):
                tag = None
            module, source = tag or ("", "")
            return module, source, False
        modules: list[Any] = []
        source, compiled = "", False
        frame = sys._getframe(3)
        while frame is not None:
            code = frame.f_code
            name = code.co_filename
            if code is _CALL_IMPL:
                module = frame.f_locals.get("self")
                if module is not None:
                    modules.append(module)
            elif name.startswith(_AOT_RUNTIME):
                compiled = True
            elif not source and not name.startswith(_TORCH_DIR) and not name.startswith(_PROJECT_DIRS):
                source = f"{os.path.basename(name)}:{frame.f_lineno} in {code.co_name}"
            frame = frame.f_back
        return self._module_path(modules), source, compiled

    def _module_path(self, modules: list[Any]) -> str:
        """The innermost module's name within the outermost one on the stack ("" for the root)."""
        if not modules:
            return ""
        root, inner = modules[-1], modules[0]
        cached = self._names.get(id(root))
        if cached is None or cached[0] is not root:  # named once per root module
            cached = (root, {id(m): n for n, m in root.named_modules(remove_duplicate=False)})
            self._names[id(root)] = cached
        name = cached[1].get(id(inner))
        if name is None:  # a module that is no attribute of the root: the nearest one that is
            name = next((cached[1][id(m)] for m in modules if id(m) in cached[1]), "")
            name = ".".join(p for p in (name, type(inner).__name__) if p)
        return name

    def _pend(self, out: Any) -> None:
        """Outputs whose autograd node is attached after this call returns: tagged at the next one."""
        if torch._C._current_autograd_node() is not None or not torch.is_grad_enabled():
            return
        flat = out if isinstance(out, (list, tuple)) else [out]
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        if tensors:
            self._pending.items = (tensors, getattr(self._pending, "where", ("", "")))

    def _tag_pending(self) -> None:
        items = getattr(self._pending, "items", None)
        self._pending.items = None
        if not items:
            return
        tensors, where = items
        for t in tensors:
            fn = t.grad_fn
            if fn is not None:
                with contextlib.suppress(RuntimeError, AttributeError):
                    fn.metadata.setdefault(_TAG, where)


@contextlib.contextmanager
def journaled(path: str | os.PathLike, device_type: str | None = None) -> Iterator[CallJournalMode]:
    """Run the block with every aten call journaled to `path` (truncated first)."""
    writer = JournalWriter(path)
    mode = CallJournalMode(writer, device_type)
    try:
        with mode:
            yield mode
    finally:
        writer.close()

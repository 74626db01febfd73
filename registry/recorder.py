"""Record every aten op call a model makes: a small TorchDispatchMode, fake tensors first.

`OpRecorder` sees each call below autograd (so the backward and optimizer ops too), keys it by a
cheap fingerprint (op, shapes, dtypes, strides, scalars) and encodes it fully only the first time,
so recording stays close to the speed of a plain run. `record_workload` runs a model's phases
(inference, training forward, backward, optimizer step) under FakeTensorMode, where large configs
cost no compute; if anything fails there (a data-dependent branch, an op without a fake kernel) it
runs the same workload again on real tensors and says why in `RecordOutcome.fake_error`.

    outcome = record_workload(build, make_inputs, model_id="bert-tiny", weight=1e6)
    registry = Registry(outcome.entries)
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from registry.constraints import infer_constraints, observe_constraints
from registry.encoding import encode_args, encode_value, signature
from registry.schema import Entry, Provenance

PHASES = ("inference", "forward", "backward", "optimizer")


_Tensor = torch.Tensor
_SCALARS = (int, bool, str, type(None))


def _fp(v: Any) -> Any:
    """A hashable fingerprint of an argument: equal fingerprints give equal signatures.

    Hot path (every op call): tensors first, plain loops, no recursion for flat tuples."""
    if isinstance(v, _Tensor):
        if v.layout is torch.strided:
            return (v.shape, v.dtype, v.stride(), v.storage_offset(), v.device.type)
        return (v.layout, v.shape, v.dtype, v.device.type)
    cls = type(v)
    if cls is tuple or cls is list:
        return tuple([_fp(x) for x in v])
    if cls is float:
        return ("f", repr(v))
    if cls in _SCALARS:
        return (cls, v)
    if cls is torch.dtype or cls is torch.layout or cls is torch.memory_format:
        return v
    if cls is torch.device:
        return ("device", v.type)
    return ("r", cls.__name__, repr(v))


def _device_types(v: Any, out: set[str]) -> set[str]:
    """Device types of the tensors and devices in an argument (nested lists/tuples/dicts)."""
    if isinstance(v, _Tensor):
        out.add(v.device.type)
    elif isinstance(v, torch.device):
        out.add(v.type)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _device_types(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            _device_types(x, out)
    return out


def receives(device: str | None, args: Any, kwargs: dict | None) -> bool:
    """Does `device` (a device type, None: any) receive this call? Yes when a tensor argument lives
    on it or the call names it (a factory's or a copy's `device=`). A call made entirely on other
    devices (a model part left on the CPU, a CPU-only decomposition) is not the device's."""
    if device is None:
        return True
    found = _device_types(args, set())
    if kwargs:
        _device_types(kwargs, found)
    return device in found if found else device == "cpu"  # naming no device: made on the CPU


@dataclass(slots=True)
class _Seen:
    op: str
    signature: str
    constraints: dict
    outputs: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)  # phase -> calls
    index: int = -1  # position in OpRecorder._order (the native hook's handle)
    ignored: bool = False  # made on another device than the one recorded (see `receives`)


def _native_module():
    """backend.native's extension when it is loaded (None: the pure-Python recorder)."""
    try:
        from backend import native
    except ImportError:  # pragma: no cover - backend is part of the package
        return None
    return native.module()


class OpRecorder(TorchDispatchMode):
    """Counts aten calls by signature, per phase. Set `.phase` between phases; `.paused()` hides
    the harness's own ops (e.g. a synthetic loss).

    With backend.native loaded and no other dispatch mode active, `with recorder:` pushes no
    Python mode: a C++ dispatcher hook right below the Python key counts calls it has seen
    before and hands new ones to `_native_first` (the same fingerprint, encoding and constraints
    as the mode), so a repeated call costs no Python. It also records the program as it runs
    unobserved: an active Python mode makes PyTorch treat every tensor as a subclass (`reshape`
    then calls `view` instead of `_reshape_alias`, the autograd engine accumulates gradients out
    of place, AccumulateGrad detaches instead of stealing), so the mode recorder (fake tensors, or
    no native path) sees those few calls differently; see docs/registry.md."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Recording runs eager models only; the per-call torch._disable_dynamo wrapper the base
        # class would add costs ~25 us per op, a third of the recording overhead on tiny models.
        return False

    def __init__(self, observe_values: bool = True, native: bool = True, device: str | None = None) -> None:
        super().__init__()
        self.device = device  # record only the calls this device type receives (None: every call)
        self._phase = "forward"
        self._phases: dict[str, int] = {}
        self.observe_values = observe_values
        self._calls = 0
        self._paused = False
        self._seen: dict[tuple, _Seen] = {}  # by the Python fingerprint (`_fp`)
        self._by_native_key: dict[bytes, _Seen] = {}  # by the native hook's fingerprint bytes
        self._order: list[_Seen] = []
        self._use_native = native
        self._native = None  # NativeRecorder while recording natively
        self._native_state = None

    # ------------------------------------------------------------------ state
    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        self._phase = value
        if self._native_state is not None:
            self._native_state.set_phase(self._phase_index(value))

    def _phase_index(self, phase: str) -> int:
        index = self._phases.get(phase)
        if index is None:
            index = self._phases[phase] = len(self._phases)
        return index

    @property
    def calls(self) -> int:
        self._take_native_counts()
        return self._calls

    @contextlib.contextmanager
    def paused(self):
        old, self._paused = self._paused, True
        if self._native_state is not None:
            self._native_state.set_paused(True)
        try:
            yield
        finally:
            self._paused = old
            if self._native_state is not None:
                self._native_state.set_paused(old)

    # ------------------------------------------------------------------ entering
    def __enter__(self):
        mod = _native_module() if self._use_native else None
        if mod is not None and torch._C._len_torch_dispatch_stack() == 0:
            if self._native_state is None:
                self._native_state = mod.NativeRecorder(self._native_first, self._native_outputs)
                self._native_state.set_phase(self._phase_index(self._phase))
            if self._native_state.start():
                self._native_state.set_paused(self._paused)
                self._native = self._native_state
                return self
        return super().__enter__()

    def __exit__(self, exc_type, exc_val, exc_tb):
        if self._native is not None:
            self._native.stop()
            self._native = None
            return False
        return super().__exit__(exc_type, exc_val, exc_tb)

    # ------------------------------------------------------------------ recording
    def _first_sight(self, func, args, kwargs) -> tuple[_Seen, bool]:
        key = (func, _fp(args), _fp(tuple(kwargs.items())) if kwargs else ())
        seen = self._seen.get(key)
        if seen is not None:
            return seen, False
        seen = self._seen[key] = self._new_seen(func, args, kwargs)
        return seen, not seen.ignored

    def _new_seen(self, func, args, kwargs) -> _Seen:
        """Encode a call met for the first time (signature, constraints) and give it an index."""
        op = str(func)
        if not receives(self.device, args, kwargs):  # counted under its fingerprint, never an entry
            seen = _Seen(op, "", {}, index=len(self._order), ignored=True)
        else:
            a_enc, k_enc = encode_args(args, kwargs)
            constraints = infer_constraints(op, a_enc, k_enc)
            if self.observe_values:
                constraints.update(observe_constraints(args, kwargs, constraints))
            seen = _Seen(op, signature(a_enc, k_enc), constraints, index=len(self._order))
        self._order.append(seen)
        return seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._paused or func.namespace != "aten":
            return func(*args, **kwargs)
        seen, new = self._first_sight(func, args, kwargs)
        out = func(*args, **kwargs)
        if new:
            seen.outputs = _encode_outputs(out)
        seen.counts[self.phase] = seen.counts.get(self.phase, 0) + 1
        self._calls += not seen.ignored
        return out

    def _native_first(self, func, args, kwargs, key: bytes | None = None) -> tuple[int, bool]:
        """The native hook met a call it has no fingerprint for: (signature index, new?). `key`:
        the hook's fingerprint bytes, whose equivalence is `_fp`'s (None: a call only Python can
        fingerprint)."""
        if key is None:
            seen, new = self._first_sight(func, args, kwargs)
            return seen.index, new
        seen = self._by_native_key.get(key)  # another thread met it first (an autograd thread)
        if seen is not None:
            return seen.index, False
        seen = self._by_native_key[key] = self._new_seen(func, args, kwargs)
        return seen.index, not seen.ignored

    def _native_outputs(self, index: int, out: Any) -> None:
        self._order[index].outputs = _encode_outputs(out)

    def _take_native_counts(self) -> None:
        if self._native_state is None:
            return
        counts, calls = self._native_state.take_counts()
        if not counts and not calls:
            return
        names = {i: p for p, i in self._phases.items()}
        for index, phase, n in counts:
            seen = self._order[index]
            seen.counts[names[phase]] = seen.counts.get(names[phase], 0) + n
            if seen.ignored:
                calls -= n
        self._calls += calls

    def entries(self, model_id: str, tier: str, mode: str, weight: float) -> list[Entry]:
        self._take_native_counts()
        out = []
        for s in self._order:
            if s.ignored or not any(s.counts.values()):
                continue  # not the device's call, or a call that raised (it never completed)
            prov = [
                Provenance(model_id, tier, phase, mode, float(weight), n)
                for phase, n in sorted(s.counts.items())
            ]
            out.append(Entry(s.op, s.signature, dict(s.constraints), s.outputs, prov))
        return out


def _encode_outputs(out: Any) -> list:
    if isinstance(out, (list, tuple)):
        return [encode_value(o) for o in out]
    return [encode_value(out)]


@dataclass
class RecordOutcome:
    model_id: str
    entries: list[Entry]
    mode: str  # fake | real | failed
    calls: int = 0
    fake_error: str = ""  # why fake tensors were not enough ("" when they were)
    error: str = ""  # why the real run failed too
    phases: list[str] = field(default_factory=list)


def _loss_of(output: Any) -> torch.Tensor | None:
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return loss
    return None


def _first_float(output: Any) -> torch.Tensor | None:
    values = (
        output.values()
        if hasattr(output, "values")
        else output
        if isinstance(output, (list, tuple))
        else [output]
    )
    for v in values:
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.requires_grad:
            return v
        if isinstance(v, (list, tuple)):
            found = _first_float(v)
            if found is not None:
                return found
    return None


def run_phases(
    rec: OpRecorder, model: torch.nn.Module, inputs: dict[str, Any], phases: Iterable[str] = PHASES
) -> list[str]:
    """Run a model's phases under `rec`; returns the phases that ran (backward needs a loss)."""
    done = []
    phases = list(phases)
    if "inference" in phases:
        model.eval()
        rec.phase = "inference"
        with torch.no_grad(), rec:
            model(**inputs)
        done.append("inference")
    if not {"forward", "backward", "optimizer"} & set(phases):
        return done
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=False) if "optimizer" in phases and params else None
    rec.phase = "forward"
    with rec:
        output = model(**inputs)
        loss = _loss_of(output)
        if loss is None:
            with rec.paused():  # a synthetic loss is the harness's op, not the model's
                first = _first_float(output)
                loss = first.float().mean() if first is not None else None
    done.append("forward")
    if loss is not None and ("backward" in phases or opt is not None):
        rec.phase = "backward"
        with rec:
            loss.backward()
        done.append("backward")
        if opt is not None:
            rec.phase = "optimizer"
            with rec:
                opt.step()
                opt.zero_grad(set_to_none=True)
            done.append("optimizer")
    return done


def _short_error(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}{where}"


def record_workload(
    build: Callable[[], torch.nn.Module],
    make_inputs: Callable[[torch.nn.Module], dict[str, Any]],
    *,
    model_id: str,
    tier: str = "representative",
    weight: float = 0.0,
    phases: Iterable[str] = PHASES,
    prefer_fake: bool = True,
    native: bool = True,
    device: str | None = None,
) -> RecordOutcome:
    """Record one model: under FakeTensorMode first, real tensors if fake fails (never raises).
    `native=False` records real tensors with the Python dispatch mode even when backend.native
    is loaded (see OpRecorder). `device` (a device type): only the calls that device receives
    become entries (a part of the model left on the CPU is not the device's op mix)."""
    phases = list(phases)
    fake_error = ""
    if prefer_fake:
        rec = OpRecorder(observe_values=False, device=device)
        try:
            with FakeTensorMode(allow_non_fake_inputs=True):
                torch.manual_seed(0)
                model = build()
                inputs = make_inputs(model)
                done = run_phases(rec, model, inputs, phases)
            return RecordOutcome(
                model_id, rec.entries(model_id, tier, "fake", weight), "fake", rec.calls, phases=done
            )
        except Exception as exc:  # noqa: BLE001 - any failure means: try real tensors
            fake_error = _short_error(exc)
    rec = OpRecorder(observe_values=True, native=native, device=device)
    try:
        torch.manual_seed(0)
        model = build()
        inputs = make_inputs(model)
        done = run_phases(rec, model, inputs, phases)
    except Exception as exc:  # noqa: BLE001 - a broken model is an outcome, not a crash
        # the calls made before the failure are real calls of the model (the last one may be the
        # op the device failed on): kept, and the outcome says it failed
        return RecordOutcome(
            model_id,
            rec.entries(model_id, tier, "real", weight),
            "failed",
            rec.calls,
            fake_error,
            _short_error(exc),
        )
    return RecordOutcome(
        model_id, rec.entries(model_id, tier, "real", weight), "real", rec.calls, fake_error, phases=done
    )

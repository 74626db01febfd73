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

import collections
import contextlib
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

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
            return (v.shape, v.dtype, v.stride(), v.storage_offset())
        return (v.layout, v.shape, v.dtype)
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
        return "device"
    return ("r", cls.__name__, repr(v))


@dataclass
class _Seen:
    op: str
    signature: str
    constraints: dict
    outputs: list = field(default_factory=list)
    counts: collections.Counter = field(default_factory=collections.Counter)


class OpRecorder(TorchDispatchMode):
    """Counts aten calls by signature, per phase. Set `.phase` between phases; `.paused()` hides
    the harness's own ops (e.g. a synthetic loss)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Recording runs eager models only; the per-call torch._disable_dynamo wrapper the base
        # class would add costs ~25 us per op, a third of the recording overhead on tiny models.
        return False

    def __init__(self, observe_values: bool = True) -> None:
        super().__init__()
        self.phase = "forward"
        self.observe_values = observe_values
        self.calls = 0
        self._paused = False
        self._seen: dict[tuple, _Seen] = {}

    @contextlib.contextmanager
    def paused(self):
        old, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = old

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._paused or func.namespace != "aten":
            return func(*args, **kwargs)
        key = (func, _fp(args), _fp(tuple(kwargs.items())) if kwargs else ())
        seen = self._seen.get(key)
        if seen is None:
            a_enc, k_enc = encode_args(args, kwargs)
            op = str(func)
            constraints = infer_constraints(op, a_enc, k_enc)
            if self.observe_values:
                constraints.update(observe_constraints(args, kwargs, constraints))
            seen = self._seen[key] = _Seen(op, signature(a_enc, k_enc), constraints)
            out = func(*args, **kwargs)
            seen.outputs = _encode_outputs(out)
        else:
            out = func(*args, **kwargs)
        seen.counts[self.phase] += 1
        self.calls += 1
        return out

    def entries(self, model_id: str, tier: str, mode: str, weight: float) -> list[Entry]:
        out = []
        for s in self._seen.values():
            prov = [Provenance(model_id, tier, phase, mode, float(weight), n) for phase, n in sorted(s.counts.items())]
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
    values = output.values() if hasattr(output, "values") else output if isinstance(output, (list, tuple)) else [output]
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
) -> RecordOutcome:
    """Record one model: under FakeTensorMode first, real tensors if fake fails (never raises)."""
    phases = list(phases)
    fake_error = ""
    if prefer_fake:
        rec = OpRecorder(observe_values=False)
        try:
            with FakeTensorMode(allow_non_fake_inputs=True):
                torch.manual_seed(0)
                model = build()
                inputs = make_inputs(model)
                done = run_phases(rec, model, inputs, phases)
            return RecordOutcome(model_id, rec.entries(model_id, tier, "fake", weight), "fake", rec.calls, phases=done)
        except Exception as exc:  # noqa: BLE001 - any failure means: try real tensors
            fake_error = _short_error(exc)
    rec = OpRecorder(observe_values=True)
    try:
        torch.manual_seed(0)
        model = build()
        inputs = make_inputs(model)
        done = run_phases(rec, model, inputs, phases)
    except Exception as exc:  # noqa: BLE001 - a broken model is an outcome, not a crash
        return RecordOutcome(model_id, [], "failed", rec.calls, fake_error, _short_error(exc))
    return RecordOutcome(model_id, rec.entries(model_id, tier, "real", weight), "real", rec.calls, fake_error, phases=done)

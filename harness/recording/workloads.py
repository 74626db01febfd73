"""Which models the registry is recorded from, and how one model is built and fed.

The default model set is the offline catalog's representatives (`agents.select.
default_representatives()`); `--models FILE` replaces it with ModelSpecs from a JSON list, JSONL
or YAML file. Each model is shrunk (`harness.build.models.resolve_config`), built with random weights
(`harness.build.models.build_model`) and given valid inputs (`harness.build.inputs.make_inputs`), once per
sequence length in `SEQ_LENGTHS` (by default the model tiers' own length; `--seq` adds shapes:
real training uses several, and so can the registry, the provenance says which). The inputs are
made exactly as the model tiers make them (harness/stages/check.py): from the model on the CPU, then
moved to the device, so a multimodal prompt gets the placeholders the model's own feature methods
count. `record_spec` runs in a worker process and never raises.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, RootModel

from contracts.errors import RuleFileError
from contracts.records import ModelSpec
from contracts.rulefiles import Rules, read_data, validate
from contracts.settings import current


def _model_tier_seq() -> int:
    from harness.build.rules import shrink_rules

    return shrink_rules().targets.test_sequence_length


#: Sequence lengths recorded per model (batch is the inputs module's, 2): the length the model
#: tiers run (shrink_rules.yaml `test_sequence_length`; the shrunk configs are sized for it, e.g.
#: sliding windows and axial position shapes), so a model that runs there records; `--seq` adds more.
SEQ_LENGTHS = (_model_tier_seq(),)

#: Models at least this large ($HARNESS_RECORD_FAKE_MIN_PARAMS) are recorded on fake tensors
#: first (no compute). Smaller ones are recorded on real tensors: for a tiny shrunk model
#: FakeTensorMode's per-op cost is ~20x the kernels' (measured on BERT/Llama/T5, hidden 64), and
#: real values give observed constraints.


def default_specs() -> tuple[list[ModelSpec], str]:
    """(specs, source): the offline catalog's representatives (agents.select)."""
    from agents.select import default_representatives

    return list(default_representatives()), "representatives"


class SpecEntry(Rules):
    """One model of a `--models` file: the fields of contracts.records.ModelSpec, nothing else."""

    model_id: str = ""  # default: "<model_type>-<position>"
    model_type: str
    architecture: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    downloads: int = 0
    source: str = ""


class SpecList(RootModel[tuple[SpecEntry, ...]]):
    """A `--models` file's list (JSON, JSONL or YAML; or a mapping with a `models` list)."""


def load_specs(path: str | Path) -> list[ModelSpec]:
    """ModelSpecs from a JSON list, JSONL or YAML file (fields of contracts.records.ModelSpec); a
    RuleFileError naming the entry and key for an unknown field or a missing model_type."""
    path = Path(path)
    if path.suffix in (".yaml", ".yml", ".toml"):
        rows = read_data(path) or []
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RuleFileError(str(path), [f"cannot be read: {exc.strerror or exc}"]) from exc
        try:
            if path.suffix == ".jsonl":
                rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            else:
                rows = json.loads(text)
        except ValueError as exc:
            raise RuleFileError(str(path), [f"not valid JSON: {exc}"]) from exc
    if isinstance(rows, dict):
        if set(rows) - {"models"}:
            raise RuleFileError(str(path), [f"unknown keys {sorted(set(rows) - {'models'})} (only `models`)"])
        rows = rows.get("models") or []
    entries = validate(SpecList, rows, path).root
    return [
        ModelSpec(**{**e.model_dump(), "model_id": e.model_id or f"{e.model_type}-{i}"})
        for i, e in enumerate(entries)
    ]


@dataclass
class SpecResult:
    model_id: str
    entries: list = field(default_factory=list)  # registry.schema.Entry
    runs: list[dict[str, Any]] = field(default_factory=list)  # per shape: mode, calls, errors
    error: str = ""
    seconds: float = 0.0
    device: str = "cpu"  # where the calls were recorded (the device under test)


# Private control flow: raised by the alarm handler, caught in this module; never leaves it.
class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def record_spec(
    spec_dict: dict[str, Any],
    seq_lengths: tuple[int, ...] = SEQ_LENGTHS,
    tier: str = "representative",
    timeout: float = 0,
    backend: str = "cpu",
) -> SpecResult:
    """Record one model at each sequence length on `backend`'s device (worker entry point: plain
    dicts in and out). The model and its inputs live on the device, so the registry holds the op
    mix the device receives (its own decompositions, not the CPU's).

    `timeout` (seconds, 0 = none) bounds the whole model via SIGALRM in the worker's main thread."""
    if timeout and hasattr(signal, "SIGALRM"):
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return _record_spec(spec_dict, seq_lengths, tier, backend)
        except _Timeout:
            return SpecResult(
                spec_dict.get("model_id", ""), error=f"timeout after {timeout:g}s", seconds=timeout
            )
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    return _record_spec(spec_dict, seq_lengths, tier, backend)


def _build_on(device: Any, build: Any) -> Any:
    """The model on `device`: built on the CPU and moved (real tensors), or built right there under
    FakeTensorMode (moving a module of fake parameters fails in Module._apply's tensor swap)."""
    import torch
    from torch._guards import detect_fake_mode

    if device.type == "cpu":
        return build()
    if detect_fake_mode() is not None:
        with torch.device(device):
            return build()
    return build().to(device)


def _to_device(value: Any, device: Any) -> Any:
    """A copy of `value` on `device` (a fresh copy each time: a run may modify its inputs in place)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone() if value.device == device else value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value


def _record_spec(
    spec_dict: dict[str, Any], seq_lengths: tuple[int, ...], tier: str, backend: str
) -> SpecResult:
    import torch

    from contracts.backends import get_backend
    from harness.build import inputs as model_inputs
    from harness.build import models
    from registry.recorder import record_workload

    torch.set_num_threads(1)
    spec = ModelSpec(**spec_dict)
    t0 = time.perf_counter()
    out = SpecResult(spec.model_id)
    try:
        device = get_backend(backend).device
    except Exception as exc:  # noqa: BLE001 - a device that cannot load records nothing, says why
        out.error = f"backend {backend!r} failed to load: {type(exc).__name__}: {exc}"[:300]
        return out
    out.device = device.type
    try:
        config = models.resolve_config(spec)
        arch = models.architecture_of(spec)
    except Exception as exc:  # noqa: BLE001 - a model that cannot be shrunk is reported
        out.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        out.seconds = time.perf_counter() - t0
        return out
    # Shrunk models are small: build the real one once and count its parameters (a meta build to
    # count first cost as much); a large one is dropped and recorded on fake tensors instead.
    # The inputs are made from this CPU model, as the model tiers make them: feature methods
    # asked for a placeholder count must run where the synthetic pixels/audio are (the CPU).
    prebuilt: list = []
    prefer_fake = False
    inputs: dict[int, dict[str, Any]] = {}
    input_error = ""
    try:
        model = models.build_model(config, arch, seed=0)
        prefer_fake = models.parameter_count(model) >= current().record_fake_min_params
        try:
            for seq in seq_lengths:
                inputs[seq] = model_inputs.make_inputs(model, config, arch, seed=0, seq=seq).kwargs
        except Exception as exc:  # noqa: BLE001 - reported as the model's record error
            input_error = (
                f"inputs: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            )
        if not prefer_fake:
            prebuilt.append(model)
        del model
    except Exception:  # noqa: BLE001 - record_workload builds again and reports the error
        pass

    def build() -> Any:
        if prebuilt:
            return _build_on(device, prebuilt.pop)
        return _build_on(device, lambda: models.build_model(config, arch, seed=0))

    def feed(m: Any, seq: int) -> dict[str, Any]:
        if seq in inputs:
            return _to_device(inputs[seq], device)
        if input_error:
            raise RuntimeError(input_error)
        # the CPU build failed and record_workload's build succeeded (it does not happen for a
        # deterministic build, but keep recording): inputs from the model where it is
        return _to_device(model_inputs.make_inputs(m, config, arch, seed=0, seq=seq).kwargs, device)

    for seq in seq_lengths:
        outcome = record_workload(
            build,
            lambda m, seq=seq: feed(m, seq),
            model_id=spec.model_id,
            tier=tier,
            weight=float(spec.downloads or 0),
            prefer_fake=prefer_fake,
            device=device.type,
        )
        out.entries.extend(outcome.entries)
        out.runs.append(
            {
                "seq": seq,
                "mode": outcome.mode,
                "calls": outcome.calls,
                "phases": outcome.phases,
                "fake_error": outcome.fake_error,
                "error": outcome.error,
            }
        )
    out.seconds = time.perf_counter() - t0
    return out

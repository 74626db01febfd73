"""Which models the registry is recorded from, and how one model is built and fed.

The default model set is the offline catalog's representatives (`agents.select.
default_representatives()`); `--models FILE` replaces it with ModelSpecs from a JSON list, JSONL
or YAML file. Each model is shrunk (`harness.models.resolve_config`), built with random weights
(`harness.models.build_model`) and given valid inputs (`harness.inputs.make_inputs`), once per
sequence length in `SEQ_LENGTHS`: real training uses several shapes, and so does the registry (the
provenance says which). `record_spec` runs in a worker process and never raises.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from contracts.records import ModelSpec
from contracts.settings import current

#: Sequence lengths recorded per model (batch is the inputs module's, 2); `--seq` adds more shapes.
SEQ_LENGTHS = (32,)

#: Models at least this large ($HARNESS_RECORD_FAKE_MIN_PARAMS) are recorded on fake tensors
#: first (no compute). Smaller ones are recorded on real tensors: for a tiny shrunk model
#: FakeTensorMode's per-op cost is ~20x the kernels' (measured on BERT/Llama/T5, hidden 64), and
#: real values give observed constraints.


def default_specs() -> tuple[list[ModelSpec], str]:
    """(specs, source): the offline catalog's representatives (agents.select)."""
    from agents.select import default_representatives

    return list(default_representatives()), "representatives"


def load_specs(path: str | Path) -> list[ModelSpec]:
    """ModelSpecs from a JSON list, JSONL or YAML file (fields of contracts.records.ModelSpec)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        rows = yaml.safe_load(text) or []
    elif path.suffix == ".jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        rows = json.loads(text)
    if isinstance(rows, dict):
        rows = rows.get("models") or []
    known = set(ModelSpec.__dataclass_fields__)
    specs = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "model_type" not in row:
            raise ValueError(f"{path}: entry {i} is not a model spec with a model_type")
        row = {k: v for k, v in row.items() if k in known}
        row.setdefault("model_id", f"{row['model_type']}-{i}")
        specs.append(ModelSpec(**row))
    return specs


@dataclass
class SpecResult:
    model_id: str
    entries: list = field(default_factory=list)  # registry.schema.Entry
    runs: list[dict[str, Any]] = field(default_factory=list)  # per shape: mode, calls, errors
    error: str = ""
    seconds: float = 0.0


class _Timeout(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise _Timeout()


def record_spec(spec_dict: dict[str, Any], seq_lengths: tuple[int, ...] = SEQ_LENGTHS, tier: str = "representative",
                timeout: float = 0) -> SpecResult:
    """Record one model at each sequence length (worker entry point: plain dicts in and out).

    `timeout` (seconds, 0 = none) bounds the whole model via SIGALRM in the worker's main thread."""
    if timeout and hasattr(signal, "SIGALRM"):
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return _record_spec(spec_dict, seq_lengths, tier)
        except _Timeout:
            return SpecResult(spec_dict.get("model_id", ""), error=f"timeout after {timeout:g}s", seconds=timeout)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    return _record_spec(spec_dict, seq_lengths, tier)


def _record_spec(spec_dict: dict[str, Any], seq_lengths: tuple[int, ...], tier: str) -> SpecResult:
    import torch

    from harness import inputs as model_inputs
    from harness import models
    from registry.recorder import record_workload

    torch.set_num_threads(1)
    spec = ModelSpec(**spec_dict)
    t0 = time.perf_counter()
    out = SpecResult(spec.model_id)
    try:
        config = models.resolve_config(spec)
        arch = models.architecture_of(spec)
        prefer_fake = models.count_parameters_meta(config, arch) >= current().record_fake_min_params
    except Exception as exc:  # noqa: BLE001 - a model that cannot be shrunk is reported
        out.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        out.seconds = time.perf_counter() - t0
        return out
    for seq in seq_lengths:
        outcome = record_workload(
            lambda: models.build_model(config, arch, seed=0),
            lambda m, seq=seq: model_inputs.make_inputs(m, config, arch, seed=0, seq=seq).kwargs,
            model_id=spec.model_id, tier=tier, weight=float(spec.downloads or 0), prefer_fake=prefer_fake,
        )
        out.entries.extend(outcome.entries)
        out.runs.append({"seq": seq, "mode": outcome.mode, "calls": outcome.calls, "phases": outcome.phases,
                         "fake_error": outcome.fake_error, "error": outcome.error})
    out.seconds = time.perf_counter() - t0
    return out

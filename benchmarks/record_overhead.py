"""Recording overhead: the same models run plainly and under the op recorder, side by side.

For each model (default: the bundled sample models, tiny BERT-MLM, Llama-CLM and GPT-2, shrunk by
the harness) one repeat = build the model, make its inputs, run inference, a training forward,
backward and an AdamW step: once plainly, once recorded exactly as `harness registry regenerate`
records it (real tensors for tiny models). One thread, median of repeats, interleaved so machine
noise hits both sides alike. `ratio` = recorded / plain, summed over the models;
`empty_mode_ratio` is the same run under a TorchDispatchMode that only forwards each call (the
floor of any dispatch-mode recorder); `--fake` adds `fake_ratio` (recording on FakeTensorMode).

    python benchmarks/record_overhead.py --json   -> {"ratio": ..., "models": {...}}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from importlib import resources


class _NoRecorder:
    """Stands in for the recorder in the plain run: same phases, no dispatch mode."""

    phase = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @contextlib.contextmanager
    def paused(self):
        yield


def _empty_mode():
    """A TorchDispatchMode that only forwards each call: the floor any dispatch-mode recorder pays."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class EmptyMode(TorchDispatchMode):
        phase = ""

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

        @contextlib.contextmanager
        def paused(self):
            yield

    return EmptyMode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="ModelSpecs file (default: registry/data/sample_models.yaml)")
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fake", action="store_true", help="also time recording on fake tensors")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    import torch

    from harness.build import inputs as model_inputs
    from harness.build import models
    from harness.recording.workloads import load_specs
    from registry.recorder import record_workload, run_phases

    torch.set_num_threads(1)
    path = args.models or str(resources.files("registry").joinpath("data/sample_models.yaml"))
    per_model, plain_total, rec_total, fake_total, empty_total = {}, 0.0, 0.0, 0.0, 0.0
    for spec in load_specs(path):
        config = models.resolve_config(spec)
        arch = models.architecture_of(spec)

        def build(config=config, arch=arch):
            return models.build_model(config, arch, seed=0)

        def make(m, config=config, arch=arch):
            return model_inputs.make_inputs(m, config, arch, seed=0, seq=args.seq).kwargs

        def plain():
            torch.manual_seed(0)
            model = build()
            run_phases(_NoRecorder(), model, make(model))

        def empty_mode():
            torch.manual_seed(0)
            model = build()
            run_phases(_empty_mode(), model, make(model))

        def recorded(model_id=spec.model_id):
            out = record_workload(build, make, model_id=model_id, prefer_fake=False)
            assert out.mode == "real", out.error

        def fake(model_id=spec.model_id):
            record_workload(build, make, model_id=model_id, prefer_fake=True)

        plain(), recorded()  # warm-up: lazy imports, caches
        times: dict[str, list[float]] = {"plain": [], "recorded": [], "empty_mode": [], "fake": []}
        for _ in range(args.repeats):
            sides = (("plain", plain), ("recorded", recorded), ("empty_mode", empty_mode))
            for name, fn in sides + ((("fake", fake),) if args.fake else ()):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items() if v}
        plain_total += med["plain"]
        rec_total += med["recorded"]
        fake_total += med.get("fake", 0.0)
        empty_total += med["empty_mode"]
        per_model[spec.model_id] = {k: round(v, 4) for k, v in med.items()} | {
            "ratio": round(med["recorded"] / med["plain"], 2)
        }
    result = {
        "ratio": round(rec_total / plain_total, 2),
        "plain_seconds": round(plain_total, 3),
        "empty_mode_ratio": round(empty_total / plain_total, 2),
        "recorded_seconds": round(rec_total, 3),
        "models": per_model,
        "seq": args.seq,
        "repeats": args.repeats,
    }
    if args.fake:
        result["fake_ratio"] = round(fake_total / plain_total, 2)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(f"recording / plain = {result['ratio']}x  ({per_model})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

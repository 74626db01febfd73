"""What the per-call journal costs where it runs: a model's eager training step on the device with
and without it (harness.engine.callmode), side by side, in interleaved rounds.

    python benchmarks/call_journal.py [--model bert] [--backend neuron] [--rounds 5] [--steps 10] [--json]

The journal runs only for a case that is re-run after its worker died, for the cases of an op a
worker died in, and for unit/upstream cases whose op changed since the baseline (harness.engine.
limits): a clean night runs no case under it. This measures what a journaled case pays: the step's
seconds with and without it (each round times --steps steps; the median of the rounds), their
ratio, the calls journaled per step and the cost per call. `--json` prints one object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert", help="a model type of the offline catalog")
    ap.add_argument("--backend", default="neuron")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="steps timed together in each round")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from contracts.backends import get_backend
    from contracts.records import ModelSpec
    from harness.build.inputs import make_inputs
    from harness.build.models import architecture_of, build_model, resolve_config
    from harness.engine.calljournal import read_calls
    from harness.engine.callmode import journaled
    from harness.stages.run import to_device

    adapter = get_backend(args.backend)
    spec = ModelSpec(f"catalog/{args.model}", args.model)
    arch = architecture_of(spec)
    config = resolve_config(spec)
    cpu_model = build_model(config, arch)
    inputs = make_inputs(cpu_model, config, arch)
    model = cpu_model.to(adapter.device).train()
    kwargs = to_device(inputs.kwargs, adapter.device)

    def step() -> None:
        out = model(**kwargs)
        first = out[0] if isinstance(out, (tuple, list)) else next(iter(out.values()))
        first.float().sum().backward()
        adapter.synchronize()

    path = Path(tempfile.mkdtemp(prefix="call-journal-")) / "calls"
    step()  # warm up: lazy initialisation is not the journal's
    plain, journal = [], []
    for _ in range(args.rounds):  # interleaved: a loaded machine slows both alike
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        plain.append((time.perf_counter() - t0) / args.steps)
        t0 = time.perf_counter()
        with journaled(path, adapter.device_type) as mode:
            for _ in range(args.steps):
                step()
        journal.append((time.perf_counter() - t0) / args.steps)
    with journaled(path, adapter.device_type):
        step()
    calls = max(e["seq"] for e in read_calls(path)) + 1
    a, b = statistics.median(plain), statistics.median(journal)
    report = {
        "model": spec.model_id,
        "backend": args.backend,
        "rounds": args.rounds,
        "steps": args.steps,
        "step_seconds": round(a, 4),
        "journaled_step_seconds": round(b, 4),
        "ratio": round(b / a, 2),
        "calls_per_step": calls,
        "microseconds_per_call": round((b - a) / calls * 1e6, 1),
        "broken": mode.broken,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{spec.model_id} on {args.backend}: step {a:.3f} s, journaled {b:.3f} s "
            f"(x{report['ratio']}), {calls} calls, {report['microseconds_per_call']} us per call"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Compile cache and adaptive eager, measured side by side in one run.

    python benchmarks/compile_cache.py [--json] [--cost-scale 100] [--repeats 7] [--rounds 5]

1. Time to the first training step (torch.compile + forward + backward of tiny BERT-MLM) in a
   fresh process each: cold cache, warm local disk, warm shared cache only (a new machine).
   Import time is excluded; Dynamo/AOTAutograd tracing is included (it is never cached).
   The simulated compiler cost is ``--cost-scale`` x the cost model (see docs: compile.md).
2. Steady-state compiled step on neuron vs the same step in CPU eager. CPU eager, neuron eager,
   the compiled step, the same compiled step with PyTorch's autograd device thread
   (``NEURON_AUTOGRAD_THREAD=device``) and adaptive eager (after its background compiles
   finished) are measured side by side: ``--rounds`` rounds, each timing ``--repeats`` steps of
   every one in turn after a GC pass; each figure is the median of its rounds' medians, so a
   drift of the machine's speed shifts them all alike (measured one after the other, the same
   compiled step can differ by 15% between two compiles a minute apart).
   Then with each compiler (``NEURON_COMPILER``: interpreter, inductor) and in exact precision,
   one after the other (each needs its own compile: Dynamo's cache does not tell them apart).
3. Adaptive eager vs plain neuron eager (from the rounds of 2).

``--json`` prints one object with ``warm_disk_over_cold``, ``warm_shared_over_cold``,
``compiled_step_over_cpu_eager``, ``adaptive_over_eager`` and the raw figures.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"


def tiny_bert():
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=512,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    ids = torch.randint(0, 512, (2, 32))
    return transformers.BertForMaskedLM(cfg), {"input_ids": ids, "labels": ids}


def step(model, batch) -> None:
    out = model(**batch)
    out.loss.backward()
    for p in model.parameters():
        p.grad = None
    out.loss.item()  # a sync point: the step is done when its loss is on the host


def side_by_side(candidates: dict, rounds: int, repeats: int) -> dict[str, float]:
    """Median step time of each candidate (name -> (model, batch, context factory)), measured in
    interleaved rounds: a slow spell of the machine slows every candidate of its round."""
    medians: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, (model, batch, context) in candidates.items():
            gc.collect()
            with context() if context else contextlib.nullcontext():
                medians[name].append(median_step(model, batch, repeats, warmup=1))
    return {name: statistics.median(m) for name, m in medians.items()}


def median_step(model, batch, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        step(model, batch)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step(model, batch)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def first_step_worker() -> None:
    """Runs in a fresh process: time torch.compile + the first training step."""
    import torch

    import backend  # noqa: F401
    from backend.cache import get_cache

    torch.set_num_threads(1)
    model, batch = tiny_bert()
    model = model.to("neuron")
    batch = {k: v.to("neuron") for k, v in batch.items()}
    start = time.perf_counter()
    step(torch.compile(model, backend="neuron"), batch)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "counters": get_cache().counters.to_dict()}))


def _first_step(env_extra: dict[str, str], scale: float) -> dict:
    env = {**os.environ, **env_extra, "NEURON_COMPILE_COST_SCALE": str(scale)}
    env.pop("NEURON_ADAPTIVE_EAGER", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, __file__, "--first-step-worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"first-step worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def measure(scale: float, repeats: int, rounds: int = 5) -> dict:
    from backend.neff.inductor import COMPILERS, compiler_name
    from backend.neff.inductor import ENV_VAR as COMPILER_ENV

    with tempfile.TemporaryDirectory(prefix="neff-bench-") as tmp:
        local_a, local_b, shared = (str(Path(tmp) / n) for n in ("machine_a", "machine_b", "shared"))
        print("first step: cold cache ...", file=sys.stderr)
        # each machine has its own Inductor cache too (NEURON_COMPILER=inductor compiles on load)
        ind_a, ind_b = local_a + "-inductor", local_b + "-inductor"
        cold = _first_step(
            {"NEURON_CACHE_DIR": local_a, "NEURON_SHARED_CACHE_DIR": shared, INDUCTOR_CACHE: ind_a}, scale
        )
        print("first step: warm disk ...", file=sys.stderr)
        warm_disk = _first_step(
            {"NEURON_CACHE_DIR": local_a, "NEURON_SHARED_CACHE_DIR": "", INDUCTOR_CACHE: ind_a}, scale
        )
        print("first step: warm shared ...", file=sys.stderr)
        warm_shared = _first_step(
            {"NEURON_CACHE_DIR": local_b, "NEURON_SHARED_CACHE_DIR": shared, INDUCTOR_CACHE: ind_b}, scale
        )

        os.environ["NEURON_CACHE_DIR"] = str(Path(tmp) / "steady")
        os.environ["NEURON_COMPILE_COST_SCALE"] = "1"
        import torch

        import backend  # noqa: F401
        from backend import adaptive

        torch.set_num_threads(1)
        print("steady state: cpu eager, neuron eager, compiled, adaptive ...", file=sys.stderr)
        cpu_model, cpu_batch = tiny_bert()
        model = copy.deepcopy(cpu_model).to("neuron")
        batch = {k: v.to("neuron") for k, v in cpu_batch.items()}
        compiled_model = torch.compile(model, backend="neuron")
        mode = adaptive.AdaptiveEager()
        with mode:
            for _ in range(3):
                step(model, batch)
            mode.wait_for_compiles()
        side = side_by_side(
            {
                "cpu_eager": (cpu_model, cpu_batch, None),
                "neuron_eager": (model, batch, None),
                "neuron_compiled": (compiled_model, batch, None),
                "neuron_adaptive": (model, batch, lambda: mode),
                # the same compiled step with PyTorch's autograd device thread (NEURON_AUTOGRAD_THREAD=device)
                "neuron_compiled_device_thread": (
                    compiled_model,
                    batch,
                    lambda: torch.autograd.set_multithreading_enabled(True),
                ),
            },
            rounds,
            repeats,
        )
        cpu_eager, neuron_eager, compiled, adaptive_eager = (
            side[k] for k in ("cpu_eager", "neuron_eager", "neuron_compiled", "neuron_adaptive")
        )
        stats = vars(mode.stats).copy()
        by_compiler = {}  # the same step with each compiler (NEURON_COMPILER), side by side
        previous_compiler = os.environ.get(COMPILER_ENV)
        for name in COMPILERS:
            os.environ[COMPILER_ENV] = name
            torch._dynamo.reset()
            by_compiler[name] = median_step(torch.compile(model, backend="neuron"), batch, repeats)
        _restore(COMPILER_ENV, previous_compiler)
        from backend.precision import set_precision

        previous = set_precision("exact")  # the same compiled step without the bf16 auto-cast
        torch._dynamo.reset()
        compiled_exact = median_step(torch.compile(model, backend="neuron"), batch, repeats)
        set_precision(previous)
    return {
        "warm_disk_over_cold": warm_disk["seconds"] / cold["seconds"],
        "warm_shared_over_cold": warm_shared["seconds"] / cold["seconds"],
        "compiled_step_over_cpu_eager": compiled / cpu_eager,
        "adaptive_over_eager": adaptive_eager / neuron_eager,
        "compiled_step_over_cpu_eager_exact_precision": compiled_exact / cpu_eager,
        "compiled_step_over_cpu_eager_device_thread": side["neuron_compiled_device_thread"] / cpu_eager,
        "compiled_step_over_cpu_eager_by_compiler": {k: v / cpu_eager for k, v in by_compiler.items()},
        "compiler": compiler_name(),
        "first_step_seconds": {
            "cold": cold["seconds"],
            "warm_disk": warm_disk["seconds"],
            "warm_shared": warm_shared["seconds"],
        },
        "first_step_counters": {
            "cold": cold["counters"],
            "warm_disk": warm_disk["counters"],
            "warm_shared": warm_shared["counters"],
        },
        "step_seconds": {
            "cpu_eager": cpu_eager,
            "neuron_eager": neuron_eager,
            "neuron_compiled": compiled,
            "neuron_adaptive": adaptive_eager,
            "neuron_compiled_exact_precision": compiled_exact,
            "neuron_compiled_device_thread": side["neuron_compiled_device_thread"],
            **{f"neuron_compiled_{k}": v for k, v in by_compiler.items()},
        },
        "load_average": os.getloadavg(),
        "adaptive_stats": stats,
        "cost_scale": scale,
        "repeats": repeats,
        "rounds": rounds,
        "model": "BertForMaskedLM hidden 64, 2 layers, 4 heads, vocab 512, batch 2x32, 1 thread",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--cost-scale",
        type=float,
        default=100.0,
        help="NEURON_COMPILE_COST_SCALE for the first-step runs (default 100: ~real compile times)",
    )
    parser.add_argument("--repeats", type=int, default=7, help="timed steps per candidate and round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the steady-state steps")
    parser.add_argument("--first-step-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.first_step_worker:
        first_step_worker()
        return 0
    r = measure(args.cost_scale, args.repeats, args.rounds)
    if args.json:
        print(json.dumps(r))
        return 0
    fs = r["first_step_seconds"]
    print(
        f"time to first training step (cost scale {r['cost_scale']:g}): cold {fs['cold']:.2f} s, "
        f"warm disk {fs['warm_disk']:.2f} s, warm shared {fs['warm_shared']:.2f} s"
    )
    print(f"  warm_disk_over_cold     {r['warm_disk_over_cold']:.3f}   (target <= 0.333)")
    print(f"  warm_shared_over_cold   {r['warm_shared_over_cold']:.3f}   (target <= 0.333)")
    s = r["step_seconds"]
    print(
        f"steady-state step: cpu eager {s['cpu_eager'] * 1e3:.1f} ms, "
        f"neuron eager {s['neuron_eager'] * 1e3:.1f} ms, "
        f"compiled {s['neuron_compiled'] * 1e3:.1f} ms, adaptive {s['neuron_adaptive'] * 1e3:.1f} ms"
    )
    print(f"  compiled_step_over_cpu_eager {r['compiled_step_over_cpu_eager']:.3f}   (target <= 1.3)")
    print(
        "  compiled_step_over_cpu_eager_exact_precision "
        f"{r['compiled_step_over_cpu_eager_exact_precision']:.3f}"
    )
    print(
        f"  compiled_step_over_cpu_eager_device_thread {r['compiled_step_over_cpu_eager_device_thread']:.3f}"
    )
    for name, ratio in r["compiled_step_over_cpu_eager_by_compiler"].items():
        print(f"  compiled_step_over_cpu_eager with NEURON_COMPILER={name} {ratio:.3f}")
    print(f"  adaptive_over_eager          {r['adaptive_over_eager']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

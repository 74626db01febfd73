"""Where the simulated device's time per op goes: single ops and training steps, CPU vs `neuron`
with the native fast path vs `neuron` on the pure-Python path (NEURON_NATIVE=0), side by side.

Single ops: 16x16 float32 inputs (int64 for `int_add`), one thread, best of 5 x --calls calls,
microseconds per call. Steps: one forward+backward of the tiny BERT-MLM / Llama-CLM of
eager_overhead.py (median of --repeats alternating steps): device ops per step, how many the native
path ran, and (neuron - CPU) step time per device op. Each device mode runs in its own process
(the fast path is chosen when `backend` is imported).

    python benchmarks/op_overhead.py [--calls 3000] [--repeats 15] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _per_call_us(fn, calls: int) -> float:
    for _ in range(200):
        fn()
    best = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best.append((time.perf_counter() - start) / calls * 1e6)
    return round(min(best), 2)


def measure(calls: int, repeats: int) -> dict:
    import torch

    import backend
    from backend import native

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from eager_overhead import BATCH, SEQ, VOCAB, step, tiny_models

    torch.set_num_threads(1)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    da, db = a.to("neuron"), b.to("neuron")
    i = torch.randint(0, 10, (16,))
    di = i.to("neuron")
    cases = {
        "add": (lambda: a + b, lambda: da + db),
        "mm": (lambda: a @ b, lambda: da @ db),
        "view_t": (lambda: a.t(), lambda: da.t()),
        "empty": (lambda: torch.empty(16, 16), lambda: torch.empty(16, 16, device="neuron")),
        "clone": (lambda: a.clone(), lambda: da.clone()),
        "int_add": (lambda: i + 1, lambda: di + 1),
    }
    out: dict = {"native": native.module() is not None, "ops_us": {}}
    for name, (on_cpu, on_dev) in cases.items():
        out["ops_us"][name] = {"cpu": _per_call_us(on_cpu, calls), "neuron": _per_call_us(on_dev, calls)}
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    for name, model in tiny_models().items():
        dev = copy.deepcopy(model).to("neuron")
        for _ in range(3):
            step(model, ids, "cpu")
            step(dev, ids, "neuron")
        backend.clear_op_tracking()
        if native.module() is not None:
            native.module().clear_executed()
        step(dev, ids, "neuron")
        ops = sum(backend.executed_ops().values())
        fast = sum(n for _, n in native.module().executed_counts()) if native.module() is not None else 0
        cpu_t, dev_t = [], []
        for _ in range(repeats):
            cpu_t.append(step(model, ids, "cpu")[0])
            dev_t.append(step(dev, ids, "neuron")[0])
        cpu_ms, dev_ms = statistics.median(cpu_t) * 1e3, statistics.median(dev_t) * 1e3
        out[name] = {
            "device_ops": ops,
            "native_ops": fast,
            "cpu_ms": round(cpu_ms, 2),
            "neuron_ms": round(dev_ms, 2),
            "overhead_us_per_op": round((dev_ms - cpu_ms) * 1e3 / ops, 1),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls per timing of a single op")
    parser.add_argument("--repeats", type=int, default=15, help="measured steps per device (median)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.calls, args.repeats)))
        return 0
    result = {}
    for mode, flag in (("native", "1"), ("pure_python", "0")):
        env = {**os.environ, "NEURON_NATIVE": flag}
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--calls", str(args.calls), "--repeats", str(args.repeats)],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            return 1
        result[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    if args.json:
        print(json.dumps(result))
        return 0
    for mode, data in result.items():
        print(f"{mode} (fast path loaded: {data['native']})")
        for op, t in data["ops_us"].items():
            print(f"  {op:<8} cpu {t['cpu']:7.2f} us   neuron {t['neuron']:7.2f} us")
        for name in ("bert_mlm", "llama_clm"):
            d = data[name]
            print(
                f"  {name}: {d['device_ops']} device ops ({d['native_ops']} native), cpu {d['cpu_ms']} ms, "
                f"neuron {d['neuron_ms']} ms, {d['overhead_us_per_op']} us overhead per op"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

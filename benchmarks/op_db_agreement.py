"""Agreement of the `neuron` device with CPU on PyTorch's own per-op samples (op_db), exact mode.

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` that supports
float32 on CPU, each float32 sample input runs on CPU and on `neuron` (NEURON_PRECISION=exact,
same seeds); the figure is the share of samples CPU can run that also run on neuron and match
(``torch.testing.assert_close`` with float32 defaults, NaNs equal). Target: >= 99%.

Ops run in child processes, a chunk at a time, so no op can kill the benchmark: when a child
dies, its chunk is re-run one op per process and the op that kills it is reported as a crash.

    python benchmarks/op_db_agreement.py [--json] [--ops add,mm] [--chunk 40] [--workers 2]
    python benchmarks/op_db_agreement.py --range 0:350 --records a.jsonl   # split a long run ...
    python benchmarks/op_db_agreement.py --summarize a.jsonl b.jsonl --json  # ... and merge it
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- child side
def _child(indices: list[int], max_samples: int) -> None:
    """Run the given op_db entries; one JSON line per op on stdout (flushed, so a crash keeps them)."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._pytree import tree_flatten, tree_map

    import backend

    backend.set_precision("exact")
    torch.set_num_threads(1)

    def to_dev(x):
        return x.to("neuron") if isinstance(x, torch.Tensor) else x

    def to_cpu(x):
        return x.cpu() if isinstance(x, torch.Tensor) else x

    def compare(a, b) -> str | None:
        fa, _ = tree_flatten(a)
        fb, _ = tree_flatten(b)
        if len(fa) != len(fb):
            return f"{len(fa)} outputs on neuron, {len(fb)} on cpu"
        for x, y in zip(fa, fb):
            if isinstance(y, torch.Tensor):
                if not isinstance(x, torch.Tensor):
                    return f"neuron returned {type(x).__name__}, cpu a tensor"
                if x.device.type != "cpu":
                    return f"result left on {x.device}"
                try:
                    torch.testing.assert_close(x, y, equal_nan=True)
                except AssertionError as exc:
                    return str(exc).splitlines()[0][:200]
            elif x != y and not (x != x and y != y):
                return f"{x!r} != {y!r}"
        return None

    def compare_cpu_skipped(op) -> bool:
        """op_db's own verdict: PyTorch skips its device-vs-CPU test (TestCommon.test_compare_cpu)
        for ops whose outputs are not comparable (uninitialized memory of empty*)."""
        for d in getattr(op, "decorators", ()) or ():
            if getattr(d, "test_name", None) != "test_compare_cpu" or getattr(d, "device_type", None):
                continue
            if getattr(d, "dtypes", None) is not None and torch.float32 not in d.dtypes:
                continue
            return True
        return False

    for i in indices:
        op = op_db[i]
        t0 = time.perf_counter()
        rec = {"index": i, "op": op.name, "variant": op.variant_test_name, "cpu_ok": 0, "matched": 0,
               "errors": 0, "unsupported": 0, "mismatches": 0, "first_problem": None}
        try:
            if torch.float32 not in op.supported_dtypes("cpu"):
                rec["skipped"] = "float32 not supported on cpu"
                print(json.dumps(rec), flush=True)
                continue
            if compare_cpu_skipped(op):
                rec["skipped"] = "op_db skips test_compare_cpu for this op (outputs not comparable)"
                print(json.dumps(rec), flush=True)
                continue
            samples = op.sample_inputs("cpu", torch.float32, requires_grad=False)
            for n, sample in enumerate(samples):
                if max_samples and n >= max_samples:
                    break
                args = (sample.input, *sample.args)
                try:
                    torch.manual_seed(0)
                    expected = op(*args, **sample.kwargs)
                except Exception:
                    continue  # CPU cannot run this sample: not in the denominator
                expected = tree_map(to_cpu, sample.output_process_fn_grad(expected))
                rec["cpu_ok"] += 1
                try:
                    dargs = tree_map(to_dev, args)
                    dkwargs = tree_map(to_dev, dict(sample.kwargs))
                    torch.manual_seed(0)
                    got = tree_map(to_cpu, sample.output_process_fn_grad(op(*dargs, **dkwargs)))
                except Exception as exc:
                    if isinstance(exc, backend.NeuronUnsupportedError):
                        rec["unsupported"] += 1
                    rec["errors"] += 1
                    rec["first_problem"] = rec["first_problem"] or f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                    continue
                problem = compare(got, expected)
                if problem is None:
                    rec["matched"] += 1
                else:
                    rec["mismatches"] += 1
                    rec["first_problem"] = rec["first_problem"] or f"mismatch: {problem}"
        except Exception as exc:  # sample generation itself failed
            rec["skipped"] = f"samples unavailable: {type(exc).__name__}"
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        print(json.dumps(rec), flush=True)


# ----------------------------------------------------------------------------- parent side
def _run_chunk(indices: list[int], max_samples: int, timeout: float) -> tuple[list[dict], str | None]:
    env = {**os.environ, "NEURON_PRECISION": "exact", "PYTHONPATH": str(ROOT), "NEURON_FALLBACK_MODE": "record"}
    cmd = [sys.executable, __file__, "--child", ",".join(map(str, indices)), "--max-samples", str(max_samples)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        out, code = proc.stdout, proc.returncode
        failure = None if code == 0 else f"exit code {code}"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        failure = "timeout"
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return records, failure


def _op_indices(only: set[str] | None) -> list[tuple[int, str]]:
    code = ("import json; from torch.testing._internal.common_methods_invocations import op_db; "
            "print(json.dumps([o.name for o in op_db]))")
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    names = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      check=True, env=env).stdout.strip().splitlines()[-1])
    return [(i, n) for i, n in enumerate(names) if only is None or n in only]


def _chunk_with_recovery(part: list[int], max_samples: int, timeout: float) -> tuple[list[dict], list[dict]]:
    got, failure = _run_chunk(part, max_samples, timeout)
    crashed: list[dict] = []
    if failure:
        done = {r["index"] for r in got}
        for i in part:  # re-run the rest one op per process to find the culprit
            if i in done:
                continue
            single, single_failure = _run_chunk([i], max_samples, timeout)
            got.extend(single)
            if single_failure and not single:
                crashed.append({"index": i, "failure": single_failure})
    return got, crashed


def measure(only: set[str] | None, chunk: int, max_samples: int, timeout: float, workers: int = 1,
            index_range: tuple[int, int] | None = None, records_path: str | None = None) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    todo = [i for i, _ in _op_indices(only)]
    if index_range:
        todo = [i for i in todo if index_range[0] <= i < index_range[1]]
    records: list[dict] = []
    crashed: list[dict] = []
    started = time.perf_counter()
    parts = [todo[s:s + chunk] for s in range(0, len(todo), chunk)]
    sink = open(records_path, "a", encoding="utf-8") if records_path else None
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for got, dead in pool.map(lambda p: _chunk_with_recovery(p, max_samples, timeout), parts):
            records.extend(got)
            crashed.extend(dead)
            if sink:
                for r in got + [{"crashed": d} for d in dead]:
                    sink.write(json.dumps(r) + "\n")
                sink.flush()
            print(f"  {len(records) + len(crashed)}/{len(todo)} ops", file=sys.stderr, flush=True)
    if sink:
        sink.close()
    return summarize(records, crashed, len(todo), time.perf_counter() - started)


def summarize(records: list[dict], crashed: list[dict], total: int, seconds: float) -> dict:
    cpu_ok = sum(r["cpu_ok"] for r in records)
    matched = sum(r["matched"] for r in records)
    problems = Counter()
    worst = []
    for r in records:
        bad = r["cpu_ok"] - r["matched"]
        if bad:
            worst.append({"op": r["op"] + (f".{r['variant']}" if r["variant"] else ""), "failing_samples": bad,
                          "of": r["cpu_ok"], "first_problem": r["first_problem"]})
            problems["error" if r["errors"] else "mismatch"] += 1
    worst.sort(key=lambda w: -w["failing_samples"])
    unsupported = sum(r.get("unsupported", 0) for r in records)
    return {
        "agreement": round(matched / cpu_ok, 5) if cpu_ok else None,
        # the same share without the samples of declared-unsupported features (sparse, nested, ...)
        "agreement_excluding_unsupported": round(matched / (cpu_ok - unsupported), 5) if cpu_ok > unsupported else None,
        "samples_unsupported": unsupported,
        "samples_cpu_ok": cpu_ok,
        "samples_matched": matched,
        "samples_errored": sum(r["errors"] for r in records),
        "samples_mismatched": sum(r["mismatches"] for r in records),
        "ops_total": total,
        "ops_run": sum(1 for r in records if "skipped" not in r),
        "ops_skipped": sum(1 for r in records if "skipped" in r),
        "ops_crashed": len(crashed),
        "crashed": crashed,
        "ops_with_failures": len(worst),
        "failures": worst,
        "precision": "exact",
        "target": 0.99,
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--ops", help="comma-separated op_db names to run (default: all)")
    parser.add_argument("--chunk", type=int, default=40, help="ops per child process")
    parser.add_argument("--max-samples", type=int, default=0, help="samples per op (0: all)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per child process")
    parser.add_argument("--workers", type=int, default=1, help="child processes at a time")
    parser.add_argument("--range", help="only op_db entries with index in A:B")
    parser.add_argument("--records", help="append one JSON line per op to this file")
    parser.add_argument("--summarize", nargs="+", metavar="RECORDS",
                        help="no run: summarize records files written by --records")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        _child([int(i) for i in args.child.split(",") if i], args.max_samples)
        return 0
    if args.summarize:
        recs, dead = [], []
        for path in args.summarize:
            for line in Path(path).read_text().splitlines():
                r = json.loads(line)
                (dead.append(r["crashed"]) if "crashed" in r else recs.append(r))
        result = summarize(recs, dead, len(recs) + len(dead), sum(r.get("seconds", 0) for r in recs))
    else:
        only = set(args.ops.split(",")) if args.ops else None
        rng = tuple(int(x) for x in args.range.split(":")) if args.range else None
        result = measure(only, args.chunk, args.max_samples, args.timeout, args.workers, rng, args.records)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"agreement: {result['agreement']} ({result['samples_matched']}/{result['samples_cpu_ok']} "
              f"float32 samples CPU can run; target {result['target']}); "
              f"{result['agreement_excluding_unsupported']} without the {result['samples_unsupported']} samples "
              f"of declared-unsupported features")
        print(f"ops: {result['ops_run']} run, {result['ops_skipped']} skipped, {result['ops_crashed']} crashed")
        for w in result["failures"][:30]:
            print(f"  {w['op']}: {w['failing_samples']}/{w['of']}  {w['first_problem']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

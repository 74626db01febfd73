"""How much of the offline catalog passes each stage, on neuron and on cpu, and how long it takes.

    python benchmarks/catalog_stages.py                       # model types, neuron and cpu
    python benchmarks/catalog_stages.py --pairs --workers 2   # every type x class pair
    python benchmarks/catalog_stages.py --shrink-only --json  # the shrinker's coverage only
    python benchmarks/catalog_stages.py --compile --types bert,llama
    python benchmarks/catalog_stages.py --pairs --backend cpu --json    # the pass shares by blame
    python benchmarks/catalog_stages.py --configs ../shared/data/hub/full_configs.jsonl --backend cpu

Each model runs in a worker process (reused between models, replaced after a timeout or a crash:
a crash is a row with status `crash`, never a lost one). Prints counts per stage and status for
each backend, the wall time per backend and their ratio; `--json` prints one object with keys
`shrink`, `backends` ({backend: {stages: {stage: {status: n}}, blame: {stage: {blame: n}},
attributable: {stage: {passed, not_applicable, denominator, share, share_applicable}}, seconds,
models}}), `ratios`, `load` (the machine's load average, start and end). Every stage that does
not pass is blamed (harness.blame.probe: backend, upstream, environment, harness);
`attributable` is the pass share over the models not blamed on upstream or the environment.
`--rows PATH` writes every result as JSON lines (the failure report).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EAGER_STAGES = ["load", "forward", "backward", "numerics", "on_device"]


# --------------------------------------------------------------------------- what to run
def catalog_specs(
    pairs: bool, types: set[str] | None, limit: int | None, heads_only: bool = False
) -> list[dict[str, Any]]:
    """Base model per type (or the first class of a type without one), or every type x class pair
    (`heads_only`: the pairs the per-type run did not already check)."""
    from agents.catalog import iter_catalog

    out, seen = [], set()
    for rec in iter_catalog(types):
        if rec.status != "ok":
            continue
        first = rec.model_type not in seen
        seen.add(rec.model_type)
        if (not pairs and not first) or (heads_only and first):
            continue
        out.append(
            {
                "model_id": rec.id,
                "model_type": rec.model_type,
                "architecture": rec.architecture,
                "config": rec.config_dict() or {},
                "heads": len(rec.tags) or 1,
                "base": bool(rec.is_base),
            }
        )
    return out[:limit] if limit else out


# --------------------------------------------------------------------------- workers
def _worker(conn, backend: str, stages: list[str]) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    from contracts.records import ModelSpec
    from harness.blame.probe import check_with_blame

    if backend not in ("cpu", "cuda"):
        import backend as _  # noqa: F401  (register the device before the first model)
    while True:
        task = conn.recv()
        if task is None:
            return
        spec = ModelSpec(task["model_id"], task["model_type"], task["architecture"], task["config"])
        result = check_with_blame(spec, backend=backend, stages=stages)
        conn.send(result.to_dict())


def _shrink_worker(conn) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    from contracts.records import ModelSpec
    from harness.build.models import architecture_of, count_parameters_meta, resolve_config

    while True:
        task = conn.recv()
        if task is None:
            return
        spec = ModelSpec(task["model_id"], task["model_type"], task["architecture"], task["config"])
        row = {"model_id": spec.model_id, "model_type": spec.model_type}
        try:
            cfg = resolve_config(spec)
            row.update(
                ok=True,
                level=cfg._shrink_level,
                parameters=count_parameters_meta(cfg, architecture_of(spec)),
                budget_changes=cfg._shrink_budget_changes,
                errors=cfg._shrink_errors,
            )
        except Exception as exc:  # noqa: BLE001 - a row with the reason
            row.update(ok=False, reason=f"{type(exc).__name__}: {str(exc)[:300]}")
        conn.send(row)


class _Rows(list):
    """The results list; each row is also handed to `on_row` as it arrives (streamed to --rows)."""

    def __init__(self, on_row=None):
        super().__init__()
        self.on_row = on_row

    def append(self, row) -> None:
        super().append(row)
        if self.on_row:
            self.on_row(row)


def _warm_imports() -> None:
    """Import transformers' modeling code and lazy model structure here, before the workers fork:
    they inherit it. Otherwise each fresh worker (and each replacement after a timeout) imports it
    inside its first task's timer: on a loaded machine most of a first model's load time, enough
    to push it over the per-model limit."""
    import warnings

    warnings.filterwarnings("ignore")
    import transformers

    from harness import blame_probe  # noqa: F401  (the workers' own imports)

    transformers.PreTrainedModel  # noqa: B018  (modeling_utils)
    transformers.BertModel  # noqa: B018  (transformers.models' lazy import structure)


class Pool:
    """N worker processes; a task that exceeds `timeout` or kills its worker becomes a row."""

    def __init__(self, target, args: tuple, workers: int, timeout: float):
        _warm_imports()
        self.ctx = mp.get_context("fork")
        self.target, self.args, self.timeout = target, args, timeout
        self.slots = [self._spawn() for _ in range(workers)]

    def _spawn(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=self.target, args=(child, *self.args), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "task": None, "start": 0.0}

    def map(self, tasks: list[dict], on_fail, progress=None, on_row=None):
        queue, results = list(tasks), _Rows(on_row)
        while queue or any(s["task"] is not None for s in self.slots):
            for i, s in enumerate(self.slots):
                if s["task"] is None and queue:
                    s["task"], s["start"] = queue.pop(0), time.monotonic()
                    try:
                        s["conn"].send(s["task"])
                    except (BrokenPipeError, OSError):  # the idle worker died: a fresh one takes the task
                        s["conn"].close()
                        task = s["task"]
                        self.slots[i] = s = self._spawn()
                        s["task"], s["start"] = task, time.monotonic()
                        s["conn"].send(task)
            busy = [s for s in self.slots if s["task"] is not None]
            ready = wait([s["conn"] for s in busy] + [s["proc"].sentinel for s in busy], timeout=1.0)
            now = time.monotonic()
            for i, s in enumerate(self.slots):
                if s["task"] is None:
                    continue
                if s["conn"] in ready and s["conn"].poll():
                    try:
                        results.append(s["conn"].recv())
                    except EOFError:
                        results.append(on_fail(s["task"], "crash", "worker died"))
                    s["task"] = None
                elif not s["proc"].is_alive():
                    results.append(
                        on_fail(s["task"], "crash", f"worker exited with code {s['proc'].exitcode}")
                    )
                    s["conn"].close()
                    self.slots[i] = self._spawn()
                    continue
                elif now - s["start"] > self.timeout:
                    s["proc"].kill()
                    s["proc"].join()
                    results.append(on_fail(s["task"], "timeout", f"exceeded {self.timeout:.0f}s"))
                    s["conn"].close()
                    self.slots[i] = self._spawn()
                    continue
                else:
                    continue
                if progress:
                    progress(len(results))
        return results

    def close(self):
        for s in self.slots:
            try:
                s["conn"].send(None)
            except (BrokenPipeError, OSError):
                pass
            s["proc"].join(timeout=5)
            if s["proc"].is_alive():
                s["proc"].kill()


# --------------------------------------------------------------------------- summaries
def _failed_row(stages: list[str], backend: str):
    """A model whose worker died or timed out: every stage gets the status, blamed like the runner
    does without a reference re-run (harness.blame.rules: on cpu a crash/timeout is the harness')."""

    def make(task: dict, status: str, reason: str) -> dict:
        from harness.blame import rules as blame

        rows = [{"stage": s, "status": status, "reason": reason} for s in stages]
        blame.complete_stages(
            rows,
            tier="benchmark",
            backend=backend,
            died=True,
            reference_note="the benchmark's pool does not re-run dead workers on cpu",
        )
        return {
            "model_id": task["model_id"],
            "model_type": task["model_type"],
            "architecture": task["architecture"],
            "stages": {r["stage"]: r for r in rows},
            "fallback_ops": [],
        }

    return make


def blame_counts(rows: list[dict]) -> dict:
    """stage -> {blame: models} over the stages that did not pass ("none": nobody's, e.g. not applicable)."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for row in rows:
        for stage, r in row["stages"].items():
            if r["status"] != "pass":
                counts[stage][r.get("blame") or "none"] += 1
    return {s: dict(c) for s, c in counts.items()}


def attributable(rows: list[dict]) -> dict:
    """stage -> passed / models not blamed on upstream or the environment (the share the harness
    and the device answer for). `not_applicable`: stages skipped with a reason (a video tracker's
    inference-mode forward has no backward), counted apart: `share` is strict, `share_applicable`
    counts them as not failing."""
    out = {}
    for stage in {s for row in rows for s in row["stages"]}:
        status = [row["stages"].get(stage, {}).get("status") for row in rows]
        passed, skipped = status.count("pass"), status.count("skipped")
        excluded = sum(
            1 for row in rows if row["stages"].get(stage, {}).get("blame") in ("upstream", "environment")
        )
        denominator = len(rows) - excluded
        out[stage] = {
            "passed": passed,
            "not_applicable": skipped,
            "denominator": denominator,
            "share": round(passed / denominator, 4) if denominator else None,
            "share_applicable": round((passed + skipped) / denominator, 4) if denominator else None,
        }
    return out


def stage_counts(rows: list[dict], weight_key: str | None = None, tasks: dict | None = None) -> dict:
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for row in rows:
        w = (tasks or {}).get(row["model_id"], {}).get(weight_key, 1) if weight_key else 1
        for stage, r in row["stages"].items():
            counts[stage][r["status"]] += w
    return {s: dict(c) for s, c in counts.items()}


def run_backend(
    backend: str, tasks: list[dict], stages: list[str], workers: int, timeout: float, on_row=None
) -> tuple[list[dict], float]:
    t0 = time.monotonic()
    pool = Pool(_worker, (backend, stages), workers, timeout)
    done = [0]
    on_fail = _failed_row(stages, backend)

    def progress(n):
        if n % 25 == 0 or n == len(tasks):
            print(
                f"  [{backend}] {n}/{len(tasks)} ({time.monotonic() - t0:.0f}s)", file=sys.stderr, flush=True
            )
            done[0] = n

    try:
        rows = pool.map(tasks, on_fail, progress, on_row)
    finally:
        pool.close()
    return rows, time.monotonic() - t0


def run_shrink(tasks: list[dict], workers: int, timeout: float) -> dict:
    from harness.build.rules import shrink_rules

    budget = shrink_rules().targets.max_parameters
    t0 = time.monotonic()
    pool = Pool(_shrink_worker, (), workers, timeout)
    try:
        rows = pool.map(
            tasks,
            lambda t, st, why: {
                "model_id": t["model_id"],
                "model_type": t["model_type"],
                "ok": False,
                "reason": f"{st}: {why}",
            },
        )
    finally:
        pool.close()
    ok = [r for r in rows if r.get("ok")]
    small = [r for r in ok if r["parameters"] < budget]
    levels = collections.Counter(r["level"] for r in ok)
    return {
        "models": len(rows),
        "instantiated": len(ok),
        "under_budget": len(small),
        "instantiated_pct": round(100 * len(ok) / max(1, len(rows)), 2),
        "under_budget_pct": round(100 * len(small) / max(1, len(rows)), 2),
        "levels": dict(levels),
        "seconds": round(time.monotonic() - t0, 1),
        "failures": sorted(
            ({"model_type": r["model_type"], "reason": r.get("reason", "")} for r in rows if not r.get("ok")),
            key=lambda r: r["model_type"],
        ),
        "over_budget": sorted(
            (
                {"model_type": r["model_type"], "parameters": r["parameters"]}
                for r in ok
                if r["parameters"] >= budget
            ),
            key=lambda r: -r["parameters"],
        ),
    }


def _kept_rows(path: Path) -> list[dict]:
    """Check rows of an earlier, interrupted run (--resume); a torn last line is dropped."""
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if row.get("kind") == "check":
                rows.append({k: v for k, v in row.items() if k != "kind"})
    return rows


def _stream(path: Path, kept: list[dict]):
    """Write each check row to `path` as soon as it arrives: a run that is stopped loses nothing."""
    with path.open("w") as f:
        for r in kept:
            f.write(json.dumps({"kind": "check", **r}, default=str) + "\n")

    def write(row: dict) -> None:
        with path.open("a") as f:
            f.write(json.dumps({"kind": "check", **row}, default=str) + "\n")

    return write


def full_config_tasks(path: Path) -> list[dict]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from harness.build.models import model_class
    from harness.errors import UnknownArchitecture

    tasks = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        cfg = row["config"]
        if cfg.get("model_type") not in CONFIG_MAPPING_NAMES:
            continue
        arch = (cfg.get("architectures") or [""])[0]
        try:
            model_class(arch)
        except UnknownArchitecture:
            arch = ""
        tasks.append(
            {"model_id": row["id"], "model_type": cfg["model_type"], "architecture": arch, "config": cfg}
        )
    return tasks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--backends", default="neuron,cpu", help="comma-separated backends, run one after the other"
    )
    p.add_argument("--backend", dest="backends", help="one backend (same as --backends B)")
    p.add_argument(
        "--stages", help="comma-separated stages (default: load,forward,backward,numerics,on_device)"
    )
    p.add_argument(
        "--configs",
        type=Path,
        help="run the stages over these full Hub configs (JSONL: id, config) "
        "of types the installed transformers knows, instead of the catalog",
    )
    p.add_argument("--pairs", action="store_true", help="every type x class pair, not one model per type")
    p.add_argument("--heads-only", action="store_true", help="with --pairs: skip each type's first class")
    p.add_argument("--compile", action="store_true", help="also run the (slow) compile stage")
    p.add_argument("--types", help="comma-separated model types to restrict to")
    p.add_argument("--limit", type=int)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--shrink-only", action="store_true")
    p.add_argument(
        "--sample", help="K/N: only every N-th model, starting at the K-th (a deterministic sample)"
    )
    p.add_argument("--no-shrink", action="store_true", help="skip the shrinker pass (only the stages)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="with --rows: keep the check rows already in the file and run only the models missing there",
    )
    p.add_argument(
        "--full-configs", type=Path, default=ROOT.parent / "shared" / "data" / "hub" / "full_configs.jsonl"
    )
    p.add_argument("--rows", type=Path, help="write every result row here (JSON lines)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    types = set(args.types.split(",")) if args.types else None
    if args.configs:
        tasks = [dict(t, heads=1, base=True) for t in full_config_tasks(args.configs)]
        tasks = [t for t in tasks if not types or t["model_type"] in types][: args.limit or None]
        unit = "full_configs"
    else:
        tasks = catalog_specs(args.pairs, types, args.limit, args.heads_only)
        unit = "pairs" if args.pairs else "types"
    if args.sample:
        k, n = (int(x) for x in args.sample.split("/"))
        tasks = tasks[k - 1 :: n]  # a deterministic systematic sample: every n-th, starting at the k-th
    out: dict[str, Any] = {
        "models": len(tasks),
        "unit": unit,
        "sample": args.sample,
        "load": {"start": os.getloadavg()},
    }
    shrink_tasks = [t for t in tasks if t["base"]] if not args.pairs else tasks
    out["shrink"] = (
        {}
        if args.heads_only or args.configs or args.no_shrink
        else {
            "catalog_base_types" if not args.pairs else "catalog_pairs": run_shrink(
                shrink_tasks, args.workers, args.timeout
            )
        }
    )
    if args.full_configs.is_file() and not args.pairs and not args.configs and not args.no_shrink:
        out["shrink"]["full_configs"] = run_shrink(
            full_config_tasks(args.full_configs), args.workers, args.timeout
        )
    if not args.json:
        for name, s in out["shrink"].items():
            print(
                f"shrink {name}: {s['instantiated']}/{s['models']} instantiate ({s['instantiated_pct']}%), "
                f"{s['under_budget']} under the parameter budget ({s['under_budget_pct']}%), {s['seconds']}s"
            )
    rows_out = []
    if not args.shrink_only:
        stages = EAGER_STAGES[:3] + (["compile"] if args.compile else []) + EAGER_STAGES[3:]
        if args.stages:
            stages = [s for s in args.stages.split(",") if s]
        out["backends"] = {}
        kept = _kept_rows(args.rows) if args.resume and args.rows else []
        stream = _stream(args.rows, kept) if args.rows else None
        for backend in args.backends.split(","):
            before = [r for r in kept if r.get("backend") == backend]
            done = {r["model_id"] for r in before}
            todo = [t for t in tasks if t["model_id"] not in done]
            rows, seconds = run_backend(
                backend,
                todo,
                stages,
                args.workers,
                args.timeout,
                (lambda r, b=backend: stream(dict(r, backend=b))) if stream else None,
            )
            rows = [r for r in before if r["model_id"] in {t["model_id"] for t in tasks}] + list(rows)
            rows_out += [dict(r, backend=backend) for r in rows]
            entry = {
                "seconds": round(seconds, 1),
                "models": len(rows),
                "stages": stage_counts(rows),
                "blame": blame_counts(rows),
                "attributable": attributable(rows),
            }
            if args.pairs:
                entry["heads_weighted"] = stage_counts(rows, "heads", {t["model_id"]: t for t in tasks})
            out["backends"][backend] = entry
            if not args.json:
                print(
                    f"\n{backend}: {len(rows)} models in {seconds:.0f}s "
                    f"({seconds / max(1, len(rows)):.2f}s/model)"
                )
                for stage in stages:
                    counts = entry["stages"].get(stage, {})
                    blames = entry["blame"].get(stage, {})
                    share = entry["attributable"].get(stage, {})
                    print(
                        f"  {stage:10s} "
                        + "  ".join(f"{k}={v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
                        + "  | not passed by blame: "
                        + (" ".join(f"{k}={v}" for k, v in sorted(blames.items())) or "-")
                        + (
                            f"  | pass {share['passed']}/{share['denominator']} not upstream/environment"
                            f" ({100 * share['share']:.1f}%)"
                            if share.get("share") is not None
                            else ""
                        )
                        + (
                            f", {share['not_applicable']} not applicable"
                            if share.get("not_applicable")
                            else ""
                        )
                    )
        secs = {b: e["seconds"] for b, e in out["backends"].items()}
        if "neuron" in secs and "cpu" in secs and secs["cpu"]:
            out["ratios"] = {"neuron_over_cpu_seconds": round(secs["neuron"] / secs["cpu"], 2)}
            if not args.json:
                print(
                    f"\nneuron/cpu wall time: {out['ratios']['neuron_over_cpu_seconds']}x "
                    "(shared 2-core machine: noisy)"
                )
    out["load"]["end"] = os.getloadavg()
    if not args.json:
        print(f"load average: start {out['load']['start']}, end {out['load']['end']}")
    if args.rows:
        with args.rows.open("a") as f:
            for name, s in out["shrink"].items():
                for fail in s["failures"]:
                    f.write(json.dumps({"kind": "shrink_failure", "set": name, **fail}) + "\n")
                for big in s["over_budget"]:
                    f.write(json.dumps({"kind": "over_budget", "set": name, **big}) + "\n")
    if args.json:
        print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

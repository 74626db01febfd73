"""Where a nightly's wall time goes: per tier, and the shares of device overhead, start-up, listing,
shrinking, references, blame probes, the compile stage and reporting.

    python benchmarks/nightly_time.py [--quick] [--workers 2] [--cpu-fraction 0.25] [--json]
    python benchmarks/nightly_time.py --from NIGHTLY_DIR [--cpu-fraction 0] [--json]  # a finished night
    python benchmarks/nightly_time.py --sample 10 [--json]   # the full night on 1/10 of every tier, scaled up

Runs `harness nightly` (every tier; `--quick`: the [quick] limits) into WORKDIR/neuron from a cold
NEFF cache (an empty NEURON_CACHE_DIR), then the same cases on the cpu backend side by side
(a deterministic sample: every k-th case of each tier's list, `--cpu-fraction`), and splits the
time by what was measured, not guessed:

- per tier, from DIR/<tier>/run.json: listing, the fingerprint probe, the runner's reference pass
  (cases re-run on cpu), writing the tables and the summary; from DIR/nightly.json: the report;
- per case, from the journal: each worker's start-up (spawn -> ready: interpreter, torch,
  transformers, tier setup), every stage's seconds, and the phases the code marks
  (contracts.timing: ``shrink``, ``reference`` - CPU work done to judge the device: the unit
  tier's CPU op, blame re-runs -, ``blame`` - upstream probes); the numerics stage counts as
  references (a CPU float64 and a CPU eager forward);
- killed cases: a case whose worker was killed (timeout, memory limit, crash) counts its time once;
- device overhead: the eager device work of a case (stages load/forward/backward/op without the
  shrinking and reference phases inside them) on neuron minus the same on cpu, over the sampled
  cases, as a ratio applied to the tier's eager device work. The compile stage (the simulated
  compiler) is its own share: the cpu backend compiles with Inductor, no like-for-like figure.

Worker-seconds become wall seconds divided by the number of workers; "idle" is what is left of
the executors' wall time (long tail, dispatch). `--json` prints `wall_seconds`, `tiers` (per tier:
`wall_seconds`, `cases`, `seconds` by category, `shares`), `shares` (whole night), `cpu_side`
(sampled cases, neuron and cpu eager seconds, `device_overhead_ratio` per tier), `targets`,
`load_average`. Re-measure on a quiet machine with the same command.

`--sample N` (the full nightly only) runs shard 1/N of every tier (the nightly config's per-tier
`shard`; stable hash sharding, so the sample is every tier's cases spread over its whole list) and
adds `estimate`: per tier, the costs paid once per tier (listing, the fingerprint probe, worker
start-up) as measured, plus N x everything paid per case (stages, shrinking, references, blame,
killed cases, tables, idle tail); the night's estimate adds the report x N. It is an estimate of
the whole night from a measured sample, and says so (`estimate.sample`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EAGER_STAGES = ("load", "forward", "backward", "op")
CATEGORIES = (
    "device_overhead",
    "startup",
    "listing",
    "shrinking",
    "references",
    "blame_probes",
    "compile",
    "killed_cases",
    "reporting",
    "cpu_kernels_and_harness",
    "idle",
)
TARGET_FULL_MINUTES = 45.0
TARGET_QUICK_COLD_MINUTES = 2.0
#: cpu side of the representative tier: its eager stages only (the cpu backend compiles with Inductor).
#: A `--tier MODULE:ATTR` reference to the class below (contracts.tiers.load_tier instantiates a class).
EAGER_REPRESENTATIVE_REF = "nightly_time:EagerRepresentative"


class EagerRepresentative:
    """The representative tier's cases with the full tier's stages (for the cpu side)."""

    name = "representative"
    chunk_size = 1

    def __init__(self) -> None:
        from contracts.status import FULL_STAGES
        from harness.tiers.representative import RepresentativeTier

        self._tier = RepresentativeTier()
        self.stages, self.timeout = FULL_STAGES, self._tier.timeout

    def setup(self, backend: str) -> None:
        from harness.tiers.full import FullTier

        FullTier().setup(backend)  # the eager stages' start-up: no compile warm-up

    def cases(self, inputs):
        return self._tier.cases(inputs)

    def execute(self, case, backend: str):
        from harness.tiers.model_check import run_model_check

        return run_model_check(case, backend, self.stages)


# ------------------------------------------------------------------------------------ reading


def journal(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "journal.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def case_seconds(outcome: dict[str, Any]) -> dict[str, float]:
    """One journaled outcome's worker-seconds by category (before the device-overhead split).

    A case whose worker was killed (timeout, memory limit, crash) reports its time on every stage;
    it counts once, as `killed_cases`."""
    worker = outcome.get("worker") or {}
    if worker.get("died"):
        return {"startup": 0.0, "killed_cases": float(outcome.get("seconds") or 0.0)}
    stages = {s["stage"]: float(s.get("seconds") or 0.0) for s in outcome.get("stages", [])}
    phases = worker.get("phases") or {}
    shrink, ref, blame = (float(phases.get(k, 0.0)) for k in ("shrink", "reference", "blame"))
    inside_ref = ref if "op" in stages else 0.0  # the unit tier's CPU op runs inside its op stage
    eager = max(0.0, sum(v for k, v in stages.items() if k in EAGER_STAGES) - shrink - inside_ref)
    total = float(outcome.get("seconds") or 0.0)
    # a worker pre-started beside the listing: only what was left of its start-up after the listing waits
    startup = max(
        0.0,
        float(worker.get("startup_seconds") or 0.0) - float(worker.get("startup_overlapped_seconds") or 0.0),
    )
    got = {
        "startup": startup,
        "shrinking": shrink,
        "references": ref + stages.get("numerics", 0.0),
        "blame_probes": blame,
        "compile": stages.get("compile", 0.0),
        "eager": eager,
    }
    got["harness"] = max(0.0, total - sum(v for k, v in got.items() if k != "startup"))
    return got


def tier_breakdown(run_dir: Path, workers: int) -> dict[str, Any]:
    """A tier's wall seconds by category, before the device-overhead split (see the docstring)."""
    meta = json.loads((run_dir / "run.json").read_text())
    name = next(iter(meta.get("tiers", {})), run_dir.name)
    tmeta = meta["tiers"].get(name, {})
    t = tmeta.get("timings") or {}
    records = journal(run_dir)
    worker_s: dict[str, float] = defaultdict(float)
    for rec in records:
        for k, v in case_seconds(rec["outcome"]).items():
            worker_s[k] += v
    listing, probe = float(t.get("list_seconds", 0.0)), float(t.get("probe_seconds", 0.0))
    exec_wall = max(0.0, float(tmeta.get("seconds", 0.0)) - listing - probe)
    w = max(1, int(tmeta.get("workers") or workers))
    wall = {k: v / w for k, v in worker_s.items()}
    busy = sum(wall.values())
    return {
        "tier": name,
        "cases": len(records),
        "workers": w,
        "wall_seconds": float(t.get("wall_seconds") or tmeta.get("seconds", 0.0)),
        "worker_seconds": dict(worker_s),
        "seconds": {
            "listing": listing,
            "probe": probe,
            "reference_pass": float(t.get("reference_seconds", 0.0)),
            "tables": float(t.get("tables_seconds", 0.0)) + float(t.get("summary_seconds", 0.0)),
            **wall,
            "idle": max(0.0, exec_wall - busy),
        },
    }


def eager_by_case(run_dir: Path) -> dict[str, float]:
    return {
        r["case_id"]: got["eager"] for r in journal(run_dir) if "eager" in (got := case_seconds(r["outcome"]))
    }


def overhead_ratio(neuron: dict[str, float], cpu: dict[str, float]) -> dict[str, Any]:
    """(neuron - cpu) / neuron eager seconds over the cases both sides ran."""
    common = sorted(set(neuron) & set(cpu))
    n, c = sum(neuron[k] for k in common), sum(cpu[k] for k in common)
    return {
        "cases": len(common),
        "neuron_eager_seconds": round(n, 3),
        "cpu_eager_seconds": round(c, 3),
        "device_over_cpu": round(n / c, 3) if c else None,
        "device_overhead_ratio": round(max(0.0, (n - c) / n), 4) if n else None,
    }


def split(tier: dict[str, Any], ratio: float | None) -> dict[str, float]:
    """Categories of one tier (CATEGORIES) in wall seconds."""
    s = tier["seconds"]
    eager = s.get("eager", 0.0)
    overhead = eager * (ratio or 0.0)
    return {
        "device_overhead": overhead,
        "startup": s.get("startup", 0.0) + s["probe"],
        "listing": s["listing"],
        "shrinking": s.get("shrinking", 0.0),
        "references": s.get("references", 0.0) + s["reference_pass"],
        "blame_probes": s.get("blame_probes", 0.0),
        "compile": s.get("compile", 0.0),
        "killed_cases": s.get("killed_cases", 0.0),
        "reporting": s["tables"],
        "cpu_kernels_and_harness": eager - overhead + s.get("harness", 0.0),
        "idle": s["idle"],
    }


def shares(seconds: dict[str, float]) -> dict[str, float]:
    total = sum(seconds.values())
    return {k: round(v / total, 4) if total else 0.0 for k, v in seconds.items()}


# ------------------------------------------------------------------------------------ running


def _env(cache: Path | None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep),
    }
    if cache is not None:
        env["NEURON_CACHE_DIR"] = str(cache)
    return env


#: categories paid once per tier, whatever its number of cases (not scaled by --sample)
ONCE_PER_TIER = ("listing", "startup")


def sample_config(path: Path, sample: int) -> Path:
    """The bundled full-night settings with `shard = "1/N"` in every tier (TOML written by hand:
    the section holds strings, numbers and a list of tier names only)."""
    from harness.engine.nightly import load_config

    full = load_config(False)
    lines = ["[full]", f"tiers = {json.dumps(list(full.tiers))}"]
    for name in full.tiers:
        lines.append(f"\n[full.{json.dumps(name)}]")
        settings = {**full.tier(name).model_dump(exclude_none=True), "shard": f"1/{sample}"}
        lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def estimate(summary: dict[str, Any], sample: int) -> dict[str, Any]:
    """The whole night from its 1/N sample: once-per-tier costs as measured, the rest x N."""
    tiers = {}
    for name, t in summary["tiers"].items():
        secs = t["seconds"]
        once = sum(secs.get(k, 0.0) for k in ONCE_PER_TIER)
        tiers[name] = {
            "cases": t["cases"] * sample,
            "seconds": round(once + sample * (sum(secs.values()) - once), 1),
        }
    total = sum(t["seconds"] for t in tiers.values()) + sample * summary["report_seconds"]
    return {
        "sample": f"1/{sample} of every tier's cases, scaled up",
        "tiers": tiers,
        "seconds": round(total, 1),
        "minutes": round(total / 60, 1),
        "target_minutes": TARGET_FULL_MINUTES,
        "met": total / 60 <= TARGET_FULL_MINUTES,
    }


def run_nightly(out: Path, quick: bool, workers: int, cache: Path, extra: list[str]) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "nightly",
        "--out",
        str(out),
        "--workers",
        str(workers),
        "--no-progress",
        "--json",
        *(["--quick"] if quick else []),
        *extra,
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=_env(cache), cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"nightly_time: harness nightly failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return {"wall_seconds": wall, "result": json.loads(proc.stdout.strip().splitlines()[-1])}


def run_cpu_side(
    neuron_dir: Path, out: Path, tiers: list[str], fraction: float, workers: int
) -> dict[str, Path]:
    """Every k-th case of each tier's list (the neuron run's own case file) on the cpu backend."""
    done = {}
    step = max(1, round(1 / fraction))
    for name in tiers:
        src = neuron_dir / name / f"cases-{name}.json"
        if not src.exists():
            continue
        data = json.loads(src.read_text())
        run_dir = out / name
        run_dir.mkdir(parents=True, exist_ok=True)
        meta = json.loads((neuron_dir / name / "run.json").read_text())["tiers"][name]
        inputs = meta.get("inputs") or {}
        sample = data["cases"][::step]
        tier_ref = EAGER_REPRESENTATIVE_REF if name == "representative" else name
        cmd = [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--tier",
            tier_ref,
            "--backend",
            "cpu",
            "--out",
            str(run_dir),
            "--workers",
            str(workers),
            "--order",
            "listed",
            "--no-progress",
            "--json",
        ]
        for flag, key in (("--limit", "limit"), ("--registry", "registry"), ("--models", "models")):
            if inputs.get(key):
                cmd += [flag, str(inputs[key])]
        # keyed as this command will key it (its tier name, no --ops/--dtypes): it runs exactly the sample
        _seed_cases(run_dir, name, tier_ref, sample, inputs)
        proc = subprocess.run(cmd, env=_env(None), cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"nightly_time: cpu side of {name} failed: {proc.stderr[-1000:]}", file=sys.stderr)
            continue
        done[name] = run_dir
    return done


def _seed_cases(run_dir: Path, name: str, tier_ref: str, sample: list, inputs: dict[str, Any]) -> None:
    """Save the sample under the key the cpu side's `harness run` will look for, so it runs these
    cases and lists nothing (a plug-in tier's name, an upstream tier's --ops selection differ)."""
    from harness.engine.runner import RunOptions, _cases_key

    key = _cases_key(
        RunOptions(
            tier=tier_ref,
            out=run_dir,
            registry=inputs.get("registry"),
            models=inputs.get("models"),
            limit=inputs.get("limit"),
        )
    )
    (run_dir / f"cases-{name}.json").write_text(json.dumps({"key": key, "cases": sample}))


# ------------------------------------------------------------------------------------ summary


def summarize(
    night: Path, workers: int, cpu_dirs: dict[str, Path], wall: float | None, quick: bool | None
) -> dict[str, Any]:
    nightly = json.loads((night / "nightly.json").read_text()) if (night / "nightly.json").exists() else {}
    timings = nightly.get("timings") or {}
    tiers, total = {}, defaultdict(float)
    cpu_side = {}
    for d in sorted(p for p in night.iterdir() if (p / "run.json").exists()):
        b = tier_breakdown(d, workers)
        ratio = None
        if b["tier"] in cpu_dirs:
            cpu_side[b["tier"]] = overhead_ratio(eager_by_case(d), eager_by_case(cpu_dirs[b["tier"]]))
            ratio = cpu_side[b["tier"]]["device_overhead_ratio"]
        secs = split(b, ratio)
        tiers[b["tier"]] = {
            "wall_seconds": round(b["wall_seconds"], 1),
            "cases": b["cases"],
            "seconds": {k: round(v, 2) for k, v in secs.items()},
            "shares": shares(secs),
            "device_overhead_measured": ratio is not None,
        }
        for k, v in secs.items():
            total[k] += v
    report = float(timings.get("report_seconds", 0.0))
    total["reporting"] += report
    night_seconds = float(timings.get("seconds") or sum(t["wall_seconds"] for t in tiers.values()) + report)
    if wall is not None:  # the nightly process's own start (interpreter, imports) and exit
        total["startup"] += max(0.0, wall - night_seconds)
    wall_total = wall if wall is not None else night_seconds
    total["idle"] += max(0.0, wall_total - sum(total.values()))  # anything unaccounted between the parts
    minutes = wall_total / 60
    out = {
        "night": str(night),
        "quick": quick,
        "workers": workers,
        "wall_seconds": round(wall_total, 1),
        "report_seconds": round(report, 2),
        "tiers": tiers,
        "seconds": {k: round(total[k], 2) for k in CATEGORIES},
        "shares": shares({k: total[k] for k in CATEGORIES}),
        "cpu_side": cpu_side,
    }
    if quick is not None:
        target = TARGET_QUICK_COLD_MINUTES if quick else TARGET_FULL_MINUTES
        out["targets"] = {
            ("quick_nightly_cold_minutes" if quick else "full_nightly_minutes"): {
                "measured": round(minutes, 2),
                "target": target,
                "met": minutes <= target,
            }
        }
    return out


def table(summary: dict[str, Any]) -> str:
    cols = ["tier", "wall s", "cases", *CATEGORIES]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    rows = [(n, t["wall_seconds"], t["cases"], t["shares"]) for n, t in summary["tiers"].items()]
    rows.append(
        (
            "**night**",
            summary["wall_seconds"],
            sum(t["cases"] for t in summary["tiers"].values()),
            summary["shares"],
        )
    )
    for name, wall, cases, sh in rows:
        lines.append(
            f"| {name} | {wall:.0f} | {cases} | "
            + " | ".join(f"{sh.get(k, 0):.1%}" for k in CATEGORIES)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument(
        "--quick", action="store_true", help="the quick nightly (target: <= 2 min from a cold NEFF cache)"
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--cpu-fraction",
        type=float,
        default=0.25,
        help="share of each tier's cases also run on cpu to measure device overhead (0: none)",
    )
    p.add_argument(
        "--from", dest="from_dir", metavar="DIR", help="analyse a finished nightly dir instead of running"
    )
    p.add_argument("--out", help="work directory, kept (default: a temporary directory, removed)")
    p.add_argument(
        "--nightly-args", default="", help="extra arguments for harness nightly, e.g. '--no-baseline'"
    )
    p.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="full nightly on shard 1/N of every tier, scaled up (`estimate`)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.sample and (args.quick or args.sample < 1):
        p.error("--sample N needs N >= 1 and the full nightly (not --quick)")

    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nightly-time-"))
    base.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    try:
        wall, quick = None, (args.quick if not args.from_dir else None)
        if args.from_dir:
            night = Path(args.from_dir)
        else:
            night = base / "neuron"
            cache = base / "neff-cold"
            shutil.rmtree(cache, ignore_errors=True)
            extra = args.nightly_args.split()
            if args.sample:
                extra += ["--config", str(sample_config(base / "nightly-sample.toml", args.sample))]
            wall = run_nightly(night, args.quick, args.workers, cache, extra)["wall_seconds"]
        tiers = [d.name for d in night.iterdir() if (d / "run.json").exists()]
        cpu_dirs = (
            run_cpu_side(night, base / "cpu", tiers, args.cpu_fraction, args.workers)
            if args.cpu_fraction > 0
            else {}
        )
        summary = summarize(night, args.workers, cpu_dirs, wall, quick)
        summary["load_average"] = {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        }
        summary["cpu_fraction"] = args.cpu_fraction
        if args.sample:
            summary["estimate"] = estimate(summary, args.sample)
    finally:
        if not args.out:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        print(table(summary))
        print(
            f"\nnight: {summary['wall_seconds']:.0f} s with {args.workers} workers; "
            + ", ".join(f"{k} {v:.0f}s" for k, v in summary["seconds"].items())
        )
        for t, c in summary["cpu_side"].items():
            print(f"{t}: neuron eager / cpu eager = {c['device_over_cpu']} over {c['cases']} cases")
        if "estimate" in summary:
            e = summary["estimate"]
            print(
                f"whole night estimated from {e['sample']}: {e['minutes']} min "
                f"(target {e['target_minutes']:.0f}); "
                + ", ".join(f"{k} {v['seconds']:.0f}s" for k, v in e["tiers"].items())
            )
        print(f"load average {summary['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

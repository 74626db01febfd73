"""Bug-finding power: plant each fault of a suite, run the quick nightly's tiers clean and faulted.

    python benchmarks/bug_detection.py [--json] [--faults A,B] [--tiers unit,full] [--jobs 2] [--order both]
                                       [--no-fail-fast] [--out WORKDIR]

The tiers are those of `harness nightly --quick` (harness/data/nightly.toml: the unit, representative,
full and upstream tiers with its limits and op_db selection), each run with `harness run` into
WORKDIR. One clean run is made (and reused by later invocations with the same --out); then each
fault of the suite (backend/faults/suite.yaml, or --suite) is planted alone through NEURON_FAULTS
in a nightly of its own, --jobs of them at a time. A fault is *caught* by a tier when some (case,
stage) row of the faulted run is one `harness compare` gates on by default against the clean run:
a new or changed failure (not blamed on the harness, upstream or the machine), or a fallback
regression (a gained CPU-fallback op: how a lost lowering shows). A control run (an empty
fault file, same timeouts, every tier whole) measures rows that flip without any fault; such rows
never count as a detection.

Fail-fast (the default): a faulted nightly stops at its first detecting case, as a CI job would -
each tier runs `harness run --exitfirst --baseline CLEAN` (harness/engine/failfast.py), and the tiers after
a detection do not run. So a fault's *first tier* (in nightly order) and its time to first
detection are measured, not estimated, and a caught fault costs only the time until it is caught.
A stop whose rows all flip in the control run too is resumed (the run continues where it
stopped). `--no-fail-fast` runs every tier of every faulted nightly in full: `per_tier` then
counts what each tier catches on its own (fail-fast, it counts the faults each tier caught first;
the unit tier, first in the nightly, is measured whole either way).

Per fault: the first tier that caught it, the first detecting row (case, stage, status, reason,
the op the row names), the seconds from the start of the faulted nightly until that case
finished (the time to first detection), and whether the fault fired at all
(NEURON_FAULT_LOG). `--json` prints `faults` (per-fault records), `detected`, `per_tier`,
`missed`, plus the targets: the quick nightly catches >= 95% of the suite, the unit tier alone
>= 80% of op-level faults (every fault except the compile-only ones).

Root causes: for a fault a model tier (representative, full) detects, the root-cause records of its
detecting rows (harness.rootcause, localized in the worker): the op they name most often, whether
it is the planted op (`top1`, any overload the fault arms), whether the repro of the first row
naming it verified, and each row's localization time. `root_causes` in `--json`: over those
faults, the planted op named and repros verified (targets >= 90% each), by category, the median
localization time per row, and `clean`: the rows the clean run localized and their seconds (a
clean night costs nothing extra when that is 0). `--representatives TYPE:ARCH,...` runs the
representative tier on models of one's choice (small ones make the figure a matter of minutes).
`--model-only N` plants N faults on sizes only the models give an op (no quick unit case has
them) and measures the quick unit tier alone on the registry as it is and after `harness registry
add-repros` of the faulted night (`model_only` in `--json`; benchmarks/bug_detection_repros.py).
Faulted runs get shorter timeouts than the nightly's (--timeout-factor x the slowest clean case,
at least --min-timeout), so a planted hang costs minutes, not hours.

Ordering: with `--order both` (the default) each fault runs in listing order
(`--order listed`: the figures above) and, when that run caught it, again likely failures first
(`--order likely-failures` with the clean run as the baseline: its failing cases first, then the
cases whose ops' fingerprints differ from the clean run's - the planted fault's op -, see
harness/engine/ordering.py). A fault the listing order missed is not run again by default: the ordered
nightly runs the same cases (the same case lists), only in another order, and a verdict does not
depend on the order or on what ran before it in a worker (tests/harness/engine/test_ordering.py,
tests/backend/compile/test_dynamo_isolation.py), so it would miss it too; `--ordered-missed` runs it
anyway. For the same reason the ordered nightly takes over the listed one's tiers that ran whole
without a detection (rows and measured seconds) and runs from the tier that caught the fault
(`--ordered-all-tiers` runs every tier again). `--json` adds `ordering`: the median time to the
first detection with and without the order over the faults both detected, their ratio (target
<= 1/3) and whether the two orders' first tiers differ (they must not); each fault record gets
`ordered`.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.bug_detection_analysis import (  # noqa: E402  (re-exported: the tests read them here)
    MODEL_TIERS,
    analyse,
    clean_root_causes,
    detections,
    elapsed,
    is_op_level,
    markdown,
    max_case_seconds,
    ordering_summary,
    stop_counts,
    summarize,
)
from benchmarks.bug_detection_repros import (  # noqa: E402
    model_only_faults,
    model_only_figure,
    write_representatives,
)

ORDERED_DIR = "faults-ordered"


# ------------------------------------------------------------------------------------ plans


def tier_plans(
    tiers: list[str] | None,
    limits: dict[str, int] | None = None,
    case_timeouts: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The quick nightly's tiers (name, limit, timeout), in nightly order, optionally a subset
    (and other case limits, for a quick look; other per-case timeouts, for a loaded machine)."""
    from contracts.tiers import load_tier, tier_chunk_size, tier_option
    from harness.engine.nightly import load_config

    config = load_config(quick=True)
    names = list(config.tiers)
    unknown = [t for t in tiers or [] if t not in names]
    if unknown:
        raise SystemExit(
            f"bug_detection: unknown tier {unknown[0]!r}; the quick nightly has {', '.join(names)}"
        )
    plans = []
    for name in names:
        if tiers and name not in tiers:
            continue
        tier, tcfg = load_tier(name), config.tier(name)
        limit = (limits or {}).get(name, tcfg.limit)
        plans.append(
            {
                "tier": name,
                "limit": limit,
                "chunk": tier_chunk_size(tier),
                "timeout": float(
                    (case_timeouts or {}).get(name) or tcfg.timeout or tier_option(tier, "timeout") or 600.0
                ),
                # the upstream tier's op_db selection, as `harness nightly --quick` passes it
                "options": tcfg.options(),
            }
        )
    return plans


def run_tiers(
    out: Path,
    plans: list[dict[str, Any]],
    env: dict[str, str],
    workers: int,
    timeouts: dict[str, float],
    cases_from: Path | None = None,
    order: str = "listed",
    baseline: Path | None = None,
    fail_fast: bool = False,
    flaky: dict | None = None,
) -> dict[str, Any]:
    """Run the tiers in order with `harness run` into out/<tier>; timings in out/timing.json.

    A tier already finished in out/ (timing.json) is kept, so an interrupted benchmark resumes.
    Fail-fast (`harness run --exitfirst` against `baseline`): a tier stops at its first case that
    regresses, and the tiers after it do not run; a stop whose rows all flip in the control run
    (`flaky`), or that the runner's reference re-run blamed on someone else, is no detection
    (bug_detection_analysis.stop_counts), so that tier is resumed (the runner continues where it
    stopped)."""
    out.mkdir(parents=True, exist_ok=True)
    timing_path = out / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else {}
    for plan in plans:
        name = plan["tier"]
        t = timing.get(name, {})
        if "limit" in t and t["limit"] != plan["limit"]:
            raise SystemExit(
                f"bug_detection: {out / name} was run with limit {t.get('limit')}, not "
                f"{plan['limit']}: use another --out"
            )
        while not (t.get("rc") == 0 and not t.get("stopped")):  # not finished whole
            if t.get("stopped") and stop_counts(
                t,
                detections(baseline / name, out / name, (flaky or {}).get(name, set()))
                if baseline is not None
                else [],
            ):
                return timing  # a detection: the fail-fast nightly ends here
            if t and t.get("rc") not in (0, None) and t.get("tried", 0) >= 2:
                break  # the runner failed twice here: recorded, the next tier runs
            t = timing[name] = _run_segment(
                out / name, plan, t, env, workers, timeouts[name], cases_from, order, baseline, fail_fast
            )
            timing_path.write_text(json.dumps(timing, indent=1))
    return timing


def _run_segment(
    run_dir: Path,
    plan: dict[str, Any],
    t: dict[str, Any],
    env: dict[str, str],
    workers: int,
    timeout: float,
    cases_from: Path | None,
    order: str,
    baseline: Path | None,
    fail_fast: bool,
) -> dict[str, Any]:
    """One `harness run` of a tier (a fresh run, or the continuation of a stopped or broken one)."""
    name = plan["tier"]
    run_dir.mkdir(parents=True, exist_ok=True)
    if cases_from is not None:  # the same case list, without listing again
        for f in (cases_from / name).glob("cases-*.json"):
            if not (run_dir / f.name).exists():
                shutil.copy(f, run_dir / f.name)
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "run",
        "--tier",
        name,
        "--out",
        str(run_dir),
        "--workers",
        str(workers),
        "--timeout",
        f"{timeout:.0f}",
        "--no-progress",
        "--json",
        "--order",
        order,
    ]
    if baseline is not None:
        cmd += ["--baseline", str(baseline)]
    if fail_fast:
        cmd += ["--exitfirst"]
    if plan["limit"]:
        cmd += ["--limit", str(plan["limit"])]
    for key, value in plan.get("options", {}).items():
        cmd += [f"--{key}", value]
    start = time.time()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    end = time.time()
    stopped = None
    if proc.returncode == 1 and fail_fast:
        try:
            stopped = (json.loads(proc.stdout.strip().splitlines()[-1]).get("stopped") or {}).get(
                "regressions"
            )
        except (ValueError, IndexError, AttributeError):
            stopped = None
    rc = 0 if stopped else proc.returncode
    segs = [*t.get("segments", []), [start, end]]
    return {
        "start": segs[0][0],
        "end": end,
        "segments": segs,
        "rc": rc,
        "limit": plan["limit"],
        "stopped": stopped,
        "stops": [*t.get("stops", []), *([stopped[0]] if stopped else [])],
        "tried": t.get("tried", 0) + 1,
        "stderr": proc.stderr.strip().splitlines()[-3:] if rc else [],
    }


# ------------------------------------------------------------------------------------- main


def _env(base: Path, fault_file: Path | None, log: Path | None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    env.setdefault("NEURON_CACHE_DIR", str(base / "neff"))
    env.pop("NEURON_FAULTS", None)
    env.pop("NEURON_FAULT_LOG", None)
    if fault_file is not None:
        env["NEURON_FAULTS"] = str(fault_file)
    if log is not None:
        env["NEURON_FAULT_LOG"] = str(log)
    return env


class CleanTiers:
    """The clean run in a thread of its own, and the faulted runs' per-tier timeouts: a faulted
    nightly reaches tier T only once the clean run of T is finished (its rows are the baseline),
    so faulted unit tiers run while the clean run is still in its model tiers. Timeouts: factor x
    the slowest clean case (x the chunk size for chunked tiers), at least `floor`, at most the
    nightly's own timeout."""

    def __init__(self, base: Path, plans: list, workers: int, factor: float, floor: float) -> None:
        self.base, self.plans, self.factor, self.floor = base, plans, factor, floor
        self.timeouts: dict[str, float] = {}
        self.timing: dict[str, Any] = {}
        self.ready = {p["tier"]: threading.Event() for p in plans}
        self.done = threading.Event()
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, args=(workers,), daemon=True, name="clean-run")

    def _run(self, workers: int) -> None:
        try:
            for plan in self.plans:  # tier by tier, so each is announced as soon as it is finished
                self.timing = run_tiers(
                    self.base / "clean",
                    [plan],
                    _env(self.base, None, None),
                    workers,
                    {plan["tier"]: plan["timeout"]},
                )
                t = self.timing.get(plan["tier"], {})
                if t.get("rc"):
                    self.error = f"the clean run of tier {plan['tier']} failed: {t.get('stderr')}"
                    return
                self.ready[plan["tier"]].set()
        except BaseException as exc:  # noqa: BLE001 - reported to every waiting faulted run
            self.error = f"the clean run failed: {type(exc).__name__}: {exc}"
        finally:
            self.done.set()

    def __getitem__(self, tier: str) -> float:
        while not self.ready[tier].wait(5):
            if self.done.is_set() and not self.ready[tier].is_set():
                raise SystemExit(f"bug_detection: {self.error or 'the clean run stopped'}")
        if tier not in self.timeouts:
            plan = next(p for p in self.plans if p["tier"] == tier)
            slowest = max_case_seconds(self.base / "clean" / tier) * plan["chunk"]
            self.timeouts[tier] = min(plan["timeout"], max(self.floor, self.factor * slowest))
        return self.timeouts[tier]


def run_fault(
    fault: dict[str, Any] | None,
    label: str,
    base: Path,
    plans: list,
    workers: int,
    timeouts: dict[str, float],
    rerun: bool,
    order: str = "listed",
    fail_fast: bool = True,
    flaky: dict | None = None,
    reuse_listed: bool = True,
) -> Path:
    """One faulted nightly: listing order into faults/LABEL, likely failures first (the clean run
    as the baseline) into faults-ordered/LABEL. The control (fault None) always runs whole."""
    ordered = order != "listed"
    fail_fast = fail_fast and fault is not None
    run_dir = base / (ORDERED_DIR if ordered else "faults") / label
    if rerun and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fault_file = run_dir / "fault.yaml"
    fault_file.write_text(yaml.safe_dump({"version": 1, "faults": [fault] if fault else []}, sort_keys=False))
    if ordered and fail_fast and reuse_listed:
        reuse_quiet_tiers(base / "faults" / label, run_dir, base / "clean", plans)
    run_tiers(
        run_dir,
        plans,
        _env(base, fault_file, run_dir / "fired.jsonl"),
        workers,
        timeouts,
        cases_from=base / "clean",
        order=order,
        baseline=base / "clean" if ordered or fail_fast else None,
        fail_fast=fail_fast,
        flaky=flaky,
    )
    return run_dir


def reuse_quiet_tiers(listed: Path, ordered: Path, clean: Path, plans: list) -> None:
    """The ordered nightly takes over the listed nightly's tiers that ran whole and caught nothing
    (their rows and measured seconds): they run the same cases, and no order makes a tier catch
    what none of its cases catches, so it would run them whole again for the same result. The
    ordered run starts at the first tier the listed run caught the fault in."""
    timing_path = listed / "timing.json"
    if not timing_path.exists() or (ordered / "timing.json").exists():
        return
    listed_t, taken = json.loads(timing_path.read_text()), {}
    for plan in plans:
        name, t = plan["tier"], listed_t.get(plan["tier"], {})
        if t.get("rc") != 0 or t.get("stopped") or detections(clean / name, listed / name, set()):
            break
        shutil.copytree(listed / name, ordered / name, dirs_exist_ok=True)
        taken[name] = {**t, "reused_from": "listed"}
    if taken:
        (ordered / "timing.json").write_text(json.dumps(taken, indent=1))


def schedule(
    faults: list[dict[str, Any]], orders: list[str], run, base: Path, plans: list, args, t0: float
) -> set:
    """The control and every fault in listing order, --jobs at a time; with --order both, a fault's
    likely-failures-first run is queued when its listed run detected it (or always, with
    --ordered-missed). Returns the faults whose ordered run was not made."""
    both = len(orders) == 2
    skipped: set[str] = set()
    pending: collections.deque = collections.deque([(None, "listed")] if not args.no_control else [])
    # op-level faults first (the unit-tier figure needs them; compile-only ones
    # are caught, if at all, in the model tiers), in suite order otherwise
    pending.extend((f, orders[0]) for f in sorted(faults, key=lambda f: not is_op_level(f)))
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures: dict[Any, tuple] = {}

        def submit(fault, order) -> None:
            futures[pool.submit(run, fault, fault["name"] if fault else "_control", order)] = (fault, order)

        # at most --jobs in flight, so an ordered run queued by a finished listed one runs next
        while pending and len(futures) < max(1, args.jobs):
            submit(*pending.popleft())
        done = 0
        while futures:
            finished, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in finished:
                fault, order = futures.pop(fut)
                fut.result()
                done += 1
                label = fault["name"] if fault else "_control"
                print(
                    f"bug_detection: [{done}] {label} ({order}) done ({time.time() - t0:.0f}s)",
                    file=sys.stderr,
                )
                if fault is not None and both and order == orders[0]:
                    caught = analyse(fault, base / "faults" / fault["name"], base / "clean", plans, {})[
                        "detected"
                    ]
                    if caught or args.ordered_missed:
                        pending.appendleft((fault, orders[1]))
                    else:
                        skipped.add(fault["name"])
                while pending and len(futures) < max(1, args.jobs):
                    submit(*pending.popleft())
    return skipped


def control_flakes(base: Path, plans: list, no_control: bool) -> tuple[dict[str, set], dict[str, list]]:
    """Rows that pass clean and not in the control run (no fault planted): flakes, never detections."""
    flaky: dict[str, set] = {}
    rows_out: dict[str, list] = {}
    if no_control:
        return flaky, rows_out
    for plan in plans:
        t = plan["tier"]
        rows = detections(base / "clean" / t, base / "faults" / "_control" / t, set())
        flaky[t] = {(d["case_id"], d["stage"]) for d in rows}
        rows_out[t] = [{k: d[k] for k in ("case_id", "stage", "status", "reason")} for d in rows]
    return flaky, rows_out


def settle(
    faults: list[dict[str, Any]], orders: list[str], run, base: Path, plans: list, flaky: dict
) -> None:
    """Faulted nightlies that fail-fast stopped only at rows the control run flips too continue
    (the runner resumes where it stopped) until a real detection or the end."""
    for order in orders:
        for f in faults:
            timing_path = base / (ORDERED_DIR if order != "listed" else "faults") / f["name"] / "timing.json"
            if not timing_path.exists():
                continue
            timing = json.loads(timing_path.read_text())
            if any(
                timing.get(p["tier"], {}).get("stopped")
                and not stop_counts(
                    timing[p["tier"]],
                    detections(
                        base / "clean" / p["tier"],
                        timing_path.parent / p["tier"],
                        flaky.get(p["tier"], set()),
                    ),
                )
                for p in plans
            ):
                run(f, f["name"], order, flaky, rerun=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument("--suite", help="fault file (default: the bundled backend/faults/suite.yaml)")
    p.add_argument(
        "--faults", help="comma-separated fault names to plant (default: every fault of the suite)"
    )
    p.add_argument("--tiers", help="comma-separated subset of the quick nightly's tiers (default: all)")
    p.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="TIER=N",
        help="run only the first N cases of TIER instead of the quick nightly's limit (repeatable; "
        "a different figure than the quick nightly's)",
    )
    p.add_argument(
        "--case-timeout",
        action="append",
        default=[],
        metavar="TIER=S",
        help="seconds per case of TIER instead of the quick nightly's (clean and faulted runs; "
        "repeatable): on a loaded machine a model killed at the timeout is no detection",
    )
    p.add_argument("--jobs", type=int, default=2, help="faulted runs at a time (default 2)")
    p.add_argument(
        "--order",
        choices=("both", "listed", "likely-failures"),
        default="both",
        help="faulted runs in listing order, likely failures first, or both (default; the "
        "ordered-over-listed figure)",
    )
    p.add_argument("--workers", type=int, default=1, help="workers per tier run (default 1)")
    p.add_argument(
        "--out",
        help="work directory, kept and reused: the clean run and finished faults are "
        "not run again (default: a temporary directory, removed)",
    )
    p.add_argument(
        "--rerun", action="store_true", help="run the selected faults again even if --out has them"
    )
    p.add_argument("--timeout-factor", type=float, default=3.0)
    p.add_argument("--min-timeout", type=float, default=60.0)
    p.add_argument("--no-control", action="store_true", help="skip the control run (no flake detection)")
    p.add_argument(
        "--no-fail-fast",
        action="store_true",
        help="run every tier of each faulted nightly in full (per-tier catch rates of each tier on its "
        "own) instead of stopping at the first detecting case (harness run --exitfirst)",
    )
    p.add_argument(
        "--ordered-all-tiers",
        action="store_true",
        help="with --order both, run every tier of the ordered nightly (by default it takes over the "
        "listed nightly's tiers that ran whole without a detection: the same cases, the same rows)",
    )
    p.add_argument(
        "--ordered-missed",
        action="store_true",
        help="with --order both, also run likely-failures-first the faults the listing order missed "
        "(by default not: the same cases run, in another order, and ordering changes no row)",
    )
    p.add_argument(
        "--representatives",
        metavar="TYPE:ARCH,...",
        help="the representative tier's models instead of the quick nightly's (written as a selection "
        "the tier reads with --models), e.g. bert:BertForMaskedLM,gpt2:GPT2LMHeadModel",
    )
    p.add_argument(
        "--model-only",
        type=int,
        metavar="N",
        help="instead of the suite: N faults on sizes only the model tiers' models give an op (no quick "
        "unit case has them); after the faulted model tiers, the quick unit tier alone on the registry "
        "as it is and with the night's verified repros added (benchmarks/bug_detection_repros.py)",
    )
    p.add_argument("--list", action="store_true", help="list the suite's faults and exit")
    p.add_argument("--markdown", action="store_true", help="print the per-fault table as Markdown")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from backend.faults import read_faults, suite_path

    suite = read_faults(args.suite or suite_path())  # validates the whole file first
    faults = [f.to_dict() for f in suite]
    if args.faults:
        wanted = [n.strip() for n in args.faults.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in {f["name"] for f in faults}]
        if unknown:
            p.error(f"--faults: no fault named {unknown[0]!r} in the suite (see --list)")
        faults = [f for f in faults if f["name"] in wanted]
    if args.list:
        for f in faults:
            print(f"{f['name']:40} {f.get('category', ''):9} {f['kind']:10} {f['op']}")
        return 0
    limits = {}
    for item in args.limit:
        tier, sep, n = item.partition("=")
        if not sep or not n.isdigit():
            p.error(f"--limit {item!r}: expected TIER=N, e.g. unit=200")
        limits[tier.strip()] = int(n)
    case_timeouts = {}
    for item in args.case_timeout:
        tier, sep, n = item.partition("=")
        try:
            case_timeouts[tier.strip()] = float(n) if sep else None
        except ValueError:
            case_timeouts[tier.strip()] = None
        if not case_timeouts[tier.strip()] or case_timeouts[tier.strip()] <= 0:
            p.error(f"--case-timeout {item!r}: expected TIER=SECONDS, e.g. representative=1800")
    plans = tier_plans(
        [t.strip() for t in args.tiers.split(",")] if args.tiers else None, limits, case_timeouts
    )
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bug-detection-"))
    base.mkdir(parents=True, exist_ok=True)
    selection = write_representatives(base, args.representatives) if args.representatives else None
    for plan in plans:
        if selection is not None and plan["tier"] == "representative":
            plan["options"]["models"] = str(selection)
    unit_limit = tier_plans(["unit"])[0]["limit"] if args.model_only else None
    if args.model_only:  # the faulted nights are the model tiers'; the unit tier is measured after
        plans = [p_ for p_ in plans if p_["tier"] in MODEL_TIERS]
        faults = model_only_faults(base, args.model_only, selection, unit_limit, _env(base, None, None))
    t0 = time.time()
    load_before = os.getloadavg()
    try:
        timeouts = CleanTiers(base, plans, args.workers, args.timeout_factor, args.min_timeout)
        timeouts.thread.start()
        orders = ["listed", "likely-failures"] if args.order == "both" else [args.order]
        fail_fast = not args.no_fail_fast
        print(
            f"bug_detection: {len(faults)} faults, {args.jobs} at a time, "
            f"{'fail-fast' if fail_fast else 'every tier in full'}; each tier once its clean run is done",
            file=sys.stderr,
        )

        def run(f, label, o, flaky=None, rerun=args.rerun):
            return run_fault(
                f,
                label,
                base,
                plans,
                args.workers,
                timeouts,
                rerun,
                o,
                fail_fast,
                flaky,
                reuse_listed=not args.ordered_all_tiers,
            )

        skipped_ordered = schedule(faults, orders, run, base, plans, args, t0)
        timeouts.thread.join()
        if timeouts.error:
            raise SystemExit(f"bug_detection: {timeouts.error}")
        flaky, control_rows = control_flakes(base, plans, args.no_control)
        settle(faults, orders, run, base, plans, flaky)  # a stop on a flaky row is resumed
        primary = "faults" if "listed" in orders else ORDERED_DIR
        records = [analyse(f, base / primary / f["name"], base / "clean", plans, flaky) for f in faults]
        ordered = None
        if args.order == "both":
            ordered = [
                analyse(f, base / ORDERED_DIR / f["name"], base / "clean", plans, flaky)
                for f in faults
                if f["name"] not in skipped_ordered
            ]
            by_name = {o["name"]: o for o in ordered}
            for r in records:
                o = by_name.get(r["name"])
                r["ordered"] = (
                    None
                    if o is None
                    else {
                        "first_detection_seconds": o["first_detection_seconds"],
                        "caught_by": o["caught_by"],
                        "first_tier": o["first_tier"],
                        "seconds": o["seconds"],
                        "first": {t: e.get("first") for t, e in o["tiers"].items() if e.get("first")},
                    }
                )
        summary = summarize(
            records, plans, faults, quick_nightly=not args.tiers and not limits, fail_fast=fail_fast
        )
        summary["order"] = args.order
        if ordered is not None:
            summary["ordering"] = ordering_summary(records, ordered)
            summary["ordering"]["not_run_ordered"] = sorted(skipped_ordered)
        clean_t = json.loads((base / "clean" / "timing.json").read_text())
        summary.update(
            {
                "control": control_rows if not args.no_control else None,
                "clean_seconds": {t: round(elapsed(v), 1) for t, v in clean_t.items()},
                "faulted_timeouts": timeouts.timeouts,
                "case_timeouts": {p_["tier"]: p_["timeout"] for p_ in plans},
                "jobs": args.jobs,
                "workers": args.workers,
                "wall_seconds": round(time.time() - t0, 1),
                "load_average": {
                    "before": [round(x, 2) for x in load_before],
                    "after": [round(x, 2) for x in os.getloadavg()],
                },
                "workdir": str(base) if args.out else None,
            }
        )
        summary["root_causes"]["clean"] = clean_root_causes(base / "clean", plans)
        if args.model_only:
            summary["model_only"] = model_only_figure(
                base,
                faults,
                base / primary,
                [p_["tier"] for p_ in plans],
                unit_limit,
                lambda fault_file: _env(base, fault_file, None),
                {r["name"] for r in records if r["detected"]},
            )
        if args.out:
            (base / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    finally:
        if not args.out:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(summary, default=str))
    elif args.markdown:
        print(markdown(summary))
    else:
        print(markdown(summary))
        rate = summary["detection_rate"]
        print(
            f"\ncaught {summary['detected']} / {summary['n_faults']} faults"
            + (f" ({rate:.0%})" if rate is not None else "")
            + "; per tier: "
            + ", ".join(f"{t} {v['detected']}" for t, v in summary["per_tier"].items())
        )
        u = summary["unit_op_level"]
        if summary.get("ordering"):
            o = summary["ordering"]
            print(
                f"median first detection: listed {o['median_first_detection_seconds_listed']} s, "
                f"likely failures first {o['median_first_detection_seconds_ordered']} s "
                f"(ratio {o['ordered_over_listed']}, "
                f"target <= {o['target']:.2f}) over {o['faults_compared']} faults"
            )
        print(
            f"unit tier, op-level faults: {u['detected']} / {u['faults']}; never fired: "
            f"{', '.join(summary['never_fired']) or 'none'}; wall {summary['wall_seconds']:.0f}s, "
            f"load {summary['load_average']}"
        )
        rc = summary["root_causes"]
        print(
            f"root causes, over the {rc['faults']} faults a model tier detected: planted op named "
            f"{rc['top1']} ({rc['top1_rate']}), repro verified {rc['verified']} ({rc['verified_rate']}); "
            f"median localization {rc['median_localization_seconds']} s per row over {rc['rows']} rows; "
            f"clean run: {rc['clean']['rows']} rows localized, {rc['clean']['seconds']} s"
        )
        if summary.get("model_only"):
            m = summary["model_only"]
            print(
                f"model-only faults: {m['n']}, detected by the model tiers {m['detected_by_model_tiers']}, "
                f"missed by the quick unit tier before {m['missed_before']}, caught by it after "
                f"add-repros {m['caught_after']} of those {m['counted']} ({m['rate']})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

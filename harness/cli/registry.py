"""`harness registry`: build, import and export the shape registry; manage unit-tier expectations
and the upstream tier's skip list."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HELP = (
    "Shape registry: regenerate from models, import/export op logs, export tests, add a run's "
    "verified root-cause repros, expectations, upstream skips."
)

EPILOG = """examples:
  harness registry regenerate --json                                # the offline catalog's representatives
  harness registry regenerate --models models.jsonl --out ops.parquet --seq 32
  harness registry regenerate --workers 2 --executor ray --backend neuron   # on the device under test
  harness registry import GPT2ForSequenceClassification_training.txt --format pytorch-oplog \
      --out gpt2.parquet --json
  harness registry export ops.parquet --format pytorch-oplog --out ops.txt
  harness registry export-tests repro/ --op aten.addmm.default --registry ops.parquet
  harness registry add-repros runs/nightly --registry ops.parquet   # a night's verified root causes
  harness registry expectations update runs/u1 --backend neuron     # rewrite the known failures
  harness registry expectations check runs/u1 --json                # PASS/XFAIL/FAIL/IMPROVED counts
  harness registry upstream-skips update runs/up --backend neuron   # rewrite the upstream skip list
  harness registry upstream-skips check runs/up --json              # a run against the skip list
"""


def _bytes(text: str) -> int:
    from harness.cli.run import parse_bytes

    return parse_bytes(text)


def default_registry_path() -> Path:
    from registry.unit_tier import default_registry_path as default

    return default()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    sub = parser.add_subparsers(dest="registry_command", metavar="ACTION")

    p = sub.add_parser("regenerate", help="record the models' op calls and rebuild the registry")
    p.add_argument(
        "--models",
        metavar="FILE",
        help="ModelSpecs (JSON list, JSONL or YAML); default: the offline catalog's representatives",
    )
    p.add_argument(
        "--out",
        metavar="PATH",
        help="registry Parquet to write (default: $HARNESS_REGISTRY or the bundled one)",
    )
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, metavar="N")
    p.add_argument(
        "--seq",
        type=int,
        action="append",
        metavar="N",
        help="sequence length to record (repeatable; default: the model tiers' length, "
        "shrink_rules.yaml test_sequence_length)",
    )
    p.add_argument("--limit", type=int, metavar="N", help="only the first N models")
    p.add_argument(
        "--backend",
        metavar="B",
        help="device the calls are recorded on, so the registry holds the op "
        "mix it receives (default: $HARNESS_BACKEND, else neuron); cpu records the CPU's",
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local worker processes (default) or Ray actors, as `harness run`",
    )
    p.add_argument(
        "--ray-address", metavar="ADDR", help="Ray cluster to join (default: $RAY_ADDRESS or a local one)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds per model before its worker is killed (default 300)",
    )
    p.add_argument(
        "--memory-limit",
        type=_bytes,
        metavar="SIZE",
        help="RSS limit per worker, e.g. 8G (default as `harness run`)",
    )
    p.add_argument(
        "--keep-run",
        action="store_true",
        help="keep the work directory OUT.run/ (journal, per-model "
        "registries, results.parquet); a stopped regenerate always keeps it and resumes from it",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("import", help="import an op log into a registry file")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", choices=("pytorch-oplog",), default="pytorch-oplog")
    p.add_argument("--out", metavar="PATH", required=True)
    p.add_argument("--merge", action="store_true", help="merge into an existing registry at --out")
    p.add_argument(
        "--shape-budget",
        type=int,
        metavar="N",
        help="elements of a case's largest tensor before it "
        "is scaled down, as at run time ($HARNESS_REPLAY_MAX_NUMEL, default 262144)",
    )
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("export", help="write a registry as an op log")
    p.add_argument("registry", metavar="REGISTRY")
    p.add_argument("--format", choices=("pytorch-oplog",), default="pytorch-oplog")
    p.add_argument("--out", metavar="PATH", help="file to write (default: stdout)")

    p = sub.add_parser("export-tests", help="write standalone pytest files for a subset of cases")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--op", action="append", metavar="OP", help="op overload (repeatable); default: all")
    p.add_argument("--registry", metavar="PATH", help="default: $HARNESS_REGISTRY or the bundled one")
    p.add_argument("--backend", default="neuron", help="device the tests run on by default (neuron)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser(
        "add-repros",
        help="merge a run's verified root-cause repros into a registry (the unit tier runs them first)",
    )
    p.add_argument("rundir", metavar="RUNDIR", help="a run directory or a nightly dir")
    p.add_argument(
        "--registry",
        metavar="PATH",
        help="registry to merge into (created if missing; default: $HARNESS_REGISTRY or the bundled one)",
    )
    p.add_argument("--json", action="store_true")

    p = sub.add_parser(
        "expectations", help="the unit tier's known failures (update from a run, or check a run)"
    )
    p.add_argument("action", choices=("update", "check"))
    p.add_argument("rundir", metavar="RUNDIR")
    p.add_argument("--backend", default="neuron")
    p.add_argument(
        "--file",
        metavar="PATH",
        help="expectations file (default: $HARNESS_EXPECTATIONS, else reports/data/expectations.yaml)",
    )
    p.add_argument("--json", action="store_true")

    p = sub.add_parser(
        "upstream-skips", help="the upstream tier's skip list (rewrite it from a run, or check a run)"
    )
    p.add_argument("action", choices=("update", "check"))
    p.add_argument(
        "rundir", metavar="RUNDIR", help="a run of `harness run --tier upstream` (or a nightly dir)"
    )
    p.add_argument("--backend", default="neuron")
    p.add_argument(
        "--file",
        metavar="PATH",
        help="skip list (default: $HARNESS_UPSTREAM_SKIPS, else reports/data/upstream_skips/BACKEND.yaml)",
    )
    p.add_argument("--json", action="store_true")


def _emit(args: argparse.Namespace, payload: dict, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(payload, sort_keys=True))
    else:
        print(text)


def _regenerate(args: argparse.Namespace) -> int:
    from harness.recording.regenerate import regenerate
    from harness.recording.workloads import SEQ_LENGTHS, default_specs, load_specs

    if args.models:
        try:
            specs, source = load_specs(args.models), f"file:{args.models}"
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    else:
        specs, source = default_specs()
    if args.limit:
        specs = specs[: args.limit]
    out = Path(args.out) if args.out else default_registry_path()
    from contracts.settings import current

    backend = args.backend or current().backend
    summary = regenerate(
        specs,
        out,
        workers=args.workers,
        source=source,
        backend=backend,
        seq_lengths=tuple(args.seq or SEQ_LENGTHS),
        timeout=args.timeout,
        executor=args.executor,
        ray_address=args.ray_address,
        memory_bytes=args.memory_limit,
        progress=not args.no_progress,
        keep_run=args.keep_run,
    )
    d = summary["diff"]
    text = (
        f"{summary['signatures']} signatures of {summary['ops']} ops from {summary['recorded_models']}/"
        f"{summary['models']} models ({source}, recorded on {backend}) -> {out} "
        f"in {summary['seconds']:.0f} s\n"
        f"changed: +{d['signatures_added']} / -{d['signatures_removed']} signatures, "
        f"ops added {d['ops_added'] or 'none'}, removed {d['ops_removed'] or 'none'}\n"
        f"failed models: {len(summary['failed'])}"
    )
    _emit(args, summary, text)
    return 0


def _import(args: argparse.Namespace) -> int:
    from registry.oplog import import_oplog
    from registry.store import Registry

    path = Path(args.file)
    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 2
    if args.shape_budget is not None and args.shape_budget < 1:
        print("error: --shape-budget must be a positive number of elements", file=sys.stderr)
        return 2
    result = import_oplog(path, shape_budget=args.shape_budget)
    registry = result.registry
    if args.merge and Path(args.out).is_file():
        registry = Registry.load(args.out).merge(registry)
    registry.save(args.out)
    summary = result.to_dict() | {"out": str(args.out)}
    lines = [
        f"{result.lines} lines: {result.cases} cases ({sum(result.scaled.values())} scaled down to the shape "
        f"budget of {result.shape_budget} elements), {len(result.unreplayable)} unreplayable -> {args.out}"
    ]
    lines += [f"  line {u.line}: {u.op}: {u.reason}" for u in result.unreplayable]
    _emit(args, summary, "\n".join(lines))
    return 0


def _export(args: argparse.Namespace) -> int:
    from registry.oplog import export_oplog
    from registry.store import Registry

    text = export_oplog(Registry.load(args.registry))
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _export_tests(args: argparse.Namespace) -> int:
    from registry.export_tests import export_tests
    from registry.store import Registry

    path = Path(args.registry) if args.registry else default_registry_path()
    summary = export_tests(Registry.load(path), args.dir, ops=args.op, backend=args.backend)
    _emit(
        args,
        summary,
        f"{summary['cases']} cases of {summary['ops']} ops -> {len(summary['files'])} files in {args.dir}",
    )
    return 0 if summary["cases"] else 1


def _add_repros(args: argparse.Namespace) -> int:
    from harness.rootcause.repro import entries, run_rows, write_repros
    from registry.errors import RegistryFormatError
    from registry.store import Registry

    path = Path(args.registry) if args.registry else default_registry_path()
    try:
        rows = run_rows(args.rundir)
        registry = Registry.load(path) if path.is_file() else Registry()
    except (FileNotFoundError, RegistryFormatError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    new, left = entries(args.rundir, rows)
    before = {e.case_id for e in registry}
    registry.merge(Registry(new))
    registry.save(path)
    files = write_repros(args.rundir, rows)
    added = sorted({e.case_id for e in new} - before)
    summary = {
        "registry": str(path),
        "repros": len(new),
        "added": added,
        "already_there": sorted({e.case_id for e in new} & before),
        "ops": sorted({e.op for e in new}),
        "left_out": left,
        "repro_files": files,
    }
    there = f", {len(summary['already_there'])} already there" if summary["already_there"] else ""
    text = (
        f"{len(new)} verified repros of {len(summary['ops'])} ops -> {path} ({len(added)} new cases{there}); "
        f"left out {len(left)}"
    )
    for item in left[:20]:
        text += f"\n  {item['case']} [{item['stage']}] {item['op']}: {item['why'][:160]}"
    _emit(args, summary, text)
    return 0


def _expectations(args: argparse.Namespace) -> int:
    from reports import expectations

    try:
        if args.action == "update":
            summary = expectations.update_from_run(args.rundir, args.backend, args.file)
            text = (
                f"{summary['expected_failures']} expected failures -> {summary['path']} "
                f"(+{len(summary['added'])} / -{len(summary['removed'])})"
            )
            _emit(args, summary, text)
            return 0
        summary = expectations.check_run(args.rundir, args.backend, args.file)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = " ".join(f"{k}={v}" for k, v in summary["labels"].items())
    if summary["new_failures"]:
        text += f"\nnew failures: {len(summary['new_failures'])}"
    if summary["improved"]:
        text += (
            f"\nIMPROVED: {len(summary['improved'])} (update with: harness registry expectations update "
            f"{args.rundir} --backend {args.backend})"
        )
    _emit(args, summary, text)
    return 1 if summary["new_failures"] else 0


def _upstream_skips(args: argparse.Namespace) -> int:
    from reports import upstream_skips as skiplist

    try:
        if args.action == "update":
            summary = skiplist.update_from_run(args.rundir, args.backend, args.file)
            text = (
                f"{summary['skipped_groups']} skipped (op, dtype) groups, "
                f"{summary['expected_failures']} expected failures -> {summary['path']} "
                f"(groups +{len(summary['groups_added'])} / -{len(summary['groups_removed'])}, "
                f"failures +{len(summary['failures_added'])} / -{len(summary['failures_removed'])})"
            )
            _emit(args, summary, text)
            return 0
        summary = skiplist.check_run(args.rundir, args.backend, args.file)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = " ".join(f"{k}={v}" for k, v in summary["labels"].items())
    if summary["new_failures_total"]:
        text += f"\nnew failures: {summary['new_failures_total']}"
    if summary["improved_total"] or summary["skips_changed_total"]:
        text += (
            f"\nIMPROVED: {summary['improved_total']}, skip counts changed for "
            f"{summary['skips_changed_total']} (op, dtype) groups (update with: harness registry "
            f"upstream-skips update {args.rundir} --backend {args.backend})"
        )
    _emit(args, summary, text)
    return 1 if summary["new_failures_total"] else 0


def run(args: argparse.Namespace) -> int:
    handlers = {
        "regenerate": _regenerate,
        "import": _import,
        "export": _export,
        "export-tests": _export_tests,
        "add-repros": _add_repros,
        "expectations": _expectations,
        "upstream-skips": _upstream_skips,
    }
    handler = handlers.get(args.registry_command or "")
    if handler is None:
        print(
            "usage: harness registry {regenerate,import,export,export-tests,add-repros,expectations,"
            "upstream-skips} ... "
            "(see --help)",
            file=sys.stderr,
        )
        return 2
    return handler(args)

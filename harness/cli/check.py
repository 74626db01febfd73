"""`harness check MODEL`: check one model on one backend, stage by stage.

Examples:
    harness check bert                                  # a model type, its base model
    harness check bert --architecture BertForMaskedLM --backend cpu
    harness check path/to/config.json --json
    harness check Qwen/Qwen3-8B --snapshot ../shared/data/hub/full_configs.jsonl
    harness check gpt2 --store out/crawl --stages load forward
    harness check bert --explain                        # + the aten call behind each backend failure
    harness check bert --explain --repro-dir repros/    # + its standalone test, verified
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contracts.records import ModelSpec
from contracts.status import MODEL_STAGES, is_failing
from harness.errors import TargetError

HELP = "Check one model (Hub id, model type or config.json) on a backend, stage by stage."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "examples:" + __doc__.split("Examples:", 1)[1]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "model",
        metavar="MODEL",
        help="a Hub id (from --store/--snapshot), a model type, or a config.json path",
    )
    parser.add_argument(
        "--backend", default="neuron", help="neuron | cpu | cuda | MODULE:DEVICE (default neuron)"
    )
    parser.add_argument(
        "--stages",
        nargs="+",
        choices=MODEL_STAGES,
        metavar="STAGE",
        help=f"stages to run (prerequisites, and the eager stages compile compares with, are added): "
        f"{' '.join(MODEL_STAGES)}",
    )
    parser.add_argument(
        "--architecture",
        default="",
        help="transformers class to build (default: the record's, else the base model)",
    )
    parser.add_argument("--store", help="crawl store directory or Parquet file to resolve a Hub id")
    parser.add_argument("--snapshot", help="snapshot JSONL/Parquet dump to resolve a Hub id")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--explain",
        action="store_true",
        help="localize every backend-blamed failure to the aten call that broke it and verify its "
        "repro (harness.rootcause; time limit per row: $HARNESS_ROOT_CAUSE_SECONDS)",
    )
    parser.add_argument(
        "--repro-dir",
        metavar="DIR",
        help="with --explain: write each root cause's standalone test into DIR",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _from_record(rec, architecture: str) -> ModelSpec:
    if rec.status != "ok":
        raise TargetError(f"{rec.id}: {rec.broken_reason} {rec.broken_detail}".strip())
    return rec.to_spec(architecture)


def resolve_target(
    target: str, *, architecture: str = "", store: str | None = None, snapshot: str | None = None
) -> ModelSpec:
    """MODEL -> ModelSpec. Order: an existing .json file, a crawl store / snapshot id, a model type."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    path = Path(target)
    if path.suffix == ".json" and path.is_file():
        try:
            config = json.loads(path.read_text())
        except ValueError as exc:
            raise TargetError(f"{target}: not valid JSON ({exc})") from exc
        if not isinstance(config, dict) or not config.get("model_type"):
            raise TargetError(f"{target}: a config.json needs a model_type")
        archs = config.get("architectures") or []
        return ModelSpec(
            model_id=str(path),
            model_type=config["model_type"],
            architecture=architecture or (archs[0] if archs else ""),
            config=config,
            source="file",
        )
    if store:
        from agents.store import read_store

        for rec in read_store(store):
            if rec.id.lower() == target.lower():
                return _from_record(rec, architecture)
    if snapshot:
        from agents.snapshot import iter_rows, record_from_row

        for lineno, row in iter_rows(snapshot):
            if isinstance(row, dict) and str(row.get("id", "")).lower() == target.lower():
                return _from_record(record_from_row(row, lineno, Path(snapshot).name), architecture)
    if target in CONFIG_MAPPING_NAMES:
        return ModelSpec(model_id=target, model_type=target, architecture=architecture, source="catalog")
    where = " or ".join(x for x in (store and f"store {store}", snapshot and f"snapshot {snapshot}") if x)
    raise TargetError(
        f"{target!r} is not a config.json, a known model type{', nor in ' + where if where else ''}"
        f"{'' if where else ' (pass --store DIR or --snapshot PATH to look up Hub ids)'}"
    )


def render_table(result) -> str:
    rows = [("stage", "status", "blame", "seconds", "detail")]
    for name, r in result.stages.items():
        detail = r.reason or ""
        if r.failing_op:
            detail += f" [op {r.failing_op}]"
        rows.append((name, r.status.value, r.blame or "-", f"{r.seconds:.2f}", detail[:110]))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        f"{result.model_id} on {result.backend}: {result.architecture or '?'} "
        f"({result.parameters:,} parameters)"
    ]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4])
    why = [
        (name, r.blame_evidence.get("why", ""))
        for name, r in result.stages.items()
        if r.blame and r.blame_evidence.get("why")
    ]
    for name, text in why:
        lines.append(f"blame {name}: {result.stages[name].blame}, {text}")
    fallbacks = (
        "n/a (the backend cannot report them)"
        if result.fallback_count is None
        else f"{result.fallback_count} ({', '.join(result.fallback_ops or []) or 'none'})"
    )
    lines.append(
        f"fallbacks: {fallbacks}; graphs: {_or_na(result.graphs)}; recompiles: {_or_na(result.recompiles)}; "
        f"peak device memory: {_or_na(result.peak_memory_bytes)}"
    )
    return "\n".join(lines)


def _or_na(value) -> str:
    """A figure the backend (or a stage that did not run) could not give: n/a, never 0."""
    return "n/a" if value is None else str(value)


def render_root_causes(result, repro_dir: str | None = None) -> str:
    """The root cause of every stage that carries one (`--explain`); repro files into repro_dir."""
    from contracts.rootcause import RootCause
    from harness.cli.explain import describe

    lines = []
    for name, r in result.stages.items():
        if not r.root_cause:
            continue
        rc = RootCause.from_dict(r.root_cause)
        lines.append(f"{name}:")
        lines += ["  " + ln for ln in describe(rc)]
        if repro_dir and rc.found and rc.repro is not None and rc.repro.case:
            from harness.rootcause.repro import standalone

            made = standalone(rc.repro.case, result.backend)
            if made is not None:
                path = Path(repro_dir) / made[0]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(made[1], encoding="utf-8")
                lines.append(f"  written:  {path}")
    if not lines:
        return "root causes: none (no stage failed on the backend)"
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from harness.blame.probe import check_with_blame
    from harness.rootcause.localize import check_with_root_cause

    try:
        spec = resolve_target(
            args.model, architecture=args.architecture, store=args.store, snapshot=args.snapshot
        )
    except (TargetError, FileNotFoundError) as exc:
        if args.json:
            print(json.dumps({"model_id": args.model, "error": str(exc)}))
        else:
            print(f"harness check: {exc}", file=sys.stderr)
        return 2
    if args.explain:
        result = check_with_root_cause(spec, args.backend, args.stages, args.seed, force=True)
    else:
        result = check_with_blame(spec, backend=args.backend, stages=args.stages, seed=args.seed)
    if args.json:
        print(json.dumps(result.to_dict(), default=str))
        if args.explain and args.repro_dir:
            render_root_causes(result, args.repro_dir)
    else:
        print(render_table(result))
        if args.explain:
            print(render_root_causes(result, args.repro_dir))
    failed = any(is_failing(r.status) for r in result.stages.values())
    return 1 if failed else 0

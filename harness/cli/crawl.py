"""`harness crawl`: build the crawl store (DIR/models.parquet) from the Hub, the catalog or a dump,
then triage its broken rows into DIR/triage.parquet (rules, or the LLM when configured)."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "Discover models (Hub crawl, offline catalog, or snapshot dump) into a Parquet crawl store"


EPILOG = """examples:
  harness crawl --out crawl/                                   # the offline catalog (no network)
  harness crawl --source snapshot:../shared/data/hub/hub_models.jsonl.gz --out crawl/ --json
  harness crawl --source hub --task text-generation --limit 500 --out crawl/
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--source",
        default="catalog",
        metavar="hub|catalog|snapshot:PATH",
        help="where models come from (default: catalog, the offline list of transformers architectures)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output directory (models.parquet, triage.parquet, crawl state)",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="stop after N models (hub: in total, resumed included)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    hub = p.add_argument_group("hub source")
    hub.add_argument("--task", default=None, help="only models with this pipeline_tag (e.g. text-generation)")
    hub.add_argument("--library", default=None, help="only models with this library tag (e.g. transformers)")
    hub.add_argument("--workers", type=int, default=4, help="parallel config.json downloads (default 4)")
    hub.add_argument(
        "--fresh", action="store_true", help="ignore an earlier crawl state in DIR and start over"
    )


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from agents.crawl import HubOptions, crawl_hub, write_records
    from agents.errors import CrawlError

    source = args.source
    if args.limit is not None and args.limit < 0:
        print("error: --limit must be >= 0", file=sys.stderr)
        return 2
    bar = tqdm(
        total=args.limit,
        unit="model",
        desc=f"crawl {source.split(':')[0]}",
        file=sys.stderr,
        disable=None,
        dynamic_ncols=True,
    )

    def progress(rec) -> None:
        bar.update(1)

    try:
        if source == "catalog":
            from agents.catalog import iter_catalog

            summary = write_records(args.out, "catalog", iter_catalog(), limit=args.limit, progress=progress)
        elif source.startswith("snapshot:"):
            from agents.snapshot import iter_snapshot

            path = source.removeprefix("snapshot:")
            if not path:
                raise CrawlError("--source snapshot:PATH needs a path")
            summary = write_records(
                args.out, "snapshot", iter_snapshot(path), limit=args.limit, progress=progress
            )
        elif source == "hub":
            opts = HubOptions(
                limit=args.limit, task=args.task, library=args.library, workers=args.workers, fresh=args.fresh
            )
            summary = crawl_hub(args.out, opts, progress=progress)
        else:
            raise CrawlError(f"unknown --source {source!r}: use hub, catalog or snapshot:PATH")
    except (CrawlError, FileNotFoundError) as exc:
        bar.close()
        if args.json:
            print(json.dumps({"error": str(exc), "source": source, "out": args.out}))
        print(f"error: {exc}", file=sys.stderr)
        return 1
    bar.close()
    triage = _triage(args.out)
    if args.json:
        print(json.dumps({**summary.to_json(), "triage": triage}))
    else:
        print(f"{summary.total} models from {summary.source} -> {summary.store}")
        print(f"  ok: {summary.ok}   broken: {summary.broken}")
        for reason, n in summary.broken_by_reason.items():
            print(f"    {reason}: {n}")
        if summary.resumed:
            print(f"  resumed after {summary.resumed} models crawled earlier")
        if "error" in triage:
            print(f"  triage: not written ({triage['error']})")
        else:
            by = ", ".join(f"{c} {n}" for c, n in triage["by_category"].items()) or "nothing broken"
            print(f"  triage ({'llm + rules' if triage['llm'] else 'rules'}): {by} -> {triage['file']}")
    return 0


def _triage(out: str) -> dict:
    """DIR/triage.parquet for the broken rows (agents.crawl_triage); a problem there never fails the crawl."""
    from agents.crawl_triage import triage_store

    try:
        return triage_store(out)
    except Exception as exc:  # noqa: BLE001 - the store is written; triage is an extra
        print(f"warning: triage not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "llm": False}

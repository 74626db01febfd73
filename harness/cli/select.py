"""`harness select --in DIR`: representatives covering every trait value and interacting pair."""

from __future__ import annotations

import argparse
import json
import sys

HELP = (
    "Choose representative models covering every trait value and interacting pair "
    "(writes DIR/representatives.parquet)"
)


EPILOG = """examples:
  harness select --in crawl/                   # writes crawl/representatives.parquet
  harness select --in crawl/ --reclassify --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--in", dest="in_dir", required=True, metavar="DIR", help="crawl directory (models.parquet)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    p.add_argument(
        "--coverage-target",
        type=float,
        default=None,
        metavar="F",
        help="also add the most-downloaded uncovered trait signatures until this download share (0..1)",
    )
    p.add_argument(
        "--reclassify", action="store_true", help="recompute traits even when DIR/traits.parquet is current"
    )
    p.add_argument("--no-llm", action="store_true", help="rules only when (re)classifying")


def run(args: argparse.Namespace) -> int:
    from agents.classify import classify_store
    from agents.select import select, write_selection
    from harness.cli.classify import llm_fill_or_none, print_summary

    if args.coverage_target is not None and not 0 <= args.coverage_target <= 1:
        print("error: --coverage-target must be between 0 and 1", file=sys.stderr)
        return 2
    try:
        frame, summary = _traits(args, classify_store, llm_fill_or_none)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"selecting representatives among {summary['ok']} usable models ...", file=sys.stderr)
    selection = select(frame, coverage_target=args.coverage_target)
    path = write_selection(args.in_dir, selection)
    summary.update(selection.summary())
    summary["representatives_file"] = str(path)
    if args.json:
        print(json.dumps(summary))
        return 0
    print_summary(summary)
    print(
        f"representatives chosen  {len(selection.representatives)} "
        f"covering {selection.covered}/{selection.universe} trait values and interacting pairs "
        f"(greedy bound H({selection.max_set_size}) = {selection.greedy_bound:.2f})"
    )
    print(
        f"download-weighted coverage  {selection.download_weighted_coverage:.1%} of downloads "
        f"({selection.model_coverage:.1%} of models) have a representative with their exact trait signature"
    )
    for r in selection.representatives[:15]:
        print(
            f"  {r.id:<50} {r.downloads:>12,}  cluster {r.cluster_download_share:6.1%}  "
            f"new {len(r.first_covered)}"
        )
    if len(selection.representatives) > 15:
        print(f"  ... {len(selection.representatives) - 15} more in {path}")
    return 0


def _traits(args, classify_store, llm_fill_or_none):
    """Traits joined with the store columns: reuse DIR/traits.parquet when newer than the store."""
    from pathlib import Path

    import pandas as pd

    from agents.classify import TRAITS_FILE, population_summary, read_store_frame, traits_frame
    from agents.traits import TRAIT_NAMES

    d = Path(args.in_dir)
    tpath, spath = d / TRAITS_FILE, d / "models.parquet"
    if (
        not args.reclassify
        and tpath.exists()
        and spath.exists()
        and tpath.stat().st_mtime >= spath.stat().st_mtime
    ):
        store = read_store_frame(d)
        base = traits_frame(store.head(0), with_store_columns=True)  # the column layout, no work
        traits = pd.read_parquet(tpath)
        rows = store.assign(
            architecture=[a[0] if a is not None and len(a) else "" for a in store["architectures"]]
        )
        keep = ["id"] + [c for c in base.columns if c not in TRAIT_NAMES and c != "id" and c in rows.columns]
        frame = traits[["id", *TRAIT_NAMES]].merge(rows[keep], on="id", how="left", validate="one_to_one")
        print(f"using {tpath} (newer than the store; --reclassify to redo)", file=sys.stderr)
        return frame, population_summary(frame)
    fill = llm_fill_or_none(d, args.no_llm)
    try:
        return classify_store(d, progress=True, llm_fill=fill)
    finally:
        if fill is not None:
            fill.__self__.close()

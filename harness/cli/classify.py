"""`harness classify --in DIR`: traits for every model of a crawl store, into DIR/traits.parquet."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "Classify every model of a crawl store by architectural traits (writes DIR/traits.parquet)"


EPILOG = """examples:
  harness classify --in crawl/                 # writes crawl/traits.parquet
  harness classify --in crawl/ --no-llm --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--in", dest="in_dir", required=True, metavar="DIR", help="crawl directory (models.parquet)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    p.add_argument(
        "--no-llm", action="store_true", help="rules only, even when an LLM endpoint is configured"
    )


def llm_fill_or_none(directory, disabled: bool):
    """The LLM trait filler when configured (OPENAI_BASE_URL/OPENAI_API_KEY + HARNESS_LLM_MODEL), else
    None."""
    if disabled:
        return None
    from agents.llm_traits import LLMClassifier
    from contracts.settings import LLMSettings

    settings = LLMSettings.from_env()
    return LLMClassifier(settings, log_dir=directory).fill if settings.enabled else None


def run(args: argparse.Namespace) -> int:
    from agents.classify import classify_store

    fill = llm_fill_or_none(args.in_dir, args.no_llm)
    try:
        _, summary = classify_store(args.in_dir, progress=True, llm_fill=fill)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if fill is not None:
            fill.__self__.close()
    summary["traits_file"] = f"{args.in_dir}/traits.parquet"
    if args.json:
        print(json.dumps(summary))
    else:
        print_summary(summary)
    return 0


def print_summary(summary: dict) -> None:
    print(f"population  {summary['population']} models ({summary['ok']} usable, {summary['broken']} broken)")
    for reason, n in summary["broken_by_reason"].items():
        print(f"  broken: {reason:<26} {n}")
    print("trait values found (usable models; unknown = cannot be told from the record):")
    for trait, info in summary["trait_values"].items():
        top = ", ".join(f"{v} {n}" for v, n in list(info["top"].items())[:5])
        print(f"  {trait:<18} {info['values']:>4} values, {info['unknown']:>6} unknown   {top}")

"""`harness traits CONFIG.json`: the architectural trait record of one config."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "Print the architectural traits of one config.json"


EPILOG = """examples:
  harness traits path/to/config.json
  harness traits path/to/config.json --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("config", metavar="CONFIG.json", help="a transformers config.json")
    p.add_argument(
        "--level",
        default="file",
        choices=["file", "full", "partial", "arch_only"],
        help="how complete the file is (default: a whole config.json; partial = fields may be missing)",
    )
    p.add_argument("--json", action="store_true", help="print the record as one JSON object")


def run(args: argparse.Namespace) -> int:
    from agents.traits import extract_traits, load_config_file
    from agents.type_profiles import profiles

    try:
        config = load_config_file(args.config)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    record = extract_traits(config, config_level=args.level).to_dict()
    profiles().save()
    if args.json:
        print(json.dumps(record))
        return 0
    width = max(len(k) for k in record)
    for k, v in record.items():
        print(f"{k:<{width}}  {v}")
    return 0

"""The `harness` command: one subcommand per module in this package.

Each subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Modules are imported lazily so `harness --help` stays fast and a
broken optional dependency only affects its own subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from contracts.errors import RuleFileError

# subcommand name -> module path. Order is the order shown in --help.
SUBCOMMANDS: dict[str, str] = {
    "doctor": "harness.cli.doctor",
    "check": "harness.cli.check",
    "crawl": "harness.cli.crawl",
    "traits": "harness.cli.traits",
    "classify": "harness.cli.classify",
    "select": "harness.cli.select",
    "registry": "harness.cli.registry",
    "run": "harness.cli.run",
    "nightly": "harness.cli.nightly",
    "report": "harness.cli.report",
    "compare": "harness.cli.compare",
    "explain": "harness.cli.explain",
    "baseline": "harness.cli.baseline",
    "cache": "harness.cli.cache",
}


def _available() -> dict[str, object]:
    modules = {}
    for name, path in SUBCOMMANDS.items():
        try:
            modules[name] = importlib.import_module(path)
        except ModuleNotFoundError as exc:
            if exc.name != path:  # a real missing dependency inside the module: surface it
                raise
    return modules


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Which Hugging Face models run on your PyTorch backend, and what changed.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _available().items():
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RuleFileError as exc:  # a rule file (bundled or the user's) with a typo: name it, no traceback
        print(f"harness {args.command}: error: {exc}", file=sys.stderr)
        return 2

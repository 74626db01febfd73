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


EPILOG = """examples:
  harness doctor                                   # versions, the backend in use and its settings
  harness check bert --backend neuron              # one model, stage by stage
  harness nightly --quick --out runs/quick         # every tier, the report, the comparison
  harness run --tier unit --out runs/u1 --json     # one tier
  harness report runs/quick                        # runs/quick/report.html
  harness explain runs/quick                       # the aten call behind each backend failure

`harness COMMAND --help` has each command's own examples.
"""


def _nested_examples(parser: argparse.ArgumentParser, prog: str) -> None:
    """A command with commands of its own (`harness registry regenerate`) shows the examples of its
    parent's help that name it: the examples stay in one place per command module."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, child in action.choices.items():
            lines = [line for line in (parser.epilog or "").splitlines() if f"{prog} {name} " in f"{line} "]
            if child.epilog is None and lines:
                child.epilog = "examples:\n" + "\n".join(lines)
                child.formatter_class = argparse.RawDescriptionHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Which Hugging Face models run on your PyTorch backend, and what changed.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in _available().items():
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        _nested_examples(p, f"harness {name}")
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

"""Every `--help` of the `harness` command shows examples of that command, and the nightly's help
names the tiers the nightly runs (harness/data/nightly.toml)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from contracts.rulefiles import resource
from harness.cli import build_parser
from harness.engine.nightly import load_config


def parsers(
    parser: argparse.ArgumentParser, prog: str = "harness"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, f"{prog} {name}")


ALL = list(parsers(build_parser()))


@pytest.mark.parametrize(("prog", "parser"), ALL, ids=[prog for prog, _ in ALL])
def test_every_help_has_examples_of_its_own_command(prog, parser):
    text = parser.format_help()
    examples = text.split("examples:", 1)[1] if "examples:" in text else ""
    assert re.search(rf"^\s+{re.escape(prog)}\b", examples, re.M), f"`{prog} --help` shows no example of it"


def test_the_walk_sees_nested_commands():
    assert {"harness", "harness nightly", "harness registry regenerate", "harness cache warm"} <= {
        prog for prog, _ in ALL
    }


@pytest.mark.parametrize("quick", [False, True])
def test_the_nightly_help_names_the_tiers_the_nightly_runs(quick):
    assert resource("harness", "data/nightly.toml").exists()
    help_text = dict(ALL)["harness nightly"].description
    named = re.findall(r"\b(unit|representative|full|upstream)\b", help_text)
    assert named == list(load_config(quick).tiers)

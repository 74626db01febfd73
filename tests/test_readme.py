"""The README's quick start is what CI runs: the install step and the test command must agree."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_quick_start_is_exactly_two_commands():
    commands = _quick_start_commands()
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands)


def test_ci_runs_the_readme_install_step_and_test_command():
    install, test = _quick_start_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    pip_step = next(part.strip() for part in install.split("&&") if part.strip().startswith("pip install"))
    assert pip_step in ci.splitlines(), f"{pip_step!r} not a line of .ci/run"
    assert test in ci.splitlines(), f"{test!r} not a line of .ci/run"
    assert "harness nightly --quick" in install

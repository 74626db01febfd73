"""The README is the front door: short, its quick start is what CI runs, and it speaks of the product.

The install step and the test command of the quick start must be lines of `.ci/run`; the README
stays short enough to read (measured figures live in docs/figures.md); the pages a newcomer reads
first say what the product does, not how it was built (the history is in the commit log).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_README_LINES = 250
#: the front-door pages, and wording that tells how the work was done instead of what the product does
FRONT_DOOR = ("README.md", "docs/figures.md", "docs/architecture.md")
HISTORY_WORDING = re.compile(
    r"\bissues?\s+#?\d+|\b(?:first|second|third|fourth|fifth|next|last) round\b|\bsessions?\b"
    r"|\bhelpers?\b|\bthe lead\b|\bwhen I\b",
    re.IGNORECASE,
)


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


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def test_the_history_wording_check_finds_history():
    assert HISTORY_WORDING.search("measured in issue 13, third round, by the inputs helper's run")
    assert not HISTORY_WORDING.search("interleaved rounds of the steady-state steps; bf16 rounding")


def test_front_door_pages_speak_of_the_product():
    found = [
        f"{name}:{i}: {m.group(0)!r}"
        for name in FRONT_DOOR
        for i, line in enumerate((ROOT / name).read_text().splitlines(), 1)
        for m in [HISTORY_WORDING.search(line)]
        if m
    ]
    assert found == [], "history wording (it belongs in commit messages):\n" + "\n".join(found)

"""The README is the front door: short, its quick start is what CI runs, and it speaks of the product.

The install step and the test command of the quick start must be lines of `.ci/run`; the README
stays short enough to read (measured figures live in docs/figures.md); the README, every page of
docs/ and the comments, docstrings and test names of every Python file say what the product does,
not how it was built (the history is in the commit log).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_README_LINES = 250
#: wording that tells how the work was done instead of what the product does: issue numbers, rounds
#: and sessions of work, the people or helpers who did it, stories of runs. Product words pass: a
#: video tracker's inference session, a helper function, interleaved measuring rounds, bf16 rounding.
HISTORY_WORDING = re.compile(
    r"\bissues?\s+#?\d+|(?<![\w&'\"])#\d{1,4}\b"
    r"|\b(?:first|second|third|fourth|fifth|sixth|next|last|previous|earlier|later|this|that) round\b"
    r"|\b(?:work|working|coding|previous|earlier|later|next|last|this|that|another|other) sessions?\b"
    r"|\bhelpers?'s?\s+(?:run|work|session|change)|\b(?:other|another|\d+|seven|several) helpers\b"
    r"|\bthe lead\b|\bwhen I\b|\bI (?:stopped|ran|measured|noticed|added|changed|fixed|moved|found)\b"
    r"|\b(?:before|after|during) this work\b|\bnot there yet\b",
    re.IGNORECASE,
)
#: where the wording is checked: the README and every page of docs/; the comments, docstrings and
#: test names of Python files (never code: an identifier such as `inference_session` is the product's)
PAGES = ("README.md", "docs")
PYTHON_DIRS = (
    "agents",
    "backend",
    "benchmarks",
    "contracts",
    "harness",
    "registry",
    "reports",
    "tests",
    "adapters",
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
    for story in ("issue 13", "fixed in #13", "the third round", "the inputs helper's run", "the lead"):
        assert HISTORY_WORDING.search(story), story
    for product in (
        "interleaved rounds of the steady-state steps; bf16 rounding; round 3 of 5",
        "a video tracker's inference session (`inference_session`)",
        "small helpers for the tests; a helper function",
        "entry '#0'; &#13;",
    ):
        assert not HISTORY_WORDING.search(product), product


def _pages() -> Iterator[Path]:
    for name in PAGES:
        path = ROOT / name
        yield from sorted(path.rglob("*.md")) if path.is_dir() else [path]


def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of a module's comments (tokenize), docstrings (ast) and test names, never its code."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            yield node.lineno, node.name.replace("_", " ")


def _python_files() -> Iterator[Path]:
    for name in PYTHON_DIRS:
        for path in sorted((ROOT / name).rglob("*.py")):
            if not any(part.startswith(".") or part.endswith(".egg-info") for part in path.parts):
                yield path


def test_only_comments_docstrings_and_test_names_are_read_as_prose():
    source = (
        '"""Module: issue 13."""\n'
        "inference_session = 'the lead'  # third round\n"
        "def test_of_issue_4():\n"
        '    """the inputs helper\'s run"""\n'
    )
    found = [HISTORY_WORDING.search(text) for _, text in python_prose(source)]
    assert sorted(m.group(0) for m in found if m) == ["helper's run", "issue 13", "issue 4", "third round"]


def test_pages_speak_of_the_product():
    found = [
        f"{path.relative_to(ROOT)}:{i}: {m.group(0)!r}"
        for path in _pages()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        for m in [HISTORY_WORDING.search(line)]
        if m
    ]
    assert found == [], "history wording (it belongs in commit messages):\n" + "\n".join(found)


def test_python_comments_docstrings_and_test_names_speak_of_the_product():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}"
        for path in _python_files()
        for line, text in python_prose(path.read_text())
        for m in [HISTORY_WORDING.search(text)]
        if m
    ]
    assert found == [], "history wording (it belongs in commit messages):\n" + "\n".join(found)

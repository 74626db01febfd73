"""JUnit XML per tier, for CI systems: one testsuite per stage, one testcase per case.

pass -> a plain testcase; fail -> <failure>; error / timeout / oom / crash -> <error> (its type
is the status, the message the reason or exception); skipped / not_attempted -> <skipped> with
the reason. A row that does not pass carries its blame: a `blame` property of the testcase and a
"[blame: backend]" prefix of the message; backend-blamed failures come first in each suite.
Written as ``junit-<tier>.xml`` into the run directory. The XML is streamed as text (escaped with
xml.sax.saxutils), so a tier of 250,000 rows stays a few seconds and little memory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import pandas as pd

from contracts.status import UNFINISHED

_ERRORS = {s.value for s in UNFINISHED}
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # not allowed in XML 1.0


def _clean(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return _BAD_XML.sub("?", str(value))


def _attr(value: object) -> str:
    return quoteattr(_clean(value), {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})


_BLAME_ORDER = {"backend": 0, "": 1, "none": 1, "harness": 2, "upstream": 3, "environment": 4}


def _blame_props(blame: str) -> str:
    return f'<properties><property name="blame" value={_attr(blame)} /></properties>' if blame else ""


def _suite(tier: str, stage: str, g: pd.DataFrame) -> tuple[dict[str, float], list[str]]:
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    lines = []
    blames = (
        (g["blame"] if "blame" in g else pd.Series([None] * len(g), index=g.index)).fillna("").astype(str)
    )
    g = g.assign(_blame=blames, _rank=blames.map(lambda b: _BLAME_ORDER.get(b, 1)))
    g = g.sort_values(["_rank", "case_id"])  # backend-blamed failures lead, the harness' own debt after
    cols = [
        g[c].tolist() for c in ("case_id", "status", "seconds", "reason", "error_class", "message", "_blame")
    ]
    cls = _attr(f"{tier}.{stage}")
    for case_id, status, seconds, reason, error_class, message, blame in zip(*cols):
        seconds = float(seconds) if seconds is not None and seconds == seconds else 0.0
        counts["time"] += seconds
        counts["tests"] += 1
        head = f'    <testcase classname={cls} name={_attr(case_id)} time="{seconds:.3f}"'
        if status == "pass":
            lines.append(head + " />")
            continue
        why = _clean(reason) or _clean(error_class)
        if blame:
            why = f"[blame: {blame}] {why}".strip()
        text = escape("\n".join(x for x in (_clean(error_class), _clean(message)) if x))
        if status == "fail":
            counts["failures"] += 1
            body = f'<failure message={_attr(why or "fail")} type="fail">{text}</failure>'
        elif status in _ERRORS:
            counts["errors"] += 1
            body = f"<error message={_attr(why or status)} type={_attr(status)}>{text}</error>"
        else:  # skipped, not_attempted
            counts["skipped"] += 1
            body = f"<skipped message={_attr(f'{status}: {why}')} />"
        lines.append(f"{head}>{_blame_props(blame)}{body}</testcase>")
    return counts, lines


def _counts(c: dict[str, float]) -> str:
    return (
        f'tests="{c["tests"]}" failures="{c["failures"]}" errors="{c["errors"]}" skipped="{c["skipped"]}" '
        f'time="{c["time"]:.3f}"'
    )


def tier_xml(results: pd.DataFrame, tier: str) -> Iterator[str]:
    """The JUnit document of one tier, as text chunks."""
    rows = results[results["tier"] == tier]
    suites = [(stage, *_suite(tier, str(stage), g)) for stage, g in rows.groupby("stage", sort=False)]
    total = {k: sum(c[k] for _, c, _ in suites) for k in ("tests", "failures", "errors", "skipped", "time")}
    yield '<?xml version="1.0" encoding="utf-8"?>\n'
    yield f"<testsuites name={_attr(f'harness.{tier}')} {_counts(total)}>\n"
    for stage, counts, lines in suites:
        yield f"  <testsuite name={_attr(f'{tier}.{stage}')} {_counts(counts)}>\n"
        yield "\n".join(lines) + "\n"
        yield "  </testsuite>\n"
    yield "</testsuites>\n"


def write_junit(results: pd.DataFrame, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write junit-<tier>.xml for every tier in results; return {tier: path}."""
    out = {}
    for tier in sorted(results["tier"].unique()):
        path = Path(out_dir) / f"junit-{tier}.xml"
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(tier_xml(results, str(tier)))
        os.replace(tmp, path)
        out[str(tier)] = path
    return out

"""Failures of a run grouped by probable root cause, into RUNDIR/failure_groups.json.

Why: a nightly run with hundreds of failing cases is read cause by cause, not row by row. Every
failing row (status fail, error, timeout, oom, crash; any tier) goes to agents.llm_groups.group_failures:
the rules group equal (stage, error class, op, normalized message) and name a cause from
agents/data/failure_causes.yaml; an LLM endpoint, when configured, may merge groups (closed list,
validated). A problem with the LLM falls back to the rules and never stops the report.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from contracts.status import FAILING_VALUES, UNFINISHED_VALUES, Status

#: statuses that carry no exception class of their own (the worker timed out, ran out of memory or died)
_CLASSLESS = UNFINISHED_VALUES - {Status.ERROR.value}

FAILURE_GROUPS_FILE = "failure_groups.json"
EXAMPLES = 5  # example ids shown per group in the report


@dataclass
class GroupRow:
    """One group as the report shows it."""

    group_id: str
    root_cause: str
    summary: str
    count: int  # failing (case, stage) rows in the group
    members: list[str]
    examples: list[str]
    source: str  # rules | llm


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def failure_rows(results: pd.DataFrame) -> list[dict[str, Any]]:
    """The failing rows of a results table as group_failures takes them (id = case id).

    The message is the row's reason and message together; a timeout/oom/crash without an error
    class gets its status as the class, so the rules can name it."""
    if results.empty:
        return []
    out = []
    for r in results[results["status"].isin(FAILING_VALUES)].to_dict("records"):
        status = _text(r.get("status"))
        error_class = _text(r.get("error_class")) or (status if status in _CLASSLESS else "")
        out.append(
            {
                "id": _text(r.get("case_id")),
                "model_id": _text(r.get("model_id")),
                "tier": _text(r.get("tier")),
                "stage": _text(r.get("stage")),
                "error_class": error_class,
                "failing_op": _text(r.get("failing_op")),
                "message": "; ".join(x for x in (_text(r.get("reason")), _text(r.get("message"))) if x),
            }
        )
    return out


def compute_groups(results: pd.DataFrame, client=None) -> list[GroupRow]:
    from agents.llm_groups import group_failures

    groups = group_failures(failure_rows(results), client)
    rows = [
        GroupRow(
            g.group_id,
            g.root_cause,
            g.summary,
            len(g.members),
            list(g.members),
            list(g.members[:EXAMPLES]),
            g.source,
        )
        for g in groups
    ]
    return sorted(rows, key=lambda g: (-g.count, g.root_cause, g.group_id))


def write_failure_groups(
    run_dir: str | os.PathLike, results: pd.DataFrame, *, use_llm: bool = True
) -> dict[str, Any]:
    """Group the run's failures (rules, or the LLM when configured) and write RUNDIR/failure_groups.json."""
    from agents.llm import run_with_llm

    run_dir = Path(run_dir)
    groups, note, llm_used = run_with_llm(
        run_dir, lambda client: compute_groups(results, client), enabled=use_llm and not results.empty
    )
    data = {
        "failures": sum(g.count for g in groups),
        "llm": llm_used,
        "note": note,
        "groups": [asdict(g) for g in groups],
    }
    path = run_dir / FAILURE_GROUPS_FILE
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
    return {**data, "file": str(path)}

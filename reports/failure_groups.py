"""Failures of a run grouped by root cause, into RUNDIR/failure_groups.json.

Why: a nightly run with hundreds of failing cases is read cause by cause, not row by row. Failing
rows (status fail, error, timeout, oom, crash; any tier) localized to one op call come first, one
group per root-cause op and phase (reports.rootcauses; `source: "root_cause"`, with `op`, `phase`
and the repro). Every other failing row goes to agents.llm_groups.group_failures: the rules group
equal (stage, error class, op, normalized message) and name a probable cause from
agents/data/failure_causes.yaml; an LLM endpoint, when configured, may merge those groups (closed
list, validated). A problem with the LLM falls back to the rules and never stops the report.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from contracts.status import FAILING_VALUES, UNFINISHED_VALUES, Status
from reports import rootcauses

#: statuses that carry no exception class of their own (the worker timed out, ran out of memory or died)
_CLASSLESS = UNFINISHED_VALUES - {Status.ERROR.value}

FAILURE_GROUPS_FILE = "failure_groups.json"
EXAMPLES = 5  # example ids shown per group in the report


@dataclass
class GroupRow:
    """One group as the report shows it."""

    group_id: str
    root_cause: str  # "<op> (<phase>)" for a localized root cause, else a failure_causes.yaml category
    summary: str
    count: int  # failing (case, stage) rows in the group
    members: list[str]  # case ids
    examples: list[str]
    source: str  # root_cause | rules | llm
    op: str = ""  # source root_cause: the overload the rows were localized to
    phase: str = ""  # ... and the phase (contracts.rootcause.PHASES)
    repro: str = ""  # ... its repro file, when one was written
    repro_verified: bool | None = None


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


def root_cause_rows(groups: list[rootcauses.RootCauseGroup]) -> list[GroupRow]:
    """One group per root-cause op and phase, the most rows first."""
    rows = [
        GroupRow(
            group_id="",
            root_cause=g.key,
            summary="; ".join(x for x in (g.largest_error, ", ".join(g.module_paths[:1])) if x)[:300],
            count=g.rows,
            members=list(g.cases),
            examples=list(g.examples),
            source="root_cause",
            op=g.op,
            phase=g.phase,
            repro=g.repro,
            repro_verified=g.repro_verified,
        )
        for g in groups
    ]
    rows.sort(key=lambda g: (-g.count, g.root_cause))
    for n, g in enumerate(rows):
        g.group_id = f"rc{n + 1}"
    return rows


def compute_groups(
    results: pd.DataFrame, client=None, root_cause_groups: list[rootcauses.RootCauseGroup] | None = None
) -> list[GroupRow]:
    """Root-cause groups first, then the rest of the failing rows grouped by the rules (or the LLM)."""
    from agents.llm_groups import group_failures

    if root_cause_groups is None:
        root_cause_groups = rootcauses.root_cause_groups(results)
    rest = results[~rootcauses.found_mask(results)] if not results.empty else results
    groups = group_failures(failure_rows(rest), client)
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
    return root_cause_rows(root_cause_groups) + sorted(
        rows, key=lambda g: (-g.count, g.root_cause, g.group_id)
    )


def write_failure_groups(
    run_dir: str | os.PathLike,
    results: pd.DataFrame,
    *,
    use_llm: bool = True,
    root_cause_groups: list[rootcauses.RootCauseGroup] | None = None,
) -> dict[str, Any]:
    """Group the run's failures (root causes, then the rules or the LLM when configured) and write
    RUNDIR/failure_groups.json."""
    from agents.llm import run_with_llm

    run_dir = Path(run_dir)
    if root_cause_groups is None:
        root_cause_groups = rootcauses.root_cause_groups(results)
    groups, note, llm_used = run_with_llm(
        run_dir,
        lambda client: compute_groups(results, client, root_cause_groups),
        enabled=use_llm and not results.empty,
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

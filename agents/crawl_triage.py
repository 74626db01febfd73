"""The crawl's triage step: every broken row of DIR/models.parquet explained, into DIR/triage.parquet.

Why a step of its own: the crawl store says *that* a model is broken (a reason code); triage says
*why*, in words a reader can act on. The rules (agents.llm_triage.triage_broken's default) always answer;
an LLM endpoint, when configured (contracts.settings.LLMSettings.from_env), may pick a category from the
same closed list and write the explanation. Nothing here may fail a crawl: any problem with the
LLM or its settings falls back to the rules, and the summary says so.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

TRIAGE_FILE = "triage.parquet"
COLUMNS = ("id", "broken_reason", "category", "explanation", "source")


def triage_store(directory: str | Path, *, use_llm: bool = True) -> dict[str, Any]:
    """Triage the broken rows of DIR/models.parquet into DIR/triage.parquet; returns the summary
    for the crawl's --json: file, broken, by_category, by_source, llm (an endpoint was consulted)."""
    import pandas as pd

    from agents.llm import run_with_llm
    from agents.llm_triage import triage_broken
    from agents.store import read_frame

    directory = Path(directory)
    store = read_frame(directory)
    broken = store[store["status"] == "broken"]
    records = [
        {
            "id": r["id"],
            "broken_reason": r["broken_reason"],
            "broken_detail": r["broken_detail"],
            "config": r["config"],
        }
        for r in broken[["id", "broken_reason", "broken_detail", "config"]].to_dict("records")
    ]
    triaged, note, llm_used = run_with_llm(
        directory, lambda client: triage_broken(records, client), enabled=use_llm and bool(records)
    )
    reasons = {r["id"]: r["broken_reason"] for r in records}
    rows = [{**asdict(t), "broken_reason": reasons.get(t.id)} for t in triaged]
    frame = pd.DataFrame.from_records(rows, columns=list(COLUMNS))
    path = directory / TRIAGE_FILE
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    summary: dict[str, Any] = {
        "file": str(path),
        "broken": len(rows),
        "by_category": dict(sorted(Counter(frame["category"]).items(), key=lambda kv: (-kv[1], kv[0]))),
        "by_source": dict(sorted(Counter(frame["source"]).items())),
        "llm": llm_used,
    }
    if note:
        summary["note"] = note
    return summary

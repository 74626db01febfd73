"""LLM use 2: explain and categorize why a model was filtered as broken (harness crawl's triage).

The rules (agents/triage_rules.yaml) always answer; an LLM may pick a category from the closed
list of reason codes, never invent one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.llm import LLMClient, clip, load_prompt


@dataclass
class TriageRecord:
    id: str
    category: str  # a reason code of agents/triage_rules.yaml
    explanation: str
    source: str  # rules | llm


class TriageAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    category: str
    explanation: str = Field(max_length=600)


def _reason_codes() -> dict[str, str]:
    from agents.triage import describe, reason_codes

    return {c: describe(c) for c in reason_codes()}


def triage_broken(
    records: Iterable[Mapping[str, Any]], client: LLMClient | None = None
) -> list[TriageRecord]:
    """Explain each broken record (id, broken_reason, broken_detail, config). Rule default: the
    reason code and its description; with an LLM, a validated category and a short explanation."""
    codes = _reason_codes()
    out = []
    for r in records:
        code = str(r.get("broken_reason") or "unspecified")
        detail = str(r.get("broken_detail") or "")
        rule = TriageRecord(
            str(r.get("id")),
            code,
            f"{codes.get(code, code)}{': ' + clip(detail, 200) if detail else ''}",
            "rules",
        )
        if client is None or not client.settings.enabled:
            out.append(rule)
            continue
        payload = {
            "id": rule.id,
            "reason": code,
            "detail": detail,
            "config": clip(r.get("config") or "", 1500),
        }
        fields = {
            "reason": code,
            "reason_description": codes.get(code, ""),
            "model_id": clip(rule.id, 200),
            "categories": "\n".join(f"  {c}: {d}" for c, d in codes.items()),
            "detail": clip(detail, 1500),
            "config": clip(r.get("config") or "", 1500),
        }

        def check(a: TriageAnswer) -> str:
            return "" if a.category in codes else f"out of vocabulary: category={clip(a.category, 60)}"

        answer, _ = client.ask(
            "triage", rule.id, load_prompt("triage_broken"), payload, fields, TriageAnswer, check
        )
        out.append(
            TriageRecord(rule.id, answer.category, clip(answer.explanation, 600), "llm") if answer else rule
        )
    return out

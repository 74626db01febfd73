"""LLM use 3: group a run's failures by probable root cause for the report.

The rules group equal (stage, error class, op, normalized message) and name a cause from
agents/data/failure_causes.yaml; an LLM, when configured, may merge groups (closed list of
causes, validated).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.llm import LLMClient, clip, load_prompt
from contracts.rulefiles import Rules, cached_rules, resource


@dataclass
class FailureGroup:
    group_id: str
    root_cause: str  # a category of agents/data/failure_causes.yaml
    summary: str
    members: list[str]  # model / case ids
    source: str  # rules | llm


class GroupItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_ids: list[str] = Field(min_length=1)
    root_cause: str
    summary: str = Field(default="", max_length=400)


class GroupAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    groups: list[GroupItem]


class Cause(Rules):
    pattern: str  # a regular expression over "<stage> <error_class> <failing_op> <message>", lower case
    doc: str  # what the category means (the LLM sees it)


class FailureCauses(Rules):
    """agents/data/failure_causes.yaml: the root-cause categories, first match wins."""

    version: int
    categories: dict[str, Cause]


def failure_causes() -> dict[str, Cause]:
    return cached_rules(FailureCauses, str(resource("agents", "data/failure_causes.yaml"))).categories


def normalize_message(message: str) -> str:
    """A message with addresses, numbers and paths blurred, so equal failures group together."""
    s = re.sub(r"0x[0-9a-fA-F]+", "0x?", message or "")
    s = re.sub(r"(/[\w.\-]+)+", "<path>", s)
    s = re.sub(r"\d+", "N", s)
    return " ".join(s.split())[:160]


def rule_root_cause(stage: str, error_class: str, failing_op: str, message: str) -> str:
    text = f"{stage} {error_class} {failing_op} {message}".lower()
    for name, spec in failure_causes().items():
        if re.search(spec.pattern, text):
            return name
    return "other"


def group_failures(
    failures: Iterable[Mapping[str, Any]], client: LLMClient | None = None
) -> list[FailureGroup]:
    """Group failures (id, stage, error_class, failing_op, message). Rule default: equal
    (stage, error class, op, normalized message) form a group, named by keyword rules; an LLM
    may merge groups and name their root cause from the closed category list."""
    buckets: dict[tuple, list[str]] = {}
    for f in failures:
        k = (
            str(f.get("stage") or ""),
            str(f.get("error_class") or ""),
            str(f.get("failing_op") or ""),
            normalize_message(str(f.get("message") or "")),
        )
        buckets.setdefault(k, []).append(str(f.get("id")))
    rule_groups: dict[str, FailureGroup] = {}
    for n, (k, members) in enumerate(sorted(buckets.items(), key=lambda kv: (-len(kv[1]), kv[0]))):
        gid = f"g{n + 1}"
        rule_groups[gid] = FailureGroup(
            gid, rule_root_cause(*k), " / ".join(x for x in k if x)[:200], sorted(members), "rules"
        )
    if client is None or not client.settings.enabled or not rule_groups:
        return list(rule_groups.values())
    causes = failure_causes()
    payload = {gid: [g.summary, len(g.members)] for gid, g in rule_groups.items()}
    fields = {
        "categories": "\n".join(f"  {c}: {s.doc}" for c, s in causes.items()),
        "groups": clip(
            "\n".join(f"{gid}: {g.summary} ({len(g.members)} models)" for gid, g in rule_groups.items())
        ),
    }

    def check(a: GroupAnswer) -> str:
        seen: set[str] = set()
        for item in a.groups:
            if item.root_cause not in causes:
                return f"out of vocabulary: root_cause={clip(item.root_cause, 60)}"
            for gid in item.group_ids:
                if gid not in rule_groups:
                    return f"unknown group id: {clip(gid, 40)}"
                if gid in seen:
                    return f"group id used twice: {gid}"
                seen.add(gid)
        return ""

    answer, _ = client.ask(
        "group", "failures", load_prompt("group_failures"), payload, fields, GroupAnswer, check
    )
    if answer is None:
        return list(rule_groups.values())
    out, used = [], set()
    for n, item in enumerate(answer.groups):
        members = sorted(m for gid in item.group_ids for m in rule_groups[gid].members)
        out.append(FailureGroup(f"llm{n + 1}", item.root_cause, clip(item.summary, 400), members, "llm"))
        used.update(item.group_ids)
    out.extend(g for gid, g in rule_groups.items() if gid not in used)
    return out

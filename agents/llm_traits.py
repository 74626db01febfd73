"""LLM use 1: traits the rules leave unknown, for a model_type transformers does not know.

The answer must use the closed trait vocabulary (agents/data/traits.yaml); anything else is
rejected and the rule result kept (agents.llm says how decisions are cached and logged).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agents.llm import LLMClient, clip, load_prompt
from agents.traits import TRAIT_NAMES
from agents.vocabulary import UNKNOWN, allowed_values
from contracts.settings import LLMSettings


class TraitAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    traits: dict[str, str]


def _known_heads() -> set[str]:
    from agents.catalog import head_table

    return {h.head for h in head_table()}


def check_traits(answer: TraitAnswer, asked: Iterable[str]) -> str:
    """Rejection reason for an answer naming a trait not asked or a value outside the vocabulary."""
    asked = set(asked)
    for trait, value in answer.traits.items():
        if trait not in asked:
            return f"trait not asked: {clip(trait, 60)}"
        allowed = allowed_values(trait) if trait != "head" else _known_heads() | {UNKNOWN}
        if allowed is None or value not in allowed:
            return f"out of vocabulary: {trait}={clip(value, 60)}"
    return ""


class LLMClassifier:
    """Fills traits the rules left unknown; rule values are never overwritten."""

    def __init__(
        self,
        settings: LLMSettings | None = None,
        log_dir: str | Path | None = None,
        client: LLMClient | None = None,
    ) -> None:
        self.client = client or LLMClient(settings or LLMSettings.from_env(), log_dir)

    def fill(self, row: Mapping[str, Any], traits: Mapping[str, str]) -> dict[str, str]:
        asked = [t for t in TRAIT_NAMES if traits.get(t) == UNKNOWN and t != "model_type"]
        out = dict(traits)
        if not asked:
            return out
        allowed = {t: sorted(allowed_values(t) or _known_heads() | {UNKNOWN}) for t in asked}
        archs = row.get("architectures")
        archs = [str(a) for a in archs] if archs is not None and not isinstance(archs, str) else []
        config = (
            row.get("config") if isinstance(row.get("config"), str) else json.dumps(row.get("config") or {})
        )
        card = row.get("card") or row.get("model_card") or ""
        payload = {
            "model_type": traits.get("model_type"),
            "architectures": archs,
            "config": config,
            "card": card,
            "asked": asked,
        }
        fields = {
            "model_type": clip(traits.get("model_type"), 100),
            "architectures": clip(archs, 300),
            "allowed": "\n".join(f"  {t}: {', '.join(v)}" for t, v in allowed.items()),
            "config": clip(config),
            "card": clip(card, 4000),
        }
        answer, _ = self.client.ask(
            "classify",
            str(row.get("id", "")),
            load_prompt("classify_traits"),
            payload,
            fields,
            TraitAnswer,
            lambda a: check_traits(a, asked),
        )
        if answer is not None:
            for t, v in answer.traits.items():
                if out.get(t) == UNKNOWN:
                    out[t] = v
        return out

    def close(self) -> None:
        self.client.close()

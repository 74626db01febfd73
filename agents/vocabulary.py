"""The trait vocabulary (agents/data/traits.yaml): trait names' closed value sets and rule tables.

Its own module because both the trait rules (agents.traits) and the per-type profiles
(agents.type_profiles) read it, and traits builds on profiles.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

#: The value of a trait that cannot be told (never a guess).
UNKNOWN = "unknown"


@lru_cache(maxsize=1)
def vocabulary() -> dict[str, Any]:
    """The trait vocabulary and rule tables (agents/data/traits.yaml)."""
    text = resources.files("agents").joinpath("data", "traits.yaml").read_text()
    return yaml.safe_load(text)


def allowed_values(trait: str) -> set[str] | None:
    """The closed value set of a trait (with unknown), or None for open traits (model_type, head)."""
    spec = vocabulary()["traits"][trait]
    if spec["values"] == "open":
        return None
    return {str(v) for v in spec["values"]} | {UNKNOWN}

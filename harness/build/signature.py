"""The architecture signature: identical architectures (after shrinking) get the same key.

The full tier runs each distinct architecture once (harness.tiers.population); this is the key.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import lru_cache
from typing import Any

from contracts.records import ModelSpec
from harness.build.models import default_architecture, resolve_config


def config_fingerprint(config) -> dict:
    """The parts of a config that define the architecture (no names, versions, label text)."""
    d = config.to_dict() if hasattr(config, "to_dict") else dict(config)

    def clean(x):
        if isinstance(x, dict):
            return {
                k: clean(v)
                for k, v in sorted(x.items())
                if k
                not in (
                    "_name_or_path",
                    "transformers_version",
                    "architectures",
                    "id2label",
                    "label2id",
                    "_commit_hash",
                    "dtype",
                    "torch_dtype",
                )
                and not k.startswith("_shrink")
            }
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
            return str(x)
        return x

    out = clean(d)
    out["num_labels"] = len(d.get("id2label") or {}) or None
    return out


def architecture_signature(spec) -> str:
    """Hash of (architecture class, shrunk config): identical architectures -> same signature.

    Cached on the spec's (type, class, config) so a population with many identical configs
    (partial or architecture-only records) shrinks each distinct one once.
    """
    blob = json.dumps(spec.config or {}, sort_keys=True, default=str)
    return _signature(spec.model_type, spec.architecture or "", blob)


@lru_cache(maxsize=65536)
def _signature(model_type: str, architecture: str, config_json: str) -> str:
    spec = ModelSpec("signature", model_type, architecture, json.loads(config_json))
    try:
        body: Any = config_fingerprint(resolve_config(spec))
    except Exception as exc:  # noqa: BLE001 - unshrinkable: still a stable key (same input, same signature)
        body = {"unresolved": type(exc).__name__, "config": config_json}
    arch = architecture or default_architecture(model_type) or ""
    blob = json.dumps(
        {"architecture": arch, "model_type": model_type, "config": body}, sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]

"""What the installed transformers says about a model_type, computed once per type and cached.

A `TypeProfile` holds the type's default config (``config_class().to_dict()``, via agents.catalog),
the MODEL_*_MAPPING_NAMES head mappings that list it, and facts read from its modeling_<type>.py
source *as text* (never imported or run). Profiles live in memory and in one JSON file per
(transformers version, trait-vocabulary version) under $HARNESS_CACHE_DIR (or the user cache), so
only the first run on a machine pays for importing ~800 configuration modules.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from agents.vocabulary import vocabulary
from contracts.settings import current


@dataclass
class TypeProfile:
    """What the installed transformers says about one model_type (JSON-able, cached on disk)."""

    model_type: str
    known: bool = False
    defaults: dict[str, Any] | None = None  # the default config's to_dict(), None if unknown/unbuildable
    mappings: list[str] | None = None  # MODEL_*_MAPPING_NAMES that list this type
    source_position: list[str] | None = None  # values whose source pattern matched
    source_norm: list[str] | None = None
    source_has_attention: bool | None = None


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


@lru_cache(maxsize=1)
def _type_mappings() -> dict[str, list[str]]:
    from transformers.models.auto import modeling_auto

    out: dict[str, list[str]] = {}
    for name in sorted(dir(modeling_auto)):
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES"):
            for model_type in getattr(modeling_auto, name):
                out.setdefault(model_type, []).append(name)
    return out


@lru_cache(maxsize=1)
def _config_names() -> dict[str, str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return dict(CONFIG_MAPPING_NAMES)


def _modeling_source(model_type: str) -> str | None:
    """The text of transformers' modeling_<type>.py, read as data (the module is not imported)."""
    import importlib.util

    from transformers.models.auto.configuration_auto import model_type_to_module_name

    module = model_type_to_module_name(model_type)
    try:
        spec = importlib.util.find_spec(f"transformers.models.{module}")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        path = Path(loc) / f"modeling_{module}.py"
        if path.is_file():
            return path.read_text(errors="replace")
    return None


def _build_profile(model_type: str) -> TypeProfile:
    if model_type not in _config_names():
        return TypeProfile(model_type=model_type, known=False)
    profile = TypeProfile(model_type=model_type, known=True, mappings=_type_mappings().get(model_type, []))
    try:
        from agents.catalog import default_config_json

        profile.defaults = json.loads(default_config_json(model_type))
    except Exception:  # noqa: BLE001 - a type whose default cannot be built keeps defaults=None
        profile.defaults = None
    src = _modeling_source(model_type)
    if src is not None:
        pats = vocabulary().source_patterns
        profile.source_position = sorted(v for v, p in pats.position.items() if re.search(p, src))
        profile.source_norm = sorted(v for v, p in pats.norm.items() if re.search(p, src))
        profile.source_has_attention = bool(re.search(r"attn|attention", src, re.IGNORECASE))
    return profile


class ProfileCache:
    """Type profiles in memory, backed by one JSON file per (transformers, vocabulary) version."""

    def __init__(self, directory: Path | None = None) -> None:
        version = f"{_transformers_version()}-v{vocabulary().version}"
        self.path = (directory or current().cache_dir) / f"type_profiles-{version}.json"
        self._profiles: dict[str, TypeProfile] = {}
        self._dirty = False
        try:
            raw = json.loads(self.path.read_text())
            self._profiles = {k: TypeProfile(**v) for k, v in raw.items()}
        except (OSError, ValueError, TypeError):
            self._profiles = {}

    def get(self, model_type: str) -> TypeProfile:
        profile = self._profiles.get(model_type)
        if profile is None:
            profile = self._profiles[model_type] = _build_profile(model_type)
            self._dirty = True
        return profile

    def save(self) -> None:
        if not self._dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({k: asdict(v) for k, v in self._profiles.items()}, default=str))
            os.replace(tmp, self.path)
            self._dirty = False
        except OSError:
            pass  # a read-only cache only costs speed


_PROFILES: ProfileCache | None = None


def profiles() -> ProfileCache:
    """The process-wide profile cache (reset_profiles() after changing HARNESS_CACHE_DIR)."""
    global _PROFILES
    if _PROFILES is None:
        _PROFILES = ProfileCache()
    return _PROFILES


def reset() -> None:
    """Forget the in-memory profiles (the disk cache stays); the next use re-reads the cache dir."""
    global _PROFILES
    _PROFILES = None

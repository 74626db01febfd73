"""A content-keyed cache of the built-in tiers' case lists ($HARNESS_CACHE_DIR/listing/).

Why: listing is pure work on inputs that rarely change between nights (the registry's 41,830
rows, shrinking and signing the full tier's sample, the catalog's representatives), and it ran
before any worker could start: a quarter of a cold quick nightly. The same inputs give the same
list, so a night whose inputs did not change reuses it.

The key is everything the list can depend on: the tier, backend, limit, shard and tier options;
the *content* (sha256, not mtime) of the registry and models inputs and of every file of the
harness's own packages (code, data tables, the bundled registry); the versions of Python, torch,
transformers and the other libraries listing reads; and every HARNESS_*/NEURON_* variable except
the ones that only say where caches and baselines live (values that name a file are keyed by its
content). Only the built-in tiers are cached: a plug-in tier's listing is its own code's business.
A damaged cache file is a recorded miss (`status` "corrupt"), listed again and rewritten; a cache
that cannot be written is a warning, never a failed run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from contracts.records import Case

FORMAT = 1
#: The project's packages: a change to any file in them (code or data) is a new code version.
PACKAGES = ("agents", "backend", "contracts", "harness", "registry", "reports")
#: Libraries whose version can change what a tier lists.
LIBRARIES = ("torch", "transformers", "huggingface_hub", "numpy", "pyarrow", "pandas", "safetensors")
#: Variables that say where things are kept or how a run is shown, never what is listed.
UNKEYED_ENV = frozenset(
    {
        "HARNESS_CACHE_DIR",
        "HARNESS_BASELINE_DIR",
        "HARNESS_LISTING_CACHE",
        "NEURON_CACHE_DIR",
        "NEURON_SHARED_CACHE_DIR",
        "NEURON_CACHE_MAX_ENTRIES",
        "NEURON_CACHE_MAX_BYTES",
    }
)
KEEP_PER_TIER = 8  # older lists of a tier are removed when a new one is written
_ROOT = Path(__file__).resolve().parent.parent


def content_stamp(path: str | os.PathLike | None) -> Any:
    """sha256 of a file's bytes, or of a directory's relative paths and bytes; other values as given."""
    if path is None:
        return None
    p = Path(path)
    if p.is_file():
        return _file_sha(p)
    if p.is_dir():
        h = hashlib.sha256()
        for f in sorted(x for x in p.rglob("*") if x.is_file() and "__pycache__" not in x.parts):
            h.update(str(f.relative_to(p)).encode() + b"\0" + _file_sha(f).encode())
        return h.hexdigest()
    return str(path)


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@functools.cache
def code_version() -> str:
    """sha256 over every file of the project's packages (per process: the code does not change under it)."""
    h = hashlib.sha256()
    for pkg in PACKAGES:
        h.update(f"{pkg}\0{content_stamp(_ROOT / pkg)}\0".encode())
    return h.hexdigest()


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cache_key(opts: Any) -> str:
    """The sha256 key of one tier listing (opts: harness.engine.runner.RunOptions)."""
    env = {
        k: content_stamp(v) if v and os.path.isfile(v) else v
        for k, v in sorted(os.environ.items())
        if k.startswith(("HARNESS_", "NEURON_")) and k not in UNKEYED_ENV
    }
    key = {
        "format": FORMAT,
        "tier": opts.tier,
        "backend": opts.backend,
        "limit": opts.limit,
        "shard": list(opts.shard) if opts.shard else None,
        "options": {k: v for k, v in opts.tier_options.items() if k != "workers"},
        "registry": content_stamp(opts.registry),
        "models": content_stamp(opts.models),
        "code": code_version(),
        "python": sys.version,
        "libraries": {n: _version(n) for n in LIBRARIES},
        "env": env,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def cached_listing(
    opts: Any, cache_dir: Path | None, builtin: bool, list_fn: Callable[[], list[Case]]
) -> tuple[list[Case], dict[str, Any]]:
    """The tier's cases from the cache when its key matches, else from `list_fn` (then saved).

    Returns (cases, record): record["status"] is hit / miss / corrupt / off (plug-in tier or no
    cache directory), with the key and, for a corrupt file, why it was not used."""
    if not builtin or cache_dir is None:
        return list_fn(), {"status": "off"}
    key = cache_key(opts)
    path = cache_dir / "listing" / f"{opts.tier}-{key[:32]}.json"
    record: dict[str, Any] = {"status": "miss", "key": key}
    if path.exists():
        try:
            data = json.loads(path.read_text())
            if data.get("format") != FORMAT or data.get("key") != key:
                raise ValueError("key or format does not match")
            return [Case(**c) for c in data["cases"]], {"status": "hit", "key": key}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            record = {"status": "corrupt", "key": key, "error": f"{type(exc).__name__}: {exc}"[:300]}
            print(
                f"warning: listing cache {path} is damaged ({record['error']}); listing again",
                file=sys.stderr,
            )
    text = json.dumps({"format": FORMAT, "key": key, "cases": [asdict(c) for c in list_fn()]}, default=str)
    try:
        _save(path, text)
    except OSError as exc:
        print(f"warning: listing cache {path} cannot be written ({exc})", file=sys.stderr)
    # what a hit would hand out (JSON types), so a cached night runs exactly what a fresh one runs
    return [Case(**c) for c in json.loads(text)["cases"]], record


def _save(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    tier = path.name.rsplit("-", 1)[0]
    older = sorted(
        (p for p in path.parent.glob(f"{tier}-*.json") if p != path and p.name.rsplit("-", 1)[0] == tier),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for stale in older[KEEP_PER_TIER - 1 :]:
        stale.unlink(missing_ok=True)

"""Entry-point groups: how backends (`harness.backends`) and tiers (`harness.tiers`) are found.

A package plugs in by naming an object in one of these groups of its `pyproject.toml`; the
harness finds it without being changed (the bundled device and the built-in tiers do the same).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, distributions


def entry_points(group: str) -> dict[str, EntryPoint]:
    """The group's entry points over every distribution on sys.path, first one per name. Not
    `importlib.metadata.entry_points()`, which keeps one distribution per name: a stale
    `*.egg-info` in the working directory (left by an older editable install) would hide the
    installed metadata."""
    found: dict[str, EntryPoint] = {}
    for dist in distributions():
        for ep in dist.entry_points:
            if ep.group == group:
                found.setdefault(ep.name, ep)
    return found

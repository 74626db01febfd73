"""Rule files: YAML/TOML data loaded once into typed models that reject what they do not know.

Why: rules are data (shrink rules, input recipes, tolerances, blame rules, expectations...), and a
typo in a key must be an error naming the file, the entry and the key, not a rule that silently
never applies. Every rule file of the harness is read through `load_rules` into a `Rules` model:

    class Tolerances(Rules):
        classes: dict[str, Tolerance]

    TOLERANCES = load_rules(Tolerances, resource("harness", "data/numerics.yaml"))

A `Rules` model forbids unknown keys and is frozen; nested models derive from it too.
"""

from __future__ import annotations

import functools
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from contracts.errors import RuleFileError


def _regex(pattern: str) -> str:
    """A broken expression is an error of the file, not of the first row it meets."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {pattern!r}: {exc}") from None
    return pattern


#: A regular expression in a rule file, checked when the file is loaded.
Regex = Annotated[str, AfterValidator(_regex)]


class Rules(BaseModel):
    """Base of every typed rule model: unknown keys are errors, loaded rules do not change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


M = TypeVar("M", bound=BaseModel)


def resource(package: str, name: str) -> Path:
    """A data file shipped inside a package (works from a checkout and from an installed wheel)."""
    return Path(str(resources.files(package).joinpath(name)))


def _where(loc: tuple[Any, ...]) -> tuple[str, str]:
    """pydantic's error location -> (entry path, key): ('classes', 'float32', 'atoll') ->
    ('classes.float32', 'atoll')."""
    parts = [str(p) for p in loc]
    if not parts:
        return "(top level)", ""
    return (".".join(parts[:-1]) or "(top level)"), parts[-1]


def problems_of(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        entry, key = _where(tuple(err.get("loc", ())))
        if err.get("type") == "extra_forbidden":
            out.append(f"entry {entry}: unknown key {key!r}")
        elif err.get("type") == "missing":
            out.append(f"entry {entry}: missing key {key!r}")
        else:
            out.append(f"entry {entry}: key {key!r}: {err.get('msg')}")
    return out


def read_data(path: str | Path) -> Any:
    """A YAML or TOML file's content (by suffix); RuleFileError when it cannot be read or parsed."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise RuleFileError(str(path), [f"cannot be read: {exc.strerror or exc}"]) from exc
    try:
        return tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise RuleFileError(str(path), [f"not valid {path.suffix.lstrip('.').upper()}: {exc}"]) from exc


def validate(model: type[M], data: Any, path: str | Path) -> M:
    """`data` (read from `path`) as `model`; RuleFileError naming each bad entry and key."""
    try:
        return model.model_validate({} if data is None else data)
    except ValidationError as exc:
        raise RuleFileError(str(path), problems_of(exc)) from exc


def load_rules(model: type[M], path: str | Path) -> M:
    """Read and validate a rule file (uncached: use `cached_rules` for the bundled files)."""
    return validate(model, read_data(path), path)


@functools.cache
def cached_rules(model: type[M], path: str) -> M:
    """`load_rules`, once per process for each (model, file): bundled rules are read once."""
    return load_rules(model, path)

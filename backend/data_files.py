"""The device's data files (YAML/JSON) into typed models that reject what they do not know.

    class Precision(DataModel):
        matmul_class: dict[str, list[str]]

    table = load_data(Precision, bundled("backend", "precision.yaml"), DataFileError)

Every data file of the device (the lowering table, the precision table, the host kernel gaps,
fault files, the compiler's lowering equivalents) is read through `read_data` and `validate` into
a `DataModel`: frozen, unknown keys forbidden, types strict (a quoted number is not a number; a
sequence is a `list`, as YAML and JSON give it). A
problem raises the file's own error class (`LoweringTableError`, `FaultFileError`, else
`DataFileError`) naming the file, the entry and the key:

    malformed fault file faults.yaml: entry 'softmax-0.2pct': unknown key 'colour'

Why a loader of its own and not the harness's rule-file loader (`contracts.rulefiles`): the
device is a stand-in for a vendor's backend package, which knows nothing of the harness that
tests it, so it imports nothing above itself; the two loaders follow the same rules.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from backend.errors import DataFileError

M = TypeVar("M", bound=BaseModel)


class DataModel(BaseModel):
    """Base of every typed model of a device data file: unknown keys are errors, types are
    strict, and a loaded model does not change."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def bundled(package: str, name: str) -> tuple[str, str]:
    """(text, source) of a data file shipped inside a package; source reads ``backend/x.yaml``."""
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    return text, f"{package.replace('.', '/')}/{name}"


def read_data(
    path: str | os.PathLike | tuple[str, str], error: type[DataFileError] = DataFileError
) -> tuple[Any, str]:
    """(parsed content, source name) of a YAML or JSON file, or of `bundled()`'s (text, source).

    An unreadable file or invalid YAML raises `error` (the entry is ``<file>`` or the line)."""
    if isinstance(path, tuple):
        text, source = path
    else:
        source = str(Path(path))
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise error(source, "<file>", f"cannot read: {exc.strerror or exc}") from exc
    try:
        return yaml.safe_load(text), source
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<file>"
        raise error(source, where, f"not valid YAML/JSON: {exc}") from exc


def _problem(err: dict[str, Any], skip: int) -> tuple[str, str]:
    """pydantic's error -> (entry path, problem naming the key); `skip` leading location parts
    are left out of the key path (they are the entry)."""
    loc = [str(p) for p in err.get("loc", ())]
    entry, rest = loc[:skip], loc[skip:]
    key = ".".join(rest)
    kind = err.get("type")
    msg = str(err.get("msg", "")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return ".".join(entry), f"unknown key {key!r}"
    if kind == "missing":
        return ".".join(entry), f"missing key {key!r}"
    if not key:
        return ".".join(entry), f"{msg}, got {err.get('input')!r}"
    return ".".join(entry), f"key {key!r}: {msg}, got {err.get('input')!r}"


def validate(
    model: type[M],
    data: Any,
    source: str,
    error: type[DataFileError] = DataFileError,
    entry: str | None = None,
) -> M:
    """`data` as `model`, or `error` naming the file, the entry and the key.

    `entry` names the entry `data` is (a fault's name); without it the entry is the location of
    the bad key's parent in the file (``ops.aten.mm``), ``<top level>`` at the top. Every problem
    is in the message, unknown keys first (a misspelt key also makes the right one missing)."""
    try:
        return model.model_validate({} if data is None else data)
    except ValidationError as exc:
        found = []
        for err in sorted(exc.errors(), key=lambda e: e.get("type") != "extra_forbidden"):
            depth = 0 if entry is not None else max(len(err.get("loc", ())) - 1, 0)
            where, problem = _problem(err, depth)
            found.append((entry if entry is not None else (where or "<top level>"), problem))
        first = found[0][0]
        text = "; ".join(p if e == first else f"entry {e!r}: {p}" for e, p in found)
        raise error(source, first, text) from None


def load_data(
    model: type[M], path: str | os.PathLike | tuple[str, str], error: type[DataFileError] = DataFileError
) -> M:
    """Read and validate a data file (a path, or `bundled()`'s (text, source))."""
    data, source = read_data(path, error)
    return validate(model, data, source, error)

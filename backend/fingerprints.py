"""Per-op fingerprints of the device: what decides how an op runs, hashed, so a run can say which
ops' lowering or kernels changed since another run.

Why: the nightly runs first the cases most likely to fail, among them the cases whose ops changed
since the baseline. "Changed" is decided here, by the device, and nowhere else:

    from backend.fingerprints import op_fingerprints
    fp = op_fingerprints()      # {"version": 1, "shared": "9f...", "ops": {"aten.addmm": "1c...", ...}}

An op's fingerprint hashes everything this device keys on that op: its lowering-table entry
(native dtypes, data-dependent or not-lowered note), its precision rule (the arguments rounded to
bf16 and the precision mode), its host-kernel dtype bridge, its explicit device kernel (source
text) and any planted fault on it (backend.faults: a planted fault *is* a kernel change). Keys are
named as the sources name them: an overload (``aten.mm.default``) or a packet (``aten.mm``, every
overload). ``shared`` hashes the code every op goes through (the generic kernel path, storage,
fallback, compiler): when it changes, every op may behave differently and no op can be singled
out. Ops absent from ``ops`` have the implicit "nothing special" fingerprint in both runs.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

VERSION = 1
#: modules whose code is per op (hashed into the op's fingerprint) or not on the execution path
_NOT_SHARED = {"fingerprints.py", "adapter.py", "explicit.py"}


def _digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _source(fn: Any) -> str:
    try:
        return inspect.getsource(inspect.unwrap(fn))
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))


def _shared_digest() -> str:
    """The generic path's code: every backend module and native source but the per-op ones and the
    planted-fault machinery (it acts only through the faults listed per op)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha1()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if (
            path.suffix not in (".py", ".cpp", ".c", ".h")
            or path.name in _NOT_SHARED
            or rel.startswith("faults/")
            or "__pycache__" in rel
        ):
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def op_components() -> dict[str, dict[str, Any]]:
    """Op key -> what the device keys on that op (the un-hashed form of the fingerprints)."""
    from backend import explicit, faults, lowering
    from backend.kernels import _HOST_GAPS
    from backend.precision import matmul_class, precision

    parts: dict[str, dict[str, Any]] = defaultdict(dict)
    table = lowering.current_table().to_dict()
    for name, value in table["ops"].items():
        parts[name]["lowering"] = value
    for section in ("data_dependent_shape", "not_lowered"):
        for name, note in table[section].items():
            parts[name][section] = note
    mode = precision()
    for packet, args in matmul_class().items():
        parts[packet]["bf16_args"] = list(args) if mode == "bf16" else []
    for packet, dtype in _HOST_GAPS.items():
        parts[packet]["host_compute_dtype"] = str(dtype)
    for schema, fn in explicit.KERNELS.items():
        name = f"aten.{schema}" if "." in schema else f"aten.{schema}.default"
        parts[name]["kernel"] = _source(fn)
    for fault in faults.active():
        for name in {fault.op, *fault.overloads}:
            parts[name].setdefault("faults", []).append(fault.to_dict())
    return dict(parts)


def op_fingerprints() -> dict[str, Any]:
    """{"version", "shared", "ops": {op key: 16-hex digest}} (JSON-able; see the module docstring)."""
    return {
        "version": VERSION,
        "shared": _shared_digest(),
        "ops": {name: _digest(parts) for name, parts in sorted(op_components().items())},
    }

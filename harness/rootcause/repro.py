"""A root cause reduced to a registry case and a standalone test, verified, never assumed.

    repro = reduce(finding, run, deadline)      # in the worker, after localization
    write_repros(run_dir)                       # RUNDIR/repros/test_<op>_<hash>.py
    entries(run_dir)                            # the verified repros as registry entries

Reduce: the failing call becomes a registry case (registry.schema.Entry): its op, the signature
of its device inputs (shapes, dtypes, strides, offsets; `run: compiled` when it failed inside a
compiled graph), and the concrete values where values matter: every integer and boolean input
(indices, masks, class ids, positions), every floating input with non-finite values (-inf
masks). Float inputs are otherwise rebuilt from the case's seed, as every unit case's are; when
the case replayed so does not fail on the device, the floating inputs are kept too (up to
`MAX_CONCRETE` elements).

Verify: the case is written as a standalone pytest file (registry/export_tests.py: torch and the
device's module only) and run, outside the worker, in a process of torch and the device's module
alone (harness.rootcause.verifier), on the run's backend — it must fail the way the root cause
does — and on the reference — it must pass; each run is bounded (HARNESS_REPRO_SECONDS, and what
is left of the row's HARNESS_ROOT_CAUSE_SECONDS). `Repro.verified` says whether both held,
`Repro.why` why not.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from contracts.backends import Backend
from contracts.rootcause import Repro, RootCause
from contracts.settings import current
from harness.rootcause import calls
from harness.rootcause.shadow import Finding
from harness.stages.run import StageRun
from registry.encoding import encode_value, encode_values, signature
from registry.export_tests import _case_data, device_facts, file_name, render
from registry.schema import Entry, Provenance

#: floating elements a repro may keep as concrete values (beyond: rebuilt from the seed)
MAX_CONCRETE = 65_536
#: where a run directory keeps its repro files
REPRO_DIR = "repros"
#: a verification left with less than this is not started (it could not finish)
MIN_VERIFY_SECONDS = 5.0

_verified: dict[str, tuple[bool | None, str]] = {}  # case id -> verdict, once per worker process


# ------------------------------------------------------------------------------ reduce


def case_of(f: Finding, floats: bool = False) -> dict[str, Any]:
    """The registry case of a found call: op, signature, constraints (concrete values), outputs."""
    a_enc, k_enc = f.encoded
    sig = signature(a_enc, k_enc, "compiled" if f.phase == "compiled" else "")
    constraints: dict[str, dict[str, Any]] = {}
    for path, t in _tensor_paths(f.args, f.kwargs):
        keep = not (t.is_floating_point() or t.is_complex()) or not bool(torch.isfinite(t).all())
        if (keep or floats) and not t.is_complex() and t.numel() <= MAX_CONCRETE:
            constraints[path] = {"kind": "values", "values": encode_values(t), "source": "repro"}
    ref = calls.recompute(f.func, f.args, f.kwargs, None)
    outputs = [encode_value(t) for _, t in (ref.eager or [])]
    return {"op": f.op, "signature": sig, "constraints": constraints, "outputs": outputs}


def _tensor_paths(args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    """(registry argument path, tensor): `a.0`, `a.1.2` (a list's element), `k.weight`."""
    out = []
    for base, value in [
        *((f"a.{i}", a) for i, a in enumerate(args)),
        *((f"k.{k}", v) for k, v in kwargs.items()),
    ]:
        if isinstance(value, torch.Tensor):
            out.append((base, value))
        elif isinstance(value, (list, tuple)):
            out += [(f"{base}.{j}", t) for j, t in enumerate(value) if isinstance(t, torch.Tensor)]
    return out


def _entry(case: dict[str, Any]) -> Entry:
    return Entry(case["op"], case["signature"], dict(case["constraints"]), list(case["outputs"]))


def _replays_failing(case: dict[str, Any], adapter: Backend) -> tuple[bool, str]:
    """Does the case, replayed in this process as the unit tier replays it, fail on the device?"""
    from registry.replay import CaseSpec, replay

    entry = _entry(case)
    result = replay(CaseSpec.from_entry(entry), adapter, adapter.precision_mode())
    return result.status.value in ("fail", "error"), result.reason or result.status.value


def reduce(f: Finding, run: StageRun, deadline: float) -> Repro:
    """The found call as a case and a standalone test, verified (see the module docstring)."""
    case = case_of(f)
    fails, how = _replays_failing(case, run.adapter)
    if not fails:
        fuller = case_of(f, floats=True)
        if fuller["constraints"] != case["constraints"]:
            fails_full, how_full = _replays_failing(fuller, run.adapter)
            if fails_full:
                case, fails, how = fuller, fails_full, how_full
    key = _entry(case).case_id
    path = f"{REPRO_DIR}/{file_name(case['op'], key)}"
    if not fails:
        return Repro(path, key, False, f"the call replayed alone passes on the device ({how})", case=case)
    verified, why = verify(case, run.adapter.name, deadline, f.kind, f.error_class)
    return Repro(path, key, verified, why, case=case)


# ------------------------------------------------------------------------------ verify


def standalone(case: dict[str, Any], backend: str) -> tuple[str, str] | None:
    """(file name, text) of the case's standalone test, None when the case cannot be exported."""
    entry = _entry(case)
    facts = device_facts(backend, None)
    data = _case_data(entry, facts["mode"], facts["rounded"])
    if data is None:
        return None
    name = file_name(entry.op, entry.case_id)
    return name, render(entry.op, {entry.case_id: data}, facts, name)


def verify(
    case: dict[str, Any], backend: str, deadline: float, kind: str = "mismatch", error_class: str = ""
) -> tuple[bool | None, str]:
    """Run the standalone test on `backend` (it must fail the way the root cause does: an assertion
    for a mismatch, the device's exception for an error) and on the cpu (it must pass), in the
    worker's verifier process (harness.rootcause.verifier), each run bounded; (verified, why)."""
    from harness.rootcause.verifier import verifier

    key = _entry(case).case_id
    if key in _verified:
        return _verified[key]
    left = deadline - time.monotonic()
    if left < MIN_VERIFY_SECONDS:
        return None, "not verified: the row's time limit (HARNESS_ROOT_CAUSE_SECONDS) was used up"
    made = standalone(case, backend)
    if made is None:
        return False, "the case cannot be written as a standalone test"
    name, text = made
    device = device_facts(backend, None)["device"]
    seconds = min(current().repro_seconds, left)
    with tempfile.TemporaryDirectory(prefix="repro-") as tmp:
        path = Path(tmp) / name
        path.write_text(text, encoding="utf-8")
        on_device = verifier().run(str(path), device, seconds)
        on_cpu = verifier().run(str(path), "cpu", seconds) if on_device is not None else None
    if on_device is None or on_cpu is None:
        verdict: tuple[bool | None, str] = None, f"not verified: a run of the repro took over {seconds:.0f} s"
    elif on_device["status"] == "pass":
        verdict = False, f"the repro passes on {device}"
    elif not _same_failure(kind, error_class, on_device["raised"]):
        verdict = False, f"the repro fails on {device} otherwise than the root cause ({on_device['raised']})"
    elif on_cpu["status"] != "pass":
        verdict = False, f"the repro fails on the reference too ({on_cpu['raised']})"
    else:
        verdict = True, f"fails on {device} ({on_device['raised'][:160]}), passes on cpu"
    _verified[key] = verdict
    return verdict


def _same_failure(kind: str, error_class: str, raised: str) -> bool:
    """Does the test's failure (`Class: message`) show the root cause: a failed comparison for a
    mismatch, the device's exception for an error?"""
    cls = raised.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    if kind == "mismatch":
        return cls == "AssertionError"
    return cls != "AssertionError" and (not error_class or cls == error_class or error_class in raised)


# ------------------------------------------------------------------------------ a run's repros


def run_rows(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a run that carry a root cause (results.parquet of the run or its tiers)."""
    from reports.tables import read_results

    frame = read_results(run_dir)
    if "root_cause" not in frame:
        return []
    rows = []
    for row in frame[frame["root_cause"].notna()].to_dict("records"):
        row["root_cause"] = RootCause.from_dict(json.loads(row["root_cause"]))
        rows.append(row)
    return rows


def run_backend(run_dir: str | os.PathLike) -> str:
    from reports.compare import run_backend as backend_of

    return backend_of(run_dir) or current().backend


def write_repros(run_dir: str | os.PathLike, rows: list[dict[str, Any]] | None = None) -> list[str]:
    """Write the standalone file of every repro a run's rows carry into RUNDIR/repros/."""
    rows = run_rows(run_dir) if rows is None else rows
    backend, written = run_backend(run_dir), []
    for row in rows:
        rc: RootCause = row["root_cause"]
        if not rc.found or rc.repro is None or not rc.repro.case:
            continue
        target = Path(run_dir) / rc.repro.path
        if target.exists():
            written.append(str(target))
            continue
        made = standalone(rc.repro.case, backend)
        if made is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(made[1], encoding="utf-8")
        written.append(str(target))
    return written


def entries(
    run_dir: str | os.PathLike, rows: list[dict[str, Any]] | None = None, backend: str | None = None
) -> tuple[list[Entry], list[dict]]:
    """The verified repros of a run as registry entries (provenance `repro`: the model, the run,
    the case), and the root causes left out with why."""
    rows = run_rows(run_dir) if rows is None else rows
    backend = backend or run_backend(run_dir)
    out, left = [], []
    for row in rows:
        rc: RootCause = row["root_cause"]
        if not rc.found:
            continue
        where = {"case": row["case_id"], "stage": row["stage"], "op": rc.op}
        if rc.repro is None or not rc.repro.case:
            left.append({**where, "why": "no repro was made"})
            continue
        if rc.repro.verified is not True:
            left.append({**where, "why": rc.repro.why or "not verified"})
            continue
        case = rc.repro.case
        entry = _entry(case)
        model = str(row.get("model_id") or "")
        entry = replace(
            entry,
            provenance=[
                Provenance(model, str(row["tier"]), rc.phase, "repro", float(row.get("weight") or 0.0), 1)
            ],
            repro=[
                {
                    "run": str(row.get("run_id") or ""),
                    "case": str(row["case_id"]),
                    "stage": str(row["stage"]),
                    "tier": str(row["tier"]),
                    "model": model,
                    "backend": backend,
                    "phase": rc.phase,
                    "kind": rc.kind,
                    "route": rc.route,
                    "why": rc.repro.why,
                }
            ],
        )
        out.append(entry)
    return out, left

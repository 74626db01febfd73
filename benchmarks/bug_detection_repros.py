"""benchmarks/bug_detection.py's model-only figure: faults no quick unit case can catch, caught by
the unit tier alone once a faulted night's verified repros are added to its registry.

1. `model_only_faults`: the calls the benchmark's models make (`harness registry regenerate` on
   the device) against the quick unit tier's cases (the first LIMIT of the registry, as `harness
   nightly --quick` runs it): for an op both call, a size of its first tensor argument that the
   models give it and no quick unit case does. A fault on that op, for that size only
   (`when: [{arg, dim, eq}]`), is one no quick unit case meets.
2. the faulted model tiers run as for any fault (bug_detection.run_fault);
3. `model_only_figure`: per fault, the quick unit tier on the registry as it is (it must miss the
   fault: measured, not assumed), then `harness registry add-repros` of the faulted night into a
   copy of that registry, and the quick unit tier again on it: a failing repro case is the catch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
KINDS = ({"kind": "nan"}, {"kind": "perturb", "rel": 0.05}, {"kind": "raise"})
#: the phases of a recording the model tiers run (a training step: no optimizer)
MODEL_PHASES = ("forward", "backward")


def write_representatives(base: Path, text: str) -> Path:
    """`type:Architecture,...` -> a selection directory the representative tier reads (`--models`)."""
    from agents.select import REPRESENTATIVES_FILE

    rows = []
    for item in [x.strip() for x in text.split(",") if x.strip()]:
        model_type, _, arch = item.partition(":")
        rows.append(
            {
                "id": f"catalog/{model_type}/{arch}" if arch else f"catalog/{model_type}",
                "source": "catalog",
                "model_type": model_type,
                "architecture": arch,
                "downloads": 0,
                "config": None,
            }
        )
    out = base / "representatives"
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(out / REPRESENTATIVES_FILE)
    return out


def _specs_file(base: Path, models: Path | None) -> Path:
    from agents import select

    specs = select.load_representatives(models) if models else select.default_representatives()
    path = base / "model_only" / "models.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(s.__dict__, default=str) + "\n" for s in specs))
    return path


def _first_tensor(sig: str) -> tuple[int, dict] | None:
    from registry.encoding import parse_signature

    args, _ = parse_signature(sig)
    for i, a in enumerate(args):
        if isinstance(a, dict) and "T" in a:
            return i, a
    return None


def _computes(op: str, sig: str, constraints: dict) -> bool:
    """Do the call's outputs depend on its inputs' values (not a factory of its shape alone)? Run it
    on the CPU on two draws of its inputs."""
    import torch

    from registry.encoding import parse_signature
    from registry.inputs import build_args, materialize
    from registry.replay import resolve_op

    try:
        func, (a_enc, k_enc) = resolve_op(op), parse_signature(sig)
        outs = []
        for seed in (1, 2):
            built = build_args(a_enc, k_enc, constraints, torch.Generator().manual_seed(seed))
            cpu = torch.device("cpu")
            out = func(*materialize(built[0], cpu), **materialize(built[1], cpu))
            outs.append(
                [t for t in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(t, torch.Tensor)]
            )
    except Exception:  # noqa: BLE001 - a call that cannot be rebuilt here is not a candidate
        return False
    return any(not torch.equal(a, b) for a, b in zip(*outs))


def model_only_faults(
    base: Path, n: int, models: Path | None, unit_limit: int | None, env: dict[str, str]
) -> list[dict[str, Any]]:
    """Up to `n` faults, one op each, on a size of the op's first tensor argument that the models
    give it and no quick unit case does (see the module docstring)."""
    from registry.constraints import is_metadata_only
    from registry.replay import resolve_op
    from registry.store import Registry
    from registry.unit_tier import cases

    out = base / "model_only" / "model_ops.parquet"
    if not out.exists():
        cmd = [
            sys.executable,
            "-m",
            "harness",
            "registry",
            "regenerate",
            "--models",
            str(_specs_file(base, models)),
        ]
        cmd += ["--out", str(out), "--backend", "neuron", "--workers", "1", "--no-progress", "--json"]
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(f"bug_detection: recording the models' calls failed: {proc.stderr[-500:]}")
    quick = cases()[: unit_limit or None]
    sizes: dict[tuple[str, int], set[int]] = {}  # (op, dim) -> sizes the quick unit cases give (any rank)
    for c in quick:
        first = _first_tensor(c.payload["signature"])
        if first is not None:
            shape = first[1]["T"]
            for d, v in enumerate(shape):
                sizes.setdefault((c.payload["op"], d), set()).add(int(v))
    faults, seen = [], set()
    entries = sorted(Registry.load(out), key=lambda e: (-e.count, e.op, e.case_id))
    for e in entries:
        if not any(p.phase in MODEL_PHASES for p in e.provenance):
            continue  # recorded in a phase the model tiers do not run (an optimizer step)
        first = _first_tensor(e.signature)
        if (
            e.op in seen
            or first is None
            or is_metadata_only(e.op)
            or first[1]["dt"] not in ("f32", "bf16", "f16")
        ):
            continue
        try:
            func = resolve_op(e.op)
        except ValueError:
            continue
        if any(r.alias_info is not None for r in func._schema.returns) or not func._schema.returns:
            continue  # views and in-place calls: nothing of their own to perturb
        if not _computes(e.op, e.signature, e.constraints):
            continue  # a factory of its input's shape (zeros_like): its values are not the input's
        position, enc = first
        shape = enc["T"]
        for d, v in enumerate(shape):
            if int(v) > 1 and int(v) not in sizes.get((e.op, d), set()):
                kind = KINDS[len(faults) % len(KINDS)]
                arg = func._schema.arguments[position].name
                faults.append(
                    {
                        "name": f"model-only-{e.op.split('.')[1]}-{arg}{d}-{v}",
                        "op": e.op,
                        **kind,
                        "when": [{"arg": arg, "dim": d, "eq": int(v)}],
                        "category": "model-only",
                        "description": f"{e.op} wrong only where {arg}.shape[{d}] == {v}: "
                        "a size the models give it and no quick unit case does",
                    }
                )
                seen.add(e.op)
                break
        if len(faults) >= n:
            break
    path = base / "model_only" / "faults.yaml"
    import yaml

    path.write_text(yaml.safe_dump({"version": 1, "faults": faults}, sort_keys=False))
    return faults


def _unit_run(out: Path, registry: Path, limit: int | None, env: dict[str, str]) -> pd.DataFrame:
    if not (out / "results.parquet").exists():
        cmd = [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--tier",
            "unit",
            "--registry",
            str(registry),
            "--out",
            str(out),
        ]
        cmd += ["--backend", "neuron", "--workers", "1", "--no-progress", "--json"]
        if limit:
            cmd += ["--limit", str(limit)]
        subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    path = out / "results.parquet"
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def model_only_figure(
    base: Path,
    faults: list[dict[str, Any]],
    fault_runs: Path,
    model_tiers: list[str],
    unit_limit: int | None,
    env_of,
    detected: set[str] | None = None,
) -> dict[str, Any]:
    """Per model-only fault: did the faulted night detect it (`detected`: the names) and keep a
    verified repro, did the quick unit tier miss it before, does it catch it after `add-repros`?
    The share caught after is over the faults the night detected and the quick unit tier missed
    before (a fault no model meets gives no repro to add; one a quick unit case meets anyway, an
    op the device reaches through another overload, is no model-only fault)."""
    from benchmarks.bug_detection_analysis import detections
    from registry.unit_tier import default_registry_path

    bundled = default_registry_path()
    clean = base / "model_only" / "unit-clean"
    _unit_run(clean, bundled, unit_limit, env_of(None))
    records = []
    for f in faults:
        work = base / "model_only" / f["name"]
        work.mkdir(parents=True, exist_ok=True)
        fault_file = fault_runs / f["name"] / "fault.yaml"
        env = env_of(fault_file)
        _unit_run(work / "unit-before", bundled, unit_limit, env)
        failing_before = [d["case_id"] for d in detections(clean, work / "unit-before", set())]
        registry = work / "ops.parquet"
        shutil.copy(bundled, registry)
        added: list[str] = []
        for tier in model_tiers:
            run_dir = fault_runs / f["name"] / tier
            if not (run_dir / "results.parquet").exists():
                continue
            cmd = [
                sys.executable,
                "-m",
                "harness",
                "registry",
                "add-repros",
                str(run_dir),
                "--registry",
                str(registry),
            ]
            proc = subprocess.run([*cmd, "--json"], env=env, cwd=ROOT, capture_output=True, text=True)
            try:  # a repro of a call the registry already has is that entry, now first in the unit tier
                merged = json.loads(proc.stdout.strip().splitlines()[-1])
                added += merged["added"] + merged["already_there"]
            except (ValueError, IndexError, KeyError):
                pass
        after = _unit_run(work / "unit-after", registry, unit_limit, env) if added else pd.DataFrame()
        caught = (
            sorted(after[after["case_id"].isin(added) & after["status"].isin(["fail", "error"])]["case_id"])
            if len(after)
            else []
        )
        records.append(
            {
                "name": f["name"],
                "op": f["op"],
                "kind": f["kind"],
                "detected_by_model_tiers": None if detected is None else f["name"] in detected,
                "when": f["when"],
                "quick_unit_missed_before": not failing_before,
                "failing_before": failing_before[:5],
                "repros_added": added,
                "caught_after": caught,
                "unit_seconds_after": round(float(after["seconds"].sum()), 1) if len(after) else None,
            }
        )
    n = len(records)
    caught = [r for r in records if r["caught_after"] and r["quick_unit_missed_before"]]
    # the figure's faults: the night detected them and the quick unit tier, measured, missed them
    counted = [
        r for r in records if r["detected_by_model_tiers"] is not False and r["quick_unit_missed_before"]
    ]
    return {
        "faults": records,
        "n": n,
        "detected_by_model_tiers": sum(1 for r in records if r["detected_by_model_tiers"] is not False),
        "missed_before": sum(1 for r in records if r["quick_unit_missed_before"]),
        "counted": len(counted),
        "with_repros": sum(1 for r in records if r["repros_added"]),
        "caught_after": len(caught),
        "caught_after_all": sum(1 for r in records if r["caught_after"]),
        "rate": round(len(caught) / len(counted), 4) if counted else None,
    }

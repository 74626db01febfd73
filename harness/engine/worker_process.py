"""The worker process: what runs inside each isolated worker (`python -m harness.engine.worker_process FD`).

Why apart from harness.engine.workers: that module is the parent's side (start, limits, deaths,
re-runs); this one is the child's: it sets up the tier once, then executes the cases the parent
sends over the socketpair and answers with their outcomes. Every exception a case raises becomes
the case's row here; a death the parent sees. A case the parent asks to be journaled runs under
the call journal (harness.engine.callmode).
"""

from __future__ import annotations

import faulthandler
import os
import resource
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from contracts import timing
from contracts.backends import identity, resolved_backend
from contracts.errors import status_of
from contracts.records import Case, CaseOutcome
from contracts.tiers import Tier, failure_outcome, from_result, load_tier, tier_hook


def short(text: str, limit: int = 500) -> str:
    """A message on one line, at most `limit` characters (rows and the parent's reasons)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _watch_parent(ppid: int) -> None:
    """Exit when the runner is gone (e.g. kill -9): no orphan keeps burning a core."""
    while True:
        time.sleep(1.0)
        if os.getppid() != ppid:
            os._exit(70)


def _backend_info(backend: str) -> dict[str, Any]:
    """Facts about the backend in this worker for runs.parquet (only if the tier resolved its
    adapter): its lowering-table version and its identity (contracts.backends.identity)."""
    adapter = resolved_backend(backend)
    if adapter is None:
        return {}
    try:
        info = {"backend_identity": identity(adapter)}
        table = adapter.describe().get("lowering_table") or {}
        return info | ({"lowering_table_version": table["version"]} if table.get("version") else {})
    except Exception:  # noqa: BLE001 - a label must never fail a case
        return {}


def _fingerprints(backend: str) -> dict[str, Any]:
    """The backend's op fingerprints as this set-up worker sees them; {} if it has none or they
    fail (the run then orders without them: ordering never fails a run)."""
    try:
        from harness.engine.ordering import fingerprints_of

        value = fingerprints_of(backend)
    except Exception:  # noqa: BLE001
        return {}
    finally:
        timing.take()
    return value if isinstance(value, dict) and isinstance(value.get("ops"), dict) else {}


def _execute_one(tier: Tier, case: Case, backend: str) -> CaseOutcome:
    out = _execute_untimed(tier, case, backend)
    phases = timing.take()
    if phases:
        out.worker["phases"] = phases
    return out


def _execute_journaled(
    tier: Tier, case: Case, backend: str, journal: str, begin: Callable[[], None]
) -> CaseOutcome:
    """The case under the call journal (the file is truncated before `begin` tells the parent the
    case runs, so the parent's stall watch never reads an earlier case's calls). A journal that
    cannot be opened leaves the case unjournaled: its death then names no call."""
    try:
        from harness.engine.callmode import journaled

        context = journaled(journal, _device_type(backend))
        mode = context.__enter__()
    except Exception as exc:  # noqa: BLE001 - the case still runs
        begin()
        out = _execute_one(tier, case, backend)
        out.worker["call_journal"] = f"not written: {type(exc).__name__}: {exc}"
        return out
    begin()
    try:
        out = _execute_one(tier, case, backend)
    finally:
        context.__exit__(None, None, None)
    if mode.broken:
        out.worker["call_journal"] = f"stopped writing: {mode.broken}"
    return out


def _device_type(backend: str) -> str | None:
    """The device type of the backend under test (its calls are the ones a phase's index counts)."""
    try:
        from contracts.backends import get_backend

        return str(get_backend(backend).device_type)
    except Exception:  # noqa: BLE001 - unknown: every call is counted
        return None


def _execute_untimed(tier: Tier, case: Case, backend: str) -> CaseOutcome:
    t0 = time.monotonic()
    try:
        result = tier.execute(case, backend)
        out = from_result(case, result, tier.stages, seconds=time.monotonic() - t0)
        out.seconds = out.seconds or time.monotonic() - t0
        return out
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - every exception (SystemExit too) becomes the case's row
        status = status_of(exc)
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        return failure_outcome(
            case,
            tier.stages,
            status,
            f"exception:{type(exc).__name__}",
            type(exc).__name__,
            short(f"{exc}{where}"),
            time.monotonic() - t0,
        )


def _child_main(fd: int) -> None:
    conn = Connection(fd)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    faulthandler.enable()
    _, init = conn.recv()
    for p in reversed(init["sys_path"]):
        if p not in sys.path:
            sys.path.insert(0, p)
    if init.get("address_space_bytes"):
        n = int(init["address_space_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    backend = init["backend"]
    try:
        tier = load_tier(init["tier"])
        setup = tier_hook(tier, "setup")
        if setup is not None:
            setup(backend)
        stages = list(tier.stages)
        timing.take()  # what setup did is start-up, not the first case's
    except BaseException as exc:  # noqa: BLE001
        conn.send(("fatal", short(f"{type(exc).__name__}: {exc}")))
        return
    conn.send(("ready", os.getpid(), stages, _fingerprints(backend) if init.get("fingerprints") else None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "stop":
            return
        cases = [Case(**c) for c in msg[1]]
        execute_many = tier_hook(tier, "execute_many") if msg[2] else None
        if execute_many is not None:
            conn.send(("begin", [c.case_id for c in cases]))
            t0 = time.monotonic()
            timing.take()
            try:
                raw = list(execute_many(cases, backend))
                if len(raw) != len(cases):
                    raise ValueError(f"execute_many returned {len(raw)} results for {len(cases)} cases")
                each = (time.monotonic() - t0) / len(cases)
                outs = [from_result(c, r, tier.stages, seconds=each) for c, r in zip(cases, raw)]
                phases = {
                    k: round(v / len(cases), 6) for k, v in timing.take().items()
                }  # a chunk's, per case
                for o in outs:
                    if phases:
                        o.worker["phases"] = dict(phases)
            except Exception:  # noqa: BLE001 - the chunk failed as a whole: retry each case alone
                timing.take()
                outs = []
                for c in cases:
                    outs.append(_execute_one(tier, c, backend))
            for o in outs:
                o.worker.update(_backend_info(backend))
            conn.send(("results", [o.to_dict() for o in outs]))
        else:
            journal = (msg[3] if len(msg) > 3 and isinstance(msg[3], dict) else {}).get("journal")
            for c in cases:
                if journal:
                    out = _execute_journaled(
                        tier, c, backend, journal, lambda c=c: conn.send(("begin", [c.case_id]))
                    )
                else:
                    conn.send(("begin", [c.case_id]))
                    out = _execute_one(tier, c, backend)
                out.worker.update(_backend_info(backend))
                conn.send(("results", [out.to_dict()]))
        conn.send(("idle",))


if __name__ == "__main__":
    _child_main(int(sys.argv[1]))

"""Isolated worker processes: a hang, a segfault, an OOM or an exception is a row, never a dead run.

Why: models are untrusted code paths through C++ kernels; one that segfaults or loops forever
must not take the run down. Each `IsolatedWorker` owns one child process (`python -m
harness.engine.workers`, talking over a socketpair with multiprocessing's Connection framing) and
enforces, from the parent side:

- a timeout per case (the child is SIGKILLed -> status ``timeout``);
- a memory limit as a watchdog on the child's RSS (read from /proc; over it -> SIGKILL, ``oom``;
  optionally also RLIMIT_AS in the child, off by default because torch reserves far more
  address space than it uses). In the child, MemoryError / an allocator's out-of-memory error is
  reported as ``oom`` too; a SIGKILL nobody sent is the kernel's OOM killer -> ``oom``;
- death by a signal -> ``crash`` with the signal name (SIGSEGV, SIGABRT...) and the tail of the
  worker's log (faulthandler prints the Python stack there);
- an exception escaping the tier -> ``error`` with the exception class and message.

Workers are reused across cases (torch and transformers load once) and recycled after a crash,
a timeout, an OOM, or `max_cases` cases. A chunk of several cases (the unit tier) that dies is
re-run one case at a time so only the guilty case gets the bad row. Linux only (/proc, socketpair).
"""

from __future__ import annotations

import faulthandler
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from contracts import timing
from contracts.backends import identity, resolved_backend
from contracts.errors import status_of
from contracts.records import Case, CaseOutcome
from contracts.settings import DEFAULT_STARTUP_TIMEOUT, DEFAULT_WORKER_MEMORY, resolve_limits
from contracts.status import Status
from contracts.tiers import failure_outcome, from_result, load_tier

_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class WorkerLimits:
    timeout: float | None = (
        None  # seconds per case (None: the tier's, else the default); a chunk gets the same
    )
    memory_bytes: int | None = DEFAULT_WORKER_MEMORY  # RSS watchdog; None = no limit
    address_space_bytes: int | None = None  # RLIMIT_AS in the child; None = off
    max_cases: int | None = (
        None  # recycle the process after this many cases (None: the tier's, else the default)
    )
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT  # spawn + tier.setup (imports torch, transformers)
    poll_interval: float = 0.05


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _short(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class WorkerDied(Exception):
    def __init__(self, status: Status, reason: str, error_class: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.error_class, self.message = status, reason, error_class, message


class IsolatedWorker:
    """One reusable child process running cases of one tier on one backend."""

    def __init__(
        self,
        tier_ref: str,
        backend: str,
        limits: WorkerLimits | None = None,
        log_dir: str | os.PathLike | None = None,
        sys_path: list[str] | None = None,
        name: str = "w0",
        threads: int | None = None,
        fingerprints: bool = False,
    ) -> None:
        self.tier_ref, self.backend = tier_ref, backend
        # ask the child for the backend's op fingerprints once it is set up (harness.engine.ordering): the
        # worker has imported the device anyway, so no second process imports it to probe them
        self.want_fingerprints = fingerprints
        self.fingerprints: dict[str, Any] | None = None
        self.threads = threads  # intra-op threads of the child (OMP/MKL/torch); None: library default
        limits = limits or WorkerLimits()
        timeout, max_cases = resolve_limits(None, limits.timeout, limits.max_cases)
        self.limits = replace(limits, timeout=timeout, max_cases=max_cases)
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "harness-workers"
        self.sys_path = list(sys_path if sys_path is not None else sys.path)
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.log_path: Path | None = None
        self.cases_in_process = 0
        self.starts = 0
        self._stages: tuple[str, ...] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def _start(self) -> None:
        self._spawn()
        self._await_ready()

    def prestart(self) -> None:
        """Spawn the child now and let it import and set up while the caller does other work
        (the runner lists the tier meanwhile); the first chunk then waits only for what is left."""
        if self.proc is None:
            self._spawn()
            self._prestarted = True

    def _spawn(self) -> None:
        self._spawned_at = time.monotonic()
        self._ready = False
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.log_path = self.log_dir / f"worker-{self.name}-{self.starts}-{os.getpid()}.log"
        parent_sock, child_sock = socket.socketpair()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.engine.workers", str(child_sock.fileno())],
                pass_fds=[child_sock.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self._child_env(),
            )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.cases_in_process = 0
        init = {
            "tier": self.tier_ref,
            "backend": self.backend,
            "sys_path": self.sys_path,
            "address_space_bytes": self.limits.address_space_bytes,
            "fingerprints": self.want_fingerprints and self.fingerprints is None,
        }
        self.conn.send(("init", init))

    def _await_ready(self) -> None:
        needed = time.monotonic()
        msg = self._wait(needed + self.limits.startup_timeout, starting=True)
        if msg[0] == "fatal":
            self._kill()
            raise RuntimeError(f"worker for tier {self.tier_ref!r} failed to start: {msg[1]}")
        self._stages = tuple(msg[2])
        if len(msg) > 3 and isinstance(msg[3], dict):
            self.fingerprints = msg[3]
        self._ready = True
        # spawn -> ready (interpreter, imports, tier.setup): journaled with the next outcome, with
        # the part that ran before the worker was needed (beside the listing: no wait for it)
        self._startup_seconds = round(time.monotonic() - self._spawned_at, 3)
        self._startup_overlapped = round(max(0.0, needed - self._spawned_at), 3) if self._prestarted else 0.0
        self._prestarted = False

    def _child_env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        if self.threads:  # N workers share the cores instead of each spinning up a thread per core
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env[var] = str(self.threads)
        return env

    def stages(self) -> tuple[str, ...]:
        if self._stages is None:
            if self.proc is not None and self.proc.poll() is None and not self._ready:
                self._await_ready()  # pre-started
            else:
                self._start()
        return self._stages  # type: ignore[return-value]

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
                pass
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def close(self) -> None:
        """Stop the child politely, then firmly."""
        if self.proc is not None and self.proc.poll() is None and self.conn is not None:
            try:
                self.conn.send(("stop",))
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired, BrokenPipeError):
                pass
        self._kill()

    # -- waiting ---------------------------------------------------------------------------
    def _log_tail(self, lines: int = 6) -> str:
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def _died(self, killed_for: str | None = None) -> WorkerDied:
        """Make sure the child is gone and explain why it went (`killed_for`: what we killed it for)."""
        assert self.proc is not None
        if killed_for is None and self.proc.poll() is None:
            try:  # the pipe closes a moment before the exit status is there
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                killed_for = "lost"  # the pipe broke but the process lives: treat as a crash
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            rc = None
        tail = self._log_tail()
        self._kill()
        if killed_for == "timeout":
            return WorkerDied(
                Status.TIMEOUT,
                "worker_timeout",
                "Timeout",
                f"no result within {self._deadline_s:.0f}s; worker killed",
            )
        if killed_for == "oom":
            return WorkerDied(
                Status.OOM,
                "worker_memory_limit",
                "MemoryLimit",
                f"worker RSS exceeded the limit of {self.limits.memory_bytes} bytes; worker killed",
            )
        if killed_for == "lost":
            return WorkerDied(
                Status.CRASH, "worker_lost", "WorkerLost", _short(f"the worker stopped answering. {tail}")
            )
        if rc is not None and rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = f"SIG{-rc}"
            if sig == "SIGKILL":  # nobody here sent it: the kernel's OOM killer, or an operator
                return WorkerDied(
                    Status.OOM,
                    "worker_killed:SIGKILL",
                    "SIGKILL",
                    _short(f"worker killed by SIGKILL (likely the kernel OOM killer). {tail}"),
                )
            return WorkerDied(
                Status.CRASH, f"worker_crash:{sig}", sig, _short(f"worker died of {sig}. {tail}")
            )
        return WorkerDied(
            Status.CRASH,
            f"worker_exit:{rc}",
            "WorkerExit",
            _short(f"worker exited with code {rc} during the case. {tail}"),
        )

    def _wait(self, deadline: float, starting: bool = False) -> tuple:
        """Next message from the child, enforcing deadline, liveness and the memory watchdog."""
        assert self.proc is not None and self.conn is not None
        limit = self.limits.memory_bytes
        while True:
            try:
                if self.conn.poll(self.limits.poll_interval):
                    return self.conn.recv()
            except (EOFError, OSError):
                raise self._died()
            if self.proc.poll() is not None:
                raise self._died()
            # memory first: a worker over its limit when the deadline passes (the watchdog itself
            # was starved of CPU, as on a loaded machine) is out of memory, not merely slow
            if limit and rss_bytes(self.proc.pid) > limit:
                raise self._died("oom")
            if time.monotonic() > deadline:
                self._deadline_s = self.limits.startup_timeout if starting else self._deadline_s
                raise self._died("timeout")

    # -- running ---------------------------------------------------------------------------
    def run_chunk(
        self, cases: list[Case], many: bool = False, emit: Callable[[list[CaseOutcome]], None] | None = None
    ) -> list[CaseOutcome]:
        """Run cases in the child; always returns one outcome per case, in order. `emit`, when
        given, gets each outcome once, as soon as it is known: a chunk that died is re-run case by
        case, and the guilty case's row (a timeout, a crash) lands before the rest re-run, not
        after the whole chunk (fail-fast stops on it a chunk's re-run earlier)."""
        results: dict[str, CaseOutcome] = {}
        pending = list(cases)
        emitted: set[str] = set()

        def land(outs: list[CaseOutcome]) -> None:
            for out in outs:
                results[out.case_id] = out
            fresh = [o for o in outs if o.case_id not in emitted]
            emitted.update(o.case_id for o in fresh)
            if emit is not None and fresh:
                emit(fresh)

        while pending:
            if self.proc is None or self.proc.poll() is not None or not self._ready:
                try:
                    if self.proc is not None and self.proc.poll() is None:  # pre-started, not ready yet
                        self._await_ready()
                    else:
                        if self.proc is not None:
                            self._kill()
                        self._start()
                except WorkerDied as died:  # the child cannot even start: every case gets the row
                    land([self._failed(c, died) for c in pending])
                    break
            batch_many = many and len(pending) > 1
            inflight: list[str] = []
            try:
                self.conn.send(("run", [asdict(c) for c in pending], batch_many))
                while True:
                    if inflight:
                        msg = self._wait(self._deadline)
                    else:
                        msg = self._wait(time.monotonic() + 60.0 + self.limits.timeout)
                    if msg[0] == "begin":
                        inflight = list(msg[1])
                        self._deadline_s = self.limits.timeout  # a chunk gets one case's time
                        self._deadline = time.monotonic() + self._deadline_s
                    elif msg[0] == "results":
                        outs = []
                        for d in msg[1]:
                            out = CaseOutcome.from_dict(d)
                            out.worker.update({"pid": self.proc.pid, "worker": self.name})
                            if self._startup_seconds is not None:
                                out.worker["startup_seconds"] = self._startup_seconds
                                if self._startup_overlapped:
                                    out.worker["startup_overlapped_seconds"] = self._startup_overlapped
                                self._startup_seconds = None
                            outs.append(out)
                        land(outs)
                        self.cases_in_process += len(msg[1])
                        inflight = []
                    elif msg[0] == "idle":
                        break
                pending = [c for c in pending if c.case_id not in results]
            except WorkerDied as died:
                done_ids = set(results)
                pending = [c for c in pending if c.case_id not in done_ids]
                guilty = [c for c in pending if c.case_id in inflight] or pending[:1]
                if len(guilty) > 1:  # a chunk died: rerun its cases one by one to find the guilty one
                    for c in guilty:
                        land(self.run_chunk([c], many=False, emit=land))
                else:
                    land([self._failed(guilty[0], died)])
                pending = [c for c in pending if c.case_id not in results]
            except (BrokenPipeError, ConnectionError):
                self._kill()
        if self.proc is not None and self.cases_in_process >= self.limits.max_cases:
            self.close()  # recycle: the next chunk starts a fresh process
        return [results[c.case_id] for c in cases]

    def _failed(self, case: Case, died: WorkerDied) -> CaseOutcome:
        stages = self._stages
        if stages is None:  # the child died before telling us: ask the tier in this process
            try:
                stages = tuple(load_tier(self.tier_ref).stages)
            except Exception:  # noqa: BLE001
                stages = ("case",)
        out = failure_outcome(
            case,
            stages,
            died.status,
            died.reason,
            died.error_class,
            died.message,
            seconds=getattr(self, "_deadline_s", 0.0) if died.status == Status.TIMEOUT else 0.0,
        )
        out.worker.update({"worker": self.name, "died": died.reason})
        return out

    _deadline = 0.0
    _deadline_s = 0.0
    _startup_seconds: float | None = None
    _startup_overlapped = 0.0
    _spawned_at = 0.0
    _ready = False
    _prestarted = False


# ------------------------------------------------------------------------------- child side


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


def _execute_one(tier: Any, case: Case, backend: str) -> CaseOutcome:
    out = _execute_untimed(tier, case, backend)
    phases = timing.take()
    if phases:
        out.worker["phases"] = phases
    return out


def _execute_untimed(tier: Any, case: Case, backend: str) -> CaseOutcome:
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
            _short(f"{exc}{where}"),
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
        if hasattr(tier, "setup"):
            tier.setup(backend)
        stages = list(tier.stages)
        timing.take()  # what setup did is start-up, not the first case's
    except BaseException as exc:  # noqa: BLE001
        conn.send(("fatal", _short(f"{type(exc).__name__}: {exc}")))
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
        if msg[2] and hasattr(tier, "execute_many"):
            conn.send(("begin", [c.case_id for c in cases]))
            t0 = time.monotonic()
            timing.take()
            try:
                raw = list(tier.execute_many(cases, backend))
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
            for c in cases:
                conn.send(("begin", [c.case_id]))
                out = _execute_one(tier, c, backend)
                out.worker.update(_backend_info(backend))
                conn.send(("results", [out.to_dict()]))
        conn.send(("idle",))


if __name__ == "__main__":
    _child_main(int(sys.argv[1]))

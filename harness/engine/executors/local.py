"""The default executor: N isolated worker processes on this machine, fed from one queue.

One dispatcher thread per worker pulls the next chunk, runs it in its `IsolatedWorker` (which
turns hangs, crashes and OOMs into rows) and hands the outcomes to the runner under a lock.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

from harness.engine.executors.base import Chunk, Executor, OnResults, Plan, refined
from harness.engine.workers import IsolatedWorker, WorkerLimits


def worker_threads(workers: int, cores: int | None = None) -> int:
    """Intra-op threads per worker process: the machine's cores shared among the workers."""
    return max(1, (cores or os.cpu_count() or 1) // max(1, int(workers)))


class LocalExecutor(Executor):
    def __init__(
        self,
        tier_ref: str,
        backend: str,
        workers: int,
        limits: WorkerLimits,
        log_dir: str | os.PathLike | None = None,
        sys_path: list[str] | None = None,
    ) -> None:
        self.tier_ref, self.backend = tier_ref, backend
        self.workers = max(1, int(workers))
        self.limits, self.log_dir, self.sys_path = limits, log_dir, sys_path
        self._stop = threading.Event()
        self._live: list[IsolatedWorker] = []
        self._ready: list[IsolatedWorker] = []  # pre-started (prestart), handed to the dispatchers

    def _worker(self, n: int) -> IsolatedWorker:
        return IsolatedWorker(
            self.tier_ref,
            self.backend,
            self.limits,
            log_dir=self.log_dir,
            sys_path=self.sys_path,
            name=f"w{n}",
            threads=worker_threads(self.workers),
            fingerprints=n == 0,
        )

    def prestart(self, count: int | None = None) -> None:
        """Spawn the worker processes now (they import torch and set the tier up while the runner
        lists the cases); run() uses them, close() stops any it did not need."""
        for n in range(len(self._ready), min(self.workers, self.workers if count is None else count)):
            worker = self._worker(n)
            worker.prestart()
            self._ready.append(worker)

    def fingerprints(self, start: bool = True) -> dict[str, Any] | None:
        """The backend's op fingerprints from the first worker's start-up (harness.engine.ordering asks for
        them to order the cases): waits for that worker to be ready, starting it if need be, so the
        run's ordering costs no process of its own. {} when the backend has none; None when no
        worker can tell (it failed to start, or none runs and `start` is false: no worker is started
        for nothing; the caller then probes in a process of its own)."""
        for w in [*self._ready, *self._live]:
            if w.fingerprints is not None:
                return w.fingerprints
        if self._live:  # run() has begun: its w0 was asked at its start
            return None
        if not self._ready:
            if not start:
                return None
            self.prestart(1)
        try:
            self._ready[0].stages()  # waits for the pre-started worker's ready message
        except RuntimeError:  # it failed to start: run() records that for each case
            return None
        return self._ready[0].fingerprints

    def close(self) -> None:
        """Stop pre-started workers that no run() took (nothing to run, or listing failed)."""
        while self._ready:
            self._ready.pop().close()

    def run(self, chunks: list[Chunk], on_results: OnResults, plan: Plan | None = None) -> None:
        """Run the chunks; `plan` refines each as it is dispatched (harness.engine.limits.Schedule)."""
        todo: queue.Queue[Chunk] = queue.Queue()
        for chunk in chunks:
            todo.put(chunk)
        lock = threading.Lock()
        errors: list[BaseException] = []
        count = min(self.workers, max(1, len(chunks)))
        started = {w.name: w for w in self._ready[:count]}
        for extra in self._ready[count:]:  # fewer chunks than workers: the rest are not needed
            extra.close()
        self._ready = []

        def deliver(outcomes: list) -> None:  # each outcome as soon as it is known (run_chunk's emit)
            with lock:
                on_results(outcomes)

        def loop(n: int) -> None:
            worker = started.get(f"w{n}") or self._worker(n)
            self._live.append(worker)
            try:
                while not self._stop.is_set() and not errors:
                    try:
                        chunk = todo.get_nowait()
                    except queue.Empty:
                        return
                    for part in refined(plan, chunk):
                        if self._stop.is_set():
                            break
                        worker.run_chunk(
                            part.cases,
                            part.many,
                            emit=deliver,
                            timeout=part.timeout,
                            diagnose=part.diagnose,
                            case_timeouts=part.case_timeouts,
                            plan=plan,
                            spare=part.spare,
                        )
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)
            finally:
                worker.close()

        dispatchers = [
            threading.Thread(target=loop, args=(n,), daemon=True, name=f"harness-worker-{n}")
            for n in range(count)
        ]
        for t in dispatchers:
            t.start()
        try:
            for t in dispatchers:
                while t.is_alive():
                    t.join(0.2)
        except KeyboardInterrupt:
            self.stop()
            raise
        if errors:
            raise errors[0]

    def drain(self) -> None:
        """Dispatch no new chunk; chunks already running finish (fail-fast: `--maxfail`)."""
        self._stop.set()

    def stop(self) -> None:
        """Stop dispatching and kill the workers (Ctrl-C)."""
        self._stop.set()
        for w in list(self._live):
            w.kill()

    def describe(self) -> dict[str, Any]:
        return {"executor": "local", "workers": self.workers}

"""The Ray executor: the same isolated workers, inside Ray actors, on a local or remote cluster.

Why: scale a nightly across machines on an existing engine instead of a home-made one. Each actor
(1 CPU) owns one `IsolatedWorker`, so timeouts, memory limits, crash rows and recycling are
exactly the local executor's and the results are the same. The driver keeps one chunk in flight
per actor and journals results as they come back. An actor lost with its node becomes `crash`
rows for its chunk (reason `ray_actor_died`) and is replaced.

Ray is an optional extra (`pip install 'neuron-coverage-harness[ray]'`): imported here only.
On a remote cluster every node needs the harness installed (same version) or a `runtime_env`.
"""

from __future__ import annotations

from typing import Any

from contracts.records import Case, CaseOutcome
from contracts.tiers import failure_outcome
from harness.engine.executors.base import Chunk, Executor, OnResults, Plan, refined
from harness.engine.workers import WorkerLimits


def _ray():
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "--executor ray needs the ray extra: pip install 'neuron-coverage-harness[ray]'"
        ) from exc
    return ray


class _WorkerActor:
    """Runs chunks in an IsolatedWorker on whichever node Ray placed the actor."""

    def __init__(
        self, tier_ref: str, backend: str, limits: dict[str, Any], sys_path: list[str] | None, name: str
    ) -> None:
        from harness.engine.workers import IsolatedWorker

        # one CPU per actor: one intra-op thread, as Ray sized it
        self.worker = IsolatedWorker(
            tier_ref, backend, WorkerLimits(**limits), sys_path=sys_path, name=name, threads=1
        )

    def run_chunk(
        self,
        cases: list[dict[str, Any]],
        many: bool,
        timeout: float | None = None,
        diagnose: bool = False,
        case_timeouts: dict[str, float] | None = None,
        spare: bool = False,
    ) -> list[dict[str, Any]]:
        outs = self.worker.run_chunk(
            [Case(**c) for c in cases],
            many,
            timeout=timeout,
            diagnose=diagnose,
            case_timeouts=case_timeouts,
            spare=spare,
        )
        return [o.to_dict() for o in outs]

    def stages(self) -> list[str]:
        return list(self.worker.stages())

    def close(self) -> None:
        self.worker.close()


class RayExecutor(Executor):
    def __init__(
        self,
        tier_ref: str,
        backend: str,
        workers: int,
        limits: WorkerLimits,
        address: str | None = None,
        sys_path: list[str] | None = None,
    ) -> None:
        self.ray = _ray()
        self.tier_ref, self.backend = tier_ref, backend
        self.workers = max(1, int(workers))
        self.limits, self.address, self.sys_path = limits, address, sys_path
        if not self.ray.is_initialized():
            kwargs: dict[str, Any] = {"address": address, "ignore_reinit_error": True, "log_to_driver": False}
            if address is None:  # start a local instance sized to --workers
                kwargs.update(num_cpus=self.workers, include_dashboard=False)
            self.ray.init(**kwargs)
        self._actor_cls = self.ray.remote(num_cpus=1, max_restarts=0)(_WorkerActor)
        self._made = 0

    def _actor(self):
        self._made += 1
        from dataclasses import asdict

        return self._actor_cls.remote(
            self.tier_ref, self.backend, asdict(self.limits), self.sys_path, f"ray{self._made}"
        )

    def run(self, chunks: list[Chunk], on_results: OnResults, plan: Plan | None = None) -> None:
        """Run the chunks; `plan` refines each as it is submitted (harness.engine.limits.Schedule)."""
        ray = self.ray
        from dataclasses import asdict

        todo = list(reversed(chunks))
        actors = [self._actor() for _ in range(min(self.workers, max(1, len(chunks))))]
        inflight: dict[Any, tuple[Any, Chunk]] = {}
        stages: list[str] | None = None

        def submit(actor: Any) -> None:
            if todo and not self._draining:
                chunk, *later = refined(plan, todo.pop())
                todo.extend(reversed(later))  # the chunk's other parts go next
                ref = actor.run_chunk.remote(
                    [asdict(c) for c in chunk.cases],
                    chunk.many,
                    chunk.timeout,
                    chunk.diagnose,
                    chunk.case_timeouts,
                    chunk.spare,
                )
                inflight[ref] = (actor, chunk)

        try:
            for a in actors:
                submit(a)
            while inflight:
                ready, _ = ray.wait(list(inflight), num_returns=1)
                ref = ready[0]
                actor, chunk = inflight.pop(ref)
                try:
                    outs = [CaseOutcome.from_dict(d) for d in ray.get(ref)]
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
                    if stages is None:
                        stages = self._stages(actors, actor)
                    outs = [
                        failure_outcome(
                            c,
                            stages or ["case"],
                            "crash",
                            "ray_actor_died",
                            type(exc).__name__,
                            str(exc)[:500],
                        )
                        for c in chunk.cases
                    ]
                    ray.kill(actor, no_restart=True)
                    actors.remove(actor)
                    actor = self._actor()
                    actors.append(actor)
                on_results(outs)
                submit(actor)
        finally:
            for a in actors:
                try:
                    ray.get(a.close.remote(), timeout=30)
                except Exception:  # noqa: BLE001 - shutting down: a dead actor is fine
                    pass
                ray.kill(a, no_restart=True)

    _draining = False

    def drain(self) -> None:
        """Submit no new chunk; chunks in flight finish (fail-fast: `--maxfail`)."""
        self._draining = True

    def _stages(self, actors: list[Any], dead: Any) -> list[str] | None:
        for a in actors:
            if a is not dead:
                try:
                    return self.ray.get(a.stages.remote(), timeout=300)
                except Exception:  # noqa: BLE001
                    continue
        return None

    def describe(self) -> dict[str, Any]:
        return {"executor": "ray", "workers": self.workers, "ray_address": self.address}

"""The simulated Neuron compiler: FX partition -> NEFF artifact, with a documented cost model.

Cost model (seconds of simulated compile per partition)::

    t = NEURON_COMPILE_COST_SCALE * (BASE_SECONDS + PER_OP_SECONDS * n_ops)

``n_ops`` counts the partition's call nodes. A real neuronx-cc takes tens of seconds to minutes
per graph; the default scale (1.0 -> 5 ms + 0.5 ms per op) keeps tests fast, and benchmarks raise
it. The time is spent sleeping, so a compile in a background thread overlaps with execution as a
real out-of-process compiler would, without burning the shared CPU.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch.fx

from backend import settings
from backend.errors import CompileError
from backend.neff import inductor, precision
from backend.neff.format import Artifact, TensorSpec, cache_key, graph_ops, serialize_graph

COMPILER_VERSION = "neuron-sim-cc/1"
BASE_SECONDS = 0.005
PER_OP_SECONDS = 0.0005


def cost_scale() -> float:
    """NEURON_COMPILE_COST_SCALE, read on every compile (benchmarks change it between runs)."""
    return settings.current().compile_cost_scale


def compile_seconds(n_ops: int, scale: float | None = None) -> float:
    """The cost model above: simulated seconds to compile a partition of `n_ops` ops."""
    return (cost_scale() if scale is None else scale) * (BASE_SECONDS + PER_OP_SECONDS * n_ops)


@dataclass(frozen=True)
class CompilerFlags:
    """Everything besides the graph that changes the produced code (part of the cache key)."""

    precision: str = "bf16"  # bf16: auto-cast fp32 matmul inputs (device default) | exact
    compiler: str = "interpreter"  # what runs the partition: interpreter (aten calls) | inductor

    @classmethod
    def current(cls) -> CompilerFlags:
        return cls(precision=precision.current_mode(), compiler=inductor.compiler_name())

    def to_json(self) -> dict[str, str]:
        """The flags as stored and keyed; the interpreter's omit `compiler` (so the keys of caches
        written before the flag existed stay valid)."""
        d = asdict(self)
        if d["compiler"] == "interpreter":
            del d["compiler"]
        return d


def plan(
    gm: torch.fx.GraphModule, inputs: list[TensorSpec], table_version: str, flags: CompilerFlags
) -> tuple[str, dict]:
    """Serialize a partition and compute its cache key, without compiling (cheap, for lookups)."""
    doc = serialize_graph(gm)
    return cache_key(doc, inputs, table_version, flags.to_json(), COMPILER_VERSION), doc


def compile_partition(
    gm: torch.fx.GraphModule,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    table_version: str,
    flags: CompilerFlags,
    planned: tuple[str, dict] | None = None,
) -> Artifact:
    """Compile one partition: pay the simulated cost, return the self-describing artifact."""
    key, doc = planned or plan(gm, inputs, table_version, flags)
    if settings.current().compile_inject_failure:  # test hook: the compiler crashes
        raise CompileError(f"neuron compiler failed on partition {key[:12]} (injected failure)")
    n_ops = len(graph_ops(doc))
    seconds = compile_seconds(n_ops)
    start = time.perf_counter()
    if seconds > 0:
        time.sleep(seconds)
    artifact = Artifact(
        key=key,
        graph=doc,
        inputs=list(inputs),
        outputs=list(outputs),
        lowering_table_version=table_version,
        flags=flags.to_json(),
        compiler_version=COMPILER_VERSION,
        compile_seconds=0.0,
        meta={"n_ops": n_ops, "cost_scale": cost_scale()},
    )
    if flags.compiler == "inductor":  # the real compile; the executable travels with the artifact
        from backend.neff.runtime import load_executable

        real = time.perf_counter()
        artifact.compiled = load_executable(artifact).compiled  # type: ignore[attr-defined]
        artifact.meta["inductor_seconds"] = round(time.perf_counter() - real, 3)
    artifact.compile_seconds = time.perf_counter() - start
    return artifact

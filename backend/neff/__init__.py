"""NEFF artifacts of the simulated Neuron compiler.

A NEFF here is a self-describing, checksummed JSON document (never a pickle): the partition's
aten graph, its input/output specs, the lowering-table version and the compiler flags. Any
process can load one and run it on host payloads without recompiling.

    art = compile_partition(graph_module, input_specs, table_version="1", flags=CompilerFlags())
    blob = art.to_bytes()                 # what the caches store
    exe = load_executable(Artifact.from_bytes(blob, expected_key=art.key))
    outs = exe(*cpu_tensors)
"""

from backend.neff.compiler import CompilerFlags, compile_partition, compile_seconds, cost_scale
from backend.neff.format import (
    Artifact,
    TensorSpec,
    cache_key,
    serialize_graph,
)
from backend.neff.runtime import Executable, load_executable

__all__ = [
    "Artifact",
    "CompilerFlags",
    "Executable",
    "TensorSpec",
    "cache_key",
    "compile_partition",
    "compile_seconds",
    "cost_scale",
    "load_executable",
    "serialize_graph",
]

"""Planted faults: make the simulated device wrong on purpose, to measure what the harness catches.

A fault names an op overload (or an op packet: every overload), optional predicates (input dtypes,
shapes, which output, a boundary slice such as the last row) and a kind:

    perturb     outputs (or one input, or one slice of it) off by a relative error ``rel``
    nan         the target becomes NaN
    substitute  the op runs with other arguments (``kwargs``), e.g. GELU with approximate='tanh'
    raise       the op raises NeuronFaultError (a RuntimeError naming the op)
    hang        the op never returns (or sleeps ``seconds``)
    crash       the process dies of a signal (SIGSEGV by default)
    fallback    the lowering is lost: the op becomes a recorded CPU fallback (reason no-lowering)

Faults apply in eager execution (``backend.kernels._run``: one check of a global set per op) and
in compiled execution: ``torch.compile(backend="neuron")`` keeps faulted nodes out of its compiled
partitions, so they run on the eager device, which applies the same fault (one definition of each
effect). ``scope: compiled`` (or ``eager``) limits a fault to one of the two::

    from backend import faults
    faults.load("faults.yaml")                     # or NEURON_FAULTS=faults.yaml before import
    with faults.planted(op="aten._softmax.default", kind="perturb", rel=0.002):
        model(x)
    faults.clear(); faults.hits()                  # fault name -> times it fired in this process

The file format (``version`` + ``faults:`` list, or a bare list) and the bundled suite
(``backend/faults/suite.yaml``) are described in docs/backend.md. ``NEURON_FAULT_LOG=path`` appends
one JSON line per fault the first time it fires in a process (a benchmark learns what fired).
"""

from backend.faults.effects import intercept
from backend.faults.planting import (
    active,
    clear,
    compiled_runner,
    faulted,
    hits,
    load,
    load_from_env,
    on_change,
    partition_table,
    plant,
    planted,
    remove,
    reset_hits,
)
from backend.faults.spec import (
    KINDS,
    Condition,
    Fault,
    load_suite,
    parse_fault,
    parse_faults,
    read_faults,
    suite_path,
)

__all__ = [
    "KINDS",
    "Condition",
    "Fault",
    "active",
    "clear",
    "compiled_runner",
    "faulted",
    "hits",
    "intercept",
    "load",
    "load_from_env",
    "load_suite",
    "on_change",
    "parse_fault",
    "parse_faults",
    "partition_table",
    "plant",
    "planted",
    "read_faults",
    "remove",
    "reset_hits",
    "suite_path",
]

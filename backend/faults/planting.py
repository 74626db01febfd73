"""The planted faults of this process: plant, load, clear, and what the compiled path needs.

State is replaced as a whole (a tuple of faults and an op -> faults map), so the eager hook reads
a consistent picture without a lock; listeners (the eager device) get the set of faulted
overloads, whose emptiness is the only cost of the fault machinery when nothing is planted.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch

from backend import settings
from backend.errors import FaultFileError
from backend.faults.spec import Fault, parse_fault, read_faults

_lock = threading.Lock()
_faults: tuple[Fault, ...] = ()
_by_op: dict[str, tuple[Fault, ...]] = {}
_listeners: list[Callable[[frozenset[str]], None]] = []
_hits: Counter = Counter()
_logged: set[tuple[str, bool]] = set()


class _Context(threading.local):
    compiled = 0  # > 0 while this thread runs a compiled graph
    inside: frozenset = frozenset()  # faults an enclosing composite kernel applies (not again inside)


_context = _Context()


def on_change(fn: Callable[[frozenset[str]], None]) -> None:
    """Subscribe to the set of faulted overload names (the eager hook keeps a copy)."""
    _listeners.append(fn)
    fn(frozenset(_by_op))


def _install(faults: tuple[Fault, ...]) -> None:
    global _faults, _by_op
    by_op: dict[str, list[Fault]] = {}
    for f in faults:
        for name in f.overloads:
            by_op.setdefault(name, []).append(f)
    changed = faults != _faults
    with _lock:
        _faults, _by_op = faults, {k: tuple(v) for k, v in by_op.items()}
    names = frozenset(_by_op)
    for fn in list(_listeners):
        fn(names)
    if changed and "torch._dynamo" in sys.modules:
        torch._dynamo.reset()  # compiled code was partitioned for the old faults: recompile


def _coerce(fault: Fault | dict | None, fields: dict[str, Any]) -> Fault:
    if isinstance(fault, Fault):
        return replace(fault, **fields) if fields else fault
    raw = dict(fault or {}, **fields)
    raw.setdefault("name", f"{raw.get('kind', 'fault')}:{raw.get('op', '?')}#{len(_faults)}")
    return parse_fault(raw, "<plant>")


def plant(fault: Fault | dict | None = None, **fields: Any) -> Fault:
    """Add one fault (a Fault, a dict in the file format, or keyword fields); returns it."""
    f = _coerce(fault, fields)
    if any(g.name == f.name for g in _faults):
        raise FaultFileError("<plant>", f.name, "a fault of that name is already planted")
    _install((*_faults, f))
    return f


def remove(name: str) -> None:
    _install(tuple(f for f in _faults if f.name != name))


@contextlib.contextmanager
def planted(fault: Fault | dict | None = None, **fields: Any) -> Iterator[Fault]:
    """Plant a fault for the block, then remove it."""
    f = plant(fault, **fields)
    try:
        yield f
    finally:
        remove(f.name)


def load(path: str | os.PathLike | list[Fault]) -> list[Fault]:
    """Replace the planted faults with a file's (validated first: a bad file changes nothing)."""
    faults = list(path) if isinstance(path, list) else read_faults(path)
    _install(tuple(faults))
    return faults


def clear() -> None:
    _install(())


def active() -> list[Fault]:
    return list(_faults)


def hits() -> dict[str, int]:
    """Fault name -> how often it fired in this process since the last reset."""
    return dict(_hits)


def reset_hits() -> None:
    _hits.clear()
    _logged.clear()


def load_from_env() -> None:
    """``NEURON_FAULTS=path`` (on import): a malformed file raises FaultFileError naming the entry."""
    path = settings.current().faults
    if path is not None:
        load(path)


# ------------------------------------------------------------------------- the compiled path


class _FaultFreeTable:
    """The lowering table as the compiler sees it while faults are planted: faulted ops are not
    compiled into partitions, so they run on the eager device, which applies the fault."""

    def __init__(self, table: Any, names: frozenset[str]) -> None:
        self.table, self.names, self.version = table, names, table.version

    def supports(self, op: str, dtypes: Any) -> tuple[bool, str | None]:
        if op in self.names:
            return False, "planted-fault"
        return self.table.supports(op, dtypes)


def partition_table(table: Any) -> Any:
    """`table` itself without faults, else a view of it that declines the faulted ops."""
    names = frozenset(n for n, fs in _by_op.items() if any(f.scope != "eager" for f in fs))
    return _FaultFreeTable(table, names) if names else table


def compiled_runner(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a compiled graph's execution (so ``scope: compiled`` faults fire only there)."""
    if not _faults:
        return fn

    def run_compiled(*args: Any, **kwargs: Any) -> Any:
        _context.compiled += 1
        try:
            return fn(*args, **kwargs)
        finally:
            _context.compiled -= 1

    return run_compiled


def faulted(op: str) -> bool:
    """Is some fault planted on this overload (adaptive eager keeps such ops eager)?"""
    return op in _by_op

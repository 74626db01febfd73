"""torchax 0.0.13 on torch 2.13: import it without editing its installed files.

torchax names op overloads in module-level tables (its autocast policy, its decomposition list)
that torch 2.13 no longer has — the named-tensor `Dimname` overloads such as
`aten.prod.dim_Dimname` — so `import torchax` raises AttributeError before anything runs. While
torchax imports, an overload that does not exist, asked for by torchax's own modules, resolves to
a `MissingOverload` placeholder: a value no op equals, so the table entry matches nothing (what the
entry would do on a torch that has no such overload). Everyone else still gets AttributeError.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

#: the placeholders handed out while torchax imported: what the adapter adapted
RESOLVED: list[str] = []


@dataclass(frozen=True)
class MissingOverload:
    """An op overload this torch does not have; equal to no op, callable by nobody."""

    name: str  # e.g. "aten::prod.dim_Dimname"

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self.name} does not exist in this torch")


@contextlib.contextmanager
def missing_overloads_resolve_to_placeholders(package: str) -> Iterator[list[str]]:
    """Within the block, `torch.ops.<ns>.<op>.<overload>` asked for by a module of `package` and
    missing in torch is a MissingOverload (its name is appended to the yielded list)."""
    import torch

    packet = torch._ops.OpOverloadPacket
    original = packet.__getattr__
    found: list[str] = []

    def getattr_(self, key: str):
        try:
            return original(self, key)
        except AttributeError:
            caller = str(sys._getframe(1).f_globals.get("__name__", ""))
            if key.startswith("__") or not (caller == package or caller.startswith(package + ".")):
                raise
            placeholder = MissingOverload(f"{self._qualified_op_name}.{key}")
            found.append(placeholder.name)
            return placeholder

    packet.__getattr__ = getattr_
    try:
        yield found
    finally:
        packet.__getattr__ = original


def import_torchax() -> ModuleType:
    """torchax, imported once with the missing overloads adapted, and its default environment made
    (which imports its op tables: the decompositions name more such overloads). Raises
    RuntimeError naming the owner when another backend already holds PrivateUse1 (torchax renames
    it to `jax`)."""
    import torch

    owner = torch._C._get_privateuse1_backend_name()
    if owner not in ("privateuseone", "jax"):
        raise RuntimeError(
            f"torchax cannot register its device: PrivateUse1 is already registered as {owner!r} "
            "by another backend in this process (run torchax in a process without it)"
        )
    fastpath = torch.backends.mha.get_fastpath_enabled()
    try:
        with missing_overloads_resolve_to_placeholders("torchax") as found:
            module = importlib.import_module("torchax")
            module.default_env()
    finally:  # torchax switches MultiheadAttention's fast path off for the whole process on import:
        torch.backends.mha.set_fastpath_enabled(fastpath)  # only its scope needs that (the adapter)
    RESOLVED[:] = sorted(set(RESOLVED) | set(found))
    return module

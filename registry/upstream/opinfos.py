"""PyTorch's op_db as the upstream tier sees it: which OpInfos, which dtypes, which samples, and
what PyTorch itself says about running them on a device (skips, expected failures, tolerances).

Samples come from ``OpInfo.sample_inputs("cpu", dtype, requires_grad=...)`` (the samples PyTorch's
own device tests use), generated with fixed seeds (torch, random, numpy) per (op, variant, dtype)
so every process regenerates the same list: the case list stores only each sample's index and a
fingerprint of its structure, never a tensor.

    ops = select_ops("add,nn.functional.*")
    for dtype in cpu_dtypes(op): samples = generate_samples(op, dtype)
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import random
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import Field

from contracts.rulefiles import Rules, cached_rules, resource

#: The test PyTorch runs to compare a device with the CPU; its decorators are PyTorch's verdict
#: on whether an op's outputs can be compared across devices at all.
COMPARE_TEST = ("TestCommon", "test_compare_cpu")
_ADDR = re.compile(r"0x[0-9a-fA-F]+")


@functools.cache
def op_db() -> tuple[Any, ...]:
    """torch.testing._internal.common_methods_invocations.op_db (imported once per process)."""
    from torch.testing._internal.common_methods_invocations import op_db as db

    return tuple(db)


def full_name(op: Any) -> str:
    """``name`` or ``name.variant`` (the OpInfo's name plus its variant_test_name)."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@functools.cache
def by_name() -> dict[tuple[str, str], Any]:
    return {(op.name, op.variant_test_name): op for op in op_db()}


def find(name: str, variant: str = "") -> Any:
    try:
        return by_name()[(name, variant)]
    except KeyError:
        raise KeyError(
            f"no OpInfo {name!r} (variant {variant!r}) in op_db of torch {torch.__version__}"
        ) from None


def matches(name: str, variant: str, pattern: str | Iterable[str] | None) -> bool:
    """Does the OpInfo `name` (variant) match one of the comma-separated globs? A glob matches the
    name or ``name.variant``; None, "" and "*" match everything."""
    if pattern is None or pattern == "" or pattern == "*":
        return True
    globs = [p.strip() for p in (pattern.split(",") if isinstance(pattern, str) else pattern) if p.strip()]
    full = f"{name}.{variant}" if variant else name
    return any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(full, g) for g in globs)


def select_ops(pattern: str | Iterable[str] | None = None) -> list[Any]:
    """OpInfos matching the pattern (see `matches`), in op_db order."""
    return [op for op in op_db() if matches(op.name, op.variant_test_name, pattern)]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: str) -> torch.dtype:
    value = getattr(torch, name.strip().removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"not a torch dtype: {name!r}")
    return value


def _sorted(dtypes: Iterable[torch.dtype]) -> list[torch.dtype]:
    return sorted(dtypes, key=dtype_name)


def cpu_dtypes(op: Any) -> list[torch.dtype]:
    """Every dtype the OpInfo declares for CPU (sorted by name: a stable case order)."""
    return _sorted(op.supported_dtypes("cpu"))


def reference_only_elsewhere(op: Any) -> list[torch.dtype]:
    """Dtypes the OpInfo declares for CUDA but not for the CPU reference: nothing to compare with."""
    return _sorted(set(op.supported_dtypes("cuda")) - set(op.supported_dtypes("cpu")))


def wants_backward(op: Any, dtype: torch.dtype) -> bool:
    """PyTorch checks gradients for this op and dtype on the CPU."""
    return bool(op.supports_autograd) and dtype in op.supported_backward_dtypes("cpu")


# ------------------------------------------------------------------------------------- decorators


def _skip_reason(fn: Any) -> str | None:
    """The reason of a ``unittest.skip(...)`` / expectedFailure decorator; None for anything else."""
    qual = getattr(fn, "__qualname__", "") or ""
    if qual.startswith("skip.") or qual == "skip":
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                if isinstance(cell.cell_contents, str):
                    return f"skipped: {cell.cell_contents}"
            except ValueError:
                continue
        return "skipped"
    if getattr(fn, "__name__", "") == "expectedFailure":
        return "expected to fail"
    return None


#: device types PyTorch's ``onlyNativeDeviceTypes`` keeps (a PrivateUse1 device is not one)
NATIVE_DEVICE_TYPES = ("cpu", "cuda", "meta", "mps", "xpu", "hpu", "mtia")


def applicability_skip(op: Any, dtype: torch.dtype, device_type: str) -> str | None:
    """Why PyTorch's own decorators skip comparing this op and dtype on `device_type` with the CPU.

    Counted: skips and expected failures of ``TestCommon.test_compare_cpu`` (or of every test of
    the op) that apply to `device_type` or to every device, skips of every test of the op on the
    CPU reference, and ``onlyCUDA`` / ``onlyNativeDeviceTypes``-style restrictions that exclude a
    third-party device. None: PyTorch would run it."""
    for info in getattr(op, "decorators", ()) or ():
        if not hasattr(info, "decorators"):  # a bare decorator: applies to every test of the op
            name = getattr(info, "__name__", type(info).__name__)
            if name == "onlyNativeDeviceTypes":
                if device_type not in NATIVE_DEVICE_TYPES:
                    return f"PyTorch runs this op's tests on native device types only ({name})"
            elif name.startswith("only") and name.lower() != f"only{device_type}".lower():
                return f"PyTorch runs this op's tests {name} only"
            continue
        if info.cls_name not in (None, COMPARE_TEST[0]) or info.test_name not in (None, COMPARE_TEST[1]):
            continue
        for cpu_side in (False, True):
            where = "cpu" if cpu_side else device_type
            if cpu_side and info.test_name is not None:
                continue  # test_compare_cpu decorated for device_type cpu is about a CPU-vs-CPU run
            if info.device_type is None and cpu_side:
                continue  # already seen for every device
            try:
                active = info.is_active(COMPARE_TEST[0], COMPARE_TEST[1], where, dtype, {})
            except Exception:  # noqa: BLE001 - a decorator condition we cannot evaluate: not ours to judge
                active = False
            if not active:
                continue
            for fn in info.decorators:
                reason = _skip_reason(fn)
                if reason:
                    test = info.test_name or "every test"
                    side = " on the CPU reference" if cpu_side else ""
                    return f"op_db: {test} {reason}{side}"
    return None


@dataclass(frozen=True)
class ToleranceOverride:
    atol: float
    rtol: float


def tolerance_override(op: Any, dtype: torch.dtype, device_type: str) -> ToleranceOverride | None:
    """PyTorch's toleranceOverride / precisionOverride for this op and dtype (test_compare_cpu or
    every test), so the tier is never stricter than PyTorch about an op it knows is imprecise."""
    found: list[ToleranceOverride] = []

    def take(dec: Any) -> None:
        table = getattr(dec, "d", None)
        if not isinstance(table, dict) or dtype not in table:
            return
        value = table[dtype]
        if hasattr(value, "atol"):
            found.append(ToleranceOverride(float(value.atol), float(value.rtol)))
        elif isinstance(value, (int, float)):
            found.append(ToleranceOverride(float(value), 0.0))

    for info in getattr(op, "decorators", ()) or ():
        if not hasattr(info, "decorators"):
            take(info)
            continue
        if info.cls_name not in (None, COMPARE_TEST[0]) or info.test_name not in (None, COMPARE_TEST[1]):
            continue
        try:
            active = info.is_active(COMPARE_TEST[0], COMPARE_TEST[1], device_type, dtype, {})
        except Exception:  # noqa: BLE001
            active = False
        if active:
            for dec in info.decorators:
                take(dec)
    if not found:
        return None
    return ToleranceOverride(max(f.atol for f in found), max(f.rtol for f in found))


# ---------------------------------------------------------------------------------------- families


class FamilyPrefix(Rules):
    family: str
    match: tuple[str, ...]  # globs over the OpInfo's name


class Families(Rules):
    """registry/data/upstream_families.yaml."""

    version: int
    prefixes: tuple[FamilyPrefix, ...] = ()
    classes: dict[str, str] = Field(default_factory=dict)  # OpInfo class name -> family
    default: str


def family(op: Any) -> str:
    """The op family of the heat map (registry/data/upstream_families.yaml: name prefixes, then
    the OpInfo class)."""
    rules = cached_rules(Families, str(resource("registry", "data/upstream_families.yaml")))
    for rule in rules.prefixes:
        if any(fnmatch.fnmatchcase(op.name, p) for p in rule.match):
            return rule.family
    return rules.classes.get(type(op).__name__, rules.default)


# ------------------------------------------------------------------------------------------ samples


def seed_of(*parts: Any) -> int:
    """A stable 31-bit seed from the parts (crc32: the same in every process and Python version)."""
    return zlib.crc32("/".join(str(p) for p in parts).encode()) & 0x7FFFFFFF


def seed_everything(seed: int, device_type: str = "cpu") -> None:
    """Seed the CPU generator, the device's (``torch.<device>.manual_seed``), random and numpy.

    Not ``torch.manual_seed``: it also queues a seed for every lazy accelerator module (cuda,
    xpu, mtia), each recording a formatted stack, which costs milliseconds per call here."""
    torch.default_generator.manual_seed(seed)
    if device_type != "cpu":
        seed_device = getattr(getattr(torch, device_type, None), "manual_seed", None)
        if callable(seed_device):
            seed_device(seed)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy ships with torch's test utilities
        pass


def generate_samples(op: Any, dtype: torch.dtype, device: str = "cpu") -> list[Any]:
    """The op's sample inputs for dtype (for the CPU; `meta` only to learn their structure),
    regenerated identically in any process (seeded once per (op, variant, dtype)).

    The OpInfo's ``sample_inputs_func``, as ``OpInfo.sample_inputs`` calls it, without the
    wrapper meant for unittest runs: it reseeds with torch.manual_seed before every sample and
    walks the stack for a test function (inspect.stack) once per call, together more than the
    samples themselves cost."""
    seed_everything(seed_of(op.name, op.variant_test_name, dtype_name(dtype)))
    return list(op.sample_inputs_func(op, device, dtype, wants_backward(op, dtype)))


def cpu_pinned(op: Any, dtype: torch.dtype, samples: list[Any]) -> list[frozenset[int]]:
    """Per sample, the positions (in `map_sample`'s order) of the tensors op_db's generator puts on
    the CPU whatever the device it is asked for, e.g. ``tensor_split``'s index tensor, which the
    op requires on the CPU. PyTorch's test_compare_cpu generates samples on the device, so those
    stay on the CPU there; we generate for the CPU, so we ask the generator once more for the
    ``meta`` device (cheap, same seed) and read which tensors it left on the CPU. A generator that
    cannot run on meta, or a sample whose structure differs there, pins nothing (all move)."""
    pinned = [frozenset()] * len(samples)
    try:
        meta = generate_samples(op, dtype, "meta")
    except Exception:  # noqa: BLE001 - a generator that needs real values: nothing to learn
        return pinned
    for i, (real, probe) in enumerate(zip(samples, meta)):
        if fingerprint(real) != fingerprint(probe):
            continue
        on_cpu: set[int] = set()
        map_sample(probe, lambda k, t, on_cpu=on_cpu: on_cpu.add(k) if t.device.type == "cpu" else None)
        pinned[i] = frozenset(on_cpu)
    return pinned


def map_sample(
    sample: Any,
    on_tensor: Callable[[int, torch.Tensor], Any],
    on_other: Callable[[str | None, Any], Any] | None = None,
) -> Any:
    """A copy of the sample with ``on_tensor(position, tensor)`` for each tensor, positions counted
    in one fixed order (input, args, kwargs; named tuples are opaque), and ``on_other(key, value)``
    for every other leaf (key: its kwarg name, if any)."""
    from torch.testing._internal.opinfo.core import SampleInput

    position = iter(range(1 << 30))

    def walk(x: Any, key: str | None = None) -> Any:
        if isinstance(x, torch.Tensor):
            return on_tensor(next(position), x)
        if on_other is not None:
            x = on_other(key, x)
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return tuple(walk(v) for v in x)
        if isinstance(x, dict):
            return {k: walk(v, k) for k, v in x.items()}
        return x

    return SampleInput(
        walk(sample.input),
        args=walk(tuple(sample.args)),
        kwargs=walk(dict(sample.kwargs)),
        output_process_fn_grad=sample.output_process_fn_grad,
        broadcasts_input=sample.broadcasts_input,
        name=sample.name,
    )


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        layout = "" if value.layout == torch.strided else str(value.layout)
        return ["T", list(value.shape), dtype_name(value.dtype), layout]
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return _ADDR.sub("0x?", repr(value))[:200]


def fingerprint(sample: Any) -> str:
    """8 hex digits over the sample's structure: tensor shapes, dtypes and layouts, and the
    non-tensor arguments (a dim, a reduction mode). Values are not hashed (they come from seeds)."""
    text = json.dumps(
        [_describe(sample.input), _describe(list(sample.args)), _describe(dict(sample.kwargs))],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def case_id(name: str, variant: str, dtype: str, index: int | None, shape_hash: str | None) -> str:
    """``add/float32/3-1f2e3d4c``; a variant rides after a colon: ``nn.functional.pad:reflect/...``;
    a (op, dtype) without samples ends in ``/-``."""
    op = f"{name}:{variant}" if variant else name
    tail = "-" if index is None else f"{index}-{shape_hash}"
    return f"{op}/{dtype}/{tail}"

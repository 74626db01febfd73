"""The device's settings: every ``NEURON_*`` variable, read here and nowhere else in the device.

    from backend import settings
    settings.current().compiler          # $NEURON_COMPILER: "interpreter" (unset) or "inductor"
    settings.Settings.compiler.name      # "NEURON_COMPILER"

`current()` is a view of the environment as it is now: each field reads its variable when it is
used, so a test or benchmark that changes a variable sees the change at the next use, and a
malformed value fails only the code that uses it, with a `SettingsError` (a ValueError) naming the
variable, the value and what it accepts. An empty value counts as unset.

Some settings are state of the device, read once at ``import backend`` and changed afterwards
through a setter (fallback mode, precision, memory capacity, model code roots, planted faults,
adaptive eager, the autograd thread); the native fast path is decided once, on first use; the
lowering table is read on first use and by ``set_table(None)``; the others are read on every use.

| variable | field | default | meaning |
|---|---|---|---|
| NEURON_ADAPTIVE_EAGER | adaptive_eager | off | adaptive eager on at import (`backend.adaptive`) |
| NEURON_ADAPTIVE_MIN_REPEATS | adaptive_min_repeats | 2 | sightings of an eager run before it compiles |
| NEURON_AUTOGRAD_THREAD | autograd_thread | `caller` (CPU-only torch), else `device` | backward thread |
| NEURON_CACHE_DIR | cache_dir | <user cache>/neuron-coverage-harness/neff-cache | NEFF cache, disk level |
| NEURON_CACHE_MAX_BYTES | cache_max_bytes | 536870912 (512 MiB) | NEFF cache, memory level: bytes |
| NEURON_CACHE_MAX_ENTRIES | cache_max_entries | 1024 | NEFF cache, memory level: entries |
| NEURON_COMPILER | compiler | interpreter | what runs a compiled partition: `interpreter` or `inductor` |
| NEURON_COMPILE_COST_SCALE | compile_cost_scale | 1.0 | factor (>= 0) on the simulated compile time |
| NEURON_COMPILE_FALLBACK | compile_fallback | raise | a failed compile `raise`s, or its graph runs `eager` |
| NEURON_COMPILE_INJECT_FAILURE | compile_inject_failure | off | every partition compile fails (for tests) |
| NEURON_FALLBACK_MODE | fallback_mode | record | a CPU fallback is recorded (`record`), warned or raised |
| NEURON_FAULTS | faults | None | a fault file planted at import (`backend.faults`) |
| NEURON_FAULT_LOG | fault_log | None | file: a JSON line per fault when it first fires in a process |
| NEURON_LOWERING_TABLE | lowering_table | None (backend/lowering_table.yaml) | the lowering table file |
| NEURON_MEMORY_CAPACITY | memory_capacity | 96 GiB | device memory: bytes or a size (`512MiB`, `1.5GB`) |
| NEURON_MODEL_CODE_ROOTS | model_code_roots | () | model code directories besides transformers/models/ |
| NEURON_NATIVE | native | on | use the native fast path (`backend.native`) |
| NEURON_PRECISION | precision | bf16 | `bf16` (fp32 matmul inputs rounded, as the hardware) or `exact` |
| NEURON_SHARED_CACHE_DIR | shared_cache_dir | None | NEFF cache, shared level: a directory or `<scheme>://` |

Switches (`on`/`off`) accept 1, true, yes, on and 0, false, no, off. The native build also follows
the variables of its toolchain, read here too: TORCH_EXTENSIONS_DIR (`torch_extensions_dir`,
torch's build root), CXX (`cxx`, default ``c++``) and PATH (`path`, where ninja and the compiler
are found; `path_prepended` extends it for the build).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from backend.errors import SettingsError

APP_NAME = "neuron-coverage-harness"

FALLBACK_MODES = ("record", "warn", "error")
PRECISION_MODES = ("bf16", "exact")
#: names users give the two precision modes
PRECISION_ALIASES = {
    "default": "bf16",
    "auto": "bf16",
    "autocast": "bf16",
    "bf16": "bf16",
    "exact": "exact",
    "fp32": "exact",
}
AUTOGRAD_THREADS = ("caller", "device")
COMPILERS = ("interpreter", "inductor")
COMPILE_FALLBACK_MODES = ("raise", "eager")
DEFAULT_MEMORY_CAPACITY = 96 << 30  # one Trainium2 device

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}

T = TypeVar("T")


def parse_bytes(text: str | int) -> int:
    """'96GiB' -> 103079215104; '1.5GB' -> 1500000000; 4096 -> 4096. Raises ValueError."""
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(
                f"cannot parse memory size {text!r}: use bytes or a number with a unit "
                f"(KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            )
        value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"memory capacity must be positive, got {text!r}")
    return value


def _switch(raw: str) -> bool:
    value = raw.lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(raw)


def _one_of(choices: tuple[str, ...], aliases: Mapping[str, str] | None = None) -> Callable[[str], str]:
    table = dict(aliases or {c: c for c in choices})

    def parse(raw: str) -> str:
        value = raw.lower()
        if value not in table:
            raise ValueError(raw)
        return table[value]

    return parse


def _count(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(raw)
    return value


def _positive(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError(raw)
    return value


def _scale(raw: str) -> float:
    value = float(raw)
    if not value >= 0 or value == float("inf"):
        raise ValueError(raw)
    return value


def _roots(raw: str) -> tuple[str, ...]:
    return tuple(p for p in raw.split(os.pathsep) if p)


def _default_cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME)) / "neff-cache"


def _or(words: tuple[str, ...]) -> str:
    return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]


_SWITCH = f"a switch: {_or(_ON)} (on) or {_or(_OFF)} (off)"


@dataclass(frozen=True)
class Variable(Generic[T]):
    """One variable: its name, default, rule and meaning. A field of `Settings` (a descriptor:
    ``settings.compiler`` is the value, ``Settings.compiler`` this description)."""

    name: str
    default: T
    parse: Callable[[str], T]
    accepts: str  # what the error message says the variable accepts
    meaning: str
    default_factory: Callable[[], T] | None = None
    strip: bool = True  # paths keep their spaces
    field_name: str = field(default="", init=False)  # set by Settings: the attribute's name

    def __set_name__(self, owner: type, name: str) -> None:
        object.__setattr__(self, "field_name", name)

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Variable[T]: ...
    @overload
    def __get__(self, obj: Settings, owner: type | None = None) -> T: ...
    def __get__(self, obj: Settings | None, owner: type | None = None) -> T | Variable[T]:
        if obj is None:
            return self
        return self.read(obj.env)

    def read(self, env: Mapping[str, str]) -> T:
        raw = env.get(self.name) or ""
        value = raw.strip() if self.strip else raw
        if not value.strip():
            return self.default_factory() if self.default_factory is not None else self.default
        try:
            return self.parse(value)
        except (ValueError, TypeError):
            raise SettingsError(self.name, raw, self.accepts) from None


def _path(raw: str) -> Path:
    return Path(raw).expanduser()


@dataclass(frozen=True)
class Settings:
    """The device's settings over one environment (``os.environ`` itself: read live)."""

    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    adaptive_eager = Variable(
        "NEURON_ADAPTIVE_EAGER", False, _switch, _SWITCH, "turn adaptive eager on at import"
    )
    adaptive_min_repeats = Variable(
        "NEURON_ADAPTIVE_MIN_REPEATS",
        2,
        _positive,
        "a whole number >= 1",
        "times an eager run is seen before it is compiled in the background",
    )
    autograd_thread = Variable[str | None](
        "NEURON_AUTOGRAD_THREAD",
        None,
        _one_of(AUTOGRAD_THREADS),
        _or(AUTOGRAD_THREADS),
        "where the autograd engine runs the device's backward",
    )
    cache_dir = Variable(
        "NEURON_CACHE_DIR",
        Path(),
        _path,
        "a directory",
        "the NEFF cache's local disk level",
        default_factory=_default_cache_dir,
        strip=False,
    )
    cache_max_bytes = Variable(
        "NEURON_CACHE_MAX_BYTES",
        512 * 1024 * 1024,
        _count,
        "a whole number of bytes >= 0",
        "bytes of the NEFF cache's memory level",
    )
    cache_max_entries = Variable(
        "NEURON_CACHE_MAX_ENTRIES",
        1024,
        _count,
        "a whole number >= 0",
        "entries of the NEFF cache's memory level",
    )
    compiler = Variable(
        "NEURON_COMPILER",
        "interpreter",
        _one_of(COMPILERS),
        _or(COMPILERS),
        "what runs a compiled partition",
    )
    compile_cost_scale = Variable(
        "NEURON_COMPILE_COST_SCALE",
        1.0,
        _scale,
        "a finite number >= 0",
        "factor on the simulated compile time",
    )
    compile_fallback = Variable(
        "NEURON_COMPILE_FALLBACK",
        "raise",
        _one_of(COMPILE_FALLBACK_MODES),
        _or(COMPILE_FALLBACK_MODES),
        "what a compile failure does",
    )
    compile_inject_failure = Variable(
        "NEURON_COMPILE_INJECT_FAILURE",
        False,
        _switch,
        _SWITCH,
        "every partition compile fails with CompileError (for tests)",
    )
    fallback_mode = Variable(
        "NEURON_FALLBACK_MODE",
        "record",
        _one_of(FALLBACK_MODES),
        _or(FALLBACK_MODES),
        "what a CPU fallback does besides being recorded",
    )
    faults = Variable[Path | None](
        "NEURON_FAULTS", None, _path, "a fault file", "a fault file planted at import"
    )
    fault_log = Variable[Path | None](
        "NEURON_FAULT_LOG",
        None,
        _path,
        "a file",
        "one JSON line per fault the first time it fires in a process",
        strip=False,
    )
    lowering_table = Variable[Path | None](
        "NEURON_LOWERING_TABLE",
        None,
        _path,
        "a YAML or JSON file",
        "the lowering table file",
        strip=False,
    )
    memory_capacity = Variable(
        "NEURON_MEMORY_CAPACITY",
        DEFAULT_MEMORY_CAPACITY,
        parse_bytes,
        "bytes or a size with a unit (KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 512MiB",
        "device memory",
    )
    model_code_roots = Variable[tuple[str, ...]](
        "NEURON_MODEL_CODE_ROOTS",
        (),
        _roots,
        f"directories separated by {os.pathsep!r}",
        "directories of model code besides transformers/models/",
        strip=False,
    )
    native = Variable("NEURON_NATIVE", True, _switch, _SWITCH, "use the native fast path")
    precision = Variable(
        "NEURON_PRECISION",
        "bf16",
        _one_of(PRECISION_MODES, PRECISION_ALIASES),
        f"{_or(PRECISION_MODES)} (or an alias: {', '.join(sorted(PRECISION_ALIASES))})",
        "the device's matmul precision",
    )
    shared_cache_dir = Variable[str | None](
        "NEURON_SHARED_CACHE_DIR",
        None,
        str,
        "a directory or <scheme>://...",
        "the NEFF cache's shared level",
        strip=False,
    )
    # the native build's toolchain (variables of torch and the system, not the device's own)
    torch_extensions_dir = Variable[Path | None](
        "TORCH_EXTENSIONS_DIR", None, _path, "a directory", "torch's build root", strip=False
    )
    cxx = Variable("CXX", "c++", str, "a C++ compiler", "the C++ compiler of the native build")
    path = Variable("PATH", "", str, "directories", "where programs are found", strip=False)

    def raw(self, name: str) -> str | None:
        """A variable's text as set (None when unset), for messages that quote it."""
        return self.env.get(name)


def variables() -> list[Variable[Any]]:
    """Every variable the device reads, in the order of `Settings`."""
    return [v for v in vars(Settings).values() if isinstance(v, Variable)]


def current() -> Settings:
    """The settings of the environment as it is now (each field read when used)."""
    return Settings(os.environ)


@contextlib.contextmanager
def path_prepended(dirs: list[str]) -> Iterator[str]:
    """PATH with `dirs` in front for the block (the native build's ninja and compiler lookups run
    in torch and its subprocesses, which read the process environment); yields the new PATH."""
    previous = os.environ.get("PATH")
    new = os.pathsep.join([*dirs, *([previous] if previous else [])])
    os.environ["PATH"] = new
    try:
        yield new
    finally:
        if previous is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = previous

"""Every public error above the device is a `HarnessError`, defined in its layer's errors module,
and still the built-in it is a kind of: a caller may catch `HarnessError`, the built-in, or the
class, and the classifier records it as before (its name, and timeout for a TimeoutError)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

from contracts.errors import HarnessError, classify
from contracts.status import Status

#: layer -> the one module holding its public errors
ERRORS_MODULE = {
    "contracts": "contracts.errors",
    "agents": "agents.errors",
    "registry": "registry.errors",
    "reports": "reports.errors",
    "harness": "harness.errors",
}


def layer_modules(layer: str) -> list[str]:
    """Every module of a layer (`__main__` modules run a command when imported: left out)."""
    package = importlib.import_module(layer)
    names = [m.name for m in pkgutil.walk_packages(package.__path__, f"{layer}.")]
    return [layer, *(n for n in names if not n.endswith("__main__"))]


def stray_errors(module: types.ModuleType, errors_module: str) -> list[str]:
    """The public Exception subclasses a module defines that are not HarnessErrors of the layer's
    errors module. BaseExceptions (a stop signal no `except Exception` may catch) and private
    classes (control flow that never leaves its module) are not public errors."""
    return [
        f"{module.__name__}.{name}"
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, Exception)
        and obj.__module__ == module.__name__
        and not name.startswith("_")
        and not (issubclass(obj, HarnessError) and module.__name__ == errors_module)
    ]


@pytest.fixture(scope="module")
def public_errors() -> dict[str, type]:
    found = {}
    for errors_module in ERRORS_MODULE.values():
        module = importlib.import_module(errors_module)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == errors_module:
                found[name] = obj
    return found


@pytest.mark.parametrize("layer", sorted(ERRORS_MODULE))
def test_every_public_error_of_a_layer_is_a_harness_error_of_its_errors_module(layer):
    stray = [
        stray
        for name in layer_modules(layer)
        for stray in stray_errors(importlib.import_module(name), ERRORS_MODULE[layer])
    ]
    assert stray == [], f"define these in {ERRORS_MODULE[layer]}, deriving from HarnessError"


def test_the_check_catches_an_error_defined_elsewhere_or_outside_the_base():
    module = types.ModuleType("registry.somewhere")
    exec(
        "class LooseError(ValueError): pass\n"
        "class _Private(Exception): pass\n"
        "class Stop(BaseException): pass\n",
        module.__dict__,
    )
    assert stray_errors(module, "registry.errors") == ["registry.somewhere.LooseError"]
    errors = types.ModuleType("registry.errors")
    exec("class LooseError(ValueError): pass\n", errors.__dict__)
    assert stray_errors(errors, "registry.errors") == ["registry.errors.LooseError"]


def test_the_errors_modules_hold_the_public_errors(public_errors):
    # a few of each layer: the walk above is not vacuous
    assert {
        "HarnessError",
        "RuleFileError",
        "AdapterError",
        "CrawlError",
        "RegistryFormatError",
        "SchemaVersionError",
        "ShrinkError",
        "WorkerDied",
    } <= set(public_errors)


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("AdapterError", TypeError),
        ("RuleFileError", ValueError),
        ("CrawlError", RuntimeError),
        ("RegistryFormatError", ValueError),
        ("UnreplayableError", ValueError),
        ("TooLargeError", ValueError),
        ("SchemaVersionError", ValueError),
        ("FormulaError", ValueError),
        ("MissingName", NameError),
        ("UnknownArchitecture", LookupError),
        ("ShrinkError", ValueError),
        ("ProbeTimeout", TimeoutError),
        ("RunDirMismatch", ValueError),
        ("TargetError", LookupError),
    ],
)
def test_each_error_is_still_its_builtin_kind(public_errors, name, builtin):
    assert issubclass(public_errors[name], HarnessError) and issubclass(public_errors[name], builtin)


def test_the_classifier_records_them_as_before():
    from harness.errors import ProbeTimeout, ShrinkError, WorkerDied

    timeout = classify(ProbeTimeout("probe took longer than 5s"))
    assert (timeout.status, timeout.error_class) == (Status.TIMEOUT, "ProbeTimeout")
    shrink = classify(ShrinkError("bert", {"tiny": "hidden_size must divide num_heads"}))
    assert (shrink.status, shrink.error_class) == (Status.ERROR, "ShrinkError")
    assert shrink.message == "bert: cannot shrink: hidden_size must divide num_heads"
    died = WorkerDied(Status.CRASH, "signal 9", "WorkerDied", "worker killed")
    assert classify(died).error_class == "WorkerDied" and died.status is Status.CRASH
    with pytest.raises(ValueError, match="cannot shrink"):  # `except ValueError` callers still catch it
        raise ShrinkError("bert", {"tiny": "no"})

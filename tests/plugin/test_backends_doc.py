"""docs/backends.md's minimal adapter is a complete adapter: it implements every protocol member
and resolves through get_backend, activation included."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from contracts import backends
from contracts.errors import AdapterError

DOC = Path(__file__).resolve().parents[2] / "docs" / "backends.md"


def _minimal_adapter_source() -> str:
    section = DOC.read_text().split("## A minimal adapter", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


@pytest.fixture
def mybackend(monkeypatch):
    """A stand-in for the device package the example imports (its device is the CPU here)."""
    module = types.ModuleType("mybackend")
    module.__version__ = "1.2.3"
    module.enabled = 0
    module.enable = lambda: setattr(module, "enabled", module.enabled + 1)
    module.precision = lambda: "fp32"
    monkeypatch.setitem(sys.modules, "mybackend", module)
    return module


def test_the_minimal_adapter_implements_the_protocol_and_activates_once(mybackend):
    source = _minimal_adapter_source()
    assert len(source.splitlines()) <= 40  # minimal: the README shows it
    namespace: dict = {}
    exec(compile(source, str(DOC), "exec"), namespace)
    cls = namespace["MyDevBackend"]
    backends.register_backend("mydev-doc", cls)
    try:
        adapter = backends.get_backend("mydev-doc")
        assert backends.get_backend("mydev-doc") is adapter and mybackend.enabled == 1
        assert backends.check_adapter(adapter, "mydev-doc") is adapter and adapter.name == "mydev-doc"
        ident = backends.identity(adapter)
        assert ident["backend_kind"] == "real" and ident["backend_versions"]["mybackend"] == "1.2.3"
        assert ident["backend_settings"] == {"precision": "fp32"}
    finally:
        backends._REGISTERED.pop("mydev-doc", None)
        backends._CACHE.pop("mydev-doc", None)


def test_an_adapter_missing_members_is_refused_by_name():
    class Half:
        name, device_type = "half", "cpu"

    backends.register_backend("half-doc", lambda name: Half())
    try:
        with pytest.raises(AdapterError, match="device_scope") as err:
            backends.get_backend("half-doc")
        assert "activate" in str(err.value) and "BackendDefaults" in str(err.value)
    finally:
        backends._REGISTERED.pop("half-doc", None)

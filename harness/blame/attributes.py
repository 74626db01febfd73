"""Probes that read a failure's message: an attribute the modeling code reads that transformers'
own class never defines (a config field, an output field) is transformers' defect, whatever the
harness chose."""

from __future__ import annotations

import contextlib
import math
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from agents.quiet import quiet_transformers
from harness.blame import rules as rules_mod
from harness.errors import ProbeTimeout

_CONFIG_ATTRIBUTE = re.compile(r"'(\w+Config)' object has no attribute '(\w+)'")


def probe_config_attribute(text: str) -> dict[str, Any]:
    """A failure "'XConfig' object has no attribute 'y'": does X built from its own defaults (no
    harness change at all) have y? If not, transformers' modeling code reads a field its config
    class never defines. {} when the message is not of that form."""
    import transformers

    match = _CONFIG_ATTRIBUTE.search(text or "")
    if not match:
        return {}
    name, attribute = match.groups()
    out: dict[str, Any] = {"config_class": name, "attribute": attribute}
    try:
        with quiet_transformers(), deadline():
            default = getattr(transformers, name)()
    except Exception as exc:  # noqa: BLE001 - inconclusive
        return {**out, "status": "inconclusive", "error": f"{type(exc).__name__}: {str(exc)[:160]}"}
    present = hasattr(default, attribute)
    return {**out, "status": "present_in_default" if present else "missing_in_default"}


_OUTPUT_ATTRIBUTE = re.compile(r"'(\w+Output\w*)' object has no attribute '(\w+)'")


def probe_output_attribute(text: str) -> dict[str, Any]:
    """A failure "'XOutput' object has no attribute 'y'" where X is one of transformers' output
    dataclasses (`ModelOutput`) and y none of its fields: the modeling code reads what the
    output class it returns never holds (Llama-4 reads `image_outputs` from its language model's
    `MoeCausalLMOutputWithPast`). {} when the message is not of that form."""
    import dataclasses

    import transformers
    from transformers import modeling_outputs
    from transformers.utils import ModelOutput

    match = _OUTPUT_ATTRIBUTE.search(text or "")
    if not match:
        return {}
    name, attribute = match.groups()
    out: dict[str, Any] = {"output_class": name, "attribute": attribute}
    cls = getattr(modeling_outputs, name, None) or getattr(transformers, name, None)
    if not (isinstance(cls, type) and issubclass(cls, ModelOutput) and dataclasses.is_dataclass(cls)):
        return {**out, "status": "inconclusive", "why": "not a transformers output dataclass"}
    fields = sorted(f.name for f in dataclasses.fields(cls))
    return {**out, "fields": fields, "status": "field" if attribute in fields else "not_a_field"}


def probe_config_unset(text: str, default: Callable[[], Any]) -> dict[str, Any]:
    """A failure saying the config does not set a field the modeling code needs ("Could not find a
    `sliding_window` argument in the config, or it is not set": `unset_config_patterns`) where the
    unshrunk config (`default()`) holds that field and leaves it None at every level that has it:
    the harness kept the default's value, and the default cannot run that code whatever the inputs
    (Step-3.7 builds a sliding-window mask whatever its layer types; its default window is None).
    {} when the message is not of that form."""
    rule = next(
        (r for r in rules_mod.rules().unset_config_patterns if re.search(r.pattern, text or "")), None
    )
    if rule is None:
        return {}
    attribute = rule.field or re.search(rule.pattern, text or "").group(1)
    parent = rule.in_ or None  # a key of this dict field: left out of it is unset too
    out: dict[str, Any] = {"attribute": attribute}
    try:
        with quiet_transformers(), deadline():
            config = default()
    except Exception as exc:  # noqa: BLE001 - inconclusive
        return {**out, "status": "inconclusive", "error": f"{type(exc).__name__}: {str(exc)[:160]}"}
    found: dict[str, Any] = {}

    def walk(path: str, d: dict) -> None:
        for k, v in d.items():
            if k == attribute:
                found[f"{path}{k}"] = v
            elif isinstance(v, dict):
                if k == parent and attribute not in v:
                    found[f"{path}{k}.{attribute}"] = None
                walk(f"{path}{k}.", v)

    walk("", config.to_dict())
    out["config_class"] = type(config).__name__
    if found and all(v is None for v in found.values()):
        return {**out, "status": "unset_in_default", "unset_at": ", ".join(sorted(found))}
    return {
        **out,
        "status": "set_in_default" if found else "not_a_field",
        "values": {k: str(v)[:40] for k, v in found.items()},
    }


def probe_config_overflow(text: str, default: Callable[[], Any]) -> dict[str, Any]:
    """A failure "value cannot be converted to type float without overflow" (`overflow_config`)
    where the unshrunk config (`default()`) holds a finite number beyond that type's range: the
    modeling code hands a config value to a kernel of that type, and the harness kept the value
    (Nemotron-3-Ultra's `time_step_limit: [0.0, 1e+308]` as a clamp bound). {} when the message is
    not of that form."""
    import torch

    settings = rules_mod.rules().overflow_config
    match = next((m for p in settings.patterns if (m := re.search(p, text or ""))), None)
    if match is None:
        return {}
    dtype = getattr(torch, settings.types.get(match.group(1), ""), None)
    out: dict[str, Any] = {"type": match.group(1)}
    if not isinstance(dtype, torch.dtype):
        return {**out, "status": "inconclusive", "why": "a type the rules do not map to a torch dtype"}
    try:
        with quiet_transformers(), deadline():
            config = default()
    except Exception as exc:  # noqa: BLE001 - inconclusive
        return {**out, "status": "inconclusive", "error": f"{type(exc).__name__}: {str(exc)[:160]}"}
    limit = torch.finfo(dtype).max
    found: dict[str, float] = {}

    def walk(path: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{path}.{k}" if path else str(k), x)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(f"{path}[{i}]", x)
        elif isinstance(v, float) and math.isfinite(v) and abs(v) > limit:
            found[path] = v

    walk("", config.to_dict())
    out["dtype"] = str(dtype).removeprefix("torch.")
    if not found:
        return {**out, "status": "within_range"}
    return {
        **out,
        "status": "beyond_range_in_default",
        "fields": ", ".join(f"{k} = {v:g}" for k, v in sorted(found.items())),
    }


@contextlib.contextmanager
def deadline() -> Iterator[None]:
    """Bound a probe's time with SIGALRM where we can (the main thread), else run unbounded."""
    seconds = rules_mod.rules().probe.timeout
    if (
        seconds <= 0
        or threading.current_thread() is not threading.main_thread()
        or signal.getitimer(signal.ITIMER_REAL)[0] > 0
    ):  # off thread, or an outer alarm bounds us
        yield
        return

    def on_alarm(signum, frame):
        raise ProbeTimeout(f"probe exceeded {seconds:.0f}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_MODULE_ATTRIBUTE = re.compile(r"'(\w+)' object has no attribute '(\w+)'")


def probe_module_attribute(text: str, default_model: Callable[[], Any]) -> dict[str, Any]:
    """A failure "'XLayer' object has no attribute 'y'" where XLayer is a module of the model: does
    the model built from the unshrunk config (`default_model`, meta device) have XLayer modules,
    and does any of them hold y? None does: the forward reads a submodule its own config never
    builds (Blip2ForImageTextRetrieval reads the Q-Former's text `intermediate`, built only with
    `use_qformer_text_input`, which the default leaves off). {} when the message is not of that
    form or names no module of the model."""
    match = _MODULE_ATTRIBUTE.search(text or "")
    if not match:
        return {}
    name, attribute = match.groups()
    try:
        model = default_model()
    except Exception:  # noqa: BLE001 - no default model: not this probe's question
        return {}
    if not hasattr(sys.modules.get(type(model).__module__), name):  # not a module class of its modeling file
        return {}
    found = [m for m in model.modules() if type(m).__name__ == name]
    if not found:
        return {}
    out: dict[str, Any] = {"module_class": name, "attribute": attribute, "instances": len(found)}
    present = any(hasattr(m, attribute) for m in found)
    return {**out, "status": "present_in_default" if present else "missing_in_default"}

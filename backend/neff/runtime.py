"""Load a NEFF artifact into an executable that runs its whole graph on host tensors in one call.

The executable is an ``fx.GraphModule`` rebuilt from the artifact's JSON: straight-line Python
calling aten ops, with no per-op device dispatch (that is the speed-up over eager). Device
arguments are mapped to the host, and the artifact's precision flag applies the same rounding
of matmul-class inputs as the eager device, so compiled and eager results agree.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx

from backend.neff.format import (
    ALLOWED_NAMESPACES,
    _NAME_RE,
    Artifact,
    CorruptArtifactError,
    decode_tensor,
    parse_dtype,
)
from backend.neff import precision


def resolve_target(name: str) -> Callable[..., Any]:
    """``aten.addmm.default`` -> the OpOverload; refuses anything outside torch.ops namespaces."""
    if name == "operator.getitem":
        return operator.getitem
    parts = name.split(".")
    if len(parts) != 3 or parts[0] not in ALLOWED_NAMESPACES or not all(_NAME_RE.match(p) for p in parts):
        raise CorruptArtifactError(f"artifact calls {name!r}: only aten ops may be called")
    try:
        packet = getattr(getattr(torch.ops, parts[0]), parts[1])
        return getattr(packet, parts[2])
    except (AttributeError, RuntimeError):
        raise CorruptArtifactError(f"artifact calls unknown op {name!r}") from None


def _decode(value: Any, env: dict[str, torch.fx.Node]) -> Any:
    if isinstance(value, list):
        return [_decode(v, env) for v in value]
    if isinstance(value, dict):
        if "$node" in value:
            return env[value["$node"]]
        if "$tuple" in value:
            return tuple(_decode(v, env) for v in value["$tuple"])
        if "$dtype" in value:
            return parse_dtype(value["$dtype"])
        if "$device" in value:
            return torch.device("cpu")  # the executable runs on the host payloads
        if "$layout" in value:
            return getattr(torch, value["$layout"])
        if "$memory_format" in value:
            return getattr(torch, value["$memory_format"])
        if "$float" in value:
            return float(value["$float"])
        raise CorruptArtifactError(f"unknown encoded value {sorted(value)}")
    return value


class Executable:
    """A loaded artifact: ``exe(*host_tensors) -> list of host tensors``."""

    def __init__(self, artifact: Artifact, module: torch.fx.GraphModule) -> None:
        self.artifact = artifact
        self.module = module
        self.key = artifact.key

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        out = self.module(*args)
        return list(out) if isinstance(out, (list, tuple)) else [out]


def load_executable(artifact: Artifact) -> Executable:
    """Rebuild the graph from JSON (aten ops only) and generate its Python code with torch.fx."""
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    env: dict[str, torch.fx.Node] = {}
    constants = artifact.graph.get("constants", {})
    mode = precision.mode_of(artifact.flags)
    try:
        for spec in artifact.graph["nodes"]:
            name, kind = spec["name"], spec["op"]
            if not _NAME_RE.match(name):
                raise CorruptArtifactError(f"bad node name {name!r}")
            if kind == "placeholder":
                env[name] = graph.placeholder(name)
            elif kind == "get_attr":
                root.register_buffer(f"c_{name}", decode_tensor(constants[name]))
                env[name] = graph.get_attr(f"c_{name}")
            elif kind == "call_function":
                target = precision.wrap(resolve_target(spec["target"]), spec["target"], mode)
                args = tuple(_decode(spec["args"], env))
                kwargs = {k: _decode(v, env) for k, v in spec["kwargs"].items()}
                env[name] = graph.call_function(target, args, kwargs)
            elif kind == "output":
                graph.output(_decode(spec["args"], env))
            else:
                raise CorruptArtifactError(f"unknown node kind {kind!r}")
    except (KeyError, TypeError) as exc:
        raise CorruptArtifactError(f"malformed graph: {exc}") from None
    return Executable(artifact, torch.fx.GraphModule(root, graph))

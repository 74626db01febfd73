"""Load a NEFF artifact into an executable that runs its whole graph on host tensors in one call.

The executable is an ``fx.GraphModule`` rebuilt from the artifact's JSON: straight-line Python
calling aten ops, with no per-op device dispatch (that is the speed-up over eager). Device
arguments are mapped to the host, and the artifact's precision flag applies the same rounding
of matmul-class inputs as the eager device, so compiled and eager results agree.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from backend.errors import CorruptArtifactError
from backend.neff import precision
from backend.neff.format import (
    _NAME_RE,
    ALLOWED_NAMESPACES,
    Artifact,
    decode_tensor,
    parse_dtype,
)


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
    """A loaded artifact: ``exe(*host_tensors) -> list of host tensors``.

    With backend.native loaded it runs as a native program (the same aten calls in the same
    order, no Python per node); otherwise as the FX module's generated Python."""

    def __init__(
        self, artifact: Artifact, module: torch.fx.GraphModule, program: Any = None, compiled: Any = None
    ) -> None:
        self.artifact = artifact
        self.module = module
        self.program = program
        self.compiled = compiled  # Inductor's callable (NEURON_COMPILER=inductor), else None
        self.key = artifact.key

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        if self.compiled is not None:
            out = self.compiled(*args)
            return list(out) if isinstance(out, (list, tuple)) else [out]
        if self.program is not None:
            return self.program.run_host(args)
        out = self.module(*args)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def run_device(self, args: Any, on_device: list[bool]) -> list[Any] | None:
        """Device tensors in, outputs flagged `on_device` as device tensors: one native call.
        None without the native program (the caller converts and calls instead)."""
        if self.compiled is not None:
            from backend.neff.device import adopter, to_host

            outs = self(*[to_host(a) for a in args])
            adopt = adopter()
            return [adopt(o) if dev and isinstance(o, torch.Tensor) else o for o, dev in zip(outs, on_device)]
        if self.program is None:
            return None
        return self.program.run_device(args, on_device)


class _Ref:
    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot


def _program_value(value: Any, env: dict[str, Any]) -> Any:
    """A JSON argument with node references as `_Ref`s (constants decoded as for the FX module)."""
    if isinstance(value, dict) and "$node" in value:
        return env[value["$node"]]
    if isinstance(value, list):
        return [_program_value(v, env) for v in value]
    if isinstance(value, dict) and "$tuple" in value:
        return tuple(_program_value(v, env) for v in value["$tuple"])
    return _decode(value, {})


def _arg_spec(value: Any, arg_type: str = "") -> tuple:
    if isinstance(value, _Ref):
        return ("ref", value.slot)
    if isinstance(value, torch.Tensor):
        return ("const", value)
    if isinstance(value, (list, tuple)) and any(isinstance(v, (_Ref, torch.Tensor)) for v in value):
        # Tensor?[] (an index with None for the dims it skips) is "List[Optional[Tensor]]"
        kind = "optlist" if "Optional[Tensor]" in arg_type or "Tensor?" in arg_type else "list"
        return (kind, [_arg_spec(v) for v in value])
    return ("const", list(value) if isinstance(value, tuple) else value)


def _native_program(artifact: Artifact, mode: str) -> Any:
    """The artifact as a backend.native Program, or None (no extension, or a graph it cannot take)."""
    from backend import native

    mod = native.module()
    if mod is None:
        return None
    nodes = artifact.graph["nodes"]
    constants = artifact.graph.get("constants", {})
    env: dict[str, Any] = {}
    for spec in nodes:
        if spec["op"] == "placeholder":
            env[spec["name"]] = _Ref(len(env))
    ninputs = nslots = len(env)
    instrs: list[tuple] = []
    outputs: list[tuple] = []
    try:
        for spec in nodes:
            kind = spec["op"]
            if kind == "get_attr":
                env[spec["name"]] = decode_tensor(constants[spec["name"]])
            elif kind == "call_function":
                target = resolve_target(spec["target"])
                args = _program_value(spec["args"], env)
                kwargs = {k: _program_value(v, env) for k, v in spec["kwargs"].items()}
                out = nslots
                nslots += 1
                env[spec["name"]] = _Ref(out)
                if target is operator.getitem:
                    if not isinstance(args[0], _Ref) or not isinstance(args[1], int):
                        return None
                    instrs.append(("getitem", args[0].slot, args[1], out))
                    continue
                schema = target._schema
                specs = []
                for i, a in enumerate(schema.arguments):
                    if i < len(args):
                        specs.append(_arg_spec(args[i], str(a.type)))
                    elif a.name in kwargs:
                        specs.append(_arg_spec(kwargs[a.name], str(a.type)))
                    else:
                        specs.append(None)
                names = precision.device_precision.rounded_args(spec["target"]) if mode == "bf16" else ()
                rounded = [i for i, a in enumerate(schema.arguments) if a.name in names]
                instrs.append(("call", schema.name, schema.overload_name, specs, rounded, out))
            elif kind == "output":
                result = _program_value(spec["args"], env)
                outputs = [_arg_spec(v) for v in (result if isinstance(result, (list, tuple)) else [result])]
        return mod.Program(ninputs, nslots, instrs, outputs)
    except Exception:  # noqa: BLE001 - anything unexpected: the FX module runs it instead
        return None


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
    module = torch.fx.GraphModule(root, graph)
    if artifact.flags.get("compiler") == "inductor":
        from backend.neff import inductor

        compiled = getattr(artifact, "compiled", None) or inductor.compile_module(module, artifact.inputs)
        return Executable(artifact, module, None, compiled)
    return Executable(artifact, module, _native_program(artifact, mode))

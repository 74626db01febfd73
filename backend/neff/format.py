"""The NEFF artifact format: an FX aten graph as JSON, its specs, and a checksummed envelope.

Why JSON and not pickle: artifacts come from a shared cache other machines fill, so loading one
must never execute anything but aten ops. Targets are written as ``aten.addmm.default`` and
resolved back through ``torch.ops`` only (plus ``operator.getitem``); anything else is refused.

On disk an artifact is ``SIMNEFF <format> sha256=<hex> size=<n>\\n`` followed by the JSON body;
a wrong size or checksum raises :class:`~backend.errors.CorruptArtifactError` (the cache removes
and recompiles).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import operator
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.fx

from backend.errors import CorruptArtifactError, UnsupportedGraphError

FORMAT = "simneff"
FORMAT_VERSION = 1
_MAGIC = b"SIMNEFF"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: op namespaces an artifact may call; a loaded artifact can never reach arbitrary Python.
ALLOWED_NAMESPACES = ("aten", "prims")


@dataclass(frozen=True)
class TensorSpec:
    """Static shape, stride and dtype of one partition input or output."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, t: Any) -> TensorSpec:
        shape, stride = tuple(t.shape), tuple(t.stride())
        for s in (*shape, *stride):
            if not isinstance(s, int):
                raise UnsupportedGraphError(
                    f"symbolic shape {list(shape)}: the neuron compiler needs static shapes"
                )
        return cls(shape, stride, dtype_name(t.dtype))

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "stride": list(self.stride), "dtype": self.dtype}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TensorSpec:
        return cls(tuple(d["shape"]), tuple(d["stride"]), str(d["dtype"]))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None) if _NAME_RE.match(name) else None
    if not isinstance(dt, torch.dtype):
        raise CorruptArtifactError(f"unknown dtype {name!r}")
    return dt


# --------------------------------------------------------------------------- graph -> JSON


def target_name(target: Any) -> str:
    """``aten.addmm.default`` for an OpOverload; raises for targets an artifact cannot hold."""
    if target is operator.getitem:
        return "operator.getitem"
    if isinstance(target, torch._ops.OpOverload) and target.namespace in ALLOWED_NAMESPACES:
        return str(target)
    raise UnsupportedGraphError(f"cannot compile call to {target!r}: not an aten op")


def _encode(value: Any, names: dict[torch.fx.Node, str]) -> Any:
    if isinstance(value, torch.fx.Node):
        return {"$node": names[value]}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, (list, tuple)):
        items = [_encode(v, names) for v in value]
        return items if isinstance(value, list) else {"$tuple": items}
    if isinstance(value, torch.dtype):
        return {"$dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"$device": value.type}
    if isinstance(value, torch.layout):
        return {"$layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"$memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise UnsupportedGraphError("symbolic value in graph: the neuron compiler needs static shapes")
    raise UnsupportedGraphError(f"cannot serialize graph argument of type {type(value).__name__}")


def encode_tensor(t: torch.Tensor) -> dict[str, Any]:
    t = t.detach().to("cpu").contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return {"dtype": dtype_name(t.dtype), "shape": list(t.shape), "data": base64.b64encode(raw).decode()}


def decode_tensor(d: dict[str, Any]) -> torch.Tensor:
    dtype = parse_dtype(d["dtype"])
    raw = base64.b64decode(d["data"])
    shape = [int(s) for s in d["shape"]]
    if not raw:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)
    return flat.reshape(shape).clone()


def serialize_graph(gm: torch.fx.GraphModule) -> dict[str, Any]:
    """The graph as JSON with canonical node names (v0, v1, ...), so cosmetic renames hash equal."""
    names: dict[torch.fx.Node, str] = {}
    nodes: list[dict[str, Any]] = []
    constants: dict[str, Any] = {}
    for i, node in enumerate(gm.graph.nodes):
        name = f"v{i}"
        names[node] = name
        if node.op == "placeholder":
            nodes.append({"name": name, "op": "placeholder"})
        elif node.op == "get_attr":
            value = _fetch_attr(gm, str(node.target))
            if not isinstance(value, torch.Tensor):
                raise UnsupportedGraphError(f"get_attr {node.target!r} is not a tensor")
            constants[name] = encode_tensor(value)
            nodes.append({"name": name, "op": "get_attr"})
        elif node.op == "call_function":
            nodes.append(
                {
                    "name": name,
                    "op": "call_function",
                    "target": target_name(node.target),
                    "args": _encode(list(node.args), names),
                    "kwargs": {k: _encode(v, names) for k, v in node.kwargs.items()},
                }
            )
        elif node.op == "output":
            nodes.append({"name": name, "op": "output", "args": _encode(node.args[0], names)})
        else:
            raise UnsupportedGraphError(f"cannot compile FX node kind {node.op!r} ({node.target})")
    return {"nodes": nodes, "constants": constants}


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def graph_ops(graph_doc: dict[str, Any]) -> list[str]:
    """The op targets of a serialized graph, in order (what the cost model counts)."""
    return [n["target"] for n in graph_doc["nodes"] if n["op"] == "call_function"]


# --------------------------------------------------------------------------- key and envelope


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def cache_key(
    graph_doc: dict[str, Any],
    inputs: list[TensorSpec],
    table_version: str,
    flags: dict[str, Any],
    compiler_version: str,
) -> str:
    """sha256 of exactly what determines the artifact: graph, input specs, table, flags, compiler."""
    material = {
        "format": [FORMAT, FORMAT_VERSION],
        "compiler": compiler_version,
        "graph": graph_doc,
        "inputs": [s.to_json() for s in inputs],
        "lowering_table_version": table_version,
        "flags": flags,
    }
    return hashlib.sha256(_canonical(material)).hexdigest()


@dataclass
class Artifact:
    """One compiled partition. `to_bytes()` is what every cache level stores."""

    key: str
    graph: dict[str, Any]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    lowering_table_version: str
    flags: dict[str, Any]
    compiler_version: str
    compile_seconds: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["inputs"] = [s.to_json() for s in self.inputs]
        d["outputs"] = [s.to_json() for s in self.outputs]
        d["format"] = FORMAT
        d["format_version"] = FORMAT_VERSION
        return d

    def to_bytes(self) -> bytes:
        body = _canonical(self.to_json())
        digest = hashlib.sha256(body).hexdigest()
        header = f"{_MAGIC.decode()} {FORMAT_VERSION} sha256={digest} size={len(body)}\n".encode()
        return header + body

    @classmethod
    def from_bytes(cls, data: bytes, expected_key: str | None = None) -> Artifact:
        """Verify envelope, size and checksum, then parse. Raises CorruptArtifactError."""
        head, sep, body = data.partition(b"\n")
        parts = head.decode("ascii", "replace").split(" ")
        if not sep or len(parts) != 4 or parts[0] != _MAGIC.decode():
            raise CorruptArtifactError("not a SIMNEFF artifact (bad header)")
        if parts[1] != str(FORMAT_VERSION):
            raise CorruptArtifactError(f"unsupported SIMNEFF format version {parts[1]}")
        try:
            digest = parts[2].removeprefix("sha256=")
            size = int(parts[3].removeprefix("size="))
        except ValueError as exc:
            raise CorruptArtifactError(f"bad header: {exc}") from None
        if len(body) != size:
            raise CorruptArtifactError(f"truncated artifact: {len(body)} of {size} bytes")
        if hashlib.sha256(body).hexdigest() != digest:
            raise CorruptArtifactError("checksum mismatch")
        try:
            d = json.loads(body)
            art = cls(
                key=str(d["key"]),
                graph=d["graph"],
                inputs=[TensorSpec.from_json(s) for s in d["inputs"]],
                outputs=[TensorSpec.from_json(s) for s in d["outputs"]],
                lowering_table_version=str(d["lowering_table_version"]),
                flags=dict(d["flags"]),
                compiler_version=str(d["compiler_version"]),
                compile_seconds=float(d.get("compile_seconds", 0.0)),
                meta=dict(d.get("meta", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptArtifactError(f"malformed artifact body: {exc}") from None
        if expected_key is not None and art.key != expected_key:
            raise CorruptArtifactError(f"artifact key {art.key[:12]} is not {expected_key[:12]}")
        return art

"""One aten call on the device and the same call on the reference: copy, recompute, judge, place.

The shadow (harness.rootcause.shadow) and the compiled routes judge a call the same way: its
device inputs are copied to the CPU, the same overload runs there as the device computes
(harness.stages.reference: the declared input rounding) once in the inputs' own dtype (the
float32 *eager* run) and once upcast to float64 (the *truth*), and each output of the device is
held against them by the numerics gate of its tolerance class (harness/data/numerics.yaml through
harness.stages.compare): allclose, else the fp64-RMSE gate with the float32 run as the yardstick.
So a call is blamed only for its own error, never for what its inputs brought with them.

Calls that compute nothing to compare are passed by: views and aliases, random ops (their values
differ by design), ops whose outputs are uninitialized memory (registry op semantics).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

from contracts.rootcause import Mismatch
from harness.stages.compare import compare, tolerance, tolerance_class
from harness.stages.reference import DeviceRounding
from registry.constraints import is_metadata_only, metadata_only_outputs

CPU = torch.device("cpu")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


# ------------------------------------------------------------------------------ which calls


def involves(device_type: str, args: Any, kwargs: Any) -> bool:
    """Does the call touch the device (a tensor on it, or a device argument naming it)?"""
    for leaf in tree_flatten((args, kwargs))[0]:
        if isinstance(leaf, torch.Tensor):
            if leaf.device.type == device_type:
                return True
        elif isinstance(leaf, torch.device) and leaf.type == device_type:
            return True
    return False


def skip_reason(func: Any) -> str:
    """Why a call has nothing to compare ("" when it has): a pure alias (view), a random op, an op
    whose outputs are uninitialized memory."""
    if any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns):
        return "view"
    if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
        return "random"
    if is_metadata_only(str(func)):
        return "uninitialized"
    return ""


def decomposition(func: Any, device_key: str) -> str:
    """The composite kernel the device runs `func` as, when it has no kernel of its own
    ("CompositeImplicitAutograd", "CompositeExplicitAutograd"; "" when it has one): the device
    never sees `func`, only the calls of its decomposition, so those are what is judged."""
    name, has = func.name(), torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        if has(name, device_key):
            return ""
        if has(name, "CompositeImplicitAutograd"):
            return "CompositeImplicitAutograd"
        if has(name, "CompositeExplicitAutograd") and not has(name, "CompositeExplicitAutogradNonFunctional"):
            return "CompositeExplicitAutograd"
    except RuntimeError:
        pass
    return ""


def mode_below() -> bool:
    """Is a dispatch mode below the running one (a backend that computes calls in its own
    TorchDispatchMode)? It receives each call whole, before any kernel of the device's dispatch
    key, so the call is what the device computes: decomposing it would hand the device calls it
    never makes (and a composite kernel its dispatch key never registered)."""
    return torch._C._len_torch_dispatch_stack() > 0


def fake(args: Any, kwargs: Any) -> bool:
    """A call on fake tensors (tracing): there are no values to compare."""
    from torch._subclasses.fake_tensor import FakeTensor

    return any(isinstance(x, FakeTensor) for x in tree_flatten((args, kwargs))[0])


def call_op(func: Any, args: tuple, kwargs: dict) -> Any:
    """Call an overload. A wrapped-number tensor of a decomposition (`remainder.Scalar` calls
    `.Tensor` with `2`) reaches a dispatch mode as a Python number: the overload packet resolves
    it, as PyTorch does (harness.stages.reference.DeviceRounding does the same)."""
    try:
        return func(*args, **kwargs)
    except RuntimeError as exc:
        if "Expected a value of type 'Tensor'" not in str(exc) or not hasattr(func, "overloadpacket"):
            raise
        return func.overloadpacket(*args, **kwargs)


# ------------------------------------------------------------------------------ copies


def to_cpu(x: torch.Tensor) -> torch.Tensor:
    """A device tensor's values in a CPU tensor (detached; strides kept where the layout is dense),
    through `aten._to_copy`, the copy every device implements. Not `Tensor.to`: a backend that
    computes in its own dispatch mode may lower `aten.to` as a no-op that stays on the device,
    and a "reference" on the device would judge the device against itself. Raises when the copy
    is not on the CPU."""
    if x.device.type == "cpu":
        return x.detach()
    out = torch.ops.aten._to_copy.default(x.detach(), device=CPU)
    if not isinstance(out, torch.Tensor) or out.device.type != "cpu":
        raise TypeError(f"a {x.device.type} tensor copied to the CPU stayed on {out.device.type}")
    return out


def to_reference(value: Any, device_type: str) -> Any:
    """Device tensors copied to the CPU (detached; strides kept where the layout is dense), device
    arguments naming the device made the CPU's; everything else as is."""

    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.device.type == device_type:
            return to_cpu(x)
        if isinstance(x, torch.Tensor):
            return x.detach()
        if isinstance(x, torch.device) and x.type == device_type:
            return CPU
        return x

    return tree_map(move, value)


def upcast(value: Any) -> Any:
    """Floating tensors in float64 (the truth's inputs)."""
    return tree_map(
        lambda x: x.to(torch.float64) if isinstance(x, torch.Tensor) and x.dtype in _FLOATS else x, value
    )


def clone_tree(value: Any) -> Any:
    """A structure with its tensors cloned (a reference call may write into its inputs)."""
    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, value)


# ------------------------------------------------------------------------------ outputs


def outputs(func: Any, result: Any, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of what a call produced: its returned tensors ("0", "1", ...) and the
    arguments it wrote ("self", "out"): in-place and out= calls are judged by what they wrote."""
    flat = result if isinstance(result, (list, tuple)) else [result]
    named: list[tuple[str, torch.Tensor]] = []
    for i, r in enumerate(flat):
        if isinstance(r, torch.Tensor):
            named.append((str(i), r))
        elif isinstance(r, (list, tuple)):
            named += [(f"{i}.{j}", t) for j, t in enumerate(r) if isinstance(t, torch.Tensor)]
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        items = value if isinstance(value, (list, tuple)) else [value]
        named += [(arg.name, t) for t in items if isinstance(t, torch.Tensor)]
    skip = {str(i) for i in metadata_only_outputs(str(func))}
    return [(n, t) for n, t in named if n not in skip]


# ------------------------------------------------------------------------------ the reference


@dataclass
class ReferenceCall:
    """The same call on the CPU: its float32 outputs (`eager`), float64 ones (`truth`, None when the
    call cannot run upcast) and the error when even the float32 call raised."""

    eager: list[tuple[str, torch.Tensor]] | None
    truth: list[tuple[str, torch.Tensor]] | None
    error: str = ""


def recompute(
    func: Any,
    args: tuple,
    kwargs: dict,
    rounding: DeviceRounding | None,
    named: Callable[[Any, tuple, dict], list[tuple[str, torch.Tensor]]] | None = None,
) -> ReferenceCall:
    """Run `func` (an op overload, or any callable whose outputs `named` names) on the CPU copies
    of a device call's inputs, as the device computes, on the CPU itself (no dispatch mode of the
    backend's below)."""
    named = named or (lambda out, a, k: outputs(func, out, a, k))

    def run(a: tuple, k: dict) -> list[tuple[str, torch.Tensor]]:
        a, k = clone_tree(a), clone_tree(k)
        # outside the dispatch modes below the caller's: a backend's own mode would compute the
        # "reference" on the device (a factory call's device argument is the backend's to ignore)
        with _disable_current_modes(), torch.no_grad():
            if rounding is not None:
                with rounding:
                    out = call_op(func, a, k)
            else:
                out = call_op(func, a, k)
        return named(out, a, k)

    try:
        eager = run(args, kwargs)
    except Exception as exc:  # noqa: BLE001 - the reference's refusal is the answer
        return ReferenceCall(None, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    if not any(t.dtype in _FLOATS for _, t in eager):
        return ReferenceCall(eager, None)
    try:
        truth = run(upcast(args), upcast(kwargs))
    except Exception:  # noqa: BLE001 - no float64 kernel (or mixed dtypes it rejects): float32 only
        truth = None
    return ReferenceCall(eager, truth)


# ------------------------------------------------------------------------------ the gate


def tie_outputs(func: Any) -> frozenset[str]:
    """The outputs of an overload that index its `values` output (the schema names them
    `indices`): which of equal elements they name is the kernel's choice."""
    try:
        returns = func._schema.returns
    except AttributeError:
        return frozenset()
    return frozenset(str(i) for i, r in enumerate(returns) if r.name == "indices")


def unordered_dim(func: Any, args: tuple, kwargs: dict) -> int | None:
    """The dim along which a call's `values` and `indices` outputs come in no defined order (its
    schema's `sorted` argument is False: `topk(sorted=False)`); None when their order is defined."""
    try:
        schema = func._schema
    except AttributeError:
        return None
    if [r.name for r in schema.returns] != ["values", "indices"]:
        return None
    given: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            given[arg.name] = args[i]
        elif arg.name in kwargs:
            given[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            given[arg.name] = arg.default_value
    if given.get("sorted", True) is not False or not isinstance(given.get("dim"), int):
        return None
    return given["dim"]


def in_value_order(named: list[tuple[str, torch.Tensor]] | None, dim: int) -> list | None:
    """`values` ("0") and `indices` ("1") outputs put in ascending value order along `dim`, so two
    kernels free to order them differently compare equal."""
    if not named:
        return named
    out = dict((n, to_cpu(t)) for n, t in named)
    values = out.get("0")
    if values is None or values.dim() == 0:
        return named
    order = torch.argsort(values, dim=dim, stable=True)
    return [(n, torch.gather(t, dim, order) if n in ("0", "1") else t) for n, t in out.items()]


def judge(
    device: list[tuple[str, torch.Tensor]],
    ref: ReferenceCall,
    undeclared_rounding: bool,
    ties: frozenset[str] = frozenset(),
) -> tuple[Mismatch, dict[str, Any]] | None:
    """The first output of a device call that fails its tolerance class, with the gate's evidence;
    None when every output passes. Integers and booleans must be equal in value (an index the
    device keeps in another integer width is the same index), except where a floating output of
    the same call agrees, or an output of `ties` whose call's other outputs all agree (a tie broken
    another way: max/topk/sort indices)."""
    eager = dict(ref.eager or [])
    truth = dict(ref.truth or [])
    ints: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    floats_agree = False
    for name, actual in device:
        expected = eager.get(name)
        if expected is None:
            continue
        actual = to_cpu(actual)
        if not (expected.is_floating_point() or expected.is_complex()):
            ints.append((name, actual, expected))
            continue
        tol = tolerance(tolerance_class(actual.dtype, undeclared_rounding=undeclared_rounding))
        t = truth.get(name)
        if t is not None and t.shape == expected.shape:
            c = compare(actual, t, expected, name=name, tol=tol, cosine=False)
        else:
            c = compare(actual, expected, None, name=name, tol=tol, cosine=False)
        if c.passed:
            floats_agree = True
            continue
        return _mismatch(name, actual, t if t is not None else expected, tol.atol, tol.rtol, tol.name), {
            "method": c.method,
            "rmse": c.rmse,
            "eager_rmse": c.eager_rmse,
            "allowed_rmse": c.allowed_rmse,
            "reference": "cpu_float64" if t is not None else "cpu_float32",
            "reason": c.reason,
        }
    differ = [
        (name, actual, expected)
        for name, actual, expected in ints
        if not (actual.shape == expected.shape and torch.equal(actual.to(expected.dtype), expected))
    ]
    values_agree = bool(ties) and all(name in ties for name, _, _ in differ)
    for name, actual, expected in differ:
        if (floats_agree or values_agree) and actual.shape == expected.shape:
            continue  # the values agree; which of equal elements an index names may differ
        return _mismatch(name, actual, expected, 0.0, 0.0, "exact"), {
            "method": "exact",
            "reference": "cpu",
            "reason": f"{name}: integer output differs from the reference",
        }
    return None


def _mismatch(
    name: str, actual: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, cls: str
) -> Mismatch:
    shape, dtype = [int(s) for s in actual.shape], str(actual.dtype).replace("torch.", "")
    if actual.shape != ref.shape:
        return Mismatch(name, -1.0, -1.0, atol, rtol, cls, shape, dtype)
    a, r = to_cpu(actual).to(torch.float64), to_cpu(ref).to(torch.float64)
    both = torch.isfinite(a) & torch.isfinite(r)
    diff = (a - r).abs()[both]
    max_abs = float(diff.max()) if diff.numel() else 0.0
    denom = r.abs()[both]
    rel = diff[denom > 0] / denom[denom > 0]
    max_rel = float(rel.max()) if rel.numel() else 0.0
    return Mismatch(name, max_abs, max_rel, atol, rtol, cls, shape, dtype)


# ------------------------------------------------------------------------------ facts


def tensor_facts(args: tuple, kwargs: dict) -> tuple[list, list, list]:
    """Shapes, dtypes and strides of a call's arguments in order (positional, then keyword; each
    tensor of a list its own entry; None for a non-tensor argument)."""
    shapes: list[list[int] | None] = []
    dtypes: list[str | None] = []
    strides: list[list[int] | None] = []
    for value in [*args, *kwargs.values()]:
        items = (
            value
            if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)
            else [value]
        )
        for x in items:
            if isinstance(x, torch.Tensor):
                shapes.append([int(s) for s in x.shape])
                dtypes.append(str(x.dtype).replace("torch.", ""))
                strides.append([int(s) for s in x.stride()])
            else:
                shapes.append(None)
                dtypes.append(None)
                strides.append(None)
    return shapes, dtypes, strides


# ------------------------------------------------------------------------------ where


def _framework_dirs() -> tuple[str, ...]:
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    own = [
        os.path.join(here, p) for p in ("harness", "backend", "contracts", "registry", "agents", "reports")
    ]
    lib = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")]
    return tuple(os.path.abspath(p) + os.sep for p in [os.path.dirname(torch.__file__), *own, *lib])


_FRAMEWORK: tuple[str, ...] = ()


def model_code_dirs(model: Any) -> tuple[str, ...]:
    """The directory of the model class's own code (e.g. .../transformers/models/bert/)."""
    try:
        import inspect

        return (os.path.dirname(os.path.abspath(inspect.getfile(type(model)))) + os.sep,)
    except (TypeError, OSError):
        return ()


def source_line(own: tuple[str, ...], skip: int = 2) -> str:
    """The innermost frame of the model's own code (`own` dirs), else the innermost frame outside
    PyTorch, the standard library and this project: "modeling_bert.py:255 in forward"."""
    global _FRAMEWORK
    if not _FRAMEWORK:
        _FRAMEWORK = _framework_dirs()
    frame = sys._getframe(skip)
    fallback = ""
    while frame is not None:
        path = frame.f_code.co_filename
        if own and path.startswith(own):
            return _where(frame)
        if not fallback and not path.startswith(_FRAMEWORK) and not path.startswith("<"):
            fallback = _where(frame)
        frame = frame.f_back
    return fallback


def traceback_place(exc: BaseException, model: Any, own: tuple[str, ...] = ()) -> tuple[str, str]:
    """(module path, source line) where an exception was raised: the innermost module of `model`
    whose code was running (a frame whose `self` is it, named as `named_modules` names it) and
    the innermost frame of the model's own code, else the innermost frame outside PyTorch, the
    standard library and this project."""
    global _FRAMEWORK
    if not _FRAMEWORK:
        _FRAMEWORK = _framework_dirs()
    names = {id(m): name for name, m in model.named_modules()} if model is not None else {}
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    path, line, fallback = "", "", ""
    for frame, lineno in reversed(frames):
        me = frame.f_locals.get("self")
        if not path and me is not None and id(me) in names:
            path = names[id(me)]
        file = frame.f_code.co_filename
        if not line and own and file.startswith(own):
            line = f"{os.path.basename(file)}:{lineno} in {frame.f_code.co_name}"
        if not fallback and not file.startswith(_FRAMEWORK) and not file.startswith("<"):
            fallback = f"{os.path.basename(file)}:{lineno} in {frame.f_code.co_name}"
    return path, line or fallback


def _where(frame: Any) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"


def fx_node_of_frame(skip: int = 2) -> Any:
    """The FX node whose generated code line the innermost FX-generated frame is running (a compiled
    graph executed op by op), or None."""
    frame = sys._getframe(skip)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<eval_with_key>"):
            gm = frame.f_locals.get("self")
            lineno_map = getattr(gm, "_lineno_map", None)
            if lineno_map:
                idx = lineno_map.get(frame.f_lineno - gm.forward.__code__.co_firstlineno)
                if idx is not None:
                    nodes = list(gm.graph.nodes)
                    return nodes[idx] if idx < len(nodes) else None
        frame = frame.f_back
    return None


def node_place(node: Any, own: tuple[str, ...] = ()) -> tuple[str, str]:
    """(module path, source line) an FX node's metadata records (Dynamo's nn_module_stack and the
    user stack trace AOTAutograd keeps), ("", "") when it has none."""
    if node is None:
        return "", ""
    # a backward node: the module of the forward node it differentiates (AOTAutograd copies it)
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    path = ""
    if stack:
        last = list(stack.values())[-1]
        path = _module_path(last[0] if isinstance(last, (list, tuple)) else str(last))
    return path, stack_trace_line(node.meta.get("stack_trace") or "", own)


def _module_path(dynamo_path: str) -> str:
    """Dynamo's module path ("L['self'].encoder.layer[3].attention") as a named_modules path."""
    import re

    path = re.sub(r"^L\['self'\]\.?|^L__self__\.?|^self\.?", "", dynamo_path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\[['\"]([^'\"]+)['\"]\]", r".\1", path)
    path = re.sub(r"\._modules\.", ".", path)
    return path.strip(".")


def stack_trace_line(trace: str, own: tuple[str, ...] = ()) -> str:
    """The model's line of a recorded stack trace ('File "...", line N, in fn' entries)."""
    import re

    entries = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', trace)
    if not entries:
        return ""
    global _FRAMEWORK
    if not _FRAMEWORK:
        _FRAMEWORK = _framework_dirs()
    pick = next((e for e in reversed(entries) if own and e[0].startswith(own)), None)
    pick = pick or next((e for e in reversed(entries) if not e[0].startswith(_FRAMEWORK)), entries[-1])
    return f"{os.path.basename(pick[0])}:{pick[1]} in {pick[2]}"


def results(out: Any) -> list[tuple[str, torch.Tensor]]:
    """The tensors a graph returned, named by position."""
    flat = out if isinstance(out, (list, tuple)) else [out]
    return [(str(i), t) for i, t in enumerate(flat) if isinstance(t, torch.Tensor)]

"""NEFF artifacts: self-describing JSON, keyed by exactly what determines them, verified on load."""

from __future__ import annotations

import json

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from backend.errors import CorruptArtifactError
from backend.neff import (
    Artifact,
    CompilerFlags,
    TensorSpec,
    compile_partition,
    load_executable,
)
from backend.neff.compiler import compile_seconds, plan


def _graph(shape=(4, 8), dtype=torch.float32):
    def f(x, w):
        return (torch.mm(x, w).softmax(-1) * 3.0).sum(0)

    x, w = torch.randn(*shape, dtype=dtype), torch.randn(shape[1], 5, dtype=dtype)
    return make_fx(f, tracing_mode="fake")(x, w), (x, w), f


def _specs(args):
    return [TensorSpec.of(a) for a in args]


def test_artifact_round_trip_runs_in_a_fresh_executable():
    gm, args, f = _graph()
    art = compile_partition(
        gm, _specs(args), [TensorSpec.of(f(*args))], "t1", CompilerFlags(precision="exact")
    )
    blob = art.to_bytes()
    loaded = Artifact.from_bytes(blob, expected_key=art.key)
    body = json.loads(blob.partition(b"\n")[2])
    # self-describing: graph, specs, table version and flags are all in the document
    assert body["lowering_table_version"] == "t1" and body["flags"] == {"precision": "exact"}
    assert body["inputs"][0] == {"shape": [4, 8], "stride": [8, 1], "dtype": "float32"}
    assert any(n.get("target") == "aten.mm.default" for n in body["graph"]["nodes"])
    (out,) = load_executable(loaded)(*args)
    torch.testing.assert_close(out, f(*args), rtol=0, atol=0)


def test_default_precision_rounds_matmul_inputs_to_bf16():
    gm, args, _ = _graph()
    art = compile_partition(gm, _specs(args), [], "t1", CompilerFlags(precision="bf16"))
    (out,) = load_executable(art)(*args)
    x, w = (a.to(torch.bfloat16).float() for a in args)
    torch.testing.assert_close(out, (torch.mm(x, w).softmax(-1) * 3.0).sum(0), rtol=0, atol=0)


def test_key_is_stable_and_changes_with_shape_dtype_table_and_flags():
    gm, args, _ = _graph()
    base = plan(gm, _specs(args), "t1", CompilerFlags())[0]
    gm_again, args_again, _ = _graph()
    assert plan(gm_again, _specs(args_again), "t1", CompilerFlags())[0] == base
    gm_shape, args_shape, _ = _graph(shape=(6, 8))
    gm_dtype, args_dtype, _ = _graph(dtype=torch.bfloat16)
    others = {
        plan(gm_shape, _specs(args_shape), "t1", CompilerFlags())[0],
        plan(gm_dtype, _specs(args_dtype), "t1", CompilerFlags())[0],
        plan(gm, _specs(args), "t2", CompilerFlags())[0],
        plan(gm, _specs(args), "t1", CompilerFlags(precision="exact"))[0],
    }
    assert base not in others and len(others) == 4


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated
        lambda b: b[:-10] + bytes(x ^ 0x01 for x in b[-10:]),  # flipped bits
        lambda b: b"garbage" + b,  # bad header
    ],
    ids=["truncated", "bitflip", "header"],
)
def test_damaged_artifacts_are_refused(damage):
    gm, args, _ = _graph()
    blob = compile_partition(gm, _specs(args), [], "t1", CompilerFlags()).to_bytes()
    with pytest.raises(CorruptArtifactError):
        Artifact.from_bytes(damage(blob))


def test_loader_only_calls_aten_ops():
    """A well-formed artifact naming a Python callable is refused, never executed."""
    gm, args, _ = _graph()
    art = compile_partition(gm, _specs(args), [], "t1", CompilerFlags())
    for node in art.graph["nodes"]:
        if node["op"] == "call_function":
            node["target"] = "builtins.eval.default"
            break
    forged = Artifact.from_bytes(art.to_bytes())  # checksum is valid: it was re-serialized
    with pytest.raises(CorruptArtifactError, match="only aten ops"):
        load_executable(forged)


def test_cost_model_grows_with_partition_size_and_scale(monkeypatch):
    monkeypatch.setenv("NEURON_COMPILE_COST_SCALE", "2")
    assert compile_seconds(100) > compile_seconds(10) > 0
    assert compile_seconds(10) == pytest.approx(2 * compile_seconds(10, scale=1.0))
    monkeypatch.setenv("NEURON_COMPILE_COST_SCALE", "fast")
    with pytest.raises(ValueError, match="NEURON_COMPILE_COST_SCALE"):
        compile_seconds(1)

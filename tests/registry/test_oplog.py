"""PyTorch operator-input logs: every line a case or unreplayable with a reason; export round trip."""

from __future__ import annotations

import json

import pytest

from contracts.backends import get_backend
from registry.encoding import parse_signature
from registry.oplog import export_oplog, import_oplog, parse_call
from registry.replay import CaseSpec, replay


@pytest.fixture(scope="module")
def gpt2(oplog_path):
    return import_oplog(oplog_path)


@pytest.mark.shared_data
def test_every_call_line_is_a_case_or_unreplayable(gpt2, oplog_path):
    call_lines = [line for line in oplog_path.read_text().splitlines() if line.startswith("cnt:")]
    assert gpt2.lines == len(call_lines)
    assert gpt2.cases + len(gpt2.unreplayable) == gpt2.lines
    assert all(u.reason for u in gpt2.unreplayable)
    assert sum(e.count for e in gpt2.registry) == sum(
        int(line.split(",")[0].split(":")[1])
        for line in call_lines
        if not any(u.text == line.strip() for u in gpt2.unreplayable)
    )


@pytest.mark.shared_data
def test_constraints_are_inferred_from_op_semantics(gpt2):
    by_op = {}
    for e in gpt2.registry:
        by_op.setdefault(e.op, []).append(e)
    highs = sorted(e.constraints["a.1"]["high"] for e in by_op["aten.embedding.default"])
    assert highs == [1024, 50257]  # position rows, vocabulary rows
    (nll,) = by_op["aten.nll_loss_forward.default"]
    assert nll.constraints["a.1"]["high"] == 2  # two classes
    (dense_bw,) = [e for e in by_op["aten.embedding_dense_backward.default"] if "50257" in e.signature]
    assert dense_bw.constraints["a.1"]["high"] == 50257  # num_weights argument
    (index,) = by_op["aten.index.Tensor"]
    assert [index.constraints[p]["high"] for p in ("a.1.0", "a.1.1")] == [4, 1024]


@pytest.mark.shared_data
def test_renamed_overloads_and_device_strings_are_normalized(gpt2):
    assert "aten.sum.dim_IntList" in gpt2.registry.ops() and "aten.sum.SymInt" not in gpt2.registry.ops()
    to_copy = [parse_signature(e.signature)[1] for e in gpt2.registry if e.op == "aten.new_zeros.default"]
    assert to_copy[0]["device"] == {"device": "dev"} and to_copy[0]["dtype"] == {"dtype": "f16"}


@pytest.mark.shared_data
def test_export_then_import_gives_the_same_registry(gpt2, tmp_path):
    path = tmp_path / "out.txt"
    path.write_text(export_oplog(gpt2.registry))
    again = import_oplog(path, model=next(iter(gpt2.registry)).models[0])
    assert list(again.registry) == list(gpt2.registry)


@pytest.mark.shared_data
def test_large_cases_replay_scaled_and_pass_on_cpu(gpt2):
    (softmax,) = [e for e in gpt2.registry if e.op == "aten._softmax.default"]
    result = replay(CaseSpec.from_entry(softmax), get_backend("cpu"))
    assert result.status.value == "pass" and result.metrics["scaled_by"] > 1


def test_malformed_and_unknown_lines_are_reported_with_reasons(tmp_path):
    log = tmp_path / "bad.txt"
    log.write_text(
        "cnt: 1, ((T([2], f32),), {})\n"
        "Operator: aten.neg.default\n"
        "cnt: 3, ((T([2], f32),), {})\n"
        "cnt: 1, ((T([2], f32), Foo()), {})\n"
        "garbage here\n"
        "Operator: aten.no_such_op.default\n"
        "cnt: 1, ((T([2], f32),), {})\n"
    )
    result = import_oplog(log)
    assert (result.lines, result.cases, len(result.unreplayable)) == (5, 1, 4)
    reasons = [u.reason for u in result.unreplayable]
    assert "before any 'Operator:'" in reasons[0]
    assert "unknown value" in reasons[1]
    assert "malformed line" in reasons[2]
    assert "does not exist" in reasons[3]
    assert [u.line for u in result.unreplayable] == [1, 4, 5, 7]
    json.dumps(result.to_dict())


def test_parse_call_handles_literals_strides_and_torch_names():
    args, kwargs = parse_call(
        "aten._to_copy.default",
        "((T([2, 3], f16, stride=(1, 2)), -1, -inf, [True, False]), "
        "{'dtype': torch.bool, 'layout': torch.strided, 'device': 'cuda'})",
    )
    assert args == [{"T": [2, 3], "dt": "f16", "st": [1, 2]}, -1, {"float": "-inf"}, [True, False]]
    assert kwargs == {"device": {"device": "dev"}, "dtype": {"dtype": "b8"}, "layout": {"layout": "strided"}}

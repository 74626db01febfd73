"""Signatures: what a call is, byte-stable, and the facts a replay needs."""

from __future__ import annotations

import math

import torch

from registry.encoding import case_id, encode_args, encode_value, find_opaque, parse_signature, signature


def test_contiguous_tensor_has_shape_and_dtype_only():
    assert encode_value(torch.zeros(2, 3, dtype=torch.float16)) == {"T": [2, 3], "dt": "f16"}


def test_transposed_tensor_keeps_stride_and_slice_keeps_offset():
    assert encode_value(torch.zeros(2, 3).t()) == {"T": [3, 2], "dt": "f32", "st": [1, 3]}
    assert encode_value(torch.zeros(10)[3:5]) == {"T": [2], "dt": "f32", "off": 3}


def test_scalars_dtypes_devices_and_non_finite_floats_are_tagged():
    a, k = encode_args(
        (1, 2.5, True, None, [1, 2], torch.float32, float("-inf")), {"device": torch.device("cpu")}
    )
    assert a == [1, 2.5, True, None, [1, 2], {"dtype": "f32"}, {"float": "-inf"}]
    assert k == {"device": {"device": "dev"}}
    assert math.isinf(float(a[-1]["float"]))


def test_signature_is_canonical_and_round_trips():
    a, k = encode_args((torch.zeros(4), 1), {"b": 2, "a": 1})
    sig = signature(a, k)
    assert sig == signature(*parse_signature(sig))
    assert sig.index('"a"') < sig.index('"b"')  # kwargs sorted


def test_case_id_is_op_plus_stable_hash_and_differs_by_signature():
    sig1 = signature(*encode_args((torch.zeros(4),), {}))
    sig2 = signature(*encode_args((torch.zeros(5),), {}))
    assert case_id("aten.neg.default", sig1) == case_id("aten.neg.default", sig1)
    assert case_id("aten.neg.default", sig1).startswith("aten.neg.default-")
    assert case_id("aten.neg.default", sig1) != case_id("aten.neg.default", sig2)


def test_unknown_objects_are_opaque():
    a, _ = encode_args((object(),), {})
    assert find_opaque(a) == "object"
    assert find_opaque(encode_args((torch.zeros(1),), {})[0]) is None

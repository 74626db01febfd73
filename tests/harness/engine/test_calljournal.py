"""The per-call journal: what it writes before each call, what a death leaves readable, and the
root cause the runner makes of it (in-process; the worker's use is tested in test_death_root_cause)."""

from __future__ import annotations

import json
import time

import torch

from harness.engine import calljournal
from harness.engine.calljournal import SLOT_BYTES, JournalWriter, read_calls, root_cause, stalled
from harness.engine.callmode import journaled


def test_an_entry_is_on_disk_before_the_call_returns_and_marked_done_after(tmp_path):
    path = tmp_path / "calls"
    writer = JournalWriter(path)
    at = writer.enter({"op": "aten.topk.default", "phase": "forward", "index": 0, "shapes": [[4, 8]]})
    # another process reads it while the call runs: the entry is there, still open
    (entry,) = read_calls(path)
    assert entry["s"] == "open" and entry["op"] == "aten.topk.default" and entry["shapes"] == [[4, 8]]
    writer.done(at)
    assert read_calls(path)[0]["s"] == "done"
    writer.close()


def test_the_ring_keeps_the_last_calls_in_order_and_never_grows(tmp_path):
    path = tmp_path / "calls"
    writer = JournalWriter(path)
    for i in range(calljournal.SLOTS + 7):
        writer.done(writer.enter({"op": f"aten.op{i}.default"}))
    writer.close()
    entries = read_calls(path)
    assert [e["seq"] for e in entries] == list(range(7, calljournal.SLOTS + 7))
    assert path.stat().st_size == calljournal.SLOTS * SLOT_BYTES


def test_an_entry_too_long_for_its_slot_is_shortened_not_lost(tmp_path):
    path = tmp_path / "calls"
    writer = JournalWriter(path)
    many = [[2, 3, 4, 5]] * 400  # a cat of hundreds of tensors
    writer.enter({"op": "aten.cat.default", "shapes": many, "dtypes": ["float32"] * 400, "strides": many})
    writer.close()
    (entry,) = read_calls(path)
    assert entry["op"] == "aten.cat.default" and entry["s"] == "open"
    assert entry.get("inputs_cut") and len(entry["shapes"]) <= 4


def test_a_torn_slot_is_skipped(tmp_path):
    path = tmp_path / "calls"
    writer = JournalWriter(path)
    writer.enter({"op": "aten.add.Tensor"})
    writer.enter({"op": "aten.mul.Tensor"})
    writer.close()
    data = bytearray(path.read_bytes())
    data[SLOT_BYTES + 5 : SLOT_BYTES + 40] = b"\x00" * 35  # the second write cut short
    path.write_bytes(bytes(data))
    assert [e["op"] for e in read_calls(path)] == ["aten.add.Tensor"]
    assert read_calls(tmp_path / "missing") == []


def test_the_root_cause_is_the_last_call_entered_that_did_not_return():
    entries = [
        {"seq": 0, "s": "done", "op": "aten.add.Tensor", "phase": "forward", "index": 0},
        {
            "seq": 1,
            "s": "open",
            "op": "aten.sort.default",
            "phase": "backward",
            "index": 3,
            "shapes": [[6], None],
            "dtypes": ["float32", None],
            "strides": [[1], None],
            "module": "encoder.layer.0",
            "source": "modeling_x.py:12 in forward",
            "node": "SortBackward0",
        },
    ]
    rc = root_cause(entries, "crash", "died (SIGSEGV)", seconds=1.5)
    assert rc.found and rc.route == "call_journal" and rc.kind == "crash"
    assert (rc.op, rc.phase, rc.call_index) == ("aten.sort.default", "backward", 3)
    assert rc.input_shapes == [[6], None] and rc.input_dtypes == ["float32", None]
    assert rc.input_strides == [[1], None]
    assert (rc.module_path, rc.source_line) == ("encoder.layer.0", "modeling_x.py:12 in forward")
    assert rc.extra["autograd_node"] == "SortBackward0" and "SIGSEGV" in rc.why
    json.dumps(rc.to_dict())  # it rides in the results' JSON column


def test_a_death_between_calls_or_before_any_is_no_root_cause_and_says_why():
    done = [{"seq": 0, "s": "done", "op": "aten.add.Tensor", "phase": "forward", "index": 0}]
    between = root_cause(done, "hang", "stalled")
    assert not between.found and between.route == "call_journal" and "outside any op call" in between.why
    assert between.extra["last_calls"][0]["op"] == "aten.add.Tensor"
    before = root_cause([], "crash", "died (SIGABRT)")
    assert not before.found and "before entering any op call" in before.why


def test_a_stall_is_an_open_call_with_nothing_entered_after_it(tmp_path):
    path = tmp_path / "calls"
    writer = JournalWriter(path)
    writer.done(writer.enter({"op": "aten.add.Tensor"}))
    writer.enter({"op": "aten.topk.default"})
    writer.close()
    assert stalled(path, 60.0) is None  # entered just now
    assert stalled(path, 60.0, now=time.time() + 61)["op"] == "aten.topk.default"
    writer = JournalWriter(path)  # every call returned: waiting between calls is no stall
    writer.done(writer.enter({"op": "aten.add.Tensor"}))
    writer.close()
    assert stalled(path, 1.0, now=time.time() + 61) is None


class _Block(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x)  # the model's own line


def test_the_mode_journals_forward_and_backward_calls_with_where_they_ran(tmp_path):
    path = tmp_path / "calls"
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), _Block(), torch.nn.Linear(3, 2))
    x = torch.randn(5, 4)
    with journaled(path, "cpu") as mode:
        model(x).sum().backward()
    assert not mode.broken
    entries = read_calls(path)
    assert entries and all(e["s"] == "done" for e in entries)
    forward = [e for e in entries if e["phase"] == "forward"]
    backward = [e for e in entries if e["phase"] == "backward"]
    assert [e["index"] for e in forward] == list(range(len(forward)))  # in dispatch order
    tanh = next(e for e in forward if e["op"] == "aten.tanh.default")
    assert tanh["module"] == "1" and tanh["shapes"] == [[5, 3]] and tanh["dtypes"] == ["float32"]
    assert tanh["source"].startswith("test_calljournal.py:") and tanh["source"].endswith(" in forward")
    assert tanh["strides"] == [[3, 1]]
    grad = next(e for e in backward if e["op"] == "aten.tanh_backward.default")
    assert grad["module"] == "1" and grad["node"] == "TanhBackward0"  # the forward call's place


def test_only_calls_on_the_device_under_test_are_counted(tmp_path):
    path = tmp_path / "calls"
    cpu, meta = torch.ones(3), torch.ones(3, device="meta")
    with journaled(path, "meta"):
        cpu + 1  # a cpu call: journaled, not counted
        meta * 2
    entries = read_calls(path)
    assert {e["op"] for e in entries} >= {"aten.add.Tensor", "aten.mul.Tensor"}
    assert next(e for e in entries if e["op"] == "aten.add.Tensor")["index"] is None
    assert next(e for e in entries if e["op"] == "aten.mul.Tensor")["index"] == 0

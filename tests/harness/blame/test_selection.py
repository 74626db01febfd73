"""A failed comparison that could hinge on a choice among near-ties says so; the verdict stays."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from contracts.records import ModelCheck, StageResult
from contracts.status import Status
from harness.blame.selection import _Selections, margin, nudged_difference, selection_ties_evidence
from harness.stages.compare import named_float_tensors


def test_margin_is_the_relative_gap_at_the_choices_boundary():
    x = torch.tensor([[4.0, 2.0, 2.0, 1.0], [8.0, 4.0, 2.0, 1.0]])
    assert margin(x, 2, -1, largest=True) == 0.0  # row 0: the 2nd and 3rd are tied
    assert margin(x[1:], 1, -1, largest=True) == pytest.approx(0.5)  # 8 vs 4
    assert margin(x[1:], 1, -1, largest=False) == pytest.approx(0.5)  # 1 vs 2, smallest first
    assert margin(x, 4, -1, largest=True) is None  # k covers the row: nothing is decided
    assert (
        margin(torch.tensor([[3.0, float("-inf"), float("-inf")]]), 1, -1, largest=True) is None
    )  # masked only
    assert margin(torch.tensor([1.0, 2.0, 2.0001]), 2, -1, largest=False, kth=True) == pytest.approx(
        1e-4 / 2.0001, rel=1e-2
    )
    assert margin(torch.tensor([[1, 1], [2, 3]]), 1, -1, largest=True) is None  # integers do not round


def _spy(fn, x):
    spy = _Selections(threshold=2.0**-8)
    with spy:
        fn(x)
    return spy.closest


def test_only_a_choice_whose_indices_are_read_counts():
    x = torch.tensor([[1.0, 1.0, 0.5], [2.0, 2.0, 0.5]])
    assert _spy(lambda t: t - t.max(-1, keepdim=True).values, x) == {}  # the softmax shift: values only
    found = _spy(lambda t: t.gather(-1, t.topk(1, dim=-1).indices), x)
    assert list(found) == ["topk"] and found["topk"].margin == 0.0 and found["topk"].candidates == 3
    assert _spy(lambda t: t.gather(-1, t.topk(1).indices), torch.tensor([[3.0, 1.0, 0.5]])) == {}  # far apart


class SoftmaxShift(torch.nn.Module):
    """`x - x.max(-1).values` over tied rows: its backward reads max's indices, its forward does not."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        s = x * self.w
        return {"out": (s - s.max(-1, keepdim=True).values).softmax(-1)}


def test_the_backward_routing_a_gradient_through_a_choice_does_not_count():
    from harness.blame.selection import _step

    spy = _Selections(threshold=2.0**-8)
    values = _step(SoftmaxShift(), {"x": torch.tensor([[1.0, 1.0, 0.5], [2.0, 2.0, 0.5]])}, 0, True, spy)
    assert "gradient of w" in values and spy.closest == {}


class Router(torch.nn.Module):
    """Each row picks one expert by its router score; `tied`: experts 0 and 1 score the same."""

    def __init__(self, tied: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.router = torch.nn.Linear(4, 3, bias=False)
        if tied:
            with torch.no_grad():
                self.router.weight[1] = self.router.weight[0]
        self.experts = torch.nn.Parameter(torch.randn(3, 4) * 3)

    def forward(self, x):
        pick = self.router(x).topk(1, dim=-1).indices.squeeze(-1)
        return {"out": (x * self.experts[pick]).sum(-1)}


def _run(model, device_rmse, allowed=1e-7, stage="compile"):
    kwargs = {"x": torch.randn(16, 4, generator=torch.Generator().manual_seed(1))}
    ((name, _),) = named_float_tensors(model(**kwargs))
    metrics = {
        "vs_eager": {"name": f"step 1 output {name}", "rmse": device_rmse, "allowed_rmse": allowed},
        "mode": "train",
    }
    result = ModelCheck(model_id="toy", backend="neuron", model_type="toy")
    result.stages[stage] = StageResult(
        stage, Status.FAIL, reason="compiled step differs from eager", metrics=metrics
    )
    return SimpleNamespace(result=result, cpu_model=model, cpu_kwargs=kwargs, seed=0), f"output {name}"


def test_a_failure_flips_among_ties_could_explain_carries_the_evidence():
    run, tensor = _run(Router(tied=True), device_rmse=1.0)
    found = nudged_difference(run.cpu_model, run.cpu_kwargs, 0, True, tensor, 1.0, 1e-7)
    assert found is not None and found.selections[0].op == "topk" and found.selections[0].margin == 0.0
    assert found.nudged_rmse > 0.01  # the nudge alone flipped picks, and the output moved
    evidence = selection_ties_evidence(run, "compile")
    assert evidence["flips_reproduce"] is True and evidence["tensor"] == tensor
    assert evidence["nudged_rmse"] == pytest.approx(found.nudged_rmse)
    assert (
        "near-ties" in evidence["note"]
        and "topk" in evidence["note"]
        and "a flip alone fails" in evidence["note"]
    )


def test_a_fault_far_larger_than_any_flip_is_not_explained_by_them():
    run, _ = _run(Router(tied=True), device_rmse=1e6)  # the ties are there, but cannot explain this
    evidence = selection_ties_evidence(run, "compile")
    assert evidence["flips_reproduce"] is False and "do not explain" in evidence["note"]


def test_without_near_ties_or_without_a_comparison_failure_the_probe_says_nothing():
    run, _ = _run(Router(tied=False), device_rmse=1.0)
    assert selection_ties_evidence(run, "compile") is None  # the picks are far apart
    tied, _ = _run(Router(tied=True), device_rmse=1.0)
    tied.result.stages["compile"].status = Status.ERROR  # an exception is no comparison
    assert selection_ties_evidence(tied, "compile") is None
    on_device, _ = _run(Router(tied=True), device_rmse=1.0, stage="on_device")
    assert selection_ties_evidence(on_device, "on_device") is None  # not a stage that compares values


def test_the_blame_stays_backend_and_says_why(monkeypatch):
    """judge_run keeps a backend verdict and adds the probe's evidence to it."""
    from harness.blame import probe as blame_probe

    run, tensor = _run(Router(tied=True), device_rmse=1.0)
    run.adapter = SimpleNamespace(name="neuron")
    run.spec = None
    ref = {"compile": StageResult("compile", Status.PASS, metrics={"compile_backend": "aot_eager"})}
    monkeypatch.setattr(blame_probe, "reference_stages", lambda r, failing: ref)
    blame_probe.judge_run(run, ["compile"])
    row = run.result.stages["compile"]
    assert row.blame == "backend"
    assert row.blame_evidence["selection_ties"]["flips_reproduce"] is True
    assert row.blame_evidence["why"].startswith(
        "the reference passes this stage; but the model's answer hinges"
    )

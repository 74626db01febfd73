"""The upstream tier: real op_db OpInfos through the tier, one per skip reason, a crash and a
fallback; stable case ids; breakdowns that sum to their totals."""

from __future__ import annotations

import pytest
import torch

from contracts.backends import get_backend
from contracts.status import UpstreamSkip
from registry.upstream import execute, listing, opinfos
from reports import upstream_skips


@pytest.fixture(scope="module")
def ctx():
    execute.quiet()
    return execute.Context(get_backend("neuron"), "exact")


def _payload(name: str, dtype: str, index: int = 0, variant: str = "") -> dict:
    op = opinfos.find(name, variant)
    sample = opinfos.generate_samples(op, opinfos.parse_dtype(dtype))[index]
    return {
        "info": {"op": name, "variant": variant, "dtype": dtype, "sample": index},
        "hash": opinfos.fingerprint(sample),
    }


def _statuses(rows) -> list[tuple[str, str, str]]:
    return [(r.stage, r.status.value, r.reason) for r in rows]


# ------------------------------------------------------------------------------- one op per reason


def test_native_op_passes_forward_and_backward(ctx):
    rows, events = execute.run_case(_payload("add", "float32"), ctx)
    assert _statuses(rows) == [("forward", "pass", ""), ("backward", "pass", "")]
    assert events == []


def test_op_db_skip_decorator_is_pytorch_applicability(ctx):
    # empty_like: op_db skips TestCommon.test_compare_cpu ("output is non-deterministic")
    rows, _ = execute.run_case(_payload("empty_like", "float32"), ctx)
    assert {r.reason for r in rows} == {UpstreamSkip.PYTORCH_APPLICABILITY.value}
    assert all(r.status.value == "skipped" for r in rows)
    assert "non-deterministic" in rows[0].message


def test_integer_dtype_backward_is_pytorch_applicability(ctx):
    rows, _ = execute.run_case(_payload("add", "int64"), ctx)
    assert _statuses(rows) == [("forward", "pass", ""), ("backward", "skipped", "pytorch-applicability")]


def test_factory_sample_without_a_device_is_pytorch_applicability_not_a_failure(ctx):
    # op_db's arange samples: most pass device=, a few do not (they would run on the CPU anywhere)
    samples = opinfos.generate_samples(opinfos.find("arange", ""), torch.float32)
    bare = next(i for i, s in enumerate(samples) if "device" not in s.kwargs)
    placed = next(i for i, s in enumerate(samples) if "device" in s.kwargs)
    rows, _ = execute.run_case(_payload("arange", "float32", bare), ctx)
    assert rows[0].status.value == "skipped" and rows[0].reason == UpstreamSkip.PYTORCH_APPLICABILITY.value
    assert "names no device" in rows[0].message
    rows, _ = execute.run_case(_payload("arange", "float32", placed), ctx)
    assert (
        rows[0].status.value in ("pass", "skipped")
        and rows[0].reason != UpstreamSkip.PYTORCH_APPLICABILITY.value
    )


def test_sparse_output_is_backend_unsupported(ctx):
    rows, _ = execute.run_case(_payload("to_sparse", "float32"), ctx)
    assert rows[0].status.value == "skipped" and rows[0].reason == UpstreamSkip.BACKEND_UNSUPPORTED.value
    assert "sparse" in rows[0].message


def test_fallback_that_matches_is_no_native_lowering_never_a_pass(ctx):
    # nonzero has a data-dependent output shape: the device runs it through the CPU fallback
    rows, events = execute.run_case(_payload("nonzero", "float32"), ctx)
    assert rows[0].status.value == "skipped" and rows[0].reason == UpstreamSkip.NO_NATIVE_LOWERING.value
    assert "aten.nonzero" in rows[0].message
    assert any(e["op"].startswith("aten.nonzero") for e in events)


def test_cpu_reference_that_raises_is_reference_error(ctx, monkeypatch):
    """A real OpInfo whose CPU reference raises for a sample: the sample is not in any denominator."""
    payload = _payload("addmm", "float32")
    op = opinfos.find("addmm")
    real = op.op
    calls = []

    def reference_raises_on_cpu(*args, **kwargs):
        calls.append(args[0].device.type)
        if args[0].device.type == "cpu":
            raise RuntimeError("the CPU kernel rejects this sample")
        return real(*args, **kwargs)

    monkeypatch.setattr(op, "op", reference_raises_on_cpu)
    rows, _ = execute.run_case(payload, ctx)
    assert [r.reason for r in rows] == [UpstreamSkip.REFERENCE_ERROR.value] * 2
    assert "cpu reference raised RuntimeError" in rows[0].message
    assert "neuron" not in calls  # the device is not run when there is nothing to compare with


def test_non_deterministic_reference_is_reference_error(ctx, monkeypatch):
    """Two CPU runs with the same seed that differ (dynamo's eager_two_runs_differ)."""
    payload = _payload("add", "float32")
    op = opinfos.find("add")
    real, runs = op.op, []

    def differs_per_run(*args, **kwargs):
        runs.append(1)
        return real(*args, **kwargs) + len(runs)

    monkeypatch.setattr(op, "op", differs_per_run)
    rows, _ = execute.run_case(payload, ctx)
    assert rows[0].reason == UpstreamSkip.REFERENCE_ERROR.value
    assert "not deterministic" in rows[0].message


def test_the_determinism_check_repeats_the_reference_as_it_ran(ctx):
    """matmul of a vector or matrix by a batch (op_db's samples): ATen folds the batch only when
    no input requires grad, which changes the last bits. The repeat runs with the same
    requires_grad inputs as the reference, so the reference is deterministic."""
    op = opinfos.find("matmul")
    samples = opinfos.generate_samples(op, torch.float32)
    folded = [i for i, s in enumerate(samples) if s.input.dim() <= 2 and s.args and s.args[0].dim() >= 3]
    assert folded
    for i in folded:
        rows, _ = execute.run_case(_payload("matmul", "float32", i), ctx)
        assert rows[0].reason != UpstreamSkip.REFERENCE_ERROR.value, (i, rows[0].message)


def test_wrong_device_answer_is_a_fail_with_the_error(ctx, monkeypatch):
    payload = _payload("add", "float32")
    op = opinfos.find("add")
    real = op.op

    def off_by_a_bit_on_the_device(*args, **kwargs):
        out = real(*args, **kwargs)
        return out + 1e-3 if out.device.type == "neuron" else out

    monkeypatch.setattr(op, "op", off_by_a_bit_on_the_device)
    rows, _ = execute.run_case(payload, ctx)
    assert rows[0].status.value == "fail" and rows[0].reason.startswith("mismatch: output 0: max_abs_err")
    assert rows[1].status.value == "pass"  # the gradient of x + c does not see the offset


def test_sample_that_is_not_reproduced_is_never_run_as_another(ctx):
    payload = {**_payload("add", "float32"), "hash": "00000000"}
    rows, _ = execute.run_case(payload, ctx)
    assert rows[0].reason == UpstreamSkip.REFERENCE_ERROR.value and "not reproducible" in rows[0].message


def test_sample_numbered_differently_by_the_listing_runs_by_its_fingerprint(ctx, monkeypatch):
    """op_db's meshgrid yields its `indexing` modes from a set, in an order that depends on the
    process's string-hash seed: the listing's sample i can be this worker's sample j. The case runs
    the sample with the listed fingerprint, not the one at the listed index."""
    op = opinfos.find("meshgrid", "list_of_tensors")
    samples = opinfos.generate_samples(op, torch.float32)
    hashes = [opinfos.fingerprint(s) for s in samples]
    assert len(set(hashes)) == len(hashes)
    wanted = 3  # listed as sample 2: another numbering than this process's
    payload = {
        "info": {"op": "meshgrid", "variant": "list_of_tensors", "dtype": "float32", "sample": 2},
        "hash": hashes[wanted],
    }
    seen, real = [], op.op

    def recording(*args, **kwargs):
        seen.append(kwargs.get("indexing"))
        return real(*args, **kwargs)

    monkeypatch.setattr(op, "op", recording)
    rows, _ = execute.run_case(payload, ctx)
    assert [r.status.value for r in rows] == ["pass", "pass"]
    assert seen and set(seen) == {samples[wanted].kwargs["indexing"]}
    assert samples[2].kwargs["indexing"] != samples[wanted].kwargs["indexing"]


def test_listed_sample_is_found_only_when_its_fingerprint_is_unique():
    a, b = opinfos.generate_samples(opinfos.find("add"), torch.float32)[:2]
    ha, hb = opinfos.fingerprint(a), opinfos.fingerprint(b)
    assert execute.listed_sample([a, b], 0, ha) == 0
    assert execute.listed_sample([b, a], 0, ha) == 1
    assert execute.listed_sample([a, a], 1, hb) is None  # not there: never another
    assert ha != hb
    assert execute.listed_sample([b, a, a], 0, ha) is None  # two candidates: neither is chosen


# -------------------------------------------------------------------------------------- case ids


def test_case_ids_name_op_variant_dtype_index_and_shape_hash():
    op = opinfos.find("nn.functional.pad", "reflect")
    sample = opinfos.generate_samples(op, torch.float32)[3]
    cid = opinfos.case_id(op.name, op.variant_test_name, "float32", 3, opinfos.fingerprint(sample))
    assert cid.startswith("nn.functional.pad:reflect/float32/3-") and len(cid.rsplit("-", 1)[1]) == 8
    again = opinfos.generate_samples(op, torch.float32)[3]  # regenerated: same seed, same structure
    assert opinfos.fingerprint(again) == opinfos.fingerprint(sample)
    assert opinfos.fingerprint(opinfos.generate_samples(op, torch.float32)[4]) != opinfos.fingerprint(sample)


@pytest.mark.slow
def test_case_ids_are_stable_across_listings_in_fresh_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    first = [
        c.case_id
        for c in listing.to_cases(
            listing.list_groups("add,nn.functional.pad,sum", ["float32", "int64"], use_cache=False)
        )
    ]
    second = [
        c.case_id
        for c in listing.to_cases(listing.list_groups("add,nn.functional.pad,sum", ["float32", "int64"]))
    ]
    assert first == second and len(first) == len(set(first)) > 50
    assert (tmp_path / "upstream").is_dir()  # the second listing wrote the cache ...
    third = [
        c.case_id
        for c in listing.to_cases(listing.list_groups("add,nn.functional.pad,sum", ["float32", "int64"]))
    ]
    assert third == first  # ... and the third read it


# ------------------------------------------------------------------------------ through the runner


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory):
    """One run through the runner on a device whose deg2rad kernel aborts the worker process."""
    from harness.engine.runner import RunOptions, run_tier

    out = tmp_path_factory.mktemp("upstream-run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(
            "HARNESS_CACHE_DIR", str(tmp_path_factory.mktemp("cache"))
        )  # a cold listing, not the user's cache
        opts = RunOptions(
            tier="upstream",
            out=out,
            backend="tests.registry.upstream.crashing_device:neuron",
            workers=1,
            progress=False,
            tier_options={"ops": "add,deg2rad,nonzero,to_sparse,empty_like", "dtypes": "float32"},
        )
        summary = run_tier(opts)
    return out, summary


@pytest.mark.slow
def test_a_crash_is_a_row_and_the_run_goes_on(crash_run):
    from reports.tables import read_results

    out, summary = crash_run
    df = read_results(out)
    crashed = df[df["status"] == "crash"]
    assert set(crashed["op"]) == {"deg2rad"} and set(crashed["dtype"]) == {"float32"}
    assert crashed["reason"].str.contains("SIGABRT").all() and "forward" in set(crashed["stage"])
    # every case has both stage rows, the crash did not take its chunk-mates down
    assert len(df) == 2 * summary["cases"]
    assert (df[df["op"] == "add"]["status"] == "pass").any()
    assert set(df[df["op"] == "nonzero"]["reason"].dropna()) >= {"no-native-lowering"}
    assert set(df[df["op"] == "to_sparse"]["reason"].dropna()) >= {"backend-unsupported"}
    assert set(df[df["op"] == "empty_like"]["reason"]) == {"pytorch-applicability"}
    assert set(df.columns) >= {"op", "dtype", "variant", "sample"} and df["sample"].notna().all()


@pytest.mark.slow
def test_breakdowns_sum_to_their_totals(crash_run):
    from reports.tables import read_results, read_table
    from reports.upstream import SKIP_REASONS, summarize

    out, summary = crash_run
    df = read_results(out)
    up = summarize(df)
    b = up.breakdown
    assert b["results"] == len(df) == sum(b["by_status"].values())
    assert b["skipped"] == sum(b["skipped_by_reason"].values()) == b["by_status"]["skipped"]
    assert (
        b["skipped_by_backend"]
        == b["skipped_by_reason"]["backend-unsupported"] + b["skipped_by_reason"]["no-native-lowering"]
    )
    assert set(b["skipped_by_reason"]) == set(SKIP_REASONS)  # a closed list: no other reason was used
    assert sum(s["results"] for s in up.by_stage.values()) == b["results"]
    assert up.cases == summary["cases"]
    per_op = read_table(out, "per_op")
    opinfo = per_op[per_op["dtype"].notna()]
    counted = opinfo[["cases_native", "cases_fallback", "cases_failed", "cases_skipped"]].sum().sum()
    assert counted == summary["cases"]
    crash_row = opinfo[(opinfo["op"] == "deg2rad") & (opinfo["dtype"] == "float32")].iloc[0]
    assert crash_row["cases_failed"] == 1 and crash_row["cases_native"] == 0
    nonzero = opinfo[(opinfo["op"] == "nonzero") & (opinfo["dtype"] == "float32")].iloc[0]
    assert nonzero["cases_fallback"] > 0 and nonzero["cases_native"] == 0


@pytest.mark.slow
def test_report_compare_and_skip_list_work_on_the_tier(crash_run, tmp_path):
    from reports.build import build_report
    from reports.compare import compare_runs

    out, _ = crash_run
    rep = build_report(out, use_baseline=False)
    html = open(rep["report_html"], encoding="utf-8").read()
    assert 'id="upstream-breakdown"' in html and "by PyTorch's own applicability checks" in html
    assert "<svg" in html.split('id="upstream"')[1]  # the heat map
    same = compare_runs(out, out)
    assert same.counts["FAIL"] == 0 and same.counts["PASS"] > 0
    skips = tmp_path / "skips.yaml"
    changed = upstream_skips.update_from_run(out, "neuron", skips)
    # the crash: both stage rows (which stage was running when the worker died is not known)
    assert changed["expected_failures"] == 2 and all(
        f.startswith("deg2rad/") for f in changed["failures_added"]
    )
    loaded = upstream_skips.load(skips)
    assert loaded.skips["nonzero"]["float32"].no_native_lowering > 0
    assert {r.tier for r in loaded.expectations} == {"upstream"}  # known failures: expectation rules
    check = upstream_skips.check_run(out, "neuron", skips)
    assert (
        check["new_failures_total"] == 0
        and check["labels"]["XFAIL"] == 2
        and check["skips_changed_total"] == 0
    )


def test_sample_tensors_op_db_pins_to_the_cpu_stay_there(ctx):
    """tensor_split's index tensor must be on the CPU (as PyTorch's test_compare_cpu leaves it):
    moving it to the device made every such sample an error blamed on the backend."""
    op = opinfos.find("tensor_split", "")
    samples = opinfos.generate_samples(op, torch.float32)
    pinned = opinfos.cpu_pinned(op, torch.float32, samples)
    with_index = [i for i, s in enumerate(samples) if isinstance(s.args[0], torch.Tensor)]
    assert with_index and all(pinned[i] == {1} for i in with_index)
    assert all(not pinned[i] for i in range(len(samples)) if i not in with_index)
    rows, _ = execute.run_case(_payload("tensor_split", "float32", with_index[0]), ctx)
    assert rows[0].status.value != "error", rows[0].message
    rows, _ = execute.run_case(_payload("add", "float32"), ctx)  # nothing pinned: all on the device, a pass
    assert _statuses(rows) == [("forward", "pass", ""), ("backward", "pass", "")]


def test_listing_blames_the_op_in_flight_when_its_child_dies(monkeypatch):
    """A chunk child that dies in its second op: the first keeps its groups, the second is listed
    alone (and dies again: crash groups for its dtypes), the third goes on in a new child."""
    calls = []

    def fake_child(names, dtypes, timeout):
        calls.append([n[0] for n in names])
        lines = []
        for name, variant in names:
            lines.append(
                {"begin": [name, variant], "dtypes": ["float32", "int64"], "todo": ["float32", "int64"]}
            )
            if name == "dies":
                lines.append({"op": name, "variant": "", "dtype": "float32", "hashes": ["aa"]})
                return lines, "SIGSEGV: Fatal Python error"
            lines += [{"op": name, "variant": "", "dtype": d, "hashes": ["bb"]} for d in ("float32", "int64")]
        return lines, None

    monkeypatch.setattr(listing, "_run_child", fake_child)
    got = listing._chunk([["first", ""], ["dies", ""], ["third", ""]], None, 60)
    assert calls == [["first", "dies", "third"], ["dies"], ["third"]]
    by_key = {(g.op, g.dtype): g for g in got.groups}
    assert by_key[("first", "int64")].hashes == ["bb"] and by_key[("third", "float32")].hashes == ["bb"]
    assert by_key[("dies", "float32")].hashes == ["aa"]  # listed before the death: kept
    assert by_key[("dies", "int64")].status == "crash" and "SIGSEGV" in by_key[("dies", "int64")].reason
    cases = listing.to_cases(got.groups)
    crash = next(
        c for c in cases if c.payload["info"]["op"] == "dies" and c.payload["info"]["dtype"] == "int64"
    )
    assert crash.case_id == "dies/int64/-" and crash.payload["listing"]["status"] == "crash"

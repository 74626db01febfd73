"""The Hub crawler against a local Hub (tests/fakes/hub_server.py) through the real huggingface_hub client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.crawl import STATE_FILE, HubOptions, crawl_hub
from agents.errors import CrawlError
from agents.store import read_store
from tests.fakes.hub_server import HubModel, HubServer

TOKEN = "hf_SECRETtokenDoNotLog123"
WEIGHTS = {"model.safetensors": b"\0" * 64, "pytorch_model.bin": b"\0" * 64}


def _good(i: int, **kw) -> HubModel:
    kw.setdefault("pipeline_tag", "text-generation" if i % 2 == 0 else "fill-mask")
    mt = "gpt2" if kw["pipeline_tag"] == "text-generation" else "bert"
    arch = "GPT2LMHeadModel" if mt == "gpt2" else "BertForMaskedLM"
    return HubModel(
        f"org/good-{i:02d}",
        downloads=1000 - i,
        likes=i,
        tags=["pytorch"],
        config={"model_type": mt, "architectures": [arch], "vocab_size": 1000},
        files=dict(WEIGHTS),
        **kw,
    )


def population() -> list[HubModel]:
    """12 good models and one of each kind of broken one, interleaved by downloads."""
    models = [_good(i) for i in range(12)]
    models += [
        HubModel(
            "org/malformed",
            downloads=995,
            config=b'{"model_type": "bert", "hidden_size": ',
            files=dict(WEIGHTS),
        ),
        HubModel(
            "org/remote-code",
            downloads=993,
            tags=["custom_code"],
            config={
                "model_type": "my_custom",
                "architectures": ["MyCustomModel"],
                "auto_map": {"AutoModel": "modeling_custom.MyCustomModel"},
            },
            files={"modeling_custom.py": b"raise SystemExit('never run me')", **WEIGHTS},
        ),
        HubModel("org/gated", downloads=991, gated=True, config={"model_type": "gpt2"}, files=dict(WEIGHTS)),
        HubModel("org/no-config", downloads=989, library_name="diffusers", config=None, files=dict(WEIGHTS)),
        HubModel("org/unknown-type", downloads=987, config={"model_type": "not_a_real_type"}),
        HubModel(
            "org/bad-arch",
            downloads=985,
            config={"model_type": "bert", "architectures": ["BertForTimeTravel"]},
        ),
        HubModel("org/bad-values", downloads=983, config={"model_type": "llama", "hidden_size": "big"}),
        HubModel(
            "org/native-auto-map",
            downloads=981,
            config={
                "model_type": "gpt2",
                "architectures": ["GPT2LMHeadModel"],
                "auto_map": {"AutoModelForCausalLM": "modeling_gpt2.GPT2LMHeadModel"},
            },
        ),
    ]
    return models


EXPECTED_BROKEN = {
    "org/malformed": "config_not_json",
    "org/remote-code": "trust_remote_code",
    "org/gated": "gated_or_private",
    "org/no-config": "no_config",
    "org/unknown-type": "unknown_model_type",
    "org/bad-arch": "architecture_missing",
    "org/bad-values": "config_not_instantiable",
}


@pytest.fixture(autouse=True)
def _no_hub_telemetry(monkeypatch):
    """huggingface_hub fetches an agent registry from the endpoint and caches it in HF_HOME: not in tests."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)


@pytest.fixture
def hub():
    with HubServer(population(), page_size=4) as server:
        yield server


def _opts(server: HubServer, tmp_path: Path, **kw) -> HubOptions:
    kw.setdefault("retry_base", 0.001)
    return HubOptions(endpoint=server.url, cache_dir=str(tmp_path / "hf-cache"), checkpoint_every=3, **kw)


def test_full_crawl_pages_triages_and_never_fetches_weights(hub, tmp_path):
    summary = crawl_hub(tmp_path / "out", _opts(hub, tmp_path))
    records = read_store(tmp_path / "out")
    by_id = {r.id: r for r in records}

    assert summary.total == len(hub.models) == len(records) == len(by_id)
    # the listing was paged (page size 4) and asked sorted by downloads
    listing = hub.requests_to(r"^/api/models$")
    assert len(listing) == -(-len(hub.models) // 4)
    assert all(r.query["sort"] == ["downloads"] for r in listing)
    assert [r.id for r in records] == sorted(by_id, key=lambda i: -hub.models[i].downloads)
    # broken models are recorded with their reason and did not stop the crawl
    assert {i: r.broken_reason for i, r in by_id.items() if r.status == "broken"} == EXPECTED_BROKEN
    assert summary.broken_by_reason == {v: 1 for v in EXPECTED_BROKEN.values()}
    assert summary.ok == 13
    # an auto_map for a type transformers has natively is not a reason to refuse
    assert by_id["org/native-auto-map"].status == "ok"
    assert "401" in by_id["org/gated"].broken_detail  # no token at all
    # metadata the listing gave is stored
    good = by_id["org/good-00"]
    assert (good.downloads, good.likes, good.pipeline_tag, good.library_name) == (
        1000,
        0,
        "text-generation",
        "transformers",
    )
    assert good.sha == hub.models["org/good-00"].sha and "pytorch" in good.tags
    assert (
        good.model_type == "gpt2"
        and good.architectures == ["GPT2LMHeadModel"]
        and good.config_level == "full"
    )
    assert json.loads(good.config)["vocab_size"] == 1000
    # only config.json was ever requested: no weights, no custom code
    files = {r.path.rsplit("/", 1)[-1] for r in hub.requests_to(r"/resolve/")}
    assert files == {"config.json"}


def test_task_and_library_filters_reach_the_hub(hub, tmp_path):
    summary = crawl_hub(tmp_path / "out", _opts(hub, tmp_path, task="fill-mask", library="transformers"))
    records = read_store(tmp_path / "out")
    assert summary.total == 6 and all(r.pipeline_tag == "fill-mask" for r in records)
    first = hub.requests_to(r"^/api/models$")[0]
    assert first.query["pipeline_tag"] == ["fill-mask"] and first.query["filter"] == ["transformers"]


def test_interrupted_crawl_resumes_where_it_stopped(hub, tmp_path):
    out = tmp_path / "out"
    seen: list[str] = []

    def stop_after_seven(rec):
        seen.append(rec.id)
        if len(seen) == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        crawl_hub(out, _opts(hub, tmp_path, workers=1), progress=stop_after_seven)
    state = json.loads((out / STATE_FILE).read_text())
    assert state["done"] == 7 and not state["finished"]

    fetched_before = {r.path for r in hub.requests_to(r"/resolve/", "GET")}
    summary = crawl_hub(out, _opts(hub, tmp_path, workers=1))
    assert summary.resumed == 7
    assert summary.total == len(hub.models)
    ids = [r.id for r in read_store(out)]
    assert len(ids) == len(set(ids)) == len(hub.models)
    # no config of the first seven was downloaded again
    after = hub.requests_to(r"/resolve/", "GET")[len(fetched_before) :]
    refetched = {r.path.split("/resolve/")[0].lstrip("/") for r in after} & set(seen)
    assert refetched == set()


def test_limit_then_a_larger_limit_continues(hub, tmp_path):
    out = tmp_path / "out"
    first = crawl_hub(out, _opts(hub, tmp_path, limit=5))
    assert first.total == 5 and len(read_store(out)) == 5
    second = crawl_hub(out, _opts(hub, tmp_path, limit=9))
    assert second.resumed == 5 and second.total == 9
    gets = [r.path for r in hub.requests_to(r"/resolve/.*config.json", "GET")]
    assert len(gets) == len(set(gets)), "a config was downloaded twice"


def test_other_filters_in_the_same_dir_are_refused_unless_fresh(hub, tmp_path):
    out = tmp_path / "out"
    crawl_hub(out, _opts(hub, tmp_path, limit=2))
    with pytest.raises(CrawlError, match="other filters"):
        crawl_hub(out, _opts(hub, tmp_path, task="fill-mask"))
    summary = crawl_hub(out, _opts(hub, tmp_path, task="fill-mask", fresh=True))
    assert summary.resumed == 0 and summary.total == 6


def test_listing_429_with_retry_after_is_honoured(hub, tmp_path):
    hub.fail(r"^/api/models$", 429, headers={"Retry-After": "0"}, times=1)
    summary = crawl_hub(tmp_path / "out", _opts(hub, tmp_path))
    assert summary.total == len(hub.models)
    assert len(hub.requests_to(r"^/api/models$")) == -(-len(hub.models) // 4) + 1


def test_transient_500_and_truncated_responses_recover(hub, tmp_path):
    hub.fail(r"^/org/good-01/resolve/", 500, method="HEAD", times=1)
    hub.fail(r"^/org/good-02/resolve/", 502, method="GET", times=2)
    hub.fail(r"^/org/good-03/resolve/", method="GET", truncate=True, times=1)
    hub.fail(r"^/api/models$", truncate=True, times=1)  # a listing page cut mid-body
    crawl_hub(tmp_path / "out", _opts(hub, tmp_path))
    by_id = {r.id: r for r in read_store(tmp_path / "out")}
    assert len(by_id) == len(hub.models)
    for i in ("org/good-01", "org/good-02", "org/good-03"):
        assert by_id[i].status == "ok", by_id[i].broken_detail
        assert json.loads(by_id[i].config)["vocab_size"] == 1000


def test_persistent_failure_is_recorded_with_retry_after_waits(hub, tmp_path):
    hub.fail(r"^/org/good-04/resolve/", 503, method="GET", headers={"Retry-After": "7"}, times=1000)
    waits: list[float] = []
    crawl_hub(tmp_path / "out", _opts(hub, tmp_path, max_retries=3, sleep=waits.append))
    by_id = {r.id: r for r in read_store(tmp_path / "out")}
    assert by_id["org/good-04"].broken_reason == "fetch_failed"
    assert "503" in by_id["org/good-04"].broken_detail
    assert waits == [7.0, 7.0, 7.0]  # Retry-After, once per retry
    assert by_id["org/good-05"].status == "ok"  # the crawl went on


def test_listing_error_stops_with_state_saved_then_resumes(hub, tmp_path):
    out = tmp_path / "out"
    hub.fail(r"^/api/models$", 400, times=1)
    with pytest.raises(CrawlError, match="rerun"):
        crawl_hub(out, _opts(hub, tmp_path))
    summary = crawl_hub(out, _opts(hub, tmp_path))
    assert summary.total == len(hub.models)


def test_token_is_sent_for_gated_repos_and_never_written(tmp_path):
    models = [
        HubModel("org/gated-ok", downloads=2, gated=True, config={"model_type": "gpt2"}),
        HubModel(
            "org/gated-no", downloads=1, gated=True, config={"model_type": "gpt2"}, token_has_access=False
        ),
    ]
    with HubServer(models, tokens=(TOKEN,)) as server:
        crawl_hub(tmp_path / "out", _opts(server, tmp_path, token=TOKEN))
        auth = {r.headers.get("authorization") or r.headers.get("Authorization") for r in server.requests}
    by_id = {r.id: r for r in read_store(tmp_path / "out")}
    assert by_id["org/gated-ok"].status == "ok"
    assert by_id["org/gated-no"].broken_reason == "gated_or_private"
    assert "403" in by_id["org/gated-no"].broken_detail  # token sent, access not granted
    assert f"Bearer {TOKEN}" in auth
    for f in (tmp_path / "out").rglob("*"):
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f


def test_offline_mode_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CrawlError, match="HF_HUB_OFFLINE"):
        crawl_hub(tmp_path / "out", HubOptions())


def test_cli_uses_hf_endpoint_and_hf_token_from_the_environment(hub, tmp_path):
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HOME=str(tmp_path / "hf-home"))
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "crawl",
            "--source",
            "hub",
            "--out",
            str(tmp_path / "out"),
            "--limit",
            "6",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["total"] == 6 and summary["store"].endswith("models.parquet")
    assert summary["ok"] + summary["broken"] == 6
    assert hub.requests_to(r"^/api/models$"), "HF_ENDPOINT was not used"
    model_api = hub.requests_to(r"^/api/models$") + hub.requests_to(r"/resolve/")
    assert all(
        r.headers.get("authorization", r.headers.get("Authorization")) == f"Bearer {TOKEN}" for r in model_api
    )
    assert TOKEN not in proc.stdout + proc.stderr


def test_two_crawls_in_one_dir_do_not_interleave(hub, tmp_path):
    from filelock import FileLock

    out = tmp_path / "out"
    out.mkdir()
    with FileLock(str(out / ".crawl.lock")), pytest.raises(CrawlError, match="another crawl"):
        crawl_hub(out, _opts(hub, tmp_path))

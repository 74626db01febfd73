"""Cache levels: memory LRU, disk (atomic, locked, verified), shared store, counters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from backend.cache import CacheConfig, DirectoryStore, NeffCache, get_cache, register_store_scheme
from backend.cache.memory import MemoryLRU
from backend.neff import Artifact, CompilerFlags, TensorSpec, compile_partition
from backend.neff.compiler import plan

ROOT = Path(__file__).resolve().parents[3]


def _partition(n=4):
    gm = make_fx(lambda x: (x * 2).relu().sum(0))(torch.ones(n, 3))
    specs = [TensorSpec((n, 3), (3, 1), "float32")]
    key, doc = plan(gm, specs, "t1", CompilerFlags())
    calls = []

    def compile_fn():
        calls.append(1)
        return compile_partition(gm, specs, [], "t1", CompilerFlags(), planned=(key, doc))

    return key, compile_fn, calls


def _cache(tmp_path, name="disk", shared=None, **kw):
    cfg = CacheConfig(tmp_path / name, shared, kw.get("max_entries", 64), kw.get("max_bytes", 1 << 24))
    return NeffCache(cfg)


def test_memory_lru_is_bounded_by_entries_and_bytes():
    lru = MemoryLRU(max_entries=2, max_bytes=100)
    lru.put("a", 1, 10)
    lru.put("b", 2, 10)
    assert lru.get("a") == 1  # a is now most recent
    lru.put("c", 3, 10)
    assert "b" not in lru and "a" in lru and "c" in lru
    lru.put("d", 4, 95)  # over the byte bound: older entries go
    assert list(lru._items) == ["d"] and lru.nbytes == 95 and lru.evictions == 3


def test_levels_memory_then_disk_then_compile(tmp_path):
    key, compile_fn, calls = _partition()
    first = _cache(tmp_path)
    first.get_or_compile(key, compile_fn)
    first.get_or_compile(key, compile_fn)
    assert len(calls) == 1 and first.counters.compiles == 1 and first.counters.hits_memory == 1
    assert first.disk.path(key).is_file()
    second = _cache(tmp_path)  # a new process: empty memory, same disk
    exe = second.get_or_compile(key, compile_fn)
    assert len(calls) == 1 and second.counters.hits_disk == 1
    torch.testing.assert_close(exe(torch.ones(4, 3))[0], torch.full((3,), 8.0))
    cumulative = json.loads((tmp_path / "disk" / "stats.json").read_text())
    assert cumulative["compiles"] == 1 and cumulative["hits_disk"] == 1


def test_shared_store_fills_local_disk(tmp_path):
    key, compile_fn, calls = _partition()
    _cache(tmp_path, "machine_a", shared=str(tmp_path / "shared")).get_or_compile(key, compile_fn)
    b = _cache(tmp_path, "machine_b", shared=f"file://{tmp_path / 'shared'}")
    b.get_or_compile(key, compile_fn)
    assert len(calls) == 1 and b.counters.hits_shared == 1 and b.counters.compiles == 0
    assert b.disk.path(key).is_file()  # the next process on machine b hits its own disk


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_artifact_is_removed_and_recompiled(tmp_path, damage):
    key, compile_fn, calls = _partition()
    _cache(tmp_path).get_or_compile(key, compile_fn)
    path = DirectoryStore(tmp_path / "disk").path(key)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3] if damage == "truncate" else data.replace(b"relu", b"relv"))
    again = _cache(tmp_path)
    exe = again.get_or_compile(key, compile_fn)
    assert len(calls) == 2 and again.counters.corrupt_removed == 1 and again.counters.compiles == 1
    Artifact.from_bytes(path.read_bytes(), expected_key=key)  # a sound artifact replaced it
    torch.testing.assert_close(exe(torch.ones(4, 3))[0], torch.full((3,), 8.0))


def test_compile_in_flight_is_not_started_twice(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_COMPILE_COST_SCALE", "40")  # ~0.3 s: threads overlap the compile
    key, compile_fn, calls = _partition()
    cache = _cache(tmp_path)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get_or_compile(key, compile_fn)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len({id(r) for r in results}) == 1
    assert cache.counters.inflight_waits + cache.counters.hits_memory == 3


def test_pluggable_store_scheme(tmp_path):
    class DictStore(DirectoryStore):
        """Stands in for an object store client."""

    register_store_scheme("memtest", lambda loc: DictStore(tmp_path / "objstore"))
    key, compile_fn, _ = _partition()
    cache = _cache(tmp_path, shared="memtest://bucket/prefix")
    cache.get_or_compile(key, compile_fn)
    assert isinstance(cache.shared, DictStore) and list(cache.shared.keys()) == [key]
    with pytest.raises(ValueError, match="no store registered for nosuch://"):
        _cache(tmp_path, shared="nosuch://x")


def test_get_cache_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_CACHE_DIR", str(tmp_path / "one"))
    assert get_cache().disk.root == tmp_path / "one"
    monkeypatch.setenv("NEURON_CACHE_DIR", str(tmp_path / "two"))
    assert get_cache().disk.root == tmp_path / "two"


_RACER = """
import json, sys, torch
from backend.cache import get_cache
from backend.neff import CompilerFlags, TensorSpec, compile_partition
job = json.load(open(sys.argv[1]))
specs = [TensorSpec.from_json(s) for s in job["inputs"]]
planned = (job["key"], job["graph"])
print("ready", flush=True)
sys.stdin.readline()  # start line: both processes ask for the graph at the same moment
compile_it = lambda: compile_partition(None, specs, [], "t1", CompilerFlags(), planned=planned)
get_cache().get_or_compile(job["key"], compile_it)
print(json.dumps(get_cache().counters.to_dict()))
"""


def test_two_processes_racing_on_one_graph_compile_it_once(tmp_path):
    gm = make_fx(lambda x: (x * 2).relu().sum(0))(torch.ones(4, 3))
    specs = [TensorSpec((4, 3), (3, 1), "float32")]
    key, doc = plan(gm, specs, "t1", CompilerFlags())
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"key": key, "graph": doc, "inputs": [s.to_json() for s in specs]}))
    env = {**os.environ, "NEURON_CACHE_DIR": str(tmp_path / "race"), "NEURON_COMPILE_COST_SCALE": "200"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(job)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:  # both imported and waiting: the compiles really race
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(o["compiles"] for o in outs) == [0, 1]  # one compiled, the other loaded it
    assert sorted(o["hits_disk"] for o in outs) == [0, 1]
    assert list(DirectoryStore(tmp_path / "race").keys()) == [key]

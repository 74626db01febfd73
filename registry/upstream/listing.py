"""List the upstream tier's cases: one per op_db OpInfo x CPU dtype x sample, with stable ids.

Listing means generating every sample once (to count them and fingerprint their shapes). It runs
in child processes (``python -m registry.upstream.listing``), a chunk of ops each, so a sample
generator that crashes or hangs cannot take the runner down: the chunk is re-run one op per
process and the op that kills it gets crash rows. What was listed is cached as JSON lines under
``$HARNESS_CACHE_DIR/upstream/`` keyed by the torch and numpy versions and this package's code,
so a nightly lists in seconds; workers regenerate the samples they run from the same seeds
(no tensor is ever written to disk or unpickled).

    groups = list_groups("add,mm", dtypes=["float32"], workers=2)
    cases = to_cases(groups)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contracts.status import UpstreamSkip

ROOT = Path(__file__).resolve().parents[2]
TIER = "upstream"
_CHUNK_OPS = 25
_OP_TIMEOUT = 900.0  # seconds one op may take to list all its dtypes' samples


@dataclass
class Group:
    """One (op, variant, dtype): its samples' fingerprints, or why it has none."""

    op: str
    variant: str
    dtype: str
    family: str = "other"
    hashes: list[str] | None = None  # one per sample, in sample order
    status: str = ""  # "" (listed) | "skipped" | "crash" | "timeout"
    reason: str = ""  # an UpstreamSkip value for skipped groups, the death for crash/timeout
    message: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.op, self.variant, self.dtype)


# ------------------------------------------------------------------------------------ child side


def _child(names: list[list[str]], dtypes: list[str] | None) -> None:
    """Print one JSON line per op ("begin": every dtype it declares) and per group it lists,
    flushed, so a crash keeps what was done."""
    from registry.upstream import execute, opinfos

    execute.quiet()
    wanted = set(dtypes) if dtypes else None
    for name, variant in names:
        op = opinfos.find(name, variant)
        fam = opinfos.family(op)
        cpu = [opinfos.dtype_name(d) for d in opinfos.cpu_dtypes(op)]
        try:
            elsewhere = [opinfos.dtype_name(d) for d in opinfos.reference_only_elsewhere(op)]
        except Exception:  # noqa: BLE001 - an OpInfo whose CUDA dtypes cannot be computed here
            elsewhere = []
        todo = [d for d in cpu if wanted is None or d in wanted]
        print(
            json.dumps({"begin": [name, variant], "dtypes": sorted(cpu + elsewhere), "todo": todo}),
            flush=True,
        )
        for d in elsewhere:
            if wanted is None or d in wanted:
                g = Group(
                    name,
                    variant,
                    d,
                    fam,
                    status="skipped",
                    reason=UpstreamSkip.PYTORCH_APPLICABILITY.value,
                    message="op_db declares this dtype for CUDA but not for the CPU reference",
                )
                print(json.dumps(asdict(g)), flush=True)
        for d in todo:
            g = Group(name, variant, d, fam)
            try:
                g.hashes = [
                    opinfos.fingerprint(s) for s in opinfos.generate_samples(op, opinfos.parse_dtype(d))
                ]
            except Exception as exc:  # noqa: BLE001 - the sample generator itself failed
                g.status, g.reason = "skipped", UpstreamSkip.REFERENCE_ERROR.value
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                g.message = f"sample generation raised {type(exc).__name__}: {first}"
            print(json.dumps(asdict(g)), flush=True)


# ----------------------------------------------------------------------------------- parent side


def _env() -> dict[str, str]:
    # PYTHONHASHSEED: a sample generator iterating a set must list the same samples in every process
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "PYTHONHASHSEED": "0",
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
    }


def _run_child(
    names: list[list[str]], dtypes: list[str] | None, op_timeout: float
) -> tuple[list[dict], str | None]:
    """Run a listing child; its JSON lines and how it ended (None: cleanly). The deadline is per
    op (reset by each op's "begin" line), so a long chunk on a loaded machine is not a hang."""
    import queue
    import threading

    spec = json.dumps({"names": names, "dtypes": dtypes})
    cmd = [sys.executable, "-W", "ignore", "-m", "registry.upstream.listing", "--child"]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=_env(), cwd=ROOT
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        proc.stdin.write(spec)  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]
        out, failure = [], None
        deadline = time.monotonic() + op_timeout + 120.0  # the child's imports come first
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                proc.kill()
                failure = "timeout"
                break
            if line is None:
                break
            if line.startswith("{"):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut by the death of the child
                out.append(record)
                if "begin" in record:
                    deadline = time.monotonic() + op_timeout
        code = proc.wait()
        if failure is None and code != 0:
            err.seek(0)
            failure = _death(code, err.read().decode(errors="replace"))
    return out, failure


def _death(code: int, stderr: str) -> str:
    import signal

    tail = " | ".join((stderr or "").strip().splitlines()[-3:])[:300]
    if code < 0:
        try:
            return f"{signal.Signals(-code).name}: {tail}"
        except ValueError:
            pass
    return f"exit code {code}: {tail}"


@dataclass
class _Listed:
    groups: list[Group] = field(default_factory=list)
    op_dtypes: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # every dtype each op declares
    names: list[list[str]] | None = None  # [name, variant] of every OpInfo of op_db


def _chunk(names: list[list[str]], dtypes: list[str] | None, timeout: float) -> _Listed:
    """List a chunk of ops in one child. Ops run one after the other and each announces itself,
    so when the child dies the op in flight is the suspect: it is listed again alone (an op that
    kills its own process gets crash, or timeout, groups for the dtypes not listed) and the ops
    after it go on in a new child."""
    lines, failure = _run_child(names, dtypes, timeout)
    out = _Listed(
        [Group(**d) for d in lines if "begin" not in d],
        {tuple(d["begin"]): d["dtypes"] for d in lines if "begin" in d},
    )
    if failure is None:
        return out
    begun = [d for d in lines if "begin" in d]
    if not begun:  # died before the first op (the import): nothing to blame on an op
        suspect, rest = names[0], names[1:]
    else:
        suspect = list(begun[-1]["begin"])
        rest = names[[list(n) for n in names].index(suspect) + 1 :]
    if len(names) == 1:  # it died alone: what it listed stands, the rest of its dtypes get the death
        todo = begun[-1]["todo"] if begun else ["all"]  # died before naming its dtypes: one row says so
        finished = {g.dtype for g in out.groups}
        status = "timeout" if failure == "timeout" else "crash"
        for d in (d for d in todo if d not in finished):
            out.groups.append(
                Group(
                    suspect[0],
                    suspect[1],
                    d,
                    status=status,
                    reason=f"sample generation: {failure}"[:300],
                    message=f"listing the op's samples killed its process ({failure})"[:300],
                )
            )
        return out
    out.groups = [g for g in out.groups if [g.op, g.variant] != suspect]
    for part in ([suspect], rest):
        if part:
            more = _chunk(part, dtypes, timeout)
            out.groups.extend(more.groups)
            out.op_dtypes.update(more.op_dtypes)
    return out


def cache_dir() -> Path:
    from contracts.settings import current

    return current().cache_dir / "upstream"


def cache_key() -> str:
    """Versions that decide the samples: torch, numpy and the code that generates and fingerprints."""
    from importlib import metadata

    here = Path(__file__).resolve().parent
    code = b"".join((here / f).read_bytes() for f in ("opinfos.py", "listing.py"))
    parts = [metadata.version("torch"), metadata.version("numpy"), hashlib.sha1(code).hexdigest()[:12]]
    return hashlib.sha1("/".join(parts).encode()).hexdigest()[:16]


def _read_cache(path: Path) -> _Listed:
    out = _Listed()
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            d = json.loads(line)
            if "names" in d:
                out.names = [list(n) for n in d["names"]]
            elif "begin" in d:
                out.op_dtypes[tuple(d["begin"])] = list(d["dtypes"])
            else:
                out.groups.append(Group(**d))
        except (ValueError, TypeError, KeyError):
            continue  # a damaged line: that group is listed again
    return out


def _append_cache(path: Path, listed: _Listed) -> None:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # two runs listing at once append whole lines
        if listed.names is not None:
            fh.write(json.dumps({"names": listed.names}) + "\n")
        for key, dts in listed.op_dtypes.items():
            fh.write(json.dumps({"begin": list(key), "dtypes": dts}) + "\n")
        for g in listed.groups:
            if g.status in ("", "skipped"):  # a crash is listed again next time
                fh.write(json.dumps(asdict(g)) + "\n")


def _all_names() -> list[list[str]]:
    """[name, variant] of every OpInfo, op_db order (in a child: the runner never imports op_db)."""
    code = (
        "import json; from registry.upstream.opinfos import op_db; "
        "print(json.dumps([[o.name, o.variant_test_name] for o in op_db()]))"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cannot read op_db: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def list_groups(
    ops: str | None = None,
    dtypes: Iterable[str] | None = None,
    workers: int = 1,
    use_cache: bool = True,
    progress: bool = False,
) -> list[Group]:
    """Every (op, variant, dtype) group of the selection, in op_db order, dtypes by name."""
    wanted = sorted({d.strip().removeprefix("torch.") for d in dtypes if d.strip()}) if dtypes else None
    from registry.upstream.opinfos import matches

    path = cache_dir() / f"listing-{cache_key()}.jsonl"
    listed = _read_cache(path) if use_cache else _Listed()
    if listed.names is None:
        listed.names = _all_names()
        if use_cache:
            _append_cache(path, _Listed(names=listed.names))
    names = [n for n in listed.names if matches(n[0], n[1], ops)]
    if not names:
        raise ValueError(
            f"no OpInfo of op_db matches --ops {ops!r} (globs over name or name.variant, "
            f"comma-separated; e.g. 'add,nn.functional.*')"
        )
    if wanted:
        import torch

        unknown = [d for d in wanted if not isinstance(getattr(torch, d, None), torch.dtype)]
        if unknown:
            raise ValueError(
                f"--dtypes: not torch dtypes: {', '.join(unknown)} (e.g. float32,bfloat16,int64)"
            )
    have = {g.key for g in listed.groups}

    def missing(n: list[str]) -> bool:
        declared = listed.op_dtypes.get((n[0], n[1]))
        return declared is None or any(
            (n[0], n[1], d) not in have for d in declared if wanted is None or d in wanted
        )

    todo = [n for n in names if missing(n)]
    if todo:
        parts = [todo[i : i + _CHUNK_OPS] for i in range(0, len(todo), _CHUNK_OPS)]
        t0, done = time.monotonic(), 0
        fresh = _Listed()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(_chunk, p, wanted, _OP_TIMEOUT) for p in parts]
            for future in as_completed(futures):
                got = future.result()
                fresh.groups.extend(got.groups)
                fresh.op_dtypes.update(got.op_dtypes)
                if use_cache:  # chunk by chunk: a listing killed half-way keeps what it listed
                    _append_cache(path, got)
                done += len(got.op_dtypes)
                if progress:
                    print(
                        f"upstream: listed the samples of {done}/{len(todo)} ops "
                        f"({time.monotonic() - t0:.0f}s)",
                        file=sys.stderr,
                        flush=True,
                    )
        listed.groups.extend(fresh.groups)
    by_op: dict[tuple[str, str], dict[str, Group]] = {}
    for g in listed.groups:  # later lines win: a group listed again replaces the cached one
        by_op.setdefault((g.op, g.variant), {})[g.dtype] = g
    out = []
    for name, variant in names:
        mine = by_op.get((name, variant), {})
        out.extend(mine[d] for d in sorted(mine) if wanted is None or d in wanted)
    return out


def to_cases(groups: Iterable[Group]) -> list[Any]:
    """Groups -> runner Cases: one per sample, one per group without samples."""
    from contracts.records import Case
    from registry.upstream.opinfos import case_id

    cases = []
    for g in groups:
        base = {"op": g.op, "variant": g.variant, "dtype": g.dtype, "family": g.family}
        if g.hashes is None or g.status:
            payload = {
                "info": {**base, "sample": None},
                "hash": None,
                "listing": {"status": g.status or "skipped", "reason": g.reason, "message": g.message},
            }
            cases.append(Case(case_id(g.op, g.variant, g.dtype, None, None), TIER, payload))
            continue
        for i, h in enumerate(
            g.hashes
        ):  # "info": what the case is, and the labels of its rows (a crash's too)
            cases.append(
                Case(
                    case_id(g.op, g.variant, g.dtype, i, h), TIER, {"info": {**base, "sample": i}, "hash": h}
                )
            )
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="list op_db samples (child process of the upstream tier)")
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args(argv)
    if args.child:
        spec = json.loads(sys.stdin.read())
        _child(spec["names"], spec.get("dtypes"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

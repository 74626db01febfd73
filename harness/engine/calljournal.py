"""The per-call journal: the last aten calls a worker entered, on disk, so its death names the op.

Why: a case whose worker segfaults or hangs leaves no answer behind; the journal does. While a
case runs under it (harness.engine.callmode, a TorchDispatchMode in the worker), every aten call
is written to a file *before* it runs and marked done after it returns. A SIGKILL or a SIGSEGV
cannot take back what the kernel already holds, so the runner reads the last call entered and
turns it into the row's root cause (contracts.rootcause.RootCause, route ``call_journal``).

The file is a ring of fixed-size slots: call ``seq`` goes to slot ``seq % SLOTS``, written with
one ``pwrite`` and completed by a second that overwrites its state in place (``open`` ->
``done``), so the file never grows and writing costs two system calls per call. Each slot holds
one JSON object padded with spaces:

    {"s": "open", "seq": 41, "t": 1733.2, "phase": "forward", "index": 17, "op": "aten.topk.default",
     "shapes": [[4, 8], null], "dtypes": ["float32", null], "strides": [[8, 1], null],
     "devices": ["neuron"], "module": "model.layers.0.mlp.gate", "source": "modeling_x.py:88 in forward"}

No torch here: the runner reads journals without importing it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from contracts.rootcause import RootCause

SLOTS = 128
SLOT_BYTES = 1024
_STATE_AT = len('{"s": "')  # where the 4-letter state of a slot starts
OPEN, DONE = "open", "done"
#: the entries kept in a root cause's evidence (the calls just before the culprit)
CONTEXT = 5


class JournalWriter:
    """Writes call entries into the ring file at `path` (truncated on open)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._lock = threading.Lock()
        self._seq = 0

    def enter(self, entry: dict[str, Any]) -> int:
        """Record a call about to run; returns its slot offset (for `done`)."""
        with self._lock:
            seq = self._seq
            self._seq += 1
        data = encode({"s": OPEN, "seq": seq, "t": round(time.time(), 3), **entry})
        offset = (seq % SLOTS) * SLOT_BYTES
        os.pwrite(self.fd, data, offset)
        return offset

    def done(self, offset: int) -> None:
        """The call at `offset` returned (or raised): it is not where the worker died."""
        os.pwrite(self.fd, DONE.encode(), offset + _STATE_AT)

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def encode(entry: dict[str, Any]) -> bytes:
    """One slot: the entry as JSON, shortened until it fits, padded to SLOT_BYTES."""
    entry = dict(entry)
    data = json.dumps(entry, separators=(", ", ": "), default=str).encode()
    for shorten in (_drop_strides, _fewer_inputs, _short_texts):
        if len(data) < SLOT_BYTES:
            break
        shorten(entry)
        data = json.dumps(entry, separators=(", ", ": "), default=str).encode()
    if len(data) >= SLOT_BYTES:  # never reached with the fields above; a slot must stay one entry
        data = json.dumps(
            {k: entry[k] for k in ("s", "seq", "t", "phase", "index", "op") if k in entry}
        ).encode()
    return data + b" " * (SLOT_BYTES - 1 - len(data)) + b"\n"


def _drop_strides(entry: dict[str, Any]) -> None:
    entry.pop("strides", None)


def _fewer_inputs(entry: dict[str, Any]) -> None:
    for key in ("shapes", "dtypes"):
        if isinstance(entry.get(key), list):
            entry[key] = entry[key][:4]
    entry["inputs_cut"] = True


def _short_texts(entry: dict[str, Any]) -> None:
    for key in ("module", "source", "node", "op"):
        if isinstance(entry.get(key), str):
            entry[key] = entry[key][-120:]


def read_calls(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The entries of a journal file in call order (the last SLOTS calls); [] when it is missing
    or empty. A slot that does not parse (torn by the death) is skipped."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return []
    entries = []
    for start in range(0, len(data), SLOT_BYTES):
        raw = data[start : start + SLOT_BYTES].strip(b" \n\x00")
        if not raw:
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("seq"), int):
            entries.append(entry)
    return sorted(entries, key=lambda e: e["seq"])


def open_calls(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Calls entered and not returned, oldest first."""
    return [e for e in entries if e.get("s") == OPEN]


def stalled(path: str | os.PathLike, seconds: float, now: float | None = None) -> dict[str, Any] | None:
    """The call a worker is stuck in: an open call entered more than `seconds` ago with no call
    entered since (the whole process has made no progress through the dispatcher). None if none."""
    entries = read_calls(path)
    if not entries:
        return None
    now = time.time() if now is None else now
    last = entries[-1]
    if now - float(last.get("t", now)) < seconds:
        return None
    pending = open_calls(entries)
    return pending[-1] if pending else None


# --------------------------------------------------------------------------- the record


def _describe(entry: dict[str, Any]) -> str:
    where = f" in {entry['module']}" if entry.get("module") else ""
    return f"{entry.get('op', '?')} ({entry.get('phase', '?')} call {entry.get('index')}){where}"


def root_cause(
    entries: list[dict[str, Any]],
    kind: str,
    how: str,
    seconds: float = 0.0,
    **extra: Any,
) -> RootCause:
    """The root cause of a worker death (`kind` crash or hang) from its journal entries: the last
    call entered that did not return. `how` says how the worker died, for the sentence."""
    context = [_brief(e) for e in entries[-CONTEXT:]]
    if not entries:
        return not_found(
            f"the worker {how} before entering any op call under the call journal (setup, imports, "
            "model building, or code that calls no aten op)",
            kind,
            seconds,
            **extra,
        )
    pending = open_calls(entries)
    if not pending:
        return not_found(
            f"the worker {how} after its last op call had returned ({_describe(entries[-1])}): outside "
            "any op call (Python code, a library or the runtime between calls)",
            kind,
            seconds,
            last_calls=context,
            **extra,
        )
    culprit = pending[-1]
    others = [_brief(e) for e in pending[:-1]]
    evidence: dict[str, Any] = {"last_calls": context, "seq": culprit.get("seq"), **extra}
    if others:
        evidence["also_open"] = others
    if culprit.get("node"):
        evidence["autograd_node"] = culprit["node"]
    if culprit.get("inputs_cut"):
        evidence["inputs_cut"] = True
    return RootCause(
        found=True,
        why=f"the worker {how} inside {_describe(culprit)}: the last call it entered did not return",
        op=str(culprit.get("op", "")),
        phase=str(culprit.get("phase", "")),
        kind=kind,
        route="call_journal",
        call_index=culprit.get("index"),
        input_shapes=list(culprit.get("shapes") or []),
        input_dtypes=list(culprit.get("dtypes") or []),
        input_strides=list(culprit.get("strides") or []),
        module_path=str(culprit.get("module") or ""),
        source_line=str(culprit.get("source") or ""),
        seconds=round(seconds, 3),
        extra=evidence,
    )


def not_found(why: str, kind: str, seconds: float = 0.0, gave_up: str = "", **extra: Any) -> RootCause:
    """A death the journal could not pin on a call (or no journal to read), and why."""
    return RootCause(
        found=False,
        why=why,
        kind=kind,
        route="call_journal",
        seconds=round(seconds, 3),
        gave_up=gave_up,
        extra=dict(extra),
    )


def _brief(entry: dict[str, Any]) -> dict[str, Any]:
    keep = ("seq", "s", "phase", "index", "op", "shapes", "dtypes", "module")
    return {k: entry[k] for k in keep if k in entry}

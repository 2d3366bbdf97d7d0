"""The search's append-only ledger: one JSON record per line, written and synced as things happen.

Every step of a search (a proposal with its prompts and responses, a validation, a training outcome,
an evaluation, a playback, a critique, a comparison, a decision) is one flat record
`{"seq", "t", "kind", "key", **data}` (t: seconds since the epoch; data a mapping). The synthesizer's
call records (kind "synthesis", motionvl.synth.synthesis_record) are lines of the same file, which
is what its `replay` backend reads back. `Ledger.once(kind, key, fn)` returns the recorded data of a
step that already happened and otherwise runs `fn` and records its result, so a search written as
a sequence of `once` steps resumes after a crash or kill -9 where it stopped, without redoing a
finished step (and without asking a model twice). A line cut short by a kill is dropped on open.
`Ledger.retry(kind, key, reason)` lets one recorded step be done again (a resume training a start whose
training had failed): a `retry` record names it, the earlier record stays in the file, and the step's next
record is the one `get`, `has` and `once` see from then on.

A full disk is `LedgerWriteError` naming the file: the search stops there with everything before
it kept, and `--resume` continues once space is free.
"""

from __future__ import annotations

import errno
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

LEDGER_FILE = "ledger.jsonl"
RECORD_FIELDS = ("seq", "t", "kind", "key")
RETRY_KIND = "retry"


class LedgerWriteError(OSError):
    """The ledger could not be written (a full disk, a read-only directory); nothing recorded before is lost."""


class Ledger:
    def __init__(self, run_dir: str | Path, on_append: Callable[[dict], None] | None = None):
        """on_append(record) is called after each record is durably written (e.g. to publish it)."""
        self.on_append = on_append
        self.path = Path(run_dir) / LEDGER_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.records: list[dict] = []
        self._index: dict[tuple[str, str], dict] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        raw = self.path.read_bytes()
        good_end = 0
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # the last line was cut short by a kill: it never happened
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break
            good_end += len(line)
            self._remember(record)
        if good_end < len(raw):
            with self.path.open("r+b") as f:
                f.truncate(good_end)

    def _remember(self, record: dict) -> None:
        self.records.append(record)
        self._index[(record["kind"], record["key"])] = record
        if record["kind"] == RETRY_KIND:
            self._index.pop(tuple(record["step"]), None)

    # ------------------------------------------------------------------ reading
    def get(self, kind: str, key: str) -> dict | None:
        """The data of the record (kind, key), or None."""
        record = self._index.get((kind, str(key)))
        return None if record is None else data_of(record)

    def has(self, kind: str, key: str) -> bool:
        return (kind, str(key)) in self._index

    def items(self, kind: str) -> list[tuple[str, dict]]:
        """(key, data) of every record of `kind`, in the order they were written."""
        return [(r["key"], data_of(r)) for r in self.records if r["kind"] == kind]

    # ------------------------------------------------------------------ writing
    def retry(self, kind: str, key: str, reason: str) -> None:
        """Let the recorded step (kind, key) be recorded again, saying why (see the module doc)."""
        step = [kind, str(key)]
        attempt = 1 + sum(1 for r in self.records if r["kind"] == RETRY_KIND and r.get("step") == step)
        self.append(RETRY_KIND, f"{kind}/{key}#{attempt}", {"step": step, "reason": reason})

    def append(self, kind: str, key: str, data: dict) -> dict:
        """Record a step's data (a mapping); a (kind, key) recorded before is not recorded again (its first data
        stands). Returns the data as recorded."""
        if not isinstance(data, dict):
            raise TypeError(f"ledger data must be a mapping, got {type(data).__name__}")
        clash = [k for k in ("seq", "t", "key") if k in data] + (["kind"] if data.get("kind", kind) != kind else [])
        if clash:
            raise ValueError(f"ledger data may not set {clash}")
        with self._lock:
            key = str(key)
            if (kind, key) in self._index:
                return data_of(self._index[(kind, key)])
            record = {"seq": len(self.records), "t": round(time.time(), 3), "kind": kind, "key": key,
                      **jsonable({k: v for k, v in data.items() if k != "kind"})}
            line = json.dumps(record, allow_nan=False) + "\n"
            size_before = self.path.stat().st_size if self.path.exists() else 0
            try:
                with self.path.open("a") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                self._truncate(size_before)
                reason = "the disk is full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)
                raise LedgerWriteError(exc.errno, f"cannot write the search ledger {self.path}: {reason}; everything "
                                                  f"recorded before is kept: free space and rerun with --resume") from exc
            self._remember(record)
        if self.on_append is not None:
            self.on_append(record)
        return data_of(record)

    def _truncate(self, size: int) -> None:
        """After a failed write, cut what part of the line reached the file (the ledger stays readable)."""
        try:
            with self.path.open("r+b") as f:
                f.truncate(size)
        except OSError:
            pass

    def once(self, kind: str, key: str, fn: Callable[[], dict]) -> dict:
        """The recorded data of step (kind, key); the first time, run `fn` and record what it returns."""
        if self.has(kind, key):
            return self.get(kind, key)
        return self.append(kind, key, fn())


def data_of(record: dict) -> dict:
    """A record's data: everything but its seq, t, kind and key."""
    return {k: v for k, v in record.items() if k not in RECORD_FIELDS}


def jsonable(x: Any) -> Any:
    """Plain JSON data: numpy numbers to Python, NaN/inf to None, paths to strings, tuples to lists."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int):
        return int(x)
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if f.is_integer() and type(x).__name__.startswith(("int", "uint")):
        return int(f)
    return f if math.isfinite(f) else None

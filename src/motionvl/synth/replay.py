"""Synthesis records for the run's ledger, and the `replay` backend that answers from them.

One JSON line per `propose` call (the search owns the ledger file and appends these lines to it)::

    {"kind": "synthesis", "version": 1, "time": "2026-12-07T10:00:00+00:00",
     "synthesizer": {"backend": "openai:qwen2.5-7b", "offline": false, ...},   # what actually ran
     "request_key": "5d0c...",          # sha256 of the request's canonical JSON, first 16 hex digits
     "request": {task, iteration, num_candidates, parent, parent_statistics, parent_scores, feedback,
                 seed, temperature},
     "candidates": [{spec, ok, rejection, prompt, response, attempts, usage, edits, rationale,
                     exchanges: [{response, finish_reason, rejection, usage, tokens_estimated}]}],
     "usage": {prompt_tokens, completion_tokens, latency_s, cost, calls, bytes_sent, bytes_received},
                                        # summed over candidates
     "budget": {calls, tokens, images, bytes, max_calls, ...},                  # the run's totals after the call
     "error": null}                     # or the SynthesisError text when the call produced no candidates

`replay` answers a request with the recorded candidates of the same request (same key), else of the
next unused record of the same iteration (training is not bit-identical across machines, so a
replayed run's statistics, and with them its requests, may differ slightly). Recorded specs are
checked again (the ledger is data, not trusted code); the model is never called.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path
from typing import Iterable

from motionvl.synth.api import (Candidate, RewardSynthesizer, SynthesisError, SynthesisRequest, add_usage,
                                empty_usage, rejected)
from motionvl.synth.validation import check_spec

RECORD_KIND = "synthesis"
RECORD_VERSION = 1


def request_key(request: SynthesisRequest) -> str:
    text = json.dumps(request.to_dict(), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def synthesis_record(request: SynthesisRequest, candidates: list[Candidate] | None,
                     synthesizer: RewardSynthesizer | None = None, error: str | None = None) -> dict:
    """The ledger line of one propose call (JSON-serialisable)."""
    usage = empty_usage()
    for c in candidates or []:
        add_usage(usage, c.usage)
    return {"kind": RECORD_KIND, "version": RECORD_VERSION,
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "synthesizer": synthesizer.describe() if synthesizer is not None else None,
            "request_key": request_key(request), "request": request.to_dict(),
            "candidates": [c.to_dict() for c in candidates or []], "usage": usage,
            "budget": synthesizer.budget.to_dict() if synthesizer is not None else None, "error": error}


def append_record(path: str | Path, record: dict) -> None:
    """Append one record as a JSON line and make it durable (flush + fsync) before returning."""
    line = json.dumps(record, default=str, separators=(",", ":"))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_synthesis_records(source: str | Path | Iterable) -> list[dict]:
    """The synthesis records of a ledger (a JSONL path, or already-parsed records), in order.

    Lines of other kinds are skipped; a last line cut off by a crash is ignored; a broken line in the
    middle is an error naming its line number.
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise SynthesisError(f"cannot read the ledger {path}: {exc}") from None
        records = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if n == len(lines):
                    break  # the line being written when the run was killed
                raise SynthesisError(f"{path}:{n}: not a JSON line ({exc})") from None
    else:
        records = list(source)
    return [r for r in records if isinstance(r, dict) and r.get("kind") == RECORD_KIND]


def usage_totals(records: Iterable[dict]) -> dict:
    """Calls, tokens and bytes the recorded synthesis calls used (restore a run's cap on resume)."""
    from motionvl.llm.usage import cap_measures, totals

    measured = cap_measures(totals((r.get("usage") or {}) for r in records))
    return {"calls": measured["calls"], "tokens": measured["tokens"], "bytes": measured["bytes"]}


class ReplaySynthesizer(RewardSynthesizer):
    """Answers from an earlier run's recorded synthesis calls; calls no model (offline)."""

    name = "replay"
    offline = True

    def __init__(self, ledger: str | Path | Iterable | None = None, *, robot=None, **budget):
        super().__init__(**budget)
        if ledger is None or ledger == "":
            raise SynthesisError("the replay synthesizer needs `ledger`: the ledger.jsonl of the run to replay")
        self.records = read_synthesis_records(ledger)
        if not self.records:
            raise SynthesisError(f"no synthesis records in {ledger if isinstance(ledger, (str, Path)) else 'the records'}")
        self.robot = robot
        self._used: set[int] = set()
        self.recorded_backends = sorted({str((r.get("synthesizer") or {}).get("backend")) for r in self.records})

    def _find(self, request: SynthesisRequest) -> tuple[int, str]:
        key = request_key(request)
        free = [i for i in range(len(self.records)) if i not in self._used and self.records[i].get("candidates")]
        for i in free:
            if self.records[i].get("request_key") == key:
                return i, "exact"
        for i in free:
            if (self.records[i].get("request") or {}).get("iteration") == request.iteration:
                return i, "iteration"
        recorded = sorted({(r.get("request") or {}).get("iteration") for r in self.records}, key=str)
        raise SynthesisError(f"replay: no unused recorded synthesis for iteration {request.iteration} "
                             f"(the ledger has iterations {recorded})")

    def _propose(self, request: SynthesisRequest) -> list[Candidate]:
        index, match = self._find(request)
        self._used.add(index)
        recorded = self.records[index]["candidates"]
        out: list[Candidate] = []
        for k in range(request.num_candidates):
            if k >= len(recorded):
                out.append(rejected(f"replay: the recording has only {len(recorded)} candidates for this request"))
                continue
            raw = dict(recorded[k])
            rationale = f"replayed ({match} match of record {index}): {raw.get('rationale', '')}"
            common = dict(prompt=raw.get("prompt", ""), response=raw.get("response", ""), attempts=0,
                          usage=empty_usage(), exchanges=raw.get("exchanges") or [])
            if not raw.get("ok") or raw.get("spec") is None:
                out.append(Candidate(spec=None, ok=False, rejection=raw.get("rejection") or "rejected in the recording",
                                     edits=raw.get("edits") or [], rationale=rationale, **common))
                continue
            spec, rejection = check_spec(raw["spec"], where=f"replayed candidate {k}", robot=self.robot,
                                         environment=request.environment)
            if spec is None:
                out.append(Candidate(spec=None, ok=False, rejection=f"the recorded spec no longer passes: {rejection}",
                                     edits=raw.get("edits") or [], rationale=rationale, **common))
                continue
            out.append(Candidate(spec=spec, ok=True, rejection=None, edits=raw.get("edits") or [], rationale=rationale,
                                 **common))
        return out

    def describe(self) -> dict:
        return {**super().describe(), "recorded_backends": self.recorded_backends}

"""What a model-backed part asked of its model, and the run's caps on it.

Usage is counted on both sides of the loop (the reward synthesizer and the critic) in one shape::

    {"calls", "prompt_tokens", "completion_tokens", "images", "bytes_sent", "bytes_received"}

Calls, images and bytes are counted here, on this side of the wire; tokens come from the server's
`usage` and are taken only when they are plausible (non-negative integers below MAX_REPORTED_TOKENS):
anything else (negative, fractional, missing, absurd) is replaced by an estimate of 4 characters per
token and flagged, so a server cannot lift a cap by reporting negative use. `UsageBudget` holds the
caps (calls, tokens = prompt + completion, images, bytes = sent + received); None is no cap.
"""

from __future__ import annotations

import math
from typing import Any

USAGE_KEYS = ("calls", "prompt_tokens", "completion_tokens", "images", "bytes_sent", "bytes_received")
CAPS = ("calls", "tokens", "images", "bytes")
MAX_REPORTED_TOKENS = 10_000_000
"""More tokens than any one request can use: a larger reported count is not believed."""
CHARS_PER_TOKEN = 4


class CapReached(RuntimeError):
    """A cap on model use is reached: no further call may start. The message starts with "cap reached"."""


def estimate_tokens(chars: int) -> int:
    return int(math.ceil(max(0, int(chars)) / CHARS_PER_TOKEN))


def reported_tokens(value: Any, estimate: int) -> tuple[int, bool]:
    """(tokens, estimated): the server's count when it is a plausible integer, else the estimate."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPORTED_TOKENS:
        return int(estimate), True
    return int(value), False


def empty_usage() -> dict:
    return {k: 0 for k in USAGE_KEYS}


def add_usage(total: dict, part: dict | None) -> dict:
    """total += part for USAGE_KEYS (missing or non-numeric entries count 0, negative ones too); returns total."""
    for key in USAGE_KEYS:
        value = (part or {}).get(key)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        total[key] = int(total.get(key) or 0) + (int(value) if ok else 0)
    return total


def totals(usages) -> dict:
    """The sum of usage dicts."""
    out = empty_usage()
    for u in usages:
        add_usage(out, u)
    return out


def cap_measures(usage: dict) -> dict:
    """The capped measures of a usage dict: calls, tokens (prompt + completion), images, bytes (sent + received)."""
    u = add_usage(empty_usage(), usage)
    return {"calls": u["calls"], "tokens": u["prompt_tokens"] + u["completion_tokens"], "images": u["images"],
            "bytes": u["bytes_sent"] + u["bytes_received"]}


class UsageBudget:
    """A run's caps on one part's model use (None = no cap). The search restores `used` on resume."""

    def __init__(self, what: str = "model", *, max_calls: int | None = None, max_tokens: int | None = None,
                 max_images: int | None = None, max_bytes: int | None = None):
        self.what = what
        self.caps = {"calls": max_calls, "tokens": max_tokens, "images": max_images, "bytes": max_bytes}
        for name, value in self.caps.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"max_{name} must be a non-negative integer or None, got {value!r}")
        self.used = {k: 0 for k in CAPS}

    @property
    def max_calls(self):
        return self.caps["calls"]

    @property
    def max_tokens(self):
        return self.caps["tokens"]

    @property
    def calls(self) -> int:
        return self.used["calls"]

    @property
    def tokens(self) -> int:
        return self.used["tokens"]

    def restore(self, calls: int = 0, tokens: int = 0, images: int = 0, bytes: int = 0) -> None:  # noqa: A002
        """Count what earlier sessions of the run used (from its ledger)."""
        self.used = {"calls": max(0, int(calls)), "tokens": max(0, int(tokens)), "images": max(0, int(images)),
                     "bytes": max(0, int(bytes))}

    def charge(self, usage: dict) -> None:
        """Add one call's usage (USAGE_KEYS; a usage without `calls` counts as one call)."""
        u = dict(usage or {})
        u.setdefault("calls", 1)
        for key, value in cap_measures(u).items():
            self.used[key] += value

    def exhausted(self) -> str | None:
        """The "cap reached: ..." reason when no further call may start, else None."""
        for name in CAPS:
            cap = self.caps[name]
            if cap is not None and self.used[name] >= cap:
                unit = {"calls": f"{self.what} calls", "tokens": "tokens", "images": "images", "bytes": "bytes"}[name]
                return f"cap reached: {self.used[name]} of {cap} {unit} used"
        return None

    def check(self) -> None:
        """CapReached when exhausted()."""
        reason = self.exhausted()
        if reason:
            raise CapReached(reason)

    def to_dict(self) -> dict:
        return {**self.used, **{f"max_{k}": v for k, v in self.caps.items()}}

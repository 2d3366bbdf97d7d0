"""Where a reward came from: a term-level diff in words, a spec's weights, the code version of a run. What makes two
specs the same reward is `motionvl.rewards.spec.reward_key` (the exported policy's reward_spec_hash)."""

from __future__ import annotations

import functools
import subprocess

from motionvl.robot import package_root


def describe_diff(diff: list[dict]) -> str:
    """A term-level diff ([{term, change, old, new}], motionvl.synth.term_diff) in one line."""
    if not diff:
        return "no change"
    parts = []
    for d in diff:
        if d["change"] == "added":
            new = d["new"]
            parts.append(f"+{d['term']} {new['weight'] if isinstance(new, dict) else new:g}")
        elif d["change"] == "removed":
            parts.append(f"-{d['term']}")
        elif d["change"] == "weight":
            parts.append(f"{d['term']} {d['old']:g}->{d['new']:g}")
        elif d["change"] in ("scale", "only_positive"):
            parts.append(f"{d['change']} {d['old']}->{d['new']}")
        else:
            parts.append(f"{d['term']} {d['change']}")
    return ", ".join(parts)


def term_weights(spec: dict) -> dict[str, float]:
    return {name: _entry(entry)["weight"] for name, entry in (spec.get("terms") or {}).items()}


def _entry(entry) -> dict | None:
    if entry is None:
        return None
    if isinstance(entry, (int, float)):
        return {"weight": float(entry)}
    return {"weight": float(entry.get("weight", 0.0)), "params": entry.get("params") or {},
            "source": entry.get("source", "library")}


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """`git describe --always --dirty` of the source tree when it is a git checkout, else the package version."""
    root = package_root()
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--tags"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return f"git:{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"motionvl {version('motionvl')}"
    except PackageNotFoundError:
        return "motionvl (unknown version)"

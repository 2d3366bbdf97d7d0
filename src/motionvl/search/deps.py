"""The search's one meeting point with parts built beside it (pinned APIs in the lead's protocol).

The synthesizer's ledger records and term diffs (motionvl.synth), and the critic's pairwise comparison
(Critic.compare), with a named interim stand-in where a critic has no comparison yet (INTERIM marks
code that goes once every critic has one).
"""

from __future__ import annotations

import importlib

from motionvl.rewards.spec import RewardSpec


# ----------------------------------------------------------------------------- synthesizer
def synthesis_record(request, candidates: list, synthesizer, error: str | None) -> dict:
    """The ledger record of one propose call (motionvl.synth.synthesis_record, what its replay backend reads),
    without its "kind" (the ledger's own). A synthesizer that cannot describe itself (a test's stand-in, none
    after a failed call) is named by its `name`."""
    from motionvl.synth import synthesis_record as record_of

    described = synthesizer if hasattr(synthesizer, "describe") and hasattr(synthesizer, "budget") else None
    record = record_of(request, candidates, described, error)
    record["synthesizer"] = record["synthesizer"] or {"backend": getattr(synthesizer, "name", None),
                                                      "offline": bool(getattr(synthesizer, "offline", False))}
    return {k: v for k, v in record.items() if k != "kind"}


def term_diff(parent: dict | None, spec: dict) -> list[dict]:
    """Term-level changes from spec dict `parent` to `spec`: [{term, change, old, new}] (motionvl.synth.term_diff)."""
    from motionvl.synth import term_diff as diff

    return diff(RewardSpec.from_dict(parent) if parent is not None else None, RewardSpec.from_dict(spec))


# ----------------------------------------------------------------------------- pairwise comparison
def rollout(frames, times, trajectory):
    """The critic's Rollout(frames, times, trajectory)."""
    for module in ("motionvl.critic", "motionvl.critic.base", "motionvl.critic.schema"):
        cls = getattr(importlib.import_module(module), "Rollout", None)
        if cls is not None:
            return cls(frames, times, trajectory)
    return {"frames": frames, "times": times, "trajectory": trajectory}


def compare(critic, first, second, task: str) -> dict:
    """Critic.compare(first, second, task) as {preferred: 'first'|'second'|None, confidence, reason, valid}.
    A critic without compare (INTERIM, before the critic helper's comparison lands) is asked for a critique
    of each and prefers the higher alignment score by more than 0.02, else abstains."""
    if hasattr(critic, "compare"):
        try:
            c = critic.compare(first, second, task)
        except Exception as exc:  # noqa: BLE001 - a judge must never crash the search
            return {"preferred": None, "confidence": 0.0, "reason": f"comparison failed: {type(exc).__name__}: {exc}",
                    "valid": False}
        return {"preferred": c.preferred, "confidence": float(c.confidence), "reason": c.reason, "valid": bool(c.valid)}
    scores = []
    for r in (first, second):
        get = (lambda k: r.get(k)) if isinstance(r, dict) else (lambda k: getattr(r, k))
        fb = critic.critique(get("frames"), get("times"), task, trajectory=get("trajectory"))
        scores.append(fb.alignment_score if fb.valid else None)
    if None in scores:
        return {"preferred": None, "confidence": 0.0, "reason": "a critique was invalid", "valid": False}
    diff = scores[0] - scores[1]
    preferred = "first" if diff > 0.02 else "second" if diff < -0.02 else None
    return {"preferred": preferred, "confidence": min(1.0, abs(diff) * 5), "valid": True,
            "reason": f"alignment {scores[0]:.3f} vs {scores[1]:.3f} (interim: critiques compared)"}

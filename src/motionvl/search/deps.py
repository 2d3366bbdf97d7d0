"""The search's calls into the synthesizer (its ledger records, term diffs) and the critic (pairwise comparison)."""

from __future__ import annotations

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
def compare(critic, first, second, task: str) -> dict:
    """Critic.compare(first, second, task) (motionvl.critic.Rollout each) as the ledger's
    {preferred: 'first'|'second'|None, confidence, reason, valid, usage}; a failing critic is an invalid answer.
    usage: what the comparison's model calls used (motionvl.llm.usage), counted against the run's critic caps."""
    try:
        c = critic.compare(first, second, task)
    except Exception as exc:  # noqa: BLE001 - a judge must never crash the search
        return {"preferred": None, "confidence": 0.0, "reason": f"comparison failed: {type(exc).__name__}: {exc}",
                "valid": False}
    out = {"preferred": c.preferred, "confidence": float(c.confidence), "reason": c.reason, "valid": bool(c.valid)}
    if c.meta.get("usage"):
        out["usage"] = c.meta["usage"]
    if not c.valid and c.error:
        out["reason"] = c.reason or f"the critic gave no usable answer: {c.error[:500]}"
    return out

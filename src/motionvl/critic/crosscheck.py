"""A model critic's claims checked against the rollout's kinematics, wherever a critic runs (loop, node, CLI).

`cross_check(feedback, measured)`: every descriptor the kinematics can measure (a quantity it measured, with a
stated value; or a feature label whose quantity it measured in a band that implies that feature or a rival) is
a measurable claim. `merge_measurements` attaches the measured value and flags a claim that disagrees beyond
the quantity's tolerance as a contradiction. The alignment the ranking uses is the critic's stated alignment
times the share of its measurable claims the kinematics confirms; a critic with no measurable claim gets share
0 (nothing it said could be checked, so its alignment does not count). The stated alignment, the counts and the
contradictions ("said X, measured Y") go in meta["cross_check"]. The kinematic critic is the measurement itself
and is not checked against itself. Checking twice changes nothing.
"""

from __future__ import annotations

import dataclasses

from motionvl.critic.schema import MotionFeedback, merge_measurements

RULE = ("alignment = the critic's stated alignment x the share of its measurable claims the kinematics confirms "
        "(0 when it made none)")


def is_checked(feedback: MotionFeedback | dict) -> bool:
    meta = feedback.meta if isinstance(feedback, MotionFeedback) else (feedback.get("meta") or {})
    return "cross_check" in meta or bool(meta.get("not_a_vlm"))


def cross_check(feedback: MotionFeedback, measured: dict[str, float]) -> MotionFeedback:
    """The feedback with its claims checked against `measured` (kinematic quantities, canonical units) and its
    alignment scaled by the confirmed share (see the module docstring). Invalid or already checked feedback and
    the kinematic critic's own are returned as they are."""
    if not feedback.valid or is_checked(feedback):
        return feedback
    merged = merge_measurements(feedback, measured)
    claims = [d for d in merged.descriptors if d.measured_value is not None]
    confirmed = [d for d in claims if not d.contradiction]
    share = len(confirmed) / len(claims) if claims else 0.0
    stated = float(feedback.alignment_score)
    meta = dict(merged.meta)
    meta["cross_check"] = {
        "measurable": len(claims), "confirmed": len(confirmed), "share": round(share, 4),
        "stated_alignment": stated, "rule": RULE,
        "contradicted": [{"label": d.label, "said": d.value, "unit": d.unit, "measured": d.measured_value}
                         for d in claims if d.contradiction],
    }
    return dataclasses.replace(merged, alignment_score=round(stated * share, 4), meta=meta)


def cross_check_dict(feedback: dict, trajectory) -> dict:
    """`cross_check` of a feedback dict (a ledger record) against a rollout's trajectory."""
    if not feedback.get("valid") or is_checked(feedback) or trajectory is None:
        return feedback
    from motionvl.critic.kinematic import KinematicCritic

    return cross_check(MotionFeedback.from_dict(feedback), KinematicCritic().measure(trajectory)).to_dict()

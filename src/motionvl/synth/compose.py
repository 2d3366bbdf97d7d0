"""A start for a task no shipped reference reward fits (the paper's category (ii)), composed by rules.

`compose_start(task)` builds a reward spec from the term library for a `motionvl.task.Task` whose
`reference_fits` is false: standing still, turning in place, stairs. It keeps the reference reward's
body and regularisation terms (the library's terms at the weights the reference found to train a
walk: a standing or turning task trains the base's range of walking commands beside its own, and
these terms are not the task) and composes the task's part:

* standing: the velocity terms hold the zero command (a tight kernel, the drift terms), the gait
  terms ask for both feet down (the task sets env.gait_stand_below, so they and the stepping
  feed-forward rest at its command), a stronger upright, level and planted body;
* turning in place: the yaw-rate terms lead (kernel, linear error, heading), the drift term keeps
  the pelvis over the spot, the feet apart so that the legs do not cross while turning;
* stairs: higher swing clearance and longer air time, the pelvis height term dropped (the ground
  moves under it), softer landings.

Model-free and deterministic: it is what the `rules` synthesizer starts such a task from (a model
synthesizer samples K rewards from scratch instead).
"""

from __future__ import annotations

from motionvl.rewards.spec import RewardSpec, load_reward_spec

# task part -> {term: weight or (weight, params) or None to drop}
_STAND = {"tracking_lin_vel": (1.0, {"sigma": 0.1}), "lin_vel_error": 1.0, "lin_vel_drift": 0.6,
          "tracking_ang_vel": (0.5, {"sigma": 0.1}), "yaw_drift": 0.3, "tracking_heading": 0.5,
          "contact_phase": 1.0, "feet_clearance": 0.6, "alive": 0.3, "orientation": (0.6, {"tilt_scale": 0.3}),
          "base_height": 0.3, "ang_vel_xy": 0.3, "foot_slip": 1.0, "feet_distance": 0.3, "action_rate": 0.2}
_TURN = {"tracking_ang_vel": (1.0, {"sigma": 0.25}), "yaw_rate_error": 0.6, "tracking_heading": 0.5,
         "lin_vel_drift": 0.6, "feet_distance": 0.4, "knee_distance": 0.2}
_STAIRS = {"feet_clearance": (0.8, {"height": 0.15}), "feet_air_time": 0.5, "base_height": None,
           "touchdown_speed": 0.2, "orientation": 0.4}


def composition(task) -> tuple[str, dict, str]:
    """(name, term changes, why no reference fits) for `task` (motionvl.task.Task)."""
    if task.motion == "stand":
        return "composed_stand", _STAND, "the reference reward is for walking; standing asks for stillness"
    if task.motion == "turn in place":
        return "composed_turn_in_place", _TURN, "the reference reward is for walking; a turn in place asks for yaw"
    if task.terrain.startswith("stairs"):
        return f"composed_{task.terrain}", _STAIRS, "the reference reward is for flat and rough ground, not steps"
    return "composed_walk", {}, "the reference reward fits"


def compose_start(task, reference: RewardSpec | str | None = None) -> RewardSpec:
    """The start of `task` (motionvl.task.Task) composed from the term library (module docstring); `reference`: the
    spec whose body and regularisation terms it keeps (None: config/rewards/reference.yaml)."""
    base = reference if isinstance(reference, RewardSpec) else load_reward_spec(reference)
    name, changes, why = composition(task)
    raw = base.to_dict()
    terms = dict(raw.get("terms") or {})
    for term, change in changes.items():
        if change is None:
            terms.pop(term, None)
            continue
        weight, params = change if isinstance(change, tuple) else (change, None)
        old = terms.get(term)
        old = {"weight": old} if isinstance(old, (int, float)) else dict(old or {})
        entry = {**old, "weight": float(weight)}
        if params:
            entry["params"] = {**(old.get("params") or {}), **params}
        terms[term] = entry
    raw.update(name=name, terms=terms,
               description=f"composed by rules from the term library for '{task.sentence}' ({why})")
    return RewardSpec.from_dict(raw, where=f"the composed start of {task.sentence!r}")

"""The `rules` backend: rule-based re-weighting of the reward-term library. Model-free; not an LLM.

The offline default of the synthesizer. It reads what a language model would read, with fixed
rules instead of a model, and answers with conservative, focused term-level edits of the parent
spec (r*, or the reference spec at the start):

* the task sentence, parsed by the keyword rules the kinematic critic uses (`motionvl.task.parse_task`):
  "straight knees" raises knee_extension (with its straight-leg companions), "upright torso" the
  orientation cost, "high steps" the clearance target, "without slipping" foot_slip, ...; a lean
  the library has no term for becomes a generated term;
* the measured gait numbers (the parent's eval.json, else the critic's measured descriptors): how
  far the motion is from what the task asks sets how urgent an edit is, and a measurement that
  already meets the ask drops a critic suggestion that contradicts it;
* the critic's suggestions (MotionFeedback.suggestions: term, direction, reason);
* the per-term statistics (the reward reflection): a reward term that training never pays gets a
  wider kernel, a cost that is almost always saturated gets a lower weight;
* the gates: a parent that falls or fails its walks gets a stabilising edit first.

Each finding is a "move" with a priority and a few variants of increasing strength; the K
candidates take the findings breadth first (each finding's mildest variant, strongest finding first;
then pairs of the strongest findings; then stronger variants). The seed perturbs near-ties only, so
one seed always gives the same candidates.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from motionvl.rewards.spec import RewardSpec, RewardSpecError, TermSpec, load_reward_spec, reward_key
from motionvl.rewards.terms import ALIASES, REGISTRY
from motionvl.synth.api import (Candidate, RewardSynthesizer, SynthesisRequest, empty_usage, gate_thresholds, rejected,
                                term_diff)
from motionvl.synth.context import term_levels
from motionvl.synth.parsing import spec_answer
from motionvl.synth.validation import check_spec

BACKEND_NAME = "rules"

STRAIGHT_KNEE = {"min_angle": 0.0, "max_angle": 0.2, "sigma": 0.2}
"""config/rewards/straight_knees.yaml's stance-knee band: inside the action range around the 0.4 rad default knee."""
BENT_KNEE = {"min_angle": 0.6, "max_angle": 1.0, "sigma": 0.2}

TORSO_LEAN_CODE = """\
TORSO_LEAN_TARGET = {target}
TORSO_LEAN_SIGMA = 0.15


def torso_lean_pitch(state):
    return np.arcsin(np.clip(state.projected_gravity[:, 0], -1.0, 1.0))


def _reward_torso_lean(state):
    return np.exp(-np.square((torso_lean_pitch(state) - TORSO_LEAN_TARGET) / TORSO_LEAN_SIGMA))
"""

TASK_TERMS = frozenset({"tracking_lin_vel", "lin_vel_error", "lin_vel_drift", "tracking_ang_vel", "yaw_rate_error",
                        "yaw_drift", "tracking_heading"})
"""What makes the robot go where the command says: reflection never lowers or reshapes these."""

# eval.json keys -> the critic's quantity names (one vocabulary for the rules below)
_EVAL_QUANTITIES = {"knee_angle_stance_deg": "knee_flexion", "torso_pitch_deg": "torso_pitch",
                    "swing_clearance_m": "foot_clearance", "stance_slip_mps": "foot_slip",
                    "mean_speed_mps": "forward_speed"}


@dataclasses.dataclass(frozen=True)
class Edit:
    """One term-level change: a new weight and/or parameters (merged into the term's), or new code."""

    term: str
    weight: float | None = None
    params: dict | None = None
    source: str = "library"
    code: str | None = None
    """Generated-term source appended to the spec's code (source 'generated')."""


@dataclasses.dataclass
class Move:
    """A finding and its variants (edit lists, mildest first)."""

    key: str
    priority: float
    reason: str
    variants: list

    def __post_init__(self):  # edits a parent cannot take (a weight already at 1) drop out, then empty variants
        variants = [[e for e in v if e is not None] for v in self.variants]
        self.variants = [v for i, v in enumerate(variants) if v and v not in variants[:i]]


# ----------------------------------------------------------------------------- edit helpers
def _w(x: float) -> float:
    return round(min(1.0, max(0.0, x)), 3)


STRICTER_PARAMS = ("speed_scale", "scale", "tilt_scale", "sigma")
"""A term already at weight 1 is emphasised by shrinking the first of these it has (a cost then charges more for the
same fault, a kernel pays only closer to its target)."""


def _raise(parent: RewardSpec, term: str, step: float, add_weight: float, params: dict | None = None) -> Edit | None:
    """Raise `term` by `step` (added with `add_weight` and `params` when absent); at weight 1 make it stricter
    instead (`STRICTER_PARAMS`); None when it has no such parameter."""
    if term not in parent.weights:
        return Edit(term, _w(add_weight), params)
    w = parent.weights[term]
    if w < 1.0:
        return Edit(term, _w(max(w + step, w * 1.5) if w > 0 else add_weight))
    for key in STRICTER_PARAMS:
        value = _param(parent, term, key)
        if value is not None:
            return Edit(term, None, {key: round(value * 0.7, 4)})
    return None


def _lower(parent: RewardSpec, term: str, factor: float) -> Edit | None:
    w = parent.weights.get(term)
    return None if not w else Edit(term, _w(w * factor))


def _param(parent: RewardSpec, term: str, key: str) -> float | None:
    """A library term's numeric parameter as the parent sets it (else its default); None for generated terms."""
    lib = REGISTRY.get(term)
    own = parent.term(term) if term in parent.weights else None
    if lib is None or (own is not None and own.source != "library"):
        return None
    value = (own.params if own is not None else {}).get(key, lib.params.get(key))
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _weight_move(parent, key, term, direction, priority, reason, add_weight=0.3) -> Move:
    if direction in ("increase", "add"):
        variants = [[_raise(parent, term, 0.2, add_weight)], [_raise(parent, term, 0.4, add_weight + 0.2)]]
    else:  # decrease / remove
        variants = [[_lower(parent, term, 0.6)], [_lower(parent, term, 0.0)]] if direction == "remove" else \
            [[_lower(parent, term, 0.7)], [_lower(parent, term, 0.4)]]
    return Move(key, priority, reason, variants)


def apply_edits(parent: RewardSpec, edits: list[Edit], name: str, description: str) -> dict:
    """The parent's spec dict with `edits` applied (not yet validated)."""
    terms = {t.name: t for t in parent.terms}
    code = parent.code or ""
    for e in edits:
        old = terms.get(e.term)
        if e.code and f"_reward_{e.term}(" not in code and f"_cost_{e.term}(" not in code:
            code = (code.rstrip() + "\n\n\n" if code.strip() else "") + e.code
        if old is None:
            terms[e.term] = TermSpec(e.term, e.weight if e.weight is not None else 0.3,
                                     dict(e.params or {}) if e.source == "library" else {}, e.source)
        else:
            terms[e.term] = dataclasses.replace(
                old, weight=old.weight if e.weight is None else e.weight,
                params={**old.params, **(e.params or {})} if e.source == "library" else old.params)
    out = {"name": name, "description": description, "scale": parent.scale,
           "terms": {n: t.to_dict() for n, t in terms.items()}}
    if parent.only_positive:
        out["only_positive"] = True
    if code.strip():
        out["code"] = code
    return out


# ----------------------------------------------------------------------------- reading the inputs
def measured_quantities(scores: dict | None, feedback: dict | None) -> dict[str, float]:
    """Gait numbers by the critic's quantity names: the reward-free evaluation first, then the critic's measurements.

    A VLM's own statements are not measurements: only `measured_value`s (merged kinematics) and the
    descriptors of a critic that is itself a measurement (meta.not_a_vlm) count.
    """
    out: dict[str, float] = {}
    for d in (feedback or {}).get("descriptors") or []:
        label = d.get("label")
        value = d.get("measured_value")
        if value is None and ((feedback or {}).get("meta") or {}).get("not_a_vlm"):
            value = d.get("value")
        if isinstance(label, str) and isinstance(value, (int, float)) and math.isfinite(value):
            out.setdefault(label, float(value))
    for key, quantity in _EVAL_QUANTITIES.items():
        value = (scores or {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[quantity] = float(value)  # held-out episodes beat one critiqued rollout
    return out


def _gap(value: float | None, met: float, far: float) -> float | None:
    """0 when `value` is at `met` or better, 1 at `far` (either direction), linear between; None without a value."""
    if value is None:
        return None
    return float(min(1.0, max(0.0, (value - met) / (far - met))))


def _urgency(gap: float | None) -> float:
    return 2.0 if gap is None else 0.6 + 2.0 * gap


# ----------------------------------------------------------------------------- the moves
def _with_measure(text: str, label: str, value: float | None, fmt: str, unit: str = "deg") -> str:
    return text if value is None else f"{text}; {label} {value:{fmt}} {unit}"


def _knee_moves(parent: RewardSpec, knees: str | None, knee: float | None) -> list[Move]:
    """Straight (or bent) stance knees: knee_extension first, then with the straight-leg companions of
    config/rewards/straight_knees.yaml, stronger, guarded against falls, firmer, milder."""
    if knees == "bent":
        weight = _w(max(0.5, parent.weights.get("knee_extension", 0) + 0.2))
        return [Move("task:bent_knees", _urgency(_gap(None if knee is None else -knee, -35.0, -15.0)),
                     _with_measure("the task asks for bent knees", "stance knees bend", knee, ".1f"),
                     [[Edit("knee_extension", weight, BENT_KNEE)],
                      [Edit("knee_extension", 0.8, BENT_KNEE), _lower(parent, "base_height", 0.5)]])]
    if knees != "straight":
        return []
    has_term = "knee_extension" in parent.weights
    focus = _raise(parent, "knee_extension", 0.2, 0.6, STRAIGHT_KNEE)
    if focus is None:  # already at full weight: ask for a straighter band instead
        band = _param(parent, "knee_extension", "max_angle") or 0.2
        focus = Edit("knee_extension", None, {"max_angle": round(max(0.05, band * 0.75), 3)})
    companions = [] if "ankle_stance" in parent.weights else [Edit("ankle_stance", 0.3)]
    height = _param(parent, "base_height", "target")
    if "base_height" in parent.weights and height is not None and height < 0.85:
        companions.append(Edit("base_height", None, {"target": 0.85}))  # straighter legs stand taller
    clearance = _param(parent, "feet_clearance", "height")
    if "feet_clearance" in parent.weights and clearance is not None and clearance > 0.05:
        companions.append(Edit("feet_clearance", None, {"height": 0.05}))  # a stiff leg lifts less
    base_w = parent.weights.get("knee_extension") or 0.6
    band = None if has_term else STRAIGHT_KNEE
    strong = [Edit("knee_extension", _w(base_w + 0.3), {**(band or {}), "max_angle": 0.15}), *companions[:1]]
    guarded = [focus, _raise(parent, "orientation", 0.2, 0.3)]  # straighter legs fell more often (probe note)
    firmer = [Edit("knee_extension", _w(base_w + 0.2), band), *companions]
    mild = [] if has_term else [Edit("knee_extension", _w(base_w - 0.2), band)]
    return [Move("task:straight_knees", _urgency(_gap(knee, 10.0, 30.0)),
                 _with_measure("the task asks for straight knees", "stance knees bend", knee, ".1f"),
                 [[focus], [focus, *companions], strong, guarded, firmer, mild])]


def _torso_moves(parent: RewardSpec, torso: str | None, pitch: float | None) -> list[Move]:
    """An upright torso raises the tilt cost; a lean, which no library term pays, becomes a generated term."""
    if torso == "upright":
        tilt = _param(parent, "orientation", "tilt_scale") or 0.4
        stricter = [_raise(parent, "orientation", 0.3, 0.5),
                    Edit("orientation", None, {"tilt_scale": round(tilt * 0.75, 3)})]
        return [Move("task:upright_torso", _urgency(_gap(None if pitch is None else abs(pitch), 5.0, 20.0)),
                     _with_measure("the task asks for an upright torso", "torso pitch", pitch, "+.1f"),
                     [[_raise(parent, "orientation", 0.2, 0.3)], stricter if "orientation" in parent.weights else [],
                      [_raise(parent, "ang_vel_xy", 0.2, 0.2)]])]
    if torso not in ("forward", "backward"):
        return []
    lean = Edit("torso_lean", 0.4, source="generated",
                code=TORSO_LEAN_CODE.format(target=0.25 if torso == "forward" else -0.2))
    lean_deg = None if pitch is None else (pitch if torso == "forward" else -pitch)
    return [Move(f"task:lean_{torso}", _urgency(_gap(None if lean_deg is None else -lean_deg, -15.0, 0.0)),
                 f"the task asks for a {torso} lean; the library has no torso-pitch target, so a generated term pays it",
                 [[lean, _lower(parent, "orientation", 0.3)],
                  [dataclasses.replace(lean, weight=0.7), _lower(parent, "orientation", 0.0)]])]


def _step_moves(parent: RewardSpec, steps: list, clearance: float | None) -> list[Move]:
    moves = []
    lift = parent.weights.get("feet_clearance", 0.4)
    for want in steps:
        if want == "high":
            # The clearance term pays fully from `height` to twice it: a target at or below the swing the parent
            # already lifts changes nothing, so the targets sit above what it lifts (walks lift 10-15 cm).
            lifted = clearance or 0.0
            moves.append(Move("task:high_steps", _urgency(_gap(None if clearance is None else -clearance, -0.2, -0.05)),
                              _with_measure("the task asks for high steps", "swing clearance",
                                            None if clearance is None else 100 * clearance, ".1f", "cm"),
                              [[Edit("feet_clearance", _w(lift + 0.2), {"height": round(max(0.12, 1.3 * lifted), 3)})],
                               [Edit("feet_clearance", _w(lift + 0.4), {"height": round(max(0.15, 1.5 * lifted), 3)}),
                                _raise(parent, "feet_air_time", 0.2, 0.3)]]))
        elif want == "low":
            moves.append(Move("task:low_steps", 1.5, "the task asks for low, shuffling steps",
                              [[Edit("feet_clearance", None, {"height": 0.03})], [_lower(parent, "feet_clearance", 0.4)]]))
        elif want == "clear":
            moves.append(Move("task:no_dragging", _urgency(_gap(None if clearance is None else -clearance, -0.05, 0.0)),
                              "the task asks not to drag the feet",
                              [[_raise(parent, "feet_clearance", 0.2, 0.5)], [_raise(parent, "feet_air_time", 0.2, 0.3)]]))
        elif want in ("long", "short"):
            moves.append(_weight_move(parent, f"task:{want}_steps", "feet_air_time",
                                      "increase" if want == "long" else "decrease", 1.5, f"the task asks for {want} steps"))
    return moves


_WEIGHT_ASKS = (  # (TaskSpec field, value, term, direction, priority, what the task asks)
    ("low_sway", True, "ang_vel_xy", "increase", 1.5, "little sway"),
    ("symmetric", True, "contact_phase", "increase", 1.5, "a symmetric gait"),
    ("gait", "run", "feet_air_time", "increase", 1.5, "a run (flight phases)"),
    ("gait", "turn", "tracking_ang_vel", "increase", 1.2, "a turn"),
)


def task_moves(parent: RewardSpec, task, measured: dict) -> list[Move]:
    """Edits the task sentence asks for (task = motionvl.task.TaskSpec)."""
    moves = _knee_moves(parent, task.knees, measured.get("knee_flexion"))
    moves += _torso_moves(parent, task.torso, measured.get("torso_pitch"))
    moves += _step_moves(parent, task.steps, measured.get("foot_clearance"))
    if task.no_slip:
        moves.append(_weight_move(parent, "task:no_slip", "foot_slip", "increase",
                                  _urgency(_gap(measured.get("foot_slip"), 0.03, 0.15)), "the task asks for no slipping"))
    if task.stable:
        moves.append(Move("task:stable", 1.2, "the task asks for a steady gait",
                          [[_raise(parent, "orientation", 0.2, 0.3)],
                           [_raise(parent, "termination", 0.0, 1.0), _raise(parent, "ang_vel_xy", 0.2, 0.2)]]))
    if task.stance in ("wide", "narrow"):
        band = {"min_dist": 0.30, "max_dist": 0.45} if task.stance == "wide" else {"min_dist": 0.06, "max_dist": 0.14}
        w = parent.weights.get("feet_distance", 0.2)
        moves.append(Move(f"task:{task.stance}_stance", 1.5, f"the task asks for a {task.stance} stance",
                          [[Edit("feet_distance", _w(w + 0.2), band)], [Edit("feet_distance", _w(w + 0.4), band)]]))
    turning = task.turn is not None
    for field, value, term, direction, priority, ask in _WEIGHT_ASKS:
        if getattr(task, field) == value or (value == "turn" and turning):
            moves.append(_weight_move(parent, f"task:{term}", term, direction, priority, f"the task asks for {ask}"))
    return moves


def motion_moves(parent: RewardSpec, task, scores: dict | None) -> list[Move]:
    """Edits for the motion the task commands when it is not the reference's forward walk (task =
    motionvl.task.Task): backward, sideways, slow or fast walking leans on the velocity tracking terms; turning in
    place on the yaw-rate terms and on staying put; standing on staying put, upright and level. Urgency from the
    parent's reward-free evaluation at the task's command where it has one."""
    scores = scores or {}
    vx, vy, yaw = task.command
    moves = []
    success = scores.get("success_rate")
    gap = None if not isinstance(success, (int, float)) else max(0.0, 0.9 - float(success)) / 0.9
    if task.motion == "stand":
        drift = scores.get("drift_mps")
        moves.append(Move("task:stand_still", _urgency(gap if drift is None else _gap(drift, 0.03, 0.15)),
                          "the task asks to stand still: no drift, feet planted, upright"
                          + (f"; drifts {drift:.2f} m/s" if isinstance(drift, (int, float)) else ""),
                          [[_raise(parent, "lin_vel_drift", 0.2, 0.5), _raise(parent, "orientation", 0.2, 0.4)],
                           [_raise(parent, "tracking_lin_vel", 0.0, 1.0), _raise(parent, "lin_vel_drift", 0.4, 0.7),
                            _raise(parent, "foot_slip", 0.0, 1.0)],
                           [_raise(parent, "contact_phase", 0.2, 0.8), _raise(parent, "ang_vel_xy", 0.2, 0.3)]]))
    elif task.motion == "turn in place":
        rate = scores.get("yaw_rate_steady_rps")
        rate_gap = None if not isinstance(rate, (int, float)) else _gap(abs(rate - yaw) / max(abs(yaw), 1e-9), 0.1, 0.5)
        moves.append(Move("task:turn_in_place", _urgency(rate_gap if rate_gap is not None else gap),
                          f"the task asks to turn in place at {yaw:+.2f} rad/s"
                          + (f"; turns at {rate:+.2f} rad/s" if isinstance(rate, (int, float)) else ""),
                          [[_raise(parent, "yaw_rate_error", 0.2, 0.5), _raise(parent, "lin_vel_drift", 0.2, 0.5)],
                           [_raise(parent, "tracking_ang_vel", 0.3, 1.0), _raise(parent, "yaw_rate_error", 0.4, 0.7)],
                           [_raise(parent, "lin_vel_drift", 0.4, 0.7), _raise(parent, "feet_distance", 0.2, 0.3)]]))
    elif vx < 0 or abs(vy) > 1e-9 or abs(math.hypot(vx, vy) - 0.6) > 0.05:
        speed = scores.get("mean_speed_mps")
        asked = math.hypot(vx, vy)
        speed_gap = None if not isinstance(speed, (int, float)) else min(1.0, abs(speed - asked) / max(asked, 0.1))
        way = "backward" if vx < 0 else "sideways" if abs(vy) > 1e-9 else "forward"
        moves.append(Move(f"task:walk_{way}", _urgency(speed_gap if speed_gap is not None else gap),
                          f"the task asks to walk {way} at {asked:.2f} m/s, away from the reference's forward 0.6"
                          + (f"; moves {speed:.2f} m/s along it" if isinstance(speed, (int, float)) else ""),
                          [[_raise(parent, "lin_vel_error", 0.2, 0.5), _raise(parent, "lin_vel_drift", 0.2, 0.4)],
                           [_raise(parent, "tracking_lin_vel", 0.0, 1.0), _raise(parent, "lin_vel_error", 0.4, 0.7)],
                           [_raise(parent, "lin_vel_drift", 0.4, 0.6), _raise(parent, "tracking_heading", 0.2, 0.5)]]))
    return moves


# suggestion (term, direction) -> (quantity, predicate on its measurement: the ask is already met)
_MET_ALREADY: dict[tuple[str, str], tuple[str, Callable[[float], bool]]] = {
    ("knee_extension", "increase"): ("knee_flexion", lambda v: v <= 10.0),
    ("orientation", "increase"): ("torso_pitch", lambda v: abs(v) <= 5.0),
    ("feet_clearance", "increase"): ("foot_clearance", lambda v: v >= 0.06),
    ("foot_slip", "increase"): ("foot_slip", lambda v: v <= 0.05),
}


def critic_moves(parent: RewardSpec, feedback: dict | None, measured: dict, taken: set) -> tuple[list[Move], list[str]]:
    """Moves from the critic's suggestions; also the notes on suggestions left out (and why)."""
    if not feedback or not feedback.get("valid", True):
        return [], []
    alignment = float(feedback.get("alignment_score") or 0.0)
    moves, notes = [], []
    for i, s in enumerate(feedback.get("suggestions") or []):
        term, direction = str(s.get("term")), str(s.get("direction"))
        term = term if term in parent.weights else ALIASES.get(term, term)  # a generated term of the parent keeps its name
        if term not in REGISTRY and term not in parent.weights:
            notes.append(f"critic suggestion '{direction} {s.get('term')}' left out: neither a library term nor one "
                         "of the parent's")
            continue
        met = _MET_ALREADY.get((term, direction))
        if met and met[0] in measured and met[1](measured[met[0]]):
            notes.append(f"critic suggestion '{direction} {term}' left out: measured {met[0]} "
                         f"{measured[met[0]]:.3g} already meets it")
            continue
        if (term, direction) in taken:
            continue  # the task's own move for this term already carries it
        priority = (0.8 + 1.2 * (1.0 - alignment)) * 0.85 ** i
        reason = f"the critic suggests to {direction} {term}" + (f": {s['reason']}" if s.get("reason") else "")
        moves.append(_weight_move(parent, f"critic:{direction}:{term}", term, direction, priority, reason))
    return moves, notes


def reflection_moves(parent: RewardSpec, stats: dict | None) -> list[Move]:
    """Eureka's reward reflection as rules: unpaid rewards get a wider kernel, saturated costs a lower weight."""
    levels, _ = term_levels(stats, parent)
    moves = []
    for name, level in levels.items():
        t = parent.term(name)
        if t.source != "library" or name in ("alive", "termination") or name in TASK_TERMS:
            continue
        sigma = _param(parent, name, "sigma")
        if REGISTRY[name].sign > 0 and level < 0.05 and sigma is not None:
            moves.append(Move(f"reflection:widen:{name}", 0.9, f"{name} is hardly ever paid in training (level "
                              f"{level:.3f} of 1 while up): its kernel is too narrow to guide learning",
                              [[Edit(name, None, {"sigma": round(sigma * 1.5, 4)})],
                               [Edit(name, None, {"sigma": round(sigma * 2.0, 4)})]]))
        elif REGISTRY[name].sign < 0 and level > 0.5:
            moves.append(Move(f"reflection:lower:{name}", 0.9, f"{name} charges {level:.2f} of its maximum on average "
                              "while up: the policy cannot avoid it and it drowns the task reward",
                              [[_lower(parent, name, 0.7)], [_lower(parent, name, 0.4)]]))
    return moves


def gate_moves(parent: RewardSpec, scores: dict | None, stats: dict | None, measured: dict,
               gates: dict | None = None) -> list[Move]:
    """Edits for a parent that fails the gates the search applies (falls, walking success) or the speed. A parent
    below the gates (the request's, else GateConfig's defaults) gets a stabilising edit, first among the findings
    when it fails them badly (success 25 points below its gate, falls 5 points above: 60 % and 20 % by default)."""
    min_success, max_falls = gate_thresholds(gates)
    scores = scores or {}
    moves = []
    fell = scores.get("fell_fraction")
    if fell is None:
        fell = ((stats or {}).get("fall_fraction") or {}).get("last")
    success = scores.get("success_rate")
    has_fell, has_success = isinstance(fell, (int, float)), isinstance(success, (int, float))
    falls_often = has_fell and fell > max_falls
    fails_walks = has_success and success < min_success
    if falls_often or fails_walks:
        badly = (falls_often and fell > max_falls + 0.05) or (fails_walks and success < min_success - 0.25)
        style = sorted((t for t in parent.terms if t.name in ("knee_extension", "ankle_stance", "torso_lean")
                        and t.weight), key=lambda t: -t.weight)
        if falls_often:
            reason = (f"the parent falls too often ({fell:.0%} of episodes)"
                      + (f", success {success:.0%}" if has_success else ""))
        else:
            reason = f"the parent fails too many walks: success {success:.0%}" + (f", falls {fell:.0%}" if has_fell else "")
        moves.append(Move("gate:stability", (2.5 if badly else 1.2) + (fell or 0.0), reason,
                          [[_raise(parent, "termination", 0.0, 1.0), _raise(parent, "orientation", 0.2, 0.3)],
                           [_raise(parent, "alive", 0.2, 0.2), *(_lower(parent, t.name, 0.7) for t in style[:1])]]))
    command = scores.get("command")
    speed = measured.get("forward_speed")  # the evaluation's mean speed along the commanded direction
    if isinstance(command, list) and len(command) >= 2 and isinstance(speed, (int, float)):
        asked = math.hypot(float(command[0]), float(command[1]))
        shortfall = asked - speed
        if asked > 1e-9 and abs(shortfall) > 0.1 * max(asked, 0.3):
            moves.append(Move("gate:speed", 1.0 + min(1.0, abs(shortfall) / 0.3),
                              f"moves at {speed:.2f} m/s along the command against its {asked:.2f}",
                              [[_raise(parent, "lin_vel_error", 0.2, 0.5)], [_raise(parent, "tracking_lin_vel", 0.0, 1.0),
                                                                             _raise(parent, "lin_vel_error", 0.4, 0.7)]]))
    return moves


SPEED_HELD = 0.95
"""A tried candidate moving slower than this share of its command walked short of it (the distance criterion asks 5
of every 6 m the command covers, pushes included)."""
STYLE_KEPT = 0.05
"""The least gain on every style measure (share of the parent's value) that makes a short-walking candidate worth
retrying with the speed held."""


def tried_moves(parent: RewardSpec, tried: list, task, parent_scores: dict | None, gates: dict | None) -> list[Move]:
    """A tried candidate that moved the task's style the asked way (>= STYLE_KEPT on each of the sentence's style
    measures) and fell no more than the gate allows, but lost on success while walking short of the command: its
    edits again, now with the speed held (a stronger velocity-error cost on top of its own; then a tighter tracking
    kernel too). At most two, the largest style gains first and ahead of the other findings. Task =
    motionvl.task.Task."""
    from motionvl.task import style_gains, style_improvement

    measures = task.style_measures if task is not None else ()
    asked = math.hypot(*task.command[:2]) if task is not None else 0.0
    if not measures or asked < 0.05:
        return []
    min_success, max_falls = gate_thresholds(gates)
    base = parent_scores or {}
    found = []
    for entry in tried:
        scores = entry.get("scores") or {}
        speed, fell, success = (scores.get(k) for k in ("mean_speed_mps", "fell_fraction", "success_rate"))
        if entry.get("outcome") == "refused" or not entry.get("terms") or \
                (entry.get("code") or None) != (parent.code or None) or \
                not all(isinstance(v, (int, float)) for v in (speed, fell, success)):
            continue
        lost = success < max(base.get("success_rate", 0.0), min_success)
        shown = style_improvement(scores, base, measures, STYLE_KEPT)
        if shown is None or not lost or fell > max_falls or speed >= SPEED_HELD * asked:
            continue
        try:
            own = RewardSpec.from_dict({"terms": entry["terms"], "code": entry.get("code"),
                                        "scale": entry.get("scale", 1.0)}, where=f"tried candidate {entry.get('id')}")
        except RewardSpecError:  # an entry this version cannot read: nothing to retry
            continue
        edits = [Edit(t.name, t.weight, dict(t.params), t.source) for t in own.terms
                 if t.name not in parent.weights or parent.term(t.name) != t]
        edits += [Edit(name, 0.0) for name in parent.weights if name not in own.weights]
        held = [e for e in (_raise(own, "lin_vel_error", 0.2, 0.5),) if e is not None]
        stricter = [e for e in (_raise(own, "tracking_lin_vel", 0.0, 1.0),) if e is not None]
        if not edits or not held:
            continue
        gain = min(style_gains(scores, base, measures))
        found.append((gain, Move(
            f"tried:{entry.get('id')}+speed", 2.0 + min(1.0, gain),
            f"{entry.get('id')} moved the style ({shown}) falling {fell:.0%}, but walked {speed:.2f} of the "
            f"{asked:.2f} m/s asked (success {success:.0%}): its edits again with the speed held",
            [[*_replace(edits, held)], [*_replace(edits, held + stricter)]])))
    return [m for _, m in sorted(found, key=lambda f: -f[0])[:2]]


def _replace(edits: list[Edit], over: list[Edit]) -> list[Edit]:
    """`edits` with `over` laid on top (an edit of the same term keeps its own parameters `over` does not set)."""
    out = {e.term: e for e in edits}
    for e in over:
        own = out.get(e.term)
        out[e.term] = e if own is None else dataclasses.replace(
            own, weight=own.weight if e.weight is None else e.weight, params={**(own.params or {}), **(e.params or {})})
    return list(out.values())


# ----------------------------------------------------------------------------- the backend
class RulesSynthesizer(RewardSynthesizer):
    """Model-free proposals by rules (see the module docstring); deterministic for a seed."""

    name = BACKEND_NAME
    offline = True

    def __init__(self, *, start: RewardSpec | str | None = None, robot=None, **budget):
        super().__init__(**budget)
        self.start = start if isinstance(start, RewardSpec) else load_reward_spec(start)
        self.robot = robot

    def _propose(self, request: SynthesisRequest) -> list[Candidate]:
        from motionvl.task import TaskError, make_task, parse_task

        parent = request.parent or self.start
        try:
            motion = make_task(request.task)
        except TaskError:  # nothing understood: no task move (the answer below says so)
            motion = None
        if request.from_scratch and motion is not None:  # the rules compose one start (motionvl.synth.compose)
            return self._composed(request, motion)
        task = motion.spec if motion is not None else parse_task(request.task)
        measured = measured_quantities(request.parent_scores, request.feedback)
        moves = gate_moves(parent, request.parent_scores, request.parent_statistics, measured, request.gates)
        moves += task_moves(parent, task, measured)
        if motion is not None:
            moves += motion_moves(parent, motion, request.parent_scores)
        taken = {(e.term, "increase") for m in moves for v in m.variants for e in v if e.weight is not None}
        found, notes = critic_moves(parent, request.feedback, measured, taken)
        moves += found + reflection_moves(parent, request.parent_statistics)
        moves += tried_moves(parent, request.tried, motion, request.parent_scores, request.gates)
        moves = [m for m in moves if m.variants]
        summary = self._summary(request, task, measured, moves, notes)
        if not moves:
            asks = (f"has parts no rule understands ({'; '.join(task.unjudged)})" if task.unjudged else
                    f"asks for nothing the parent can be edited towards ('{request.task}')")
            reason = (f"the rules found nothing to change: the task {asks}; "
                      + ("; ".join(notes) + "; " if notes else "")
                      + "no critic suggestion, failed gate or training statistic gave an applicable edit")
            return [rejected(reason, prompt=summary) for _ in range(request.num_candidates)]
        rng = np.random.default_rng([request.seed, request.iteration])
        options = self._options(moves, rng)
        out: list[Candidate] = []
        seen = {reward_key(parent)} | {reward_key(t) for t in request.tried}
        for label, chosen, edits in options:
            if len(out) == request.num_candidates:
                break
            name = f"{parent.name or 'reward'}_i{request.iteration}_k{len(out)}"[:80]
            raw = apply_edits(parent, edits, name, f"{parent.description} (rules: {label})".strip())
            if reward_key(raw) in seen:  # r* itself, or a candidate an earlier iteration tried
                continue
            seen.add(reward_key(raw))
            rationale = "rules (model-free): " + "; ".join(m.reason for m in chosen)
            spec, rejection = check_spec(raw, where=f"rules candidate {len(out)}", robot=self.robot,
                                         environment=request.environment)
            response = spec_answer(raw, rationale)
            if spec is None:
                out.append(rejected(rejection, prompt=summary, response=response))
                continue
            out.append(Candidate(spec=spec, ok=True, rejection=None, prompt=summary, response=response, attempts=0,
                                 usage=empty_usage(), edits=term_diff(parent, spec), rationale=rationale))
        found_count = len(out)
        while len(out) < request.num_candidates:
            out.append(rejected(f"no further distinct edit: the rules found {found_count} for this input that no "
                                f"earlier candidate ({len(request.tried)} tried) made", prompt=summary))
        return out

    def _composed(self, request: SynthesisRequest, task) -> list[Candidate]:
        from motionvl.synth.compose import compose_start

        spec = compose_start(task)
        rationale = f"rules (model-free): {spec.description}"
        checked, rejection = check_spec(spec.to_dict(), where="rules composed start", robot=self.robot)
        summary = f"rules (model-free) composing a start for task: {request.task}\n{task.describe()}"
        first = (rejected(rejection, prompt=summary) if checked is None else
                 Candidate(spec=checked, ok=True, rejection=None, prompt=summary, response=spec_answer(spec.to_dict(),
                           rationale), attempts=0, usage=empty_usage(), edits=term_diff(None, checked),
                           rationale=rationale))
        return [first] + [rejected("the rules compose one start for a task; no further independent sample",
                                   prompt=summary) for _ in range(request.num_candidates - 1)]

    @staticmethod
    def _options(moves: list[Move], rng) -> list[tuple[str, list[Move], list[Edit]]]:
        """(label, moves, edits) in the order candidates are made: breadth first, so K candidates try K
        different findings before any finding gets a second variant (a strong speed gap would otherwise
        take every slot and leave the task's style for the next iteration); within a round, strongest
        first. Round 0: each finding's mildest variant; round 1: pairs of the three strongest findings;
        then each finding's next variant."""
        scored = []
        for m in moves:
            for v, edits in enumerate(m.variants):
                rank = 0 if v == 0 else v + 1
                scored.append((rank, m.priority * 0.7 ** v * (1.0 + 0.1 * rng.random()), f"{m.key}#{v}", [m], edits))
        top = sorted(moves, key=lambda m: -m.priority)[:3]
        for a, b in ((0, 1), (0, 2), (1, 2)):
            if b < len(top):
                ma, mb = top[a], top[b]
                edits = ma.variants[0] + [e for e in mb.variants[0] if e.term not in {x.term for x in ma.variants[0]}]
                scored.append((1, (ma.priority + mb.priority) * 0.5 * (1.0 + 0.1 * rng.random()),
                               f"{ma.key}#0+{mb.key}#0", [ma, mb], edits))
        scored.sort(key=lambda s: (s[0], -s[1]))
        return [(label, chosen, edits) for _, _, label, chosen, edits in scored]

    @staticmethod
    def _summary(request, task, measured, moves, notes) -> str:
        """The rules' "prompt": what they read and found, for the ledger and the report."""
        asks = {k: v for k, v in task.to_dict().items() if v not in (None, [], False) and k not in ("text", "understood")}
        lines = [f"rules (model-free) on task: {request.task}", f"understood: {asks}"]
        if measured:
            lines.append("measured: " + ", ".join(f"{k}={v:.3g}" for k, v in sorted(measured.items())))
        lines += [f"finding {m.key} (priority {m.priority:.2f}): {m.reason}" for m in sorted(moves, key=lambda m: -m.priority)]
        lines += notes
        return "\n".join(lines)

"""How well measured gait numbers fulfil a parsed task, criterion by criterion (no model).

`score_task(spec, analysis)` turns a `motionvl.task.TaskSpec` and a `motionvl.gait.metrics.GaitAnalysis`
into `Criterion`s: each a score in [0, 1] with a weight, the target it was judged against, what was
measured, and (when it scores below 0.7) the reward-term change that would help. `alignment` folds
them into one score with the fall penalty; `suggestions` names the reward library's terms.
"""

from __future__ import annotations

import dataclasses
import math

from motionvl.critic.schema import Suggestion
from motionvl.gait.metrics import GaitAnalysis
from motionvl.task import TURN_RATE, TaskSpec, commanded

SUGGEST_BELOW = 0.7
HIGH_STEP_FRACTION = (0.05, 0.3)
"""Swing clearance as a fraction of the leg: "high steps" scores 0 at the first (a shuffle) and full at the second
(a marching step, about knee-high); an ordinary walk's lift scores about half."""
NOMINAL_LEG_M = 0.8
"""The leg length assumed when a rollout has no base height."""
"""A criterion scoring below this suggests a reward-term change."""


def _clip01(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


@dataclasses.dataclass
class Criterion:
    """One thing the task asks, judged on the measured gait."""

    name: str
    """What is judged ("speed", "straight knees", ...)."""
    score: float
    """How well the motion meets it, in [0, 1]."""
    weight: float
    """Its weight in the alignment score."""
    target: str
    """The target as a reader sees it ("<= 10 deg at stance")."""
    measured: str
    """The measured value as a reader sees it."""
    suggestion: tuple | None = None
    """(concept, direction, reason) when the score says the reward should change."""


def _speed_score(measured: float, target: float) -> float:
    sigma = max(0.25 * abs(target), 0.1)
    return float(math.exp(-((measured - target) / sigma) ** 2))


def score_task(spec: TaskSpec, a: GaitAnalysis) -> tuple[list[Criterion], list[str]]:
    """Per-criterion scores of the motion against a parsed task, and parts that cannot be judged."""
    v = a.get
    crit: list[Criterion] = []
    unjudged: list[str] = []
    fwd, lat = v("forward_speed_mps") or 0.0, v("lateral_speed_mps") or 0.0
    yaw_rate = math.radians(v("yaw_rate_deg_s") or 0.0)
    cadence = 60.0 * (v("step_frequency_hz") or 0.0)

    gait = spec.gait
    if gait in ("walk", "run", "hop") or (gait == "turn" and spec.direction):
        signs = {"forward": (fwd, "forward"), "backward": (-fwd, "backward"), "left": (lat, "to the left"),
                 "right": (-lat, "to the right"), "sideways": (abs(lat), "sideways")}
        along, words = signs.get(spec.direction or "forward", (fwd, "forward"))
        cmd_speed = abs(a.command[1] if spec.direction in ("left", "right", "sideways") else a.command[0])
        table_speed = max(math.hypot(*commanded(spec)[:2]), 0.05)
        if spec.speed is not None:
            target = spec.speed
            s = _speed_score(along, target)
            tgt = f"{target:.2f} m/s {words}"
        elif spec.speed_word == "slow":  # the task table's slow speed in this direction (motionvl.task)
            target = table_speed
            s = _clip01(along / 0.05) * _clip01(1 - (along - 1.5 * target) / 0.3)
            tgt = f"slow (0.05-{1.5 * target:.2f} m/s) {words}"
        elif spec.speed_word == "fast" or gait == "run":
            target = table_speed
            s = _clip01(along / target)
            tgt = f">= {target:.2f} m/s {words}"
        elif cmd_speed > 0.05:
            target = cmd_speed
            s = _speed_score(along, target)
            tgt = f"{target:.2f} m/s {words} (the command)"
        else:
            target = table_speed
            s = _clip01(along / target)
            tgt = f"moving {words} (>= {target:.2f} m/s)"
        sug = None
        if s < 0.7:
            sug = ("tracking_lin_vel", "increase",
                   f"moves {along:+.2f} m/s {words}; the task asks {tgt}")
        crit.append(Criterion("speed", s, 2.0, tgt, f"{along:+.2f} m/s {words}", sug))
        # it must step, not slide
        s_step = _clip01(cadence / 60.0)
        crit.append(Criterion("stepping", s_step, 1.0, ">= 60 steps/min", f"{cadence:.0f} steps/min",
                              ("feet_air_time", "increase", f"only {cadence:.0f} steps/min") if s_step < SUGGEST_BELOW else None))
        if gait == "run":
            flight = v("flight_fraction") or 0.0
            s_run = _clip01(flight / 0.15)
            crit.append(Criterion("flight phases", s_run, 1.0, "flight phases (running)", f"{flight:.0%} of the time airborne",
                                  ("feet_air_time", "increase", "no flight phases for a run") if s_run < SUGGEST_BELOW else None))
        if gait == "hop":
            flight, sync = v("flight_fraction") or 0.0, v("synchronous_touchdowns") or 0.0
            s_hop = _clip01(flight / 0.15) * _clip01(sync / 0.8)
            crit.append(Criterion("hopping", s_hop, 1.0, "both feet leave and land together",
                                  f"{flight:.0%} airborne, {sync:.0%} synchronous touchdowns",
                                  ("feet_air_time", "increase", "no two-footed hops") if s_hop < SUGGEST_BELOW else None))
    elif gait == "stand":
        speed = math.hypot(fwd, lat)
        s = math.exp(-(speed / 0.1) ** 2) * math.exp(-(yaw_rate / 0.2) ** 2)
        crit.append(Criterion("standing still", s, 2.0, "no net motion", f"{speed:.2f} m/s, {math.degrees(yaw_rate):.0f} deg/s",
                              ("tracking_lin_vel", "increase", f"drifts at {speed:.2f} m/s while asked to stand")
                              if s < SUGGEST_BELOW else None))
        s_steps = _clip01(1.0 - cadence / 30.0)
        crit.append(Criterion("no stepping", s_steps, 1.0, "feet stay planted", f"{cadence:.0f} steps/min",
                              ("feet_air_time", "decrease", "steps while asked to stand") if s_steps < SUGGEST_BELOW else None))
    elif gait == "step":
        speed = math.hypot(fwd, lat)
        s = math.exp(-(speed / 0.15) ** 2)
        crit.append(Criterion("in place", s, 1.5, "no net motion", f"{speed:.2f} m/s",
                              ("tracking_lin_vel", "increase", f"drifts at {speed:.2f} m/s while stepping in place")
                              if s < SUGGEST_BELOW else None))
        s_step = _clip01(cadence / 60.0)
        crit.append(Criterion("stepping", s_step, 1.5, ">= 60 steps/min", f"{cadence:.0f} steps/min",
                              ("feet_air_time", "increase", f"only {cadence:.0f} steps/min") if s_step < SUGGEST_BELOW else None))
    if gait == "turn" and not spec.direction:  # turning without travel: in place
        speed = math.hypot(fwd, lat)
        s = math.exp(-(speed / 0.15) ** 2)
        crit.append(Criterion("in place", s, 1.0, "no net travel", f"{speed:.2f} m/s",
                              ("tracking_lin_vel", "increase", f"travels at {speed:.2f} m/s while turning in place")
                              if s < SUGGEST_BELOW else None))
    if spec.turn is not None:
        sign = {"left": 1.0, "right": -1.0}.get(spec.turn)
        along = yaw_rate * sign if sign is not None else abs(yaw_rate)
        cmd_rate = abs(a.command[2]) if len(a.command) > 2 else 0.0
        target = spec.turn_rate or (cmd_rate if cmd_rate > 0.05 else abs(commanded(spec)[2]) or TURN_RATE)
        s = _speed_score(along, target) if spec.turn_rate or cmd_rate > 0.05 else _clip01(along / 0.3)
        words = f"turning {spec.turn}" if sign is not None else "turning"
        crit.append(Criterion("turning", s, 2.0 if gait == "turn" else 1.0, f"{words} ({target:.2f} rad/s)"
                              if spec.turn_rate or cmd_rate > 0.05 else words, f"{math.degrees(yaw_rate):+.0f} deg/s",
                              ("tracking_ang_vel", "increase", f"yaw rate {yaw_rate:+.2f} rad/s, task asks {words}")
                              if s < SUGGEST_BELOW else None))

    knee = v("knee_angle_stance_deg")
    if spec.knees:
        if knee is None:
            unjudged.append(f"{spec.knees} knees (no knee joints found)")
        elif spec.knees == "straight":
            s = _clip01(1.0 - (knee - 10.0) / 20.0)
            crit.append(Criterion("straight knees", s, 1.5, "<= 10 deg in stance", f"{knee:.0f} deg",
                                  ("knee_extension", "increase", f"knees bent {knee:.0f} deg in stance")
                                  if s < SUGGEST_BELOW else None))
        else:
            s = _clip01((knee - 15.0) / 20.0)
            crit.append(Criterion("bent knees", s, 1.5, ">= 35 deg in stance", f"{knee:.0f} deg",
                                  ("knee_extension", "decrease", f"knees only {knee:.0f} deg in stance")
                                  if s < SUGGEST_BELOW else None))
    pitch, roll = v("torso_pitch_deg") or 0.0, v("torso_roll_deg") or 0.0
    if spec.torso == "upright":
        tilt = math.hypot(pitch, roll)
        s = _clip01(1.0 - (tilt - 5.0) / 15.0)
        crit.append(Criterion("upright torso", s, 1.0, "tilt <= 5 deg", f"pitch {pitch:+.0f} deg, roll {roll:+.0f} deg",
                              ("orientation", "increase", f"trunk tilted {tilt:.0f} deg") if s < SUGGEST_BELOW else None))
    elif spec.torso in ("forward", "backward"):
        lean = pitch if spec.torso == "forward" else -pitch
        s = _clip01((lean - 3.0) / 12.0)
        crit.append(Criterion(f"leaning {spec.torso}", s, 1.0, ">= 15 deg", f"pitch {pitch:+.0f} deg",
                              ("orientation", "decrease", f"trunk pitch {pitch:+.0f} deg, the task asks a lean")
                              if s < SUGGEST_BELOW else None))
    clear = v("swing_clearance_m") if sum(a.swings) else None
    leg = v("base_height_m") or NOMINAL_LEG_M
    for want in spec.steps:
        if want in ("high", "clear", "low"):
            if clear is None:
                if a.steps == 0:
                    crit.append(Criterion(f"{want} steps", 0.0 if want != "low" else 0.5, 1.0,
                                          "steps", "no steps", ("feet_clearance", "increase", "the feet never lift")
                                          if want != "low" else None))
                else:
                    unjudged.append(f"{want} steps (no complete swing)")
                continue
            if want == "high":
                # relative to the leg (the base's height over the soles): an ordinary walk lifts its feet 15-18 %
                # of it (13-15 cm for 0.85 m legs), which a fixed 12 cm bar already called high-stepping
                lo, hi = HIGH_STEP_FRACTION[0] * leg, HIGH_STEP_FRACTION[1] * leg
                s = _clip01((clear - lo) / (hi - lo))
                crit.append(Criterion("high steps", s, 1.5, f">= {hi:.2f} m swing clearance", f"{clear:.3f} m",
                                      ("feet_clearance", "increase", f"swing clearance {clear:.3f} m") if s < SUGGEST_BELOW else None))
            elif want == "clear":
                s = _clip01(clear / 0.04)
                crit.append(Criterion("no dragging", s, 1.0, ">= 0.04 m swing clearance", f"{clear:.3f} m",
                                      ("feet_clearance", "increase", f"feet drag ({clear:.3f} m)") if s < SUGGEST_BELOW else None))
            else:
                s = _clip01(1.0 - (clear - 0.03) / 0.05)
                crit.append(Criterion("low steps", s, 1.0, "<= 0.03 m swing clearance", f"{clear:.3f} m",
                                      ("feet_clearance", "decrease", f"swing clearance {clear:.3f} m") if s < SUGGEST_BELOW else None))
        else:
            step = v("step_length_m")
            if step is None:
                unjudged.append(f"{want} steps (no steps taken)")
                continue
            if want == "long":
                s = _clip01((abs(step) - 0.15) / 0.2)
                crit.append(Criterion("long steps", s, 1.0, ">= 0.35 m", f"{abs(step):.2f} m",
                                      ("feet_air_time", "increase", f"steps of {abs(step):.2f} m") if s < SUGGEST_BELOW else None))
            else:
                s = _clip01(1.0 - (abs(step) - 0.1) / 0.15)
                crit.append(Criterion("short steps", s, 1.0, "<= 0.10 m", f"{abs(step):.2f} m",
                                      ("feet_air_time", "decrease", f"steps of {abs(step):.2f} m") if s < SUGGEST_BELOW else None))
    if spec.stable:
        wob = max(v("torso_pitch_std_deg") or 0.0, v("torso_roll_std_deg") or 0.0)
        s = 0.0 if a.fall_time_s is not None else _clip01(1.0 - (wob - 2.0) / 8.0)
        crit.append(Criterion("stable", s, 1.0, "no fall, trunk steady", "fell" if a.fall_time_s is not None
                              else f"trunk angle std {wob:.1f} deg",
                              ("orientation", "increase", "unsteady trunk" if a.fall_time_s is None else "it fell")
                              if s < SUGGEST_BELOW else None))
    if spec.symmetric:
        asym = v("gait_asymmetry")
        if asym is None:
            unjudged.append("symmetry (too few steps per side to compare)")
        else:
            s = _clip01(1.0 - asym / 0.3)
            crit.append(Criterion("symmetric gait", s, 1.0, "asymmetry <= 0.05", f"{asym:.2f}",
                                  ("contact_phase", "increase", f"left/right asymmetry {asym:.2f}") if s < SUGGEST_BELOW else None))
    if spec.no_slip:
        slip = v("stance_slip_mps")
        if slip is None:
            unjudged.append("slipping (no stance phases)")
        else:
            s = _clip01(1.0 - slip / 0.2)
            crit.append(Criterion("no slipping", s, 1.0, "stance feet still", f"{slip:.2f} m/s",
                                  ("foot_slip", "increase", f"stance feet slide at {slip:.2f} m/s") if s < SUGGEST_BELOW else None))
    if spec.low_sway:
        sway = v("lateral_sway_m")
        if sway is None:
            unjudged.append("sway (rollout too short)")
        else:
            s = _clip01(1.0 - (sway - 0.01) / 0.05)
            crit.append(Criterion("no sway", s, 1.0, "<= 0.01 m RMS", f"{sway:.3f} m",
                                  ("ang_vel_xy", "increase", f"pelvis sways {sway:.3f} m RMS") if s < SUGGEST_BELOW else None))
    if spec.stance:
        width = v("stance_width_m") or 0.0
        if spec.stance == "wide":
            s = _clip01((width - 0.2) / 0.15)
        else:
            s = _clip01(1.0 - (width - 0.08) / 0.12)
        crit.append(Criterion(f"{spec.stance} stance", s, 1.0, "wide (>= 0.35 m)" if spec.stance == "wide"
                              else "narrow (<= 0.08 m)", f"{width:.2f} m",
                              ("feet_distance", "increase", f"stance width {width:.2f} m") if s < SUGGEST_BELOW else None))
    return crit, unjudged


# ============================================================================ suggestions

def _registry() -> set:
    from motionvl.rewards.terms import REGISTRY

    return set(REGISTRY)


def _term_name(concept: str, registry: set) -> str | None:
    """The reward library's term for a concept, None when the library has no such term."""
    return concept if concept in registry else None


def _general_faults(a: GaitAnalysis, spec: TaskSpec) -> list[tuple[str, str, str]]:
    """Faults worth a reward change whatever the task says."""
    v = a.get
    out = []
    if a.fall_time_s is not None:
        out.append(("orientation", "increase", f"the robot fell at t={a.fall_time_s:.1f} s"))
        out.append(("termination", "increase", "falls must cost more"))
    walking = spec.gait in ("walk", "run", "step", "turn") or abs(v("forward_speed_mps") or 0.0) > 0.1
    clear = v("swing_clearance_m") if sum(a.swings) else None
    if walking and clear is not None and clear < 0.03 and "low" not in spec.steps:
        out.append(("feet_clearance", "increase", f"swing feet drag ({clear:.3f} m clearance)"))
    slip = v("stance_slip_mps")
    if slip is not None and slip > 0.15 and not spec.no_slip:
        out.append(("foot_slip", "increase", f"stance feet slide at {slip:.2f} m/s"))
    if spec.torso is None and abs(v("torso_pitch_deg") or 0.0) > 15.0:
        out.append(("orientation", "increase", f"trunk pitched {v('torso_pitch_deg'):+.0f} deg"))
    return out



@dataclasses.dataclass
class TaskScore:
    """A rollout's gait judged against a task."""

    score: float
    """Weighted mean of the criteria's scores in [0, 1], times the fall penalty; 0 without criteria."""
    criteria: list
    """The `Criterion`s judged."""
    unjudged: list
    """Parts of the task that could not be judged (not understood, or not measurable here)."""


def judge(spec: TaskSpec, a: GaitAnalysis, *, rollout_s: float, fall_penalty: float = 0.3) -> TaskScore:
    """Score `a` against `spec`. A fall multiplies the score by fall_penalty x (fall time / rollout_s)."""
    criteria, unjudged = score_task(spec, a)
    unjudged = list(spec.unjudged) + unjudged
    if criteria:
        score = sum(c.score * c.weight for c in criteria) / sum(c.weight for c in criteria)
    else:
        score = 0.0
        if spec.text.strip() and not unjudged:
            unjudged.append(spec.text.strip())
    if a.fall_time_s is not None:
        score *= fall_penalty * min(1.0, a.fall_time_s / max(rollout_s, 1e-9))
    return TaskScore(_clip01(score), criteria, unjudged)


def suggestions(judged: TaskScore, a: GaitAnalysis, spec: TaskSpec) -> list[Suggestion]:
    """Reward-term changes, the worst-met criteria first, then faults whatever the task; one per term and direction."""
    registry = _registry()
    out: list[Suggestion] = []
    seen: set = set()
    raw = [c.suggestion for c in sorted(judged.criteria, key=lambda c: -c.weight * (1.0 - c.score)) if c.suggestion]
    for concept, direction, reason in raw + _general_faults(a, spec):
        term = _term_name(concept, registry)
        if term is None or (term, direction) in seen:
            continue
        seen.add((term, direction))
        out.append(Suggestion(term, direction, reason))
    return out

"""The kinematic critic ("kinematic"): gait analysis of the recorded rollout, no model at all.

This is the offline default critic. It is not a vision-language model and never says it is: it
reads the `Trajectory` (base pose, joint angles, sole positions and contacts), measures it with
`motionvl.gait.metrics` (the definitions `motionvl eval` uses), reads the task sentence with
`motionvl.task.parse_task` and scores one against the other with `motionvl.critic.scoring`.

Descriptors (D_motion): the measured numbers below, plus feature descriptors where a threshold is
crossed (feet_sliding, hips_swaying, torso_wobbling, turning, moving_sideways, running, hopping,
shuffling, feet_dragging, too_slow / too_fast). Suggestions name terms of the reward library.

`compare(first, second, task)` scores both rollouts against the task the same way and prefers the
higher score when the difference stands out from the measurement noise; see `KinematicCritic.compare`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np

from motionvl.critic.base import Rollout
from motionvl.critic.schema import QUANTITIES, Comparison, Descriptor, MotionFeedback, discretise
from motionvl.critic.scoring import TaskScore, judge, suggestions
from motionvl.gait.metrics import WARMUP_S, GaitAnalysis, analyse_gait
from motionvl.sim.trajectory import Trajectory
from motionvl.task import parse_task

CRITIC_NAME = "kinematic"

DESCRIPTORS = {
    # label: (gait key, scale, region, unit, note); labels are the schema's quantity names where one exists
    "knee_flexion": ("knee_angle_stance_deg", 1.0, "knees", "deg", "knee angle in stance, both legs (0 = straight)"),
    "knee_flexion_left": ("knee_angle_stance_left_deg", 1.0, "knees", "deg", "left knee angle in stance"),
    "knee_flexion_right": ("knee_angle_stance_right_deg", 1.0, "knees", "deg", "right knee angle in stance"),
    "swing_knee_flexion": ("knee_angle_swing_peak_deg", 1.0, "knees", "deg", "peak knee angle during swing"),
    "torso_pitch": ("torso_pitch_deg", 1.0, "torso", "deg", "mean trunk pitch, + = leaning forward"),
    "torso_roll": ("torso_roll_deg", 1.0, "torso", "deg", "mean trunk roll, + = leaning right"),
    "base_height": ("base_height_m", 1.0, "hips", "m", "pelvis height above the stance soles"),
    "step_length": ("step_length_m", 1.0, "feet", "m", "landing foot ahead of the other along the heading"),
    "cadence": ("step_frequency_hz", 60.0, "whole_body", "steps/min", "touchdowns per minute"),
    "gait_asymmetry": ("gait_asymmetry", 1.0, "whole_body", "", "left/right difference (0 = identical)"),
    "foot_clearance": ("swing_clearance_m", 1.0, "feet", "m", "peak swing-foot height above its stance height"),
    "foot_slip": ("stance_slip_mps", 1.0, "feet", "m/s", "horizontal sole speed while in stance"),
    "lateral_sway": ("lateral_sway_m", 1.0, "hips", "m", "RMS sideways pelvis displacement about its mean path"),
    "stance_width": ("stance_width_m", 1.0, "hips", "m", "lateral distance between the soles"),
    "forward_speed": ("forward_speed_mps", 1.0, "whole_body", "m/s", "mean pelvis velocity along its heading"),
    "lateral_speed": ("lateral_speed_mps", 1.0, "whole_body", "m/s", "mean pelvis velocity to its left"),
    "yaw_rate": ("yaw_rate_deg_s", 1.0, "whole_body", "deg/s", "mean heading rate, + = turning left"),
    "speed_error": ("speed_error_mps", 1.0, "whole_body", "m/s", "forward speed minus the commanded forward speed"),
    "flight_fraction": ("flight_fraction", 1.0, "whole_body", "", "share of the time with no foot on the ground"),
    "fell": ("fell", 1.0, "whole_body", "", "1 if the robot fell"),
}
"""The measured descriptors: label -> (gait key, scale to the label's unit, region, unit, note)."""


def _conf_from_count(n: int, full: int = 6, low: float = 0.55, high: float = 0.95) -> float:
    return float(low + (high - low) * min(1.0, n / full))


def _ramp(x: float, lo: float, hi: float, c0: float = 0.6, c1: float = 0.95) -> float:
    """Confidence growing from c0 at x = lo to c1 at x >= hi."""
    if hi == lo:
        return c1
    return float(np.clip(c0 + (c1 - c0) * (x - lo) / (hi - lo), c0, c1))


def measured(a: GaitAnalysis, label: str) -> float | None:
    """A descriptor's measured value in its own unit (None where the analysis has none).

    knee_flexion without a stance sample (the feet never touched) is the mean knee angle over the
    whole window: what a camera would still see of the knees."""
    key, scale, *_ = DESCRIPTORS[label]
    value = a.get(key)
    if value is None and label == "knee_flexion":
        value = a.get("knee_angle_mean_deg")
    if value is None or (label == "foot_clearance" and not sum(a.swings)):
        return None
    return value * scale


def build_descriptors(a: GaitAnalysis) -> list[Descriptor]:
    """Descriptors (D_motion) from a gait analysis: measured quantities plus threshold features."""
    v = a.get
    steps = a.steps
    swings = sum(a.swings)
    moving = abs(v("forward_speed_mps") or 0.0) > 0.1 or abs(v("lateral_speed_mps") or 0.0) > 0.1
    conf = {
        "knee_flexion": 0.9 if sum(a.stance_phases) >= 2 else 0.75 if sum(a.stance_phases) else 0.7,
        "knee_flexion_left": 0.9 if a.stance_phases[0] >= 1 else 0.7,
        "knee_flexion_right": 0.9 if a.stance_phases[1] >= 1 else 0.7,
        "swing_knee_flexion": _conf_from_count(swings),
        "torso_pitch": 0.95, "torso_roll": 0.95, "base_height": 0.9,
        "step_length": _conf_from_count(steps), "cadence": _conf_from_count(steps, low=0.7),
        "gait_asymmetry": _conf_from_count(steps, full=8),
        "foot_clearance": _conf_from_count(swings),
        "foot_slip": 0.85, "lateral_sway": 0.8, "stance_width": 0.9,
        "forward_speed": 0.95, "lateral_speed": 0.9, "yaw_rate": 0.9, "speed_error": 0.9,
        "flight_fraction": 0.85, "fell": 1.0,
    }
    out: list[Descriptor] = []
    for label, (_, _, region, unit, note) in DESCRIPTORS.items():
        value = measured(a, label)
        if value is None:
            continue
        if label == "speed_error" and not any(abs(x) > 1e-9 for x in a.command):
            continue
        if label == "knee_flexion" and a.get("knee_angle_stance_deg") is None:
            note = "mean knee angle over the rollout (no foot was on the ground)"
        if label == "fell":  # "fell" is also a feature label: state it only when it happened
            if a.fall_time_s is None:
                continue
            note = f"fell at t={a.fall_time_s:.2f} s"
        out.append(Descriptor(label, region, round(value, 4) + 0.0, unit, conf[label], note))  # + 0.0: no -0.0

    def feature(label: str, region: str, value: float | None, unit: str | None, confidence: float, note: str):
        out.append(Descriptor(label, region, None if value is None else round(float(value), 4) + 0.0, unit,
                              round(float(confidence), 3), note))

    slip = v("stance_slip_mps")
    if slip is not None and slip > 0.1:
        feature("feet_sliding", "feet", slip, "m/s", _ramp(slip, 0.1, 0.3), "stance feet slide on the ground")
    sway, roll_std = v("lateral_sway_m") or 0.0, v("torso_roll_std_deg") or 0.0
    if sway > 0.03 or roll_std > 4.0:
        feature("hips_swaying", "hips", sway, "m", _ramp(max(sway / 0.03, roll_std / 4.0), 1.0, 2.0),
                "pelvis sways side to side")
    elif a.duration_s >= 1.0:
        feature("hips_level", "hips", sway, "m", 0.8, "pelvis stays level")
    wobble = max(v("torso_pitch_std_deg") or 0.0, roll_std)
    if wobble > 4.0:
        feature("torso_wobbling", "torso", wobble, "deg", _ramp(wobble, 4.0, 10.0), "trunk angle oscillates")
    yaw_rate = v("yaw_rate_deg_s") or 0.0
    if abs(yaw_rate) > 11.5:  # 0.2 rad/s
        feature("turning", "whole_body", yaw_rate, "deg/s", _ramp(abs(yaw_rate), 11.5, 30.0),
                f"turning {'left' if yaw_rate > 0 else 'right'}")
    lateral = v("lateral_speed_mps") or 0.0
    if abs(lateral) > 0.1:
        feature("moving_sideways", "whole_body", lateral, "m/s", _ramp(abs(lateral), 0.1, 0.3),
                f"moving to the {'left' if lateral > 0 else 'right'}")
    flight = v("flight_fraction") or 0.0
    if flight > 0.1 and steps >= 2:
        together = v("synchronous_touchdowns") or 0.0
        if together > 0.6:
            feature("hopping", "whole_body", flight, "", _ramp(together, 0.6, 0.9), "both feet leave and land together")
        else:
            feature("running", "whole_body", flight, "", _ramp(flight, 0.1, 0.3), "flight phases between steps")
    clearance, step = measured(a, "foot_clearance"), v("step_length_m")
    if moving and steps >= 2 and clearance is not None and clearance < 0.03 and step is not None and abs(step) < 0.15:
        feature("shuffling", "feet", clearance, "m", 0.8, "short, low steps")
    if moving and steps == 0:
        feature("feet_dragging", "feet", 0.0, "m", 0.8, "moves without lifting the feet")
    error = v("speed_error_mps")
    if error is not None and abs(a.command[0]) > 1e-9:
        tolerance = max(0.15, 0.25 * abs(a.command[0]))
        if error < -tolerance:
            feature("too_slow", "whole_body", error, "m/s", _ramp(-error, tolerance, 2 * tolerance),
                    "slower than commanded")
        elif error > tolerance:
            feature("too_fast", "whole_body", error, "m/s", _ramp(error, tolerance, 2 * tolerance),
                    "faster than commanded")
    return out


def measurements(a: GaitAnalysis) -> dict[str, float]:
    """The schema quantities (QUANTITIES labels, canonical units) measured, for `merge_measurements`."""
    return {label: value for label in QUANTITIES if label in DESCRIPTORS
            and (value := measured(a, label)) is not None}


def _previous_score(previous_best: Any) -> float | None:
    """The alignment score of the best motion so far, from a feedback, its JSON or dict, or a number."""
    if previous_best is None or isinstance(previous_best, bool):
        return None
    if isinstance(previous_best, MotionFeedback):
        return previous_best.alignment_score if previous_best.valid else None
    if isinstance(previous_best, (int, float)):
        return float(previous_best)
    if isinstance(previous_best, dict):
        score = previous_best.get("alignment_score")
        return float(score) if isinstance(score, (int, float)) and previous_best.get("valid", True) else None
    if isinstance(previous_best, str):
        try:
            return _previous_score(MotionFeedback.from_json(previous_best))
        except ValueError:  # a description text or a plain number
            try:
                return float(previous_best)
            except ValueError:
                return None
    return None


def _segments(traj: Trajectory, analysis: GaitAnalysis, segment_s: float) -> list[Trajectory]:
    """The analysed window cut into consecutive pieces of `segment_s` (fall flags cleared: the walk before it)."""
    t = np.asarray(traj.time, dtype=float) - float(traj.time[0])
    end = int(np.searchsorted(t, analysis.duration_s - 1e-9))
    start = int(np.searchsorted(t, analysis.warmup_s - 1e-9))
    per = max(2, int(round(segment_s / traj.dt)))
    pieces = []
    for a in range(start, end - per + 1, per):
        piece = {f.name: getattr(traj, f.name)[a:a + per] for f in dataclasses.fields(traj)
                 if isinstance(getattr(traj, f.name), np.ndarray)}
        piece["fell"] = np.zeros(per, bool)
        pieces.append(dataclasses.replace(traj, **piece))
    return pieces


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


@dataclasses.dataclass
class _Judged:
    analysis: GaitAnalysis
    task: TaskScore
    score_se: float | None
    """Standard error of the score from its segments, None with fewer than two segments."""


class KinematicCritic:
    """Offline critic from the rollout's kinematics; needs no model and is not a VLM.

    `critique(traj, task, previous_best=None)`; it also accepts the critic protocol's
    `critique(frames, times, task, previous_best=None, trajectory=traj)` (frames are ignored).
    `previous_best` may be the best MotionFeedback so far (or its JSON, or its score): then
    `better_than_best` says whether this rollout scores higher by more than `margin`.

    Args:
        warmup_s: seconds left out at the start of a rollout (`motionvl.gait.metrics`).
        margin: score differences up to this are never a preference (better_than_best, compare).
        fall_penalty: a fall multiplies the score by this x (time before the fall / rollout time).
        segment_s: compare judges the noise of a rollout's score from segments this long.
        min_confidence: compare prefers a rollout only when at least this sure (see `compare`).
    """

    name = CRITIC_NAME

    def __init__(self, warmup_s: float = WARMUP_S, margin: float = 0.02, fall_penalty: float = 0.3,
                 segment_s: float = 2.0, min_confidence: float = 0.9, **_ignored: Any):
        self.warmup_s = float(warmup_s)
        self.margin = float(margin)
        self.fall_penalty = float(fall_penalty)
        self.segment_s = float(segment_s)
        self.min_confidence = float(min_confidence)

    # -- measurement only ----------------------------------------------------------
    def analyse(self, traj: Trajectory) -> GaitAnalysis:
        return analyse_gait(traj, warmup_s=self.warmup_s)

    def measure(self, traj: Trajectory) -> dict[str, float]:
        """Schema quantities for `merge_measurements` (knee_flexion, torso_pitch, forward_speed, ...)."""
        return measurements(self.analyse(traj))

    def describe(self, traj: Trajectory) -> list[Descriptor]:
        return build_descriptors(self.analyse(traj))

    # -- the critique --------------------------------------------------------------
    def critique(self, *args: Any, task: str | None = None, previous_best: Any = None,
                 trajectory: Trajectory | None = None, **kwargs: Any) -> MotionFeedback:
        args = list(args)
        if args and isinstance(args[0], Trajectory):
            trajectory = args.pop(0)
        elif len(args) >= 2 and not isinstance(args[0], str):
            args = args[2:]  # frames, times: not used
        if args and task is None:
            task = args.pop(0)
        if args and previous_best is None:
            previous_best = args.pop(0)
        task = "" if task is None else str(task)
        problem = self._unusable(trajectory)
        if problem:
            return MotionFeedback.invalid(self.name, task, problem)
        try:
            return self._critique(trajectory, task, previous_best)
        except Exception as exc:  # noqa: BLE001 - a critic never crashes the loop
            return MotionFeedback.invalid(self.name, task, f"kinematic analysis failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _unusable(trajectory: Trajectory | None) -> str | None:
        if trajectory is None:
            return "the kinematic critic needs the rollout's trajectory (critique(traj, task) or trajectory=...)"
        if len(trajectory.time) < 2:
            return f"the trajectory has {len(trajectory.time)} sample(s); at least 2 are needed to judge motion"
        return None

    def _critique(self, traj: Trajectory, task: str, previous_best: Any) -> MotionFeedback:
        t0 = time.perf_counter()
        a = self.analyse(traj)
        descriptors = build_descriptors(a)
        spec = parse_task(task)
        judged = judge(spec, a, rollout_s=traj.duration, fall_penalty=self.fall_penalty)
        previous = _previous_score(previous_best)
        better = None if previous is None else bool(judged.score > previous + self.margin)
        meta = {
            "analysis": a.to_dict(),
            "measurements": {k: round(v, 5) for k, v in measurements(a).items()},
            "criteria": [{"name": c.name, "score": round(c.score, 4), "weight": c.weight, "target": c.target,
                          "measured": c.measured} for c in judged.criteria],
            "task_spec": {k: v for k, v in spec.to_dict().items() if v not in (None, [], False)},
            "not_a_vlm": True,
            "latency_s": round(time.perf_counter() - t0, 5),
        }
        return MotionFeedback(critic=self.name, task=task, descriptors=descriptors, features=discretise(descriptors),
                              alignment_score=round(judged.score, 4), suggestions=suggestions(judged, a, spec),
                              better_than_best=better,
                              unjudged=judged.unjudged, valid=True, meta=meta)

    # -- the comparison ------------------------------------------------------------
    def _judge(self, traj: Trajectory, spec) -> _Judged:
        a = self.analyse(traj)
        whole = judge(spec, a, rollout_s=traj.duration, fall_penalty=self.fall_penalty)
        scores = [judge(spec, analyse_gait(piece, warmup_s=0.0), rollout_s=piece.duration).score
                  for piece in _segments(traj, a, self.segment_s)]
        se = float(np.std(scores, ddof=1) / math.sqrt(len(scores))) if len(scores) >= 2 else None
        return _Judged(a, whole, se)

    def compare(self, first: Rollout, second: Rollout, task: str) -> Comparison:
        """Which rollout fulfils `task` better, judged on the gait each one measures (frames are not used).

        Both trajectories are scored against the task exactly as `critique` scores them (the
        alignment score). The noise of a score is judged from the rollout itself: the analysed
        window is cut into `segment_s` pieces, each piece is scored alone, and the standard error
        of the rollout's score is the pieces' standard deviation / sqrt(count) (unknown, taken as
        0, with fewer than two pieces). With d the difference of the two scores and se the
        combined standard error, the critic is Phi(|d| / se) sure that the higher score is the
        better rollout (1 when se is 0). It prefers that rollout when |d| > `margin` and that
        certainty reaches `min_confidence`; otherwise it abstains (preferred None) with confidence
        2 (1 - Phi(|d| / se)), the chance of a difference this size from noise alone. The answer
        depends on the order only by the labels: swapping the rollouts mirrors it.
        """
        task = "" if task is None else str(task)
        for who, rollout in (("first", first), ("second", second)):
            problem = self._unusable(rollout.trajectory)
            if problem:
                return Comparison.invalid(self.name, task, f"{who} rollout: {problem}")
        try:
            spec = parse_task(task)
            one, two = self._judge(first.trajectory, spec), self._judge(second.trajectory, spec)
        except Exception as exc:  # noqa: BLE001 - a critic never crashes the loop
            return Comparison.invalid(self.name, task, f"kinematic analysis failed: {type(exc).__name__}: {exc}")
        d = two.task.score - one.task.score
        se = math.hypot(one.score_se or 0.0, two.score_se or 0.0)
        sure = 1.0 if se == 0.0 else _normal_cdf(abs(d) / se)
        better, worse = ("second", "first") if d > 0 else ("first", "second")
        if abs(d) > self.margin and sure >= self.min_confidence:
            preferred, confidence = better, sure
            reason = f"the {better} rollout fulfils the task better: " + _differences(one, two, better)
        else:
            preferred, confidence = None, (1.0 if abs(d) <= self.margin and se == 0.0 else 2.0 * (1.0 - sure))
            reason = (f"no clear difference: scores {one.task.score:.3f} and {two.task.score:.3f} differ by "
                      f"{abs(d):.3f}, within the noise (standard error {se:.3f}) or the margin {self.margin:g}")
        meta = {"scores": [round(one.task.score, 4), round(two.task.score, 4)],
                "score_se": [None if j.score_se is None else round(j.score_se, 4) for j in (one, two)],
                "difference": round(d, 4), "certainty": round(sure, 4),
                "criteria": [_criteria_dict(one.task), _criteria_dict(two.task)], "not_a_vlm": True}
        return Comparison(preferred=preferred, confidence=round(min(max(confidence, 0.0), 1.0), 4), reason=reason,
                          valid=True, meta=meta, critic=self.name, task=task)


def _criteria_dict(judged: TaskScore) -> dict:
    return {c.name: {"score": round(c.score, 4), "measured": c.measured, "target": c.target} for c in judged.criteria}


def _differences(one: _Judged, two: _Judged, better: str, most: int = 3) -> str:
    """The criteria that separate the two rollouts most, as "name: measured vs measured (target)"."""
    first = {c.name: c for c in one.task.criteria}
    second = {c.name: c for c in two.task.criteria}
    sign = 1.0 if better == "second" else -1.0
    shared = [n for n in first if n in second]
    shared.sort(key=lambda n: -sign * (second[n].score - first[n].score) * first[n].weight)
    parts = [f"{n}: {first[n].measured} vs {second[n].measured} (target {first[n].target})" for n in shared[:most]
             if sign * (second[n].score - first[n].score) > 0]
    falls = [f"the {who} rollout fell at t={j.analysis.fall_time_s:.1f} s"
             for who, j in (("first", one), ("second", two)) if j.analysis.fall_time_s is not None]
    return "; ".join(falls + parts) or f"scores {one.task.score:.3f} vs {two.task.score:.3f}"

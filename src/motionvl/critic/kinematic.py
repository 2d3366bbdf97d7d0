"""The kinematic critic ("kinematic"): gait analysis of the recorded rollout, no model at all.

This is the offline default critic. It is not a vision-language model and never says it is:
it reads the `Trajectory` (base pose, joint angles, sole positions and contacts) and measures
what a biomechanist would read off a motion-capture recording:

==================  ===========  ==========================================================
descriptor          unit         how
==================  ===========  ==========================================================
knee_flexion        deg          mean of the left/right values below (schema quantity)
knee_flexion_left   deg          knee angle at mid-stance: median over the middle third of
knee_flexion_right  deg          each contact phase of that foot, averaged over phases
swing_knee_flexion  deg          peak knee angle during swings
torso_pitch         deg          mean pelvis/torso pitch, + = leaning forward (quantity)
torso_roll          deg          mean roll, + = leaning right (quantity)
base_height         m            pelvis height above the stance soles
step_length         m            at each touchdown, touching foot ahead of the other foot
                                 along the heading (negative when stepping backward)
cadence             steps/min    touchdowns per minute (from the mean interval)
gait_asymmetry      0..1         left vs right step length, stance time, clearance and
                                 mid-stance knee, |L-R| / (|L|+|R|) averaged (quantity)
foot_clearance      m            peak sole height in swing above its stance height (quantity)
foot_slip           m/s          horizontal sole speed while in contact
lateral_sway        m            RMS of the detrended sideways pelvis displacement
stance_width        m            lateral distance between the soles (quantity)
forward_speed       m/s          mean pelvis velocity along its heading (quantity)
lateral_speed       m/s          mean pelvis velocity to its left
yaw_rate            deg/s        mean heading rate, + = turning left
speed_error         m/s          forward_speed - commanded forward speed
flight_fraction     0..1         share of samples with no foot on the ground
fell                0/1          the fall condition held (the analysis stops there) (quantity)
==================  ===========  ==========================================================

plus feature descriptors where a threshold is crossed (feet_sliding, hips_swaying,
torso_wobbling, turning, moving_sideways, running, hopping, shuffling, too_slow / too_fast).
Speeds, cadence and sway skip the first `warmup_s` (the start from standing) when the
rollout is long enough. Step, clearance, slip and flight numbers come from
`motionvl.rl.gait_metrics` where it has them.

`critique(traj, task)` then scores the task sentence with simple rules (`parse_task`): speed
("0.6 m/s"), gait (walk / run / stand / turn / step or march in place / hop), direction,
knees (straight / bent), torso (upright / leaning), steps (high / long / short / no
dragging), stability, symmetry, slip, sway and stance width. Phrases it cannot judge are
listed in `unjudged`. Suggestions name terms of the reward library
(`motionvl.rewards.terms.REGISTRY`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import time as _time
from typing import Any

import numpy as np

from motionvl.critic.schema import QUANTITIES, Descriptor, MotionFeedback, Suggestion, discretise
from motionvl.rl.gait_metrics import gait_metrics, torso_pitch, truncate_at_fall
from motionvl.sim.math import to_heading_frame, yaw_of
from motionvl.sim.trajectory import Trajectory

CRITIC_NAME = "kinematic"


# ============================================================================ measurement

def _runs(mask: np.ndarray) -> list[tuple[bool, int, int]]:
    """Run-length encoding of a 1-D bool array: [(value, start, stop), ...]."""
    mask = np.asarray(mask, dtype=bool)
    if mask.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [mask.size]])
    return [(bool(mask[s]), int(s), int(e)) for s, e in zip(starts, stops)]


def debounce(mask: np.ndarray, min_len: int) -> np.ndarray:
    """Flip interior runs shorter than `min_len` samples (contact blips, one-sample lift-offs)."""
    mask = np.asarray(mask, dtype=bool).copy()
    if min_len <= 1:
        return mask
    runs = _runs(mask)
    for k, (_, s, e) in enumerate(runs):
        if 0 < k < len(runs) - 1 and e - s < min_len:
            mask[s:e] = not mask[s]
    return mask


def _roll(quat: np.ndarray) -> np.ndarray:
    w, x, y, z = np.moveaxis(np.asarray(quat, dtype=float), -1, 0)
    return np.arctan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))


def _knee_indices(joint_names) -> tuple[int | None, int | None]:
    names = [str(n).lower() for n in joint_names]

    def find(side: str, short: str):
        for i, n in enumerate(names):
            if "knee" in n and (side in n or n.startswith(short + "_")):
                return i
        return None

    return find("left", "l"), find("right", "r")


def _nanmean(values) -> float:
    a = np.asarray([v for v in values if v is not None], dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else float("nan")


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


@dataclasses.dataclass
class GaitAnalysis:
    """Numbers measured from one trajectory (NaN where undefined) and how much data backs them."""

    values: dict
    """descriptor label -> value (see the module docstring for units)."""
    duration_s: float
    """Seconds analysed (up to the fall, if any)."""
    fall_time_s: float | None
    touchdowns: tuple
    """(left, right) touchdown counts."""
    stance_phases: tuple
    """(left, right) contact phases used for the mid-stance knee."""
    swing_phases: int
    warmup_used_s: float
    command: tuple
    """Mean (vx, vy, yaw rate) command over the analysed window."""

    def get(self, key: str) -> float | None:
        v = self.values.get(key)
        return float(v) if _finite(v) else None

    @property
    def steps(self) -> int:
        return int(sum(self.touchdowns))

    def to_dict(self) -> dict:
        return {"values": {k: (round(float(v), 5) if _finite(v) else None) for k, v in self.values.items()},
                "duration_s": round(self.duration_s, 4), "fall_time_s": self.fall_time_s,
                "touchdowns": list(self.touchdowns), "stance_phases": list(self.stance_phases),
                "swing_phases": self.swing_phases, "warmup_used_s": self.warmup_used_s,
                "command": [round(c, 4) for c in self.command]}


def analyse_gait(traj: Trajectory, warmup_s: float = 0.5, min_phase_s: float = 0.04) -> GaitAnalysis:
    """Measure the gait descriptors of a trajectory (see the module docstring)."""
    fell_idx = np.flatnonzero(np.asarray(traj.fell, dtype=bool))
    fall_time = float(traj.time[fell_idx[0]] - traj.time[0]) if fell_idx.size else None
    tr = truncate_at_fall(traj)
    T, dt = len(tr.time), float(tr.dt)
    nan = float("nan")
    values: dict[str, float] = {}
    if T == 0:
        return GaitAnalysis({"fell": 1.0 if fall_time is not None else 0.0}, 0.0, fall_time, (0, 0), (0, 0), 0, 0.0,
                            (0.0, 0.0, 0.0))
    t = np.asarray(tr.time, dtype=float) - float(tr.time[0])
    duration = float(t[-1]) + dt if T > 0 else 0.0
    min_len = max(1, int(round(min_phase_s / dt)))
    contact = np.stack([debounce(tr.foot_contact[:, k], min_len) for k in range(2)], axis=1)
    tr_db = dataclasses.replace(tr, foot_contact=contact)
    # analysis window for rates: skip the start from standing when there is enough left
    warm = warmup_s if duration - warmup_s >= max(1.0, 2 * warmup_s) else 0.0
    win = t >= warm - 1e-9
    win_dur = max(float(t[win][-1] - t[win][0]) + dt, dt)

    # ---------------------------------------------------------------- base motion
    heading = np.unwrap(yaw_of(tr.base_quat))
    pitch = np.degrees(torso_pitch(tr.base_quat))
    roll = np.degrees(_roll(tr.base_quat))
    if T > 1:
        v_world = np.gradient(tr.base_pos, t, axis=0)
        yaw_rate = np.gradient(heading, t)
    else:
        v_world, yaw_rate = np.zeros((T, 3)), np.zeros(T)
    v_fwd, v_lat = np.moveaxis(to_heading_frame(v_world[:, :2], heading), -1, 0)
    values["forward_speed"] = float(v_fwd[win].mean())
    values["lateral_speed"] = float(v_lat[win].mean())
    values["yaw_rate"] = float(np.degrees(yaw_rate[win].mean()))
    values["torso_pitch"] = float(pitch.mean())
    values["torso_roll"] = float(roll.mean())
    values["torso_pitch_std"] = float(pitch[win].std())
    values["torso_roll_std"] = float(roll[win].std())
    # sideways displacement relative to the heading: integrate, remove the linear trend
    lat_disp = np.concatenate([[0.0], np.cumsum(0.5 * (v_lat[1:] + v_lat[:-1]) * np.diff(t))]) if T > 1 else np.zeros(T)
    tw, lw = t[win], lat_disp[win]
    if tw.size >= 3:
        lw = lw - np.polyval(np.polyfit(tw, lw, 1), tw)
        values["lateral_sway"] = float(np.sqrt(np.mean(lw ** 2)))
    else:
        values["lateral_sway"] = nan
    cmd = np.asarray(tr.command, dtype=float)[win].mean(axis=0) if T else np.zeros(3)
    values["speed_error"] = values["forward_speed"] - float(cmd[0])

    # ---------------------------------------------------------------- feet
    foot_z = tr.foot_pos[:, :, 2]
    ground = float(np.median(foot_z[contact])) if contact.any() else float(np.min(foot_z))
    values["base_height"] = float(np.mean(tr.base_pos[:, 2] - ground))
    rel = tr.foot_pos[:, 0, :2] - tr.foot_pos[:, 1, :2]  # left minus right, world xy
    lat_sep = to_heading_frame(rel, heading)[:, 1]
    values["stance_width"] = float(np.mean(np.abs(lat_sep)))

    gm = gait_metrics(tr_db, min_swing_s=min_phase_s)
    values["foot_clearance"] = gm["swing_clearance_m"]
    values["flight_fraction"] = gm["flight_fraction"]
    values["foot_slip"] = gm["stance_slip_mps"]
    stance_phases = [0, 0]
    knee_mid: list[list[float]] = [[], []]
    knees = _knee_indices(tr.joint_names)
    touch_idx: list[list[int]] = [[], []]
    swing_peaks: list[list[float]] = [[], []]
    clear_side: list[list[float]] = [[], []]
    stance_time: list[list[float]] = [[], []]
    swing_count = 0
    for k in range(2):
        runs = _runs(contact[:, k])
        for n_run, (on, a, b) in enumerate(runs):
            if on:
                if knees[k] is not None and b - a >= 2:
                    third = max(1, (b - a) // 3)
                    mid = slice(a + (b - a - third) // 2, a + (b - a - third) // 2 + third)
                    knee_mid[k].append(float(np.median(np.abs(tr.joint_pos[mid, knees[k]]))))
                    stance_phases[k] += 1
                if n_run >= 2:  # a touchdown ends a swing that itself followed a contact
                    touch_idx[k].append(a)
                if 0 < n_run < len(runs) - 1:
                    stance_time[k].append((b - a) * dt)
            elif 0 < n_run < len(runs) - 1:  # a complete swing between two contacts
                swing_count += 1
                z = foot_z[:, k]
                base = np.mean(np.concatenate([z[max(0, a - min_len):a], z[b:b + min_len]]))
                clear_side[k].append(float(z[a:b].max() - base))
                if knees[k] is not None:
                    swing_peaks[k].append(float(np.degrees(np.abs(tr.joint_pos[a:b, knees[k]]).max())))
    if knees[0] is None and knees[1] is None:
        values["knee_flexion_left"] = values["knee_flexion_right"] = values["knee_flexion"] = nan
    else:
        for k, side in enumerate(("left", "right")):
            if knees[k] is None:
                values[f"knee_flexion_{side}"] = nan
            elif knee_mid[k]:
                values[f"knee_flexion_{side}"] = float(np.degrees(np.mean(knee_mid[k])))
            else:  # never in contact: the whole rollout
                values[f"knee_flexion_{side}"] = float(np.degrees(np.median(np.abs(tr.joint_pos[:, knees[k]]))))
        values["knee_flexion"] = _nanmean([values["knee_flexion_left"], values["knee_flexion_right"]])
    values["swing_knee_flexion"] = _nanmean(swing_peaks[0] + swing_peaks[1])

    # steps: touchdowns in the window; step length along the heading at each touchdown
    step_len: list[list[float]] = [[], []]
    for k in range(2):
        for i in touch_idx[k]:
            d = tr.foot_pos[i, k, :2] - tr.foot_pos[i, 1 - k, :2]
            step_len[k].append(float(to_heading_frame(d, heading[i])[0]))
    all_td = sorted(i for k in range(2) for i in touch_idx[k] if win[i])
    if len(all_td) >= 2:
        values["cadence"] = 60.0 / (float(np.mean(np.diff(t[all_td]))))
    else:
        values["cadence"] = 60.0 * len(all_td) / win_dur
    values["step_length"] = _nanmean(step_len[0] + step_len[1])
    # hopping: touchdowns of the two feet (nearly) together
    if touch_idx[0] and touch_idx[1]:
        pairs = sum(1 for i in touch_idx[0] if any(abs(i - j) <= min_len for j in touch_idx[1]))
        values["synchronous_touchdowns"] = pairs / max(len(touch_idx[0]), 1)
    else:
        values["synchronous_touchdowns"] = 0.0

    # symmetry: only with at least two touchdowns per side
    if len(touch_idx[0]) >= 2 and len(touch_idx[1]) >= 2:
        pairs = [(step_len[0], step_len[1], 0.05), (stance_time[0], stance_time[1], 0.1),
                 (clear_side[0], clear_side[1], 0.02), (knee_mid[0], knee_mid[1], math.radians(5))]
        rels = []
        for a, b, floor in pairs:
            ma, mb = _nanmean(a), _nanmean(b)
            if math.isfinite(ma) and math.isfinite(mb):
                rels.append(abs(ma - mb) / max(abs(ma) + abs(mb), floor))
        values["gait_asymmetry"] = float(np.clip(np.mean(rels), 0.0, 1.0)) if rels else nan
    else:
        values["gait_asymmetry"] = nan
    values["fell"] = 1.0 if fall_time is not None else 0.0
    return GaitAnalysis(values=values, duration_s=duration if fall_time is None else float(fall_time) + dt,
                        fall_time_s=fall_time, touchdowns=(len(touch_idx[0]), len(touch_idx[1])),
                        stance_phases=tuple(stance_phases), swing_phases=swing_count, warmup_used_s=warm,
                        command=tuple(float(x) for x in cmd))


# ============================================================================ descriptors

_DESCRIPTOR_INFO = {
    # label: (region, unit, note template)
    "knee_flexion": ("knees", "deg", "knee angle at mid-stance, mean of both legs (0 = straight)"),
    "knee_flexion_left": ("knees", "deg", "left knee angle at mid-stance"),
    "knee_flexion_right": ("knees", "deg", "right knee angle at mid-stance"),
    "swing_knee_flexion": ("knees", "deg", "peak knee angle during swing"),
    "torso_pitch": ("torso", "deg", "mean trunk pitch, + = leaning forward"),
    "torso_roll": ("torso", "deg", "mean trunk roll, + = leaning right"),
    "base_height": ("hips", "m", "pelvis height above the stance soles"),
    "step_length": ("feet", "m", "touching foot ahead of the other foot along the heading at touchdown"),
    "cadence": ("whole_body", "steps/min", "touchdowns per minute"),
    "gait_asymmetry": ("whole_body", "", "left/right difference (0 = identical)"),
    "foot_clearance": ("feet", "m", "peak swing-foot height above its stance height"),
    "foot_slip": ("feet", "m/s", "horizontal sole speed while in contact"),
    "lateral_sway": ("hips", "m", "RMS sideways pelvis displacement about its mean path"),
    "stance_width": ("hips", "m", "lateral distance between the soles"),
    "forward_speed": ("whole_body", "m/s", "mean pelvis velocity along its heading"),
    "lateral_speed": ("whole_body", "m/s", "mean pelvis velocity to its left"),
    "yaw_rate": ("whole_body", "deg/s", "mean heading rate, + = turning left"),
    "speed_error": ("whole_body", "m/s", "forward speed minus the commanded forward speed"),
    "flight_fraction": ("whole_body", "", "share of the time with no foot on the ground"),
    "fell": ("whole_body", "", "1 if the robot fell"),
}


def _conf_from_count(n: int, full: int = 6, low: float = 0.55, high: float = 0.95) -> float:
    return float(low + (high - low) * min(1.0, n / full))


def _ramp(x: float, lo: float, hi: float, c0: float = 0.6, c1: float = 0.95) -> float:
    """Confidence growing from c0 at x = lo to c1 at x >= hi."""
    if hi == lo:
        return c1
    return float(np.clip(c0 + (c1 - c0) * (x - lo) / (hi - lo), c0, c1))


def build_descriptors(a: GaitAnalysis) -> list[Descriptor]:
    """Descriptors (D_motion) from a gait analysis: measured quantities plus threshold features."""
    v = a.get
    steps = a.steps
    moving = abs(v("forward_speed") or 0.0) > 0.1 or abs(v("lateral_speed") or 0.0) > 0.1
    conf = {
        "knee_flexion": 0.9 if sum(a.stance_phases) >= 2 else 0.75,
        "knee_flexion_left": 0.9 if a.stance_phases[0] >= 1 else 0.7,
        "knee_flexion_right": 0.9 if a.stance_phases[1] >= 1 else 0.7,
        "swing_knee_flexion": _conf_from_count(a.swing_phases),
        "torso_pitch": 0.95, "torso_roll": 0.95, "base_height": 0.9,
        "step_length": _conf_from_count(steps), "cadence": _conf_from_count(steps, low=0.7),
        "gait_asymmetry": _conf_from_count(steps, full=8),
        "foot_clearance": _conf_from_count(a.swing_phases),
        "foot_slip": 0.85, "lateral_sway": 0.8, "stance_width": 0.9,
        "forward_speed": 0.95, "lateral_speed": 0.9, "yaw_rate": 0.9, "speed_error": 0.9,
        "flight_fraction": 0.85, "fell": 1.0,
    }
    out: list[Descriptor] = []
    for label, (region, unit, note) in _DESCRIPTOR_INFO.items():
        value = v(label)
        if value is None:
            continue
        if label == "foot_clearance" and a.swing_phases == 0:
            continue
        if label == "speed_error" and not any(abs(x) > 1e-9 for x in a.command):
            continue
        if label == "fell":  # "fell" is also a feature label: state it only when it happened
            if a.fall_time_s is None:
                continue
            note = f"fell at t={a.fall_time_s:.2f} s"
        out.append(Descriptor(label, region, round(value, 4) + 0.0, unit, conf[label], note))  # + 0.0: no -0.0

    def feature(label: str, region: str, value: float | None, unit: str | None, confidence: float, note: str):
        out.append(Descriptor(label, region, None if value is None else round(float(value), 4) + 0.0, unit,
                              round(float(confidence), 3), note))

    slip = v("foot_slip")
    if slip is not None and slip > 0.1:
        feature("feet_sliding", "feet", slip, "m/s", _ramp(slip, 0.1, 0.3), "stance feet slide on the ground")
    sway, roll_std = v("lateral_sway") or 0.0, v("torso_roll_std") or 0.0
    if sway > 0.03 or roll_std > 4.0:
        feature("hips_swaying", "hips", sway, "m", _ramp(max(sway / 0.03, roll_std / 4.0), 1.0, 2.0),
                "pelvis sways side to side")
    elif a.duration_s >= 1.0:
        feature("hips_level", "hips", sway, "m", 0.8, "pelvis stays level")
    wob = max(v("torso_pitch_std") or 0.0, roll_std)
    if wob > 4.0:
        feature("torso_wobbling", "torso", wob, "deg", _ramp(wob, 4.0, 10.0), "trunk angle oscillates")
    yr = v("yaw_rate") or 0.0
    if abs(yr) > 11.5:  # 0.2 rad/s
        feature("turning", "whole_body", yr, "deg/s", _ramp(abs(yr), 11.5, 30.0),
                f"turning {'left' if yr > 0 else 'right'}")
    lat = v("lateral_speed") or 0.0
    if abs(lat) > 0.1:
        feature("moving_sideways", "whole_body", lat, "m/s", _ramp(abs(lat), 0.1, 0.3),
                f"moving to the {'left' if lat > 0 else 'right'}")
    flight = v("flight_fraction") or 0.0
    if flight > 0.1 and steps >= 2:
        sync = v("synchronous_touchdowns") or 0.0
        if sync > 0.6:
            feature("hopping", "whole_body", flight, "", _ramp(sync, 0.6, 0.9), "both feet leave and land together")
        else:
            feature("running", "whole_body", flight, "", _ramp(flight, 0.1, 0.3), "flight phases between steps")
    clear, step = v("foot_clearance"), v("step_length")
    if moving and steps >= 2 and clear is not None and clear < 0.03 and step is not None and abs(step) < 0.15:
        feature("shuffling", "feet", clear, "m", 0.8, "short, low steps")
    if moving and steps == 0:
        feature("feet_dragging", "feet", 0.0, "m", 0.8, "moves without lifting the feet")
    err = v("speed_error")
    if err is not None and any(abs(x) > 1e-9 for x in a.command[:1]):
        tol = max(0.15, 0.25 * abs(a.command[0]))
        if err < -tol:
            feature("too_slow", "whole_body", err, "m/s", _ramp(-err, tol, 2 * tol), "slower than commanded")
        elif err > tol:
            feature("too_fast", "whole_body", err, "m/s", _ramp(err, tol, 2 * tol), "faster than commanded")
    return out


def measurements(a: GaitAnalysis) -> dict[str, float]:
    """The schema quantities (QUANTITIES labels, canonical units) measured, for `merge_measurements`."""
    out = {}
    for label in QUANTITIES:
        value = a.get(label)
        if value is None or (label == "foot_clearance" and a.swing_phases == 0):
            continue
        out[label] = value
    return out


# ============================================================================ task sentences

@dataclasses.dataclass
class TaskSpec:
    """What a task sentence asks for, as far as the rules understand it."""

    text: str
    gait: str | None = None
    """"walk", "run", "stand", "step" (in place), "turn", "hop" or None."""
    direction: str | None = None
    """"forward", "backward", "left", "right", "sideways" or None."""
    turn: str | None = None
    """"left" / "right" / "any" when turning is asked for."""
    speed: float | None = None
    """Asked speed in m/s (magnitude)."""
    speed_word: str | None = None
    """"slow" or "fast" when the speed is only qualitative."""
    turn_rate: float | None = None
    """Asked yaw rate in rad/s (magnitude)."""
    knees: str | None = None
    """"straight" or "bent"."""
    torso: str | None = None
    """"upright", "forward" or "backward"."""
    steps: list = dataclasses.field(default_factory=list)
    """Any of "high", "clear", "low", "long", "short"."""
    stable: bool = False
    symmetric: bool = False
    no_slip: bool = False
    low_sway: bool = False
    stance: str | None = None
    """"wide" or "narrow"."""
    in_place: bool = False
    """No net travel asked ("in place", "on the spot")."""
    understood: list = dataclasses.field(default_factory=list)
    """The phrases the rules matched."""
    unjudged: list = dataclasses.field(default_factory=list)
    """The parts of the sentence no rule understood."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_NUM = r"(\d+(?:\.\d+)?|\.\d+)"
_BODY_PARTS = r"(?:arms?|legs?|foot|feet|knees?|hands?|hips?|ankles?|shoulders?|elbows?|side|eye|ear)"

_SPEED_UNITS = {"m/s": 1.0, "mps": 1.0, "meters per second": 1.0, "metres per second": 1.0, "meter per second": 1.0,
                "metre per second": 1.0, "km/h": 1 / 3.6, "kph": 1 / 3.6, "cm/s": 0.01}


def _speed_unit(u: str) -> float:
    u = re.sub(r"\s+", " ", u.strip().lower()).replace(" / ", "/").replace(" /", "/").replace("/ ", "/")
    return _SPEED_UNITS.get(u, 1.0)


# (field, value, pattern); applied in order, each match blanks its text so later rules and the
# "unjudged" leftovers do not see it again.
_RULES: list[tuple[str, Any, str]] = [
    ("gait", "step", r"\b(?:step(?:s|ping)?|walk(?:s|ing)?|march(?:es|ing)?|jog(?:s|ging)?)\s+in\s+place\b|\bstep(?:s|ping)?\s+on\s+the\s+spot\b"),
    ("speed", None, _NUM + r"\s*(m\s*/\s*s(?:ec)?|mps|met(?:er|re)s?\s+per\s+second|km\s*/\s*h|kph|cm\s*/\s*s)\b"),
    ("speed", None, r"\bspeed\s+(?:of\s+)?" + _NUM + r"\b"),
    ("turn_rate", None, _NUM + r"\s*(rad\s*/\s*s|radians?\s+per\s+second|deg(?:rees?)?\s*/\s*s|degrees?\s+per\s+second)"),
    ("knees", "straight", r"\b(?:straight|extended|stiff|locked|straightened|unbent)\s+(?:knees?|legs?)\b"
                          r"|\b(?:knees?|legs?)\s+(?:kept\s+|held\s+|fully\s+)?(?:straight|extended|stiff|locked|straightened)\b"
                          r"|\bstraight[- ]legged\b|\bstiff[- ]legged\b"
                          r"|\bwithout\s+bending\s+(?:the\s+|its\s+|his\s+|her\s+)?knees\b"),
    ("knees", "bent", r"\b(?:bent|flexed|bending|crouched|soft)\s+(?:knees?|legs?)\b|\b(?:knees?|legs?)\s+(?:kept\s+)?(?:bent|flexed)\b"
                      r"|\bcrouch(?:ed|ing|es)?\b|\bsquat(?:s|ted|ting)?\b|\bbend(?:ing|s)?\s+(?:the\s+|its\s+)?knees\b"),
    ("steps", "high", r"\bhigh\s+(?:steps?|knees?|knee\s+lifts?|foot\s+clearance|clearance|leg\s+lifts?)\b"
                      r"|\b(?:lift(?:s|ing)?|rais(?:e|es|ing))\s+(?:the\s+|its\s+|his\s+|her\s+|their\s+)?(?:knees?|feet|foot|legs?)"
                      r"(?:\s+high(?:er)?)?\b|\bknees?\s+high\b|\bhigh[- ]stepping\b|\bmarch(?:es|ing)?\b"),
    ("steps", "clear", r"\bwithout\s+(?:dragging|scuffing)(?:\s+(?:the\s+|its\s+)?feet)?\b|\bdon'?t\s+drag(?:\s+(?:the\s+|its\s+)?feet)?\b"
                       r"|\bno\s+(?:foot\s+)?dragging\b"),
    ("steps", "low", r"\bshuffl(?:e|es|ing)\b"),
    ("steps", "long", r"\b(?:long|big|large|wide|longer)\s+(?:strides?|steps?)\b"),
    ("steps", "short", r"\b(?:short|small|tiny|little|shorter)\s+(?:strides?|steps?)\b"),
    ("torso", "forward", r"\blean(?:s|ing|ed)?\s+forward\b|\bforward\s+lean\b|\bhunch(?:ed|ing)?(?:\s+over)?\b|\bstoop(?:ed|ing)?\b"),
    ("torso", "backward", r"\blean(?:s|ing|ed)?\s+back(?:ward|wards)?\b|\bbackward\s+lean\b"),
    ("torso", "upright", r"\b(?:upright|erect|vertical|straight)\s+(?:torso|trunk|back|posture|body|spine|upper\s+body)\b"
                         r"|\b(?:torso|trunk|back|posture|body|spine|upper\s+body)\s+(?:kept\s+|held\s+)?(?:upright|erect|vertical|straight)\b"
                         r"|\bupright\b|\b(?:stand(?:ing)?|walk(?:ing)?)\s+tall\b|\bgood\s+posture\b"),
    ("symmetric", True, r"\bsymmetric(?:al|ally)?\b|\bbalanced\s+gait\b|\bevenly\b|\beven\s+(?:gait|steps)\b|\brhythmic(?:al|ally)?\b"),
    ("no_slip", True, r"\bwithout\s+(?:slipping|sliding|skidding)\b|\bno\s+(?:slip|slipping|sliding)\b|\bfirm\s+footing\b"),
    ("low_sway", True, r"\bwithout\s+sway(?:ing)?\b|\bno\s+sway(?:ing)?\b|\bminimal\s+sway\b|\blevel\s+(?:hips|pelvis)\b"
                       r"|\b(?:hips|pelvis)\s+(?:kept\s+)?level\b"),
    ("stance", "wide", r"\bwide\s+(?:stance|gait|base)\b|\bfeet\s+(?:wide\s+|far\s+)?apart\b"),
    ("stance", "narrow", r"\bnarrow\s+(?:stance|gait|base)\b|\bfeet\s+(?:close\s+)?together\b"),
    ("stable", True, r"\bwithout\s+(?:falling(?:\s+(?:over|down))?|tripping|stumbling|losing\s+(?:its\s+|his\s+|her\s+)?balance|wobbl\w*)\b"
                     r"|\bdon'?t\s+fall\b|\bno\s+wobbl\w*\b|\bstabl[ey]\b|\bsteady\b|\bsteadily\b|\bsmooth(?:ly)?\b"
                     r"|\bstay(?:s|ing)?\s+on\s+(?:its|his|her)\s+feet\b|\b(?:in\s+)?balance[ds]?\b|\bbalancing\b"),
    ("gait", "turn", r"\b(?:turn(?:s|ing)?|rotat(?:e|es|ing)|spin(?:s|ning)?|pivot(?:s|ing)?)(?:\s+(?:around|in\s+place|on\s+the\s+spot))?\b"),
    ("gait", "stand", r"\bstand(?:s|ing)?(?:\s+still)?\b|\b(?:stay|remain|hold|keep)(?:s|ing)?\s+still\b|\bstay(?:s|ing)?\s+(?:put|in\s+place)\b"
                      r"|\bdon'?t\s+move\b|\bstationary\b|\bstill\b"),
    ("gait", "hop", r"\bhop(?:s|ping)?\b|\bjump(?:s|ing)?\b"),
    ("gait", "run", r"\brun(?:s|ning)?\b|\bjog(?:s|ging)?\b|\bsprint(?:s|ing)?\b|\btrot(?:s|ting)?\b"),
    ("gait", "walk", r"\bwalk(?:s|ing)?\b|\bstroll(?:s|ing)?\b|\bmov(?:e|es|ing)\b|\bgo(?:es|ing)?\b|\btravel(?:s|ling|ing)?\b"
                     r"|\bproceed(?:s|ing)?\b|\bstep(?:s|ping)?\b|\blocomot\w*\b|\bgait\b"),
    ("direction", "sideways", r"\bside\s*-?\s*step(?:s|ping)?\b|\bsideways\b|\blaterally\b|\bstrafe\w*\b"),
    ("direction", "forward", r"\bforwards?\b|\bahead\b|\bstraight\s+ahead\b"),
    ("direction", "backward", r"\bbackwards?\b|\bin\s+reverse\b|\breverse\b|\bback\b"),
    ("direction", "left", r"\b(?:to\s+(?:the\s+|its\s+)?)?left\b(?!\s*-?\s*" + _BODY_PARTS + r")"),
    ("direction", "right", r"\b(?:to\s+(?:the\s+|its\s+)?)?right\b(?!\s*-?\s*" + _BODY_PARTS + r")"),
    ("in_place", True, r"\bin\s+place\b|\bon\s+the\s+spot\b"),
    ("speed_word", "slow", r"\bslow(?:ly)?\b|\bgentl[ey]\b|\bleisurely\b|\bcareful(?:ly)?\b"),
    ("speed_word", "fast", r"\bfast\b|\bquick(?:ly)?\b|\bbrisk(?:ly)?\b|\brapid(?:ly)?\b|\bhurr(?:y|ied|iedly)\b"),
]
_COMPILED = [(f, v, re.compile(p)) for f, v, p in _RULES]

_STOPWORDS = frozenset("""a an the with while whilst and at of to in on it its his her their your keep keeps keeping kept
maintain maintains maintaining please robot humanoid should be being is are very also then but both so that as by for from
too more less much using use can could would must try trying tries make makes making let lets do does hold holding held
nice nicely good well properly like just only same time all around about over up down into onto itself he she they them
one some any each every way manner style""".split())


def parse_task(task: str) -> TaskSpec:
    """Read what a task sentence asks for with keyword rules; unknown parts go to `unjudged`."""
    spec = TaskSpec(text=task)
    text = " " + str(task).lower().replace("’", "'") + " "
    work = list(text)
    directions: list[str] = []

    def blank(m: re.Match) -> None:
        for i in range(m.start(), m.end()):
            work[i] = " "

    for field, value, rx in _COMPILED:
        for m in rx.finditer("".join(work)):
            phrase = m.group(0).strip()
            if field == "speed":
                num = float(m.group(1))
                scale = _speed_unit(m.group(2)) if m.lastindex and m.lastindex >= 2 else 1.0
                if spec.speed is None:
                    spec.speed = num * scale
            elif field == "turn_rate":
                num = float(m.group(1))
                rate = math.radians(num) if m.group(2).startswith("deg") else num
                if spec.turn_rate is None:
                    spec.turn_rate = rate
            elif field == "steps":
                if value not in spec.steps:
                    spec.steps.append(value)
            elif field == "gait":
                # the first (most specific) gait wins; "turn" combines with a walking gait
                if spec.gait is None:
                    spec.gait = value
                elif spec.gait == "turn" and value in ("walk", "run"):
                    spec.gait, spec.turn = value, spec.turn or "any"
                elif value == "turn" and spec.gait in ("walk", "run", "step"):
                    spec.turn = spec.turn or "any"
            elif field == "direction":
                directions.append(value)
            elif getattr(spec, field) is None or isinstance(getattr(spec, field), bool):
                setattr(spec, field, value)
            spec.understood.append(phrase)
            blank(m)
    # "turn left": with a turning gait left/right is the turn's direction, forward/backward the walk's
    lateral = [d for d in directions if d in ("left", "right")]
    if spec.gait == "turn" or spec.turn is not None:
        spec.turn = lateral[0] if lateral else (spec.turn or "any")
        spec.direction = next((d for d in directions if d not in ("left", "right")), None)
    elif directions:
        spec.direction = lateral[0] if lateral and "sideways" in directions else directions[0]
    if spec.gait == "step":
        spec.in_place = True
    if spec.in_place and spec.gait in (None, "walk"):
        spec.gait = "step"
    if spec.gait is None and (spec.speed is not None or spec.direction is not None):
        spec.gait = "walk"
    if spec.gait in ("walk", "run") and spec.direction is None and spec.turn is None:
        spec.direction = "forward"
    if spec.gait == "run" and spec.speed_word is None and spec.speed is None:
        spec.speed_word = "fast"
    # leftovers: split what no rule matched at clause boundaries and keep chunks with content words
    rest = "".join(work)
    chunks = re.split(r"[,;.!?]|\b(?:and|while|whilst|with|but|then|also)\b", rest)
    for chunk in chunks:
        words = [w for w in re.findall(r"[a-z0-9'/-]+", chunk) if w not in _STOPWORDS]
        if words:
            spec.unjudged.append(_original_phrase(task, chunk))
    return spec


def _original_phrase(task: str, chunk: str) -> str:
    """The leftover chunk as it reads in the task (case kept), whitespace collapsed."""
    norm = " ".join(chunk.split())
    m = re.search(r"\s+".join(re.escape(w) for w in norm.split()), task, flags=re.IGNORECASE)
    return m.group(0) if m else norm


# ============================================================================ scoring

def _clip01(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


@dataclasses.dataclass
class Criterion:
    name: str
    score: float
    weight: float
    target: str
    measured: str
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
    fwd, lat = v("forward_speed") or 0.0, v("lateral_speed") or 0.0
    yaw_rate = math.radians(v("yaw_rate") or 0.0)
    cadence = v("cadence") or 0.0

    gait = spec.gait
    if gait in ("walk", "run", "hop") or (gait == "turn" and spec.direction):
        signs = {"forward": (fwd, "forward"), "backward": (-fwd, "backward"), "left": (lat, "to the left"),
                 "right": (-lat, "to the right"), "sideways": (abs(lat), "sideways")}
        along, words = signs.get(spec.direction or "forward", (fwd, "forward"))
        cmd_speed = abs(a.command[1] if spec.direction in ("left", "right", "sideways") else a.command[0])
        if spec.speed is not None:
            target = spec.speed
            s = _speed_score(along, target)
            tgt = f"{target:.2f} m/s {words}"
        elif spec.speed_word == "slow":
            target, s = 0.3, _clip01(along / 0.05) * _clip01(1 - (along - 0.45) / 0.3)
            tgt = f"slow (0.05-0.45 m/s) {words}"
        elif spec.speed_word == "fast":
            target = 1.0 if gait == "run" else 0.8
            s = _clip01(along / target)
            tgt = f">= {target:.1f} m/s {words}"
        elif cmd_speed > 0.05:
            target = cmd_speed
            s = _speed_score(along, target)
            tgt = f"{target:.2f} m/s {words} (the command)"
        else:
            target = 0.3
            s = _clip01(along / target)
            tgt = f"moving {words}"
        sug = None
        if s < 0.7:
            sug = ("tracking_lin_vel", "increase",
                   f"moves {along:+.2f} m/s {words}; the task asks {tgt}")
        crit.append(Criterion("speed", s, 2.0, tgt, f"{along:+.2f} m/s {words}", sug))
        # it must step, not slide
        s_step = _clip01(cadence / 60.0)
        crit.append(Criterion("stepping", s_step, 1.0, ">= 60 steps/min", f"{cadence:.0f} steps/min",
                              ("feet_air_time", "increase", f"only {cadence:.0f} steps/min") if s_step < 0.7 else None))
        if gait == "run":
            flight = v("flight_fraction") or 0.0
            s_run = _clip01(flight / 0.15)
            crit.append(Criterion("flight phases", s_run, 1.0, "flight phases (running)", f"{flight:.0%} of the time airborne",
                                  ("feet_air_time", "increase", "no flight phases for a run") if s_run < 0.7 else None))
        if gait == "hop":
            flight, sync = v("flight_fraction") or 0.0, v("synchronous_touchdowns") or 0.0
            s_hop = _clip01(flight / 0.15) * _clip01(sync / 0.8)
            crit.append(Criterion("hopping", s_hop, 1.0, "both feet leave and land together",
                                  f"{flight:.0%} airborne, {sync:.0%} synchronous touchdowns",
                                  ("feet_air_time", "increase", "no two-footed hops") if s_hop < 0.7 else None))
    elif gait == "stand":
        speed = math.hypot(fwd, lat)
        s = math.exp(-(speed / 0.1) ** 2) * math.exp(-(yaw_rate / 0.2) ** 2)
        crit.append(Criterion("standing still", s, 2.0, "no net motion", f"{speed:.2f} m/s, {math.degrees(yaw_rate):.0f} deg/s",
                              ("tracking_lin_vel", "increase", f"drifts at {speed:.2f} m/s while asked to stand")
                              if s < 0.7 else None))
        s_steps = _clip01(1.0 - cadence / 30.0)
        crit.append(Criterion("no stepping", s_steps, 1.0, "feet stay planted", f"{cadence:.0f} steps/min",
                              ("feet_air_time", "decrease", "steps while asked to stand") if s_steps < 0.7 else None))
    elif gait == "step":
        speed = math.hypot(fwd, lat)
        s = math.exp(-(speed / 0.15) ** 2)
        crit.append(Criterion("in place", s, 1.5, "no net motion", f"{speed:.2f} m/s",
                              ("tracking_lin_vel", "increase", f"drifts at {speed:.2f} m/s while stepping in place")
                              if s < 0.7 else None))
        s_step = _clip01(cadence / 60.0)
        crit.append(Criterion("stepping", s_step, 1.5, ">= 60 steps/min", f"{cadence:.0f} steps/min",
                              ("feet_air_time", "increase", f"only {cadence:.0f} steps/min") if s_step < 0.7 else None))
    if spec.in_place and gait == "turn":
        speed = math.hypot(fwd, lat)
        s = math.exp(-(speed / 0.15) ** 2)
        crit.append(Criterion("in place", s, 1.0, "no net travel", f"{speed:.2f} m/s",
                              ("tracking_lin_vel", "increase", f"travels at {speed:.2f} m/s while turning in place")
                              if s < 0.7 else None))
    if spec.turn is not None:
        sign = {"left": 1.0, "right": -1.0}.get(spec.turn)
        along = yaw_rate * sign if sign is not None else abs(yaw_rate)
        target = spec.turn_rate or 0.5
        s = _speed_score(along, target) if spec.turn_rate else _clip01(along / 0.3)
        words = f"turning {spec.turn}" if sign is not None else "turning"
        crit.append(Criterion("turning", s, 2.0 if gait == "turn" else 1.0, f"{words} ({target:.2f} rad/s)" if spec.turn_rate
                              else words, f"{math.degrees(yaw_rate):+.0f} deg/s",
                              ("tracking_ang_vel", "increase", f"yaw rate {yaw_rate:+.2f} rad/s, task asks {words}")
                              if s < 0.7 else None))

    knee = v("knee_flexion")
    if spec.knees:
        if knee is None:
            unjudged.append(f"{spec.knees} knees (no knee joints found)")
        elif spec.knees == "straight":
            s = _clip01(1.0 - (knee - 10.0) / 20.0)
            crit.append(Criterion("straight knees", s, 1.5, "<= 10 deg at mid-stance", f"{knee:.0f} deg",
                                  ("knee_extension", "increase", f"knees bent {knee:.0f} deg at mid-stance")
                                  if s < 0.7 else None))
        else:
            s = _clip01((knee - 15.0) / 20.0)
            crit.append(Criterion("bent knees", s, 1.5, ">= 35 deg at mid-stance", f"{knee:.0f} deg",
                                  ("knee_extension", "decrease", f"knees only {knee:.0f} deg at mid-stance")
                                  if s < 0.7 else None))
    pitch, roll = v("torso_pitch") or 0.0, v("torso_roll") or 0.0
    if spec.torso == "upright":
        tilt = math.hypot(pitch, roll)
        s = _clip01(1.0 - (tilt - 5.0) / 15.0)
        crit.append(Criterion("upright torso", s, 1.0, "tilt <= 5 deg", f"pitch {pitch:+.0f} deg, roll {roll:+.0f} deg",
                              ("orientation", "increase", f"trunk tilted {tilt:.0f} deg") if s < 0.7 else None))
    elif spec.torso in ("forward", "backward"):
        lean = pitch if spec.torso == "forward" else -pitch
        s = _clip01((lean - 3.0) / 12.0)
        crit.append(Criterion(f"leaning {spec.torso}", s, 1.0, ">= 15 deg", f"pitch {pitch:+.0f} deg",
                              ("orientation", "decrease", f"trunk pitch {pitch:+.0f} deg, the task asks a lean")
                              if s < 0.7 else None))
    clear = v("foot_clearance") if a.swing_phases else None
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
                s = _clip01((clear - 0.03) / 0.09)
                crit.append(Criterion("high steps", s, 1.5, ">= 0.12 m swing clearance", f"{clear:.3f} m",
                                      ("feet_clearance", "increase", f"swing clearance {clear:.3f} m") if s < 0.7 else None))
            elif want == "clear":
                s = _clip01(clear / 0.04)
                crit.append(Criterion("no dragging", s, 1.0, ">= 0.04 m swing clearance", f"{clear:.3f} m",
                                      ("feet_clearance", "increase", f"feet drag ({clear:.3f} m)") if s < 0.7 else None))
            else:
                s = _clip01(1.0 - (clear - 0.03) / 0.05)
                crit.append(Criterion("low steps", s, 1.0, "<= 0.03 m swing clearance", f"{clear:.3f} m",
                                      ("feet_clearance", "decrease", f"swing clearance {clear:.3f} m") if s < 0.7 else None))
        else:
            step = v("step_length")
            if step is None:
                unjudged.append(f"{want} steps (no steps taken)")
                continue
            if want == "long":
                s = _clip01((abs(step) - 0.15) / 0.2)
                crit.append(Criterion("long steps", s, 1.0, ">= 0.35 m", f"{abs(step):.2f} m",
                                      ("feet_air_time", "increase", f"steps of {abs(step):.2f} m") if s < 0.7 else None))
            else:
                s = _clip01(1.0 - (abs(step) - 0.1) / 0.15)
                crit.append(Criterion("short steps", s, 1.0, "<= 0.10 m", f"{abs(step):.2f} m",
                                      ("feet_air_time", "decrease", f"steps of {abs(step):.2f} m") if s < 0.7 else None))
    if spec.stable:
        wob = max(v("torso_pitch_std") or 0.0, v("torso_roll_std") or 0.0)
        s = 0.0 if a.fall_time_s is not None else _clip01(1.0 - (wob - 2.0) / 8.0)
        crit.append(Criterion("stable", s, 1.0, "no fall, trunk steady", "fell" if a.fall_time_s is not None
                              else f"trunk angle std {wob:.1f} deg",
                              ("orientation", "increase", "unsteady trunk" if a.fall_time_s is None else "it fell")
                              if s < 0.7 else None))
    if spec.symmetric:
        asym = v("gait_asymmetry")
        if asym is None:
            unjudged.append("symmetry (too few steps per side to compare)")
        else:
            s = _clip01(1.0 - asym / 0.3)
            crit.append(Criterion("symmetric gait", s, 1.0, "asymmetry <= 0.05", f"{asym:.2f}",
                                  ("contact_phase", "increase", f"left/right asymmetry {asym:.2f}") if s < 0.7 else None))
    if spec.no_slip:
        slip = v("foot_slip")
        if slip is None:
            unjudged.append("slipping (no stance phases)")
        else:
            s = _clip01(1.0 - slip / 0.2)
            crit.append(Criterion("no slipping", s, 1.0, "stance feet still", f"{slip:.2f} m/s",
                                  ("foot_slip", "increase", f"stance feet slide at {slip:.2f} m/s") if s < 0.7 else None))
    if spec.low_sway:
        sway = v("lateral_sway")
        if sway is None:
            unjudged.append("sway (rollout too short)")
        else:
            s = _clip01(1.0 - (sway - 0.01) / 0.05)
            crit.append(Criterion("no sway", s, 1.0, "<= 0.01 m RMS", f"{sway:.3f} m",
                                  ("ang_vel_xy", "increase", f"pelvis sways {sway:.3f} m RMS") if s < 0.7 else None))
    if spec.stance:
        width = v("stance_width") or 0.0
        if spec.stance == "wide":
            s = _clip01((width - 0.2) / 0.15)
        else:
            s = _clip01(1.0 - (width - 0.08) / 0.12)
        crit.append(Criterion(f"{spec.stance} stance", s, 1.0, "wide (>= 0.35 m)" if spec.stance == "wide"
                              else "narrow (<= 0.08 m)", f"{width:.2f} m",
                              ("feet_distance", "increase", f"stance width {width:.2f} m") if s < 0.7 else None))
    return crit, unjudged


# ============================================================================ suggestions

def _registry() -> set | None:
    try:
        from motionvl.rewards.terms import REGISTRY
    except Exception:  # noqa: BLE001 - the library is optional here
        return None
    return set(REGISTRY)


_CONCEPT_NAMES = {
    # concept -> candidate library names, first existing one is used
    "tracking_lin_vel": ("tracking_lin_vel", "lin_vel_tracking"),
    "tracking_ang_vel": ("tracking_ang_vel", "ang_vel_tracking"),
    "feet_air_time": ("feet_air_time",),
    "knee_extension": ("knee_extension",),
    "orientation": ("orientation",),
    "feet_clearance": ("feet_clearance",),
    "contact_phase": ("contact_phase",),
    "foot_slip": ("foot_slip",),
    "ang_vel_xy": ("ang_vel_xy", "orientation"),
    "feet_distance": ("feet_distance",),
    "base_height": ("base_height",),
    "termination": ("termination",),
}


def _term_name(concept: str, registry: set | None) -> str | None:
    names = _CONCEPT_NAMES.get(concept, (concept,))
    if registry is None:
        return names[0]
    return next((n for n in names if n in registry), None)


def _general_faults(a: GaitAnalysis, spec: TaskSpec) -> list[tuple[str, str, str]]:
    """Faults worth a reward change whatever the task says."""
    v = a.get
    out = []
    if a.fall_time_s is not None:
        out.append(("orientation", "increase", f"the robot fell at t={a.fall_time_s:.1f} s"))
        out.append(("termination", "increase", "falls must cost more"))
    walking = spec.gait in ("walk", "run", "step", "turn") or abs(v("forward_speed") or 0.0) > 0.1
    clear = v("foot_clearance") if a.swing_phases else None
    if walking and clear is not None and clear < 0.03 and "low" not in spec.steps:
        out.append(("feet_clearance", "increase", f"swing feet drag ({clear:.3f} m clearance)"))
    slip = v("foot_slip")
    if slip is not None and slip > 0.15 and not spec.no_slip:
        out.append(("foot_slip", "increase", f"stance feet slide at {slip:.2f} m/s"))
    if spec.torso is None and abs(v("torso_pitch") or 0.0) > 15.0:
        out.append(("orientation", "increase", f"trunk pitched {v('torso_pitch'):+.0f} deg"))
    return out


def _previous_score(previous_best, task: str) -> float | None:
    if previous_best is None:
        return None
    if isinstance(previous_best, MotionFeedback):
        return previous_best.alignment_score if previous_best.valid else None
    if isinstance(previous_best, (int, float)) and not isinstance(previous_best, bool):
        return float(previous_best)
    if isinstance(previous_best, dict):
        s = previous_best.get("alignment_score")
        return float(s) if isinstance(s, (int, float)) else None
    if isinstance(previous_best, str):
        try:
            fb = MotionFeedback.from_json(previous_best)
            return fb.alignment_score if fb.valid else None
        except Exception:  # noqa: BLE001 - a description text, not a feedback
            try:
                return float(previous_best)
            except ValueError:
                return None
    return None


# ============================================================================ the critic

class KinematicCritic:
    """Offline critic from the rollout's kinematics; needs no model and is not a VLM.

    `critique(traj, task, previous_best=None)`; it also accepts the critic protocol's
    `critique(frames, times, task, previous_best=None, trajectory=traj)` (frames are ignored).
    `previous_best` may be the best MotionFeedback so far (or its JSON, or its score): then
    `better_than_best` says whether this rollout scores higher by more than `margin`.
    """

    name = CRITIC_NAME

    def __init__(self, warmup_s: float = 0.5, margin: float = 0.02, fall_penalty: float = 0.3, **_ignored: Any):
        self.warmup_s = float(warmup_s)
        self.margin = float(margin)
        self.fall_penalty = float(fall_penalty)

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
        if trajectory is None:
            return MotionFeedback.invalid(self.name, task, "the kinematic critic needs the rollout's trajectory "
                                          "(critique(traj, task) or trajectory=...)")
        if len(trajectory.time) < 2:
            return MotionFeedback.invalid(self.name, task, f"the trajectory has {len(trajectory.time)} sample(s); "
                                          "at least 2 are needed to judge motion")
        try:
            return self._critique(trajectory, task, previous_best)
        except Exception as exc:  # noqa: BLE001 - a critic never crashes the loop
            return MotionFeedback.invalid(self.name, task, f"kinematic analysis failed: {type(exc).__name__}: {exc}")

    def _critique(self, traj: Trajectory, task: str, previous_best: Any) -> MotionFeedback:
        t0 = _time.perf_counter()
        a = self.analyse(traj)
        descriptors = build_descriptors(a)
        features = discretise(descriptors)
        spec = parse_task(task)
        criteria, unjudged = score_task(spec, a)
        unjudged = list(spec.unjudged) + unjudged
        if criteria:
            score = sum(c.score * c.weight for c in criteria) / sum(c.weight for c in criteria)
        else:
            score = 0.0
            if task.strip() and not unjudged:
                unjudged.append(task.strip())
        if a.fall_time_s is not None:
            total = max(float(len(traj.time)) * traj.dt, 1e-9)
            score *= self.fall_penalty * min(1.0, a.fall_time_s / total)
        registry = _registry()
        suggestions: list[Suggestion] = []
        seen: set = set()
        raw = [c.suggestion for c in sorted(criteria, key=lambda c: -c.weight * (1.0 - c.score)) if c.suggestion]
        raw += _general_faults(a, spec)
        for concept, direction, reason in raw:
            term = _term_name(concept, registry)
            if term is None or (term, direction) in seen:
                continue
            seen.add((term, direction))
            suggestions.append(Suggestion(term, direction, reason))
        prev = _previous_score(previous_best, task)
        better = None if prev is None else bool(score > prev + self.margin)
        meta = {
            "analysis": a.to_dict(),
            "measurements": {k: round(v, 5) for k, v in measurements(a).items()},
            "criteria": [{"name": c.name, "score": round(c.score, 4), "weight": c.weight, "target": c.target,
                          "measured": c.measured} for c in criteria],
            "task_spec": {k: v for k, v in spec.to_dict().items() if v not in (None, [], False)},
            "not_a_vlm": True,
            "latency_s": round(_time.perf_counter() - t0, 5),
        }
        return MotionFeedback(critic=self.name, task=task, descriptors=descriptors, features=features,
                              alignment_score=round(_clip01(score), 4), suggestions=suggestions,
                              better_than_best=better, unjudged=unjudged, valid=True, meta=meta)

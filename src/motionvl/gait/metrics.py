"""Gait numbers of a recorded rollout: the one definition of each, read by `motionvl eval` and the
kinematic critic (kinematics and contacts only, no reward involved).

How a `Trajectory` is read before anything is measured:

* it ends at its first sample flagged as fallen (`truncate_at_fall`);
* contact is the recorded sole contact with every interior run shorter than `min_phase_s` flipped
  (`debounce`): a one- or two-sample blip neither ends a stance nor makes a step. A *stance phase*
  of a leg is a run of contact samples of its foot, a *swing* a run without contact between two
  stance phases, a *touchdown* the first sample of a stance phase that follows a swing;
* heights are above the terrain: a sole's height is its z minus the ground under it, the base's its z
  minus the ground under the pelvis (`Trajectory.ground_height`; z itself on level ground at 0), so that
  clearance over a step is measured from the step, not from z = 0;
* the *window* is the rollout from `warmup_s` on, leaving out the start from the standing pose, when
  at least max(1 s, 2 x warmup_s) remain; otherwise the whole rollout. Every number below is
  measured on the window (a swing or stance phase cut by the window's start counts as cut).

Stance knee flexion (`knee_angle_stance_deg`, the language loop's outcome metric): the knee
joint's angle in degrees (0 = straight leg, positive = flexed, as in the robot config) averaged
over every window sample in which that leg's foot is in stance, both legs pooled (each stance
sample of either leg counts once). The per-leg means are `knee_angle_stance_{left,right}_deg`.

=============================  =========  ======================================================
key                            unit       definition (on the window)
=============================  =========  ======================================================
knee_angle_stance_deg          deg        see above
knee_angle_stance_left_deg     deg        the left leg's stance samples only (right: likewise)
knee_angle_swing_peak_deg      deg        peak knee angle of each swing, averaged over swings
knee_angle_mean_deg            deg        knee angle over every window sample, both legs
torso_pitch_deg                deg        mean base pitch, + = leaning forward (nose down)
torso_roll_deg                 deg        mean base roll, + = leaning right
torso_pitch_std_deg            deg        standard deviation of the pitch (roll: likewise)
forward_speed_mps              m/s        mean base velocity along its heading
lateral_speed_mps              m/s        mean base velocity to its left
yaw_rate_deg_s                 deg/s      mean heading rate, + = turning left
speed_error_mps                m/s        forward speed - mean commanded forward speed
lateral_sway_m                 m          RMS of the sideways base displacement about a line
base_height_m                  m          mean base height above the median stance sole height
stance_width_m                 m          mean lateral distance between the soles (heading frame)
step_frequency_hz              1/s        touchdowns (either foot) per second: (n - 1) / (last -
                                          first), or n / window when they all fall on one sample
step_length_m                  m          at each touchdown, the landing sole ahead of the other
                                          along the heading (negative when stepping backward)
swing_clearance_m              m          peak sole height of each swing above the mean height of
                                          that sole over min_phase_s before and after it (heights
                                          above the terrain under the sole)
stance_slip_mps                m/s        horizontal sole speed over stance samples, leaving out
                                          the first and last sample of each stance phase longer
                                          than two (they carry the swing's own speed)
touchdown_speed_mps            m/s        horizontal sole speed at each touchdown sample
double_support_fraction        0..1       share of samples with both feet in stance
flight_fraction                0..1       share of samples with no foot in stance
synchronous_touchdowns         0..1       share of left touchdowns with a right one within
                                          min_phase_s (hopping)
gait_asymmetry                 0..1       |L - R| / max(|L| + |R|, floor) averaged over step
                                          length, stance time, swing clearance and stance knee
                                          flexion; needs two touchdowns per side
=============================  =========  ======================================================

NaN marks a number the window cannot give (no stance, no complete swing, too few steps).
`EVAL_KEYS` are the numbers `motionvl eval` reports per episode.

Joint roles: the knees are the joints the robot config declares as (left, knee) and (right, knee)
(`Trajectory.joint_roles`, `knee_indices`); `knees=(left, right)` gives them for a trajectory without roles.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from motionvl.sim.math import roll_pitch_of, to_heading_frame, yaw_of
from motionvl.sim.trajectory import Trajectory

WARMUP_S = 0.5
"""Default seconds left out at the start (the step off from the standing pose)."""
MIN_PHASE_S = 0.06
"""Default shortest contact or swing run that counts (shorter interior runs are flipped)."""

EVAL_KEYS = ("knee_angle_stance_deg", "torso_pitch_deg", "step_frequency_hz", "swing_clearance_m",
             "stance_slip_mps", "touchdown_speed_mps", "double_support_fraction", "flight_fraction")
"""Gait numbers `motionvl eval` reports (means over episodes)."""

_ASYMMETRY_FLOORS = {"step_length": 0.05, "stance_time": 0.1, "clearance": 0.02, "stance_knee": 5.0}
"""Denominator floor of each left/right comparison (m, s, m, deg): small values are not asymmetric."""


def truncate_at_fall(traj: Trajectory) -> Trajectory:
    """The trajectory up to and including the first sample flagged as fallen (all of it if none)."""
    fell = np.flatnonzero(np.asarray(traj.fell, dtype=bool))
    if len(fell) == 0:
        return traj
    n = int(fell[0]) + 1
    return dataclasses.replace(traj, **{f.name: getattr(traj, f.name)[:n] for f in dataclasses.fields(traj)
                                       if isinstance(getattr(traj, f.name), np.ndarray)})


def runs(mask: np.ndarray) -> list[tuple[bool, int, int]]:
    """Run-length encoding of a 1-D bool array: [(value, start, stop), ...], stop exclusive."""
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
    encoded = runs(mask)
    for k, (_, s, e) in enumerate(encoded):
        if 0 < k < len(encoded) - 1 and e - s < min_len:
            mask[s:e] = not mask[s]
    return mask


def knee_indices(joint_roles) -> tuple[int | None, int | None]:
    """(left, right) indices of the joints declared as knees among `joint_roles` ((side, kind) per joint,
    RobotConfig.joint_roles); None where a side declares none."""
    roles = [tuple(r) for r in joint_roles]
    left, right = (roles.index((side, "knee")) if (side, "knee") in roles else None for side in ("left", "right"))
    return left, right


def _mean(values) -> float:
    a = np.asarray([v for v in values if v is not None], dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else float("nan")


@dataclasses.dataclass
class GaitAnalysis:
    """The gait numbers of one trajectory and how much data backs them."""

    values: dict
    """key -> value (see the module docstring; NaN where the window cannot give it)."""
    duration_s: float
    """Seconds of the rollout kept (up to and including the fall, if any)."""
    fall_time_s: float | None
    """Seconds from the start to the first fallen sample, None if it did not fall."""
    warmup_s: float
    """Seconds actually left out at the start (0 when the rollout is too short)."""
    touchdowns: tuple
    """(left, right) touchdowns in the window."""
    stance_phases: tuple
    """(left, right) stance phases (whole or cut) in the window."""
    swings: tuple
    """(left, right) complete swings in the window."""
    command: tuple
    """Mean (vx, vy, yaw rate) command over the window."""

    def get(self, key: str) -> float | None:
        """The value, or None when it is missing or not finite."""
        v = self.values.get(key)
        return float(v) if v is not None and math.isfinite(v) else None

    @property
    def steps(self) -> int:
        return int(sum(self.touchdowns))

    def eval_metrics(self) -> dict:
        """The `EVAL_KEYS` numbers (NaN where undefined)."""
        return {k: float(self.values.get(k, float("nan"))) for k in EVAL_KEYS}

    def to_dict(self) -> dict:
        return {"values": {k: (round(float(v), 5) if math.isfinite(v) else None) for k, v in self.values.items()},
                "duration_s": round(self.duration_s, 4), "fall_time_s": self.fall_time_s,
                "warmup_s": self.warmup_s, "touchdowns": list(self.touchdowns),
                "stance_phases": list(self.stance_phases), "swings": list(self.swings),
                "command": [round(c, 4) for c in self.command]}


def analyse_gait(traj: Trajectory, *, warmup_s: float = WARMUP_S, min_phase_s: float = MIN_PHASE_S,
                 knees: tuple[int | None, int | None] | None = None) -> GaitAnalysis:
    """Measure every gait number of `traj` (see the module docstring).

    knees: (left, right) knee joint indices; None: the trajectory's declared knees (`knee_indices`).
    """
    fell = np.flatnonzero(np.asarray(traj.fell, dtype=bool))
    fall_time = float(traj.time[fell[0]] - traj.time[0]) if fell.size else None
    whole = truncate_at_fall(traj)
    dt = float(whole.dt)
    nan = float("nan")
    if len(whole.time) == 0:
        return GaitAnalysis({"fell": 1.0 if fall_time is not None else 0.0}, 0.0, fall_time, 0.0, (0, 0), (0, 0),
                            (0, 0), (0.0, 0.0, 0.0))
    duration = float(whole.time[-1] - whole.time[0]) + dt
    warm = float(warmup_s) if duration - warmup_s >= max(1.0, 2.0 * warmup_s) else 0.0
    first = int(np.searchsorted(np.asarray(whole.time) - whole.time[0], warm - 1e-9))
    min_len = max(1, int(round(min_phase_s / dt)))
    contact_all = np.stack([debounce(whole.foot_contact[:, k], min_len) for k in range(2)], axis=1)
    tr = dataclasses.replace(whole, **{f.name: getattr(whole, f.name)[first:] for f in dataclasses.fields(whole)
                                       if isinstance(getattr(whole, f.name), np.ndarray)})
    contact = contact_all[first:]
    T = len(tr.time)
    t = np.asarray(tr.time, dtype=float) - float(tr.time[0])
    window_s = float(t[-1]) + dt
    knees = knee_indices(tr.joint_roles) if knees is None else knees
    v: dict[str, float] = {}

    # ---------------------------------------------------------------- base
    heading = np.unwrap(yaw_of(tr.base_quat))
    roll, pitch = (np.degrees(a) for a in roll_pitch_of(np.asarray(tr.base_quat, dtype=float)))
    if T > 1:
        v_world = np.gradient(np.asarray(tr.base_pos, dtype=float), t, axis=0)
        yaw_rate = np.gradient(heading, t)
    else:
        v_world, yaw_rate = np.zeros((T, 3)), np.zeros(T)
    v_fwd, v_lat = np.moveaxis(to_heading_frame(v_world[:, :2], heading), -1, 0)
    command = np.asarray(tr.command, dtype=float).mean(axis=0)
    v["forward_speed_mps"] = float(v_fwd.mean())
    v["lateral_speed_mps"] = float(v_lat.mean())
    v["yaw_rate_deg_s"] = float(np.degrees(yaw_rate.mean()))
    v["speed_error_mps"] = v["forward_speed_mps"] - float(command[0])
    v["torso_pitch_deg"] = float(pitch.mean())
    v["torso_roll_deg"] = float(roll.mean())
    v["torso_pitch_std_deg"] = float(pitch.std())
    v["torso_roll_std_deg"] = float(roll.std())
    if T >= 3:  # sideways displacement along the heading, about its straight-line trend
        lateral = np.concatenate([[0.0], np.cumsum(0.5 * (v_lat[1:] + v_lat[:-1]) * np.diff(t))])
        lateral = lateral - np.polyval(np.polyfit(t, lateral, 1), t)
        v["lateral_sway_m"] = float(np.sqrt(np.mean(lateral ** 2)))
    else:
        v["lateral_sway_m"] = nan

    # ---------------------------------------------------------------- feet
    # heights above the terrain: under each sole and under the base (level ground at 0 when not recorded)
    terrain = np.zeros((T, 3)) if tr.ground_height is None else np.asarray(tr.ground_height, dtype=float)
    foot_z = np.asarray(tr.foot_pos[:, :, 2], dtype=float) - terrain[:, 1:3]
    sole_rest = float(np.median(foot_z[contact])) if contact.any() else float(foot_z.min())
    v["base_height_m"] = float(np.mean(tr.base_pos[:, 2] - terrain[:, 0] - sole_rest))
    between = np.asarray(tr.foot_pos[:, 0, :2] - tr.foot_pos[:, 1, :2], dtype=float)  # left minus right
    v["stance_width_m"] = float(np.mean(np.abs(to_heading_frame(between, heading)[:, 1])))
    v["double_support_fraction"] = float(np.mean(contact.all(axis=1)))
    v["flight_fraction"] = float(np.mean(~contact.any(axis=1)))
    foot_vel = np.asarray(tr.foot_vel, dtype=float)
    if not np.any(foot_vel) and T > 1:  # trajectories recorded without foot velocities
        foot_vel = np.gradient(np.asarray(tr.foot_pos, dtype=float), dt, axis=0)
    sole_speed = np.linalg.norm(foot_vel[..., :2], axis=-1)

    stance_knee: list[np.ndarray] = [np.array([]), np.array([])]
    touchdowns: list[list[int]] = [[], []]
    step_length: list[list[float]] = [[], []]
    clearance: list[list[float]] = [[], []]
    stance_time: list[list[float]] = [[], []]
    swing_knee: list[float] = []
    slip: list[np.ndarray] = []
    landing_speed: list[float] = []
    stance_phases, swings = [0, 0], [0, 0]
    for k in range(2):
        leg = runs(contact[:, k])
        knee = None if knees[k] is None else np.degrees(np.asarray(tr.joint_pos[:, knees[k]], dtype=float))
        if knee is not None:
            stance_knee[k] = knee[contact[:, k]]
        for n, (on, a, b) in enumerate(leg):
            interior = 0 < n < len(leg) - 1
            if on:
                stance_phases[k] += 1
                slip.append(sole_speed[a + 1:b - 1, k] if b - a > 2 else sole_speed[a:b, k])
                if interior:
                    stance_time[k].append((b - a) * dt)
                if n >= 2:  # follows a whole swing
                    touchdowns[k].append(a)
                    landing_speed.append(float(sole_speed[a, k]))
                    ahead = tr.foot_pos[a, k, :2] - tr.foot_pos[a, 1 - k, :2]
                    step_length[k].append(float(to_heading_frame(ahead, heading[a])[0]))
            elif interior:
                swings[k] += 1
                z = foot_z[:, k]
                rest = np.mean(np.concatenate([z[max(0, a - min_len):a], z[b:b + min_len]]))
                clearance[k].append(float(z[a:b].max() - rest))
                if knee is not None:
                    swing_knee.append(float(knee[a:b].max()))

    for k, side in enumerate(("left", "right")):
        v[f"knee_angle_stance_{side}_deg"] = float(stance_knee[k].mean()) if stance_knee[k].size else nan
    pooled = np.concatenate(stance_knee)
    v["knee_angle_stance_deg"] = float(pooled.mean()) if pooled.size else nan
    both = [k for k in knees if k is not None]
    v["knee_angle_mean_deg"] = float(np.degrees(np.asarray(tr.joint_pos[:, both], dtype=float).mean())) if both else nan
    v["knee_angle_swing_peak_deg"] = _mean(swing_knee)
    v["swing_clearance_m"] = _mean(clearance[0] + clearance[1])
    slip_all = np.concatenate(slip) if slip else np.array([])
    v["stance_slip_mps"] = float(slip_all.mean()) if slip_all.size else nan
    v["touchdown_speed_mps"] = _mean(landing_speed)
    v["step_length_m"] = _mean(step_length[0] + step_length[1])

    landed = sorted(touchdowns[0] + touchdowns[1])
    if len(landed) >= 2 and landed[-1] > landed[0]:
        v["step_frequency_hz"] = (len(landed) - 1) / float(t[landed[-1]] - t[landed[0]])
    else:  # none, one, or both feet landing together once: no interval to time
        v["step_frequency_hz"] = len(landed) / window_s
    if touchdowns[0] and touchdowns[1]:
        together = sum(1 for i in touchdowns[0] if any(abs(i - j) <= min_len for j in touchdowns[1]))
        v["synchronous_touchdowns"] = together / len(touchdowns[0])
    else:
        v["synchronous_touchdowns"] = 0.0

    if len(touchdowns[0]) >= 2 and len(touchdowns[1]) >= 2:
        sides = {"step_length": step_length, "stance_time": stance_time, "clearance": clearance,
                 "stance_knee": [list(stance_knee[0]), list(stance_knee[1])]}
        shares = []
        for name, (left, right) in sides.items():
            a, b = _mean(left), _mean(right)
            if math.isfinite(a) and math.isfinite(b):
                shares.append(abs(a - b) / max(abs(a) + abs(b), _ASYMMETRY_FLOORS[name]))
        v["gait_asymmetry"] = float(np.clip(np.mean(shares), 0.0, 1.0)) if shares else nan
    else:
        v["gait_asymmetry"] = nan
    v["fell"] = 1.0 if fall_time is not None else 0.0
    return GaitAnalysis(values=v, duration_s=duration, fall_time_s=fall_time, warmup_s=warm,
                        touchdowns=(len(touchdowns[0]), len(touchdowns[1])), stance_phases=tuple(stance_phases),
                        swings=tuple(swings), command=tuple(float(c) for c in command))


def gait_metrics(traj: Trajectory, **options) -> dict:
    """The `EVAL_KEYS` numbers of one trajectory (options as `analyse_gait`)."""
    return analyse_gait(traj, **options).eval_metrics()

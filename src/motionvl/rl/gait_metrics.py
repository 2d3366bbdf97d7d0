"""Gait numbers from a recorded `Trajectory` (kinematics and contacts only, no reward involved).

Used by `motionvl eval` and reusable by the kinematic motion critic. Conventions: angles in
degrees, torso pitch positive when leaning forward (nose down), knees positive when bent (as in
the robot config), clearance measured from the foot's own stance height around each swing.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from motionvl.sim.trajectory import Trajectory

GAIT_KEYS = ("knee_angle_stance_deg", "torso_pitch_deg", "step_frequency_hz", "swing_clearance_m",
             "stance_slip_mps", "touchdown_speed_mps", "double_support_fraction", "flight_fraction")


def truncate_at_fall(traj: Trajectory) -> Trajectory:
    """The trajectory up to and including the first sample flagged as fallen (all of it if none)."""
    fell = np.flatnonzero(np.asarray(traj.fell, dtype=bool))
    if len(fell) == 0:
        return traj
    n = int(fell[0]) + 1
    return dataclasses.replace(traj, **{f.name: getattr(traj, f.name)[:n] for f in dataclasses.fields(traj)
                                       if isinstance(getattr(traj, f.name), np.ndarray)})


def torso_pitch(quat: np.ndarray) -> np.ndarray:
    """Pitch (rad) of (T, 4) wxyz quaternions, positive = nose down / leaning forward."""
    w, x, y, z = np.moveaxis(np.asarray(quat, dtype=float), -1, 0)
    return np.arcsin(np.clip(2.0 * (w * y - z * x), -1.0, 1.0))


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) index ranges where the 1-D bool mask is True."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


def gait_metrics(traj: Trajectory, min_swing_s: float = 0.06) -> dict:
    """Gait numbers of one trajectory (NaN where undefined, e.g. no stance or no step).

    knee_angle_stance_deg: mean knee angle of each leg while its foot is in contact.
    torso_pitch_deg: mean pelvis pitch. step_frequency_hz: touchdowns (ends of swings lasting
    at least `min_swing_s`, either foot) per second, from the mean interval between them.
    swing_clearance_m: mean over swings of the peak sole height above the mean stance height of
    that foot just before and after the swing. stance_slip_mps: mean horizontal speed of feet in
    contact, leaving out the first and last sample of each contact (of contacts longer than two
    samples): those carry the swing's own speed into touchdown and out at lift-off.
    touchdown_speed_mps: mean horizontal speed at the first contact sample after each swing (how
    hard the foot is still moving when it lands). double_support_fraction / flight_fraction:
    share of samples with both / no feet in contact.
    """
    contact = np.asarray(traj.foot_contact, dtype=bool)
    T, dt = len(contact), float(traj.dt)
    nan = float("nan")
    out = dict.fromkeys(GAIT_KEYS, nan)
    if T == 0:
        return out
    names = [n.lower() for n in traj.joint_names]
    knees = [next((i for i, n in enumerate(names) if "knee" in n and side in n), None) for side in ("left", "right")]
    stance_knee = [traj.joint_pos[contact[:, f], k] for f, k in enumerate(knees) if k is not None]
    stance_knee = np.concatenate(stance_knee) if stance_knee else np.array([])
    out["knee_angle_stance_deg"] = float(np.degrees(stance_knee.mean())) if stance_knee.size else nan
    out["torso_pitch_deg"] = float(np.degrees(torso_pitch(traj.base_quat).mean()))

    min_len = max(1, int(round(min_swing_s / dt)))
    touchdowns, clearances = [], []
    for f in range(2):
        z = traj.foot_pos[:, f, 2]
        for start, stop in _runs(~contact[:, f]):
            if stop - start < min_len or start == 0:
                continue  # too short to be a step, or no stance seen before it
            before = z[max(0, start - min_len):start]
            after = z[stop:stop + min_len]
            ground = np.mean(np.concatenate([before, after]))
            clearances.append(float(z[start:stop].max() - ground))
            if stop < T:
                touchdowns.append(stop)
    touchdowns.sort()
    if len(touchdowns) >= 2 and touchdowns[-1] > touchdowns[0]:  # both feet landing together: no interval
        out["step_frequency_hz"] = float((len(touchdowns) - 1) / ((touchdowns[-1] - touchdowns[0]) * dt))
    elif touchdowns:
        out["step_frequency_hz"] = len(touchdowns) / (T * dt)
    else:
        out["step_frequency_hz"] = 0.0
    out["swing_clearance_m"] = float(np.mean(clearances)) if clearances else nan
    foot_vel = np.asarray(traj.foot_vel, dtype=float)
    if not np.any(foot_vel) and T > 1:  # trajectories recorded without foot velocities
        foot_vel = np.gradient(np.asarray(traj.foot_pos, dtype=float), dt, axis=0)
    speed = np.linalg.norm(foot_vel[..., :2], axis=-1)
    slips, landings = [], []
    for f in range(2):
        for start, stop in _runs(contact[:, f]):
            slips.append(speed[start + 1:stop - 1, f] if stop - start > 2 else speed[start:stop, f])
            if start > 0:
                landings.append(speed[start, f])
    slip = np.concatenate(slips) if slips else np.array([])
    out["stance_slip_mps"] = float(slip.mean()) if slip.size else nan
    out["touchdown_speed_mps"] = float(np.mean(landings)) if landings else nan
    out["double_support_fraction"] = float(np.mean(contact.all(axis=1)))
    out["flight_fraction"] = float(np.mean(~contact.any(axis=1)))
    return out

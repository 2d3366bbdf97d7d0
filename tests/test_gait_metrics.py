"""motionvl.gait.metrics on trajectories of known geometry: each number against its definition."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gait_fixtures import J, ROBOT, synthetic_gait, walking_trajectory
from motionvl.gait.metrics import EVAL_KEYS, analyse_gait, debounce, gait_metrics, knee_indices, truncate_at_fall


def test_eval_numbers_on_a_synthetic_gait():
    m = gait_metrics(synthetic_gait())
    assert set(m) == set(EVAL_KEYS)
    assert m["knee_angle_stance_deg"] == pytest.approx(np.degrees(0.5), abs=1e-6)
    assert m["torso_pitch_deg"] == pytest.approx(np.degrees(0.1), abs=1e-6)
    assert m["step_frequency_hz"] == pytest.approx(2.0, abs=1e-6)
    assert m["swing_clearance_m"] == pytest.approx(0.08, abs=1e-6)
    assert m["stance_slip_mps"] == pytest.approx(0.02, abs=1e-9)
    assert m["double_support_fraction"] == pytest.approx(0.2, abs=0.011)
    assert m["flight_fraction"] == 0.0
    assert m["touchdown_speed_mps"] == pytest.approx(0.02, abs=1e-9)
    # a foot still swinging at its first contact sample: a landing speed, not stance slip
    landing = synthetic_gait()
    first = landing.foot_contact & ~np.roll(landing.foot_contact, 1, axis=0)
    first[0] = False
    landing.foot_vel[first, 0] = 0.9
    m = gait_metrics(landing)
    assert m["stance_slip_mps"] == pytest.approx(0.02, abs=1e-9)
    assert m["touchdown_speed_mps"] == pytest.approx(0.9, abs=1e-9)
    hop = synthetic_gait(T=60)  # both feet land at one sample, once: a rate over the trajectory, not 1 / 0
    hop.foot_contact[:, 1], hop.foot_pos[:, 1] = hop.foot_contact[:, 0], hop.foot_pos[:, 0]
    assert gait_metrics(hop)["step_frequency_hz"] == pytest.approx(2 / 1.2)
    traj = synthetic_gait()
    traj.fell[50:] = True
    assert len(truncate_at_fall(traj).time) == 51


def test_stance_knee_flexion_is_the_mean_over_stance_samples_of_both_legs():
    """The definition the language loop's outcome rests on: which samples count, which angle, degrees."""
    traj = synthetic_gait(T=300)  # 6 s; stance 60 % of each 1 s cycle
    t = traj.time
    left, right = knee_indices(traj.joint_roles)
    ramp = 0.2 + 0.3 * (t % 1.0)  # the angle changes through stance: a mean, not a mid-stance sample
    traj.qpos[:, 7 + left] = np.where(traj.foot_contact[:, 0], ramp, 1.3)
    traj.qpos[:, 7 + right] = np.where(traj.foot_contact[:, 1], 0.1, 1.3)
    a = analyse_gait(traj, warmup_s=0.5)
    window = t >= 0.5 - 1e-9
    left_stance = traj.qpos[window & traj.foot_contact[:, 0], 7 + left]
    right_stance = traj.qpos[window & traj.foot_contact[:, 1], 7 + right]
    assert a.get("knee_angle_stance_left_deg") == pytest.approx(np.degrees(left_stance.mean()), abs=1e-9)
    assert a.get("knee_angle_stance_right_deg") == pytest.approx(np.degrees(0.1), abs=1e-9)
    pooled = np.degrees(np.concatenate([left_stance, right_stance]).mean())  # each stance sample counts once
    assert a.get("knee_angle_stance_deg") == pytest.approx(pooled, abs=1e-9)
    assert gait_metrics(traj)["knee_angle_stance_deg"] == pytest.approx(pooled, abs=1e-9)
    # swing samples never count, however bent; the peak swing angle is its own number
    assert a.get("knee_angle_swing_peak_deg") == pytest.approx(np.degrees(1.3), abs=1e-9)
    # the first warmup_s (the step off from the standing pose) is left out
    start = traj.foot_contact[:, 0] & (t < 0.5)
    traj.qpos[start, 7 + left] = 2.0
    assert analyse_gait(traj, warmup_s=0.5).get("knee_angle_stance_deg") == pytest.approx(pooled, abs=1e-9)
    assert analyse_gait(traj, warmup_s=0.0).get("knee_angle_stance_deg") > pooled + 1.0


def test_contact_blips_are_debounced_before_anything_is_measured():
    m = np.array([1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1], bool)
    assert debounce(m, 2).tolist() == [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    clean = synthetic_gait(T=300)
    blips = dataclasses.replace(clean, foot_contact=clean.foot_contact.copy())
    for i in range(40, 300, 25):  # one-sample lift-offs in stance and touches in swing
        blips.foot_contact[i, 0] = not blips.foot_contact[i, 0]
    assert gait_metrics(blips) == pytest.approx(gait_metrics(clean), abs=1e-9)
    assert analyse_gait(blips).touchdowns == analyse_gait(clean).touchdowns


def test_short_rollouts_keep_their_start():
    short = synthetic_gait(T=60)  # 1.2 s: too short to leave 0.5 s out and keep 1 s
    assert analyse_gait(short).warmup_s == 0.0
    assert analyse_gait(synthetic_gait(T=200)).warmup_s == 0.5


def test_synthetic_walk_gait_numbers():
    a = analyse_gait(walking_trajectory(speed=0.6, period=1.0))
    assert a.get("step_frequency_hz") == pytest.approx(2.0, rel=0.03)
    assert a.get("step_length_m") == pytest.approx(0.3, abs=0.02)
    assert a.get("swing_clearance_m") == pytest.approx(0.08, abs=0.005)
    assert a.get("stance_slip_mps") == pytest.approx(0.0, abs=0.01)
    assert a.get("forward_speed_mps") == pytest.approx(0.6, abs=0.01)
    assert a.get("knee_angle_stance_deg") == pytest.approx(math.degrees(0.1), abs=0.5)
    assert a.get("knee_angle_swing_peak_deg") == pytest.approx(math.degrees(1.0), abs=1.0)
    assert a.get("gait_asymmetry") < 0.05 and a.get("flight_fraction") == 0.0
    lopsided = analyse_gait(walking_trajectory(clearance=(0.10, 0.02)))
    assert lopsided.get("gait_asymmetry") > 0.1


def test_knees_as_declared_or_given():
    assert knee_indices(ROBOT.joint_roles) == (J["left_knee"], J["right_knee"])
    assert knee_indices((("left", "knee"), ("right", "knee"), (None, "waist_yaw"))) == (0, 1)
    assert knee_indices(((None, "waist_yaw"), (None, "neck"))) == (None, None)
    walk = walking_trajectory()
    renamed = dataclasses.replace(walk, joint_names=tuple(f"joint{i}" for i in range(len(walk.joint_names))))
    assert analyse_gait(renamed).get("knee_angle_stance_deg") == analyse_gait(walk).get("knee_angle_stance_deg"), \
        "the roles, not the names, say which joints are knees"
    unnamed = dataclasses.replace(walk, joint_roles=())
    assert analyse_gait(unnamed).get("knee_angle_stance_deg") is None
    given = analyse_gait(unnamed, knees=(J["left_knee"], J["right_knee"]))
    assert given.get("knee_angle_stance_deg") == pytest.approx(analyse_gait(walk).get("knee_angle_stance_deg"))

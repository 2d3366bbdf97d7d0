"""Reward-term library and reward specs: known answers on hand-made states, validation, files, env."""

from __future__ import annotations

import dataclasses
import json
import pickle

import numpy as np
import pytest
import yaml

from motionvl.envs.config import EnvConfig, RandomizationConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.rewards import terms as T
from motionvl.rewards.spec import (RewardSpec, RewardSpecError, TermSpec, load_reward_spec,
                                   reward_spec_from_text)
from motionvl.rewards.state import RewardState
from motionvl.robot import load_robot_config, package_root

ROBOT = load_robot_config()
SOLE_Z = 0.015  # sole-site height above the floor when a foot stands
DT = 0.02


def make_state(n: int = 4, **over) -> RewardState:
    """Upright robot in the default pose, both feet down 0.18 m apart, commanded 0.6 m/s, phase 0.25."""
    J = ROBOT.num_joints
    foot_pos = np.zeros((n, 2, 3))
    foot_pos[:, 0, 1], foot_pos[:, 1, 1], foot_pos[:, :, 2] = 0.09, -0.09, SOLE_Z
    base = dict(
        dt=DT, base_pos=np.tile([0.0, 0.0, 0.82], (n, 1)), base_quat=np.tile([1.0, 0, 0, 0], (n, 1)),
        base_lin_vel=np.tile([0.6, 0.0, 0.0], (n, 1)), base_ang_vel=np.zeros((n, 3)),
        base_vel_avg=np.tile([0.6, 0.0, 0.0], (n, 1)),
        projected_gravity=np.tile([0.0, 0.0, -1.0], (n, 1)), base_height=np.full(n, 0.82),
        joint_pos=np.tile(ROBOT.default_pose, (n, 1)), joint_vel=np.zeros((n, J)), joint_acc=np.zeros((n, J)),
        joint_torque=np.zeros((n, J)), default_joint_pos=ROBOT.default_pose, joint_pos_lower=ROBOT.lower,
        joint_pos_upper=ROBOT.upper, effort_limit=ROBOT.effort_limit, foot_pos=foot_pos,
        foot_vel=np.zeros((n, 2, 3)), foot_contact=np.ones((n, 2), bool), foot_contact_force=np.full((n, 2), 190.0),
        foot_air_time=np.zeros((n, 2)), first_contact=np.zeros((n, 2), bool), body_collision=np.zeros(n, bool),
        command=np.tile([0.6, 0.0, 0.0], (n, 1)), heading_error=np.zeros(n), gait_phase=np.full(n, 0.25), gait_period=0.7,
        action=np.zeros((n, J)), last_action=np.zeros((n, J)), terminated=np.zeros(n, bool),
        joint_names=ROBOT.joint_names, joint_roles=ROBOT.joint_roles)
    base.update(over)
    return RewardState(**base)


def term(name: str, state: RewardState, **params) -> np.ndarray:
    lib = T.REGISTRY[name]
    out = lib.fn(state, **{**lib.params, **params})
    assert out.shape == (state.num_envs,)
    return out


def joint(name: str) -> int:
    return ROBOT.joint_names.index(name)


# ----------------------------------------------------------------------------- library
def test_every_term_is_batched_finite_and_normalised():
    rng = np.random.default_rng(0)
    n, J = 64, ROBOT.num_joints
    contact = rng.random((n, 2)) < 0.6
    s = make_state(
        n, base_lin_vel=rng.normal(0, 1, (n, 3)), base_ang_vel=rng.normal(0, 2, (n, 3)),
        projected_gravity=np.tile([0.3, -0.2, -0.93], (n, 1)), base_height=rng.uniform(0.3, 1.0, n),
        joint_pos=rng.uniform(ROBOT.lower, ROBOT.upper, (n, J)), joint_vel=rng.normal(0, 20, (n, J)),
        joint_acc=rng.normal(0, 1e3, (n, J)), joint_torque=rng.uniform(-1, 1, (n, J)) * ROBOT.effort_limit,
        foot_pos=rng.uniform(-0.3, 0.3, (n, 2, 3)), foot_vel=rng.normal(0, 1, (n, 2, 3)), foot_contact=contact,
        foot_contact_force=rng.uniform(0, 2000, (n, 2)), foot_air_time=rng.uniform(0, 1, (n, 2)),
        first_contact=contact & (rng.random((n, 2)) < 0.3), body_collision=rng.random(n) < 0.2,
        command=rng.uniform(-1, 1, (n, 3)), gait_phase=rng.random(n), action=rng.uniform(-1, 1, (n, J)),
        last_action=rng.uniform(-1, 1, (n, J)), terminated=rng.random(n) < 0.2)
    assert len(T.REGISTRY) >= 25
    for name, lib in T.REGISTRY.items():
        out = term(name, s)
        assert np.all(np.isfinite(out)), name
        assert out.min() >= 0.0 and out.max() <= 1.0 + 1e-12, (name, out.min(), out.max())
        assert lib.sign in (1, -1) and lib.doc, name


def test_registry_signs_come_from_the_prefix():
    assert T.REGISTRY["tracking_lin_vel"].sign == 1 and T.REGISTRY["foot_slip"].sign == -1
    assert T.REGISTRY["default_pose"].params == {"joints": ("hip_yaw", "hip_roll"), "scale": 0.3}
    assert "+ contact_phase(" in T.describe_library()


def test_velocity_tracking():
    assert term("tracking_lin_vel", make_state()) == pytest.approx(1.0)
    slow = make_state(base_lin_vel=np.tile([0.1, 0.0, 0.0], (4, 1)))  # error 0.5 m/s, sigma 0.25
    assert term("tracking_lin_vel", slow) == pytest.approx(np.exp(-1.0))
    assert term("lin_vel_error", make_state()) == pytest.approx(0.0)
    assert term("lin_vel_error", make_state(base_lin_vel=np.tile([0.5, 0.0, 0.0], (4, 1)))) == pytest.approx(0.1)
    assert term("lin_vel_error", slow) == pytest.approx(0.5)
    assert term("lin_vel_error", make_state(base_lin_vel=np.tile([-0.6, 0.0, 0.0], (4, 1)))) == pytest.approx(1.0)
    assert T.REGISTRY["lin_vel_error"].sign == -1
    assert term("tracking_ang_vel", make_state()) == pytest.approx(1.0)
    assert term("yaw_rate_error", make_state()) == pytest.approx(0.0)
    assert term("yaw_rate_error", make_state(base_ang_vel=np.tile([0.0, 0.0, 0.3], (4, 1)))) == pytest.approx(0.3)
    assert term("yaw_rate_error", make_state(base_ang_vel=np.tile([0.0, 0.0, -2.0], (4, 1)))) == pytest.approx(1.0)
    assert T.REGISTRY["yaw_rate_error"].sign == -1
    turning = make_state(base_ang_vel=np.tile([0.0, 0.0, 0.5], (4, 1)))
    assert term("tracking_ang_vel", turning) == pytest.approx(np.exp(-1.0))
    # yaw_drift reads the stride-averaged yaw rate, not the sway of this step
    drifting = make_state(base_vel_avg=np.tile([0.6, 0.0, -0.1], (4, 1)), base_ang_vel=np.tile([0.0, 0.0, 0.4], (4, 1)))
    assert term("yaw_drift", drifting) == pytest.approx(0.2)
    assert term("yaw_drift", make_state(base_ang_vel=np.tile([0.0, 0.0, 0.4], (4, 1)))) == pytest.approx(0.0)
    assert term("yaw_drift", make_state(base_vel_avg=np.tile([0.6, 0.0, 0.9], (4, 1)))) == pytest.approx(1.0)
    assert T.REGISTRY["yaw_drift"].sign == -1
    # lin_vel_drift reads the stride-averaged velocity: a step's sway is not a shortfall, a slow stride is
    swaying = make_state(base_lin_vel=np.tile([0.9, 0.3, 0.0], (4, 1)))
    assert np.all(term("lin_vel_error", swaying) > 0.4) and term("lin_vel_drift", swaying) == pytest.approx(0.0)
    short = make_state(base_vel_avg=np.tile([0.6, 0.15, 0.0], (4, 1)))  # commanded 0.6 forward: 0.15 m/s sideways
    assert term("lin_vel_drift", short) == pytest.approx(0.3)
    assert term("lin_vel_drift", make_state(base_vel_avg=np.tile([-0.5, 0.0, 0.0], (4, 1)))) == pytest.approx(1.0)
    assert T.REGISTRY["lin_vel_drift"].sign == -1

    # the heading term grows with the course lost, either way round
    assert term("tracking_heading", make_state()) == pytest.approx(1.0)
    off = term("tracking_heading", make_state(heading_error=np.array([0.1, -0.1, 0.3, -3.0])))
    assert off[:3] == pytest.approx(np.exp(-np.array([0.01, 0.01, 0.09]) / 0.1))
    assert off[3] < 1e-30
    assert T.REGISTRY["tracking_heading"].sign == 1


def test_base_terms():
    s = make_state()
    for name in ("orientation", "base_height", "lin_vel_z", "ang_vel_xy"):
        assert term(name, s) == pytest.approx(0.0), name
    tilt = 0.2
    tilted = make_state(projected_gravity=np.tile([np.sin(tilt), 0.0, -np.cos(tilt)], (4, 1)))
    assert term("orientation", tilted) == pytest.approx(np.sin(tilt) ** 2 / np.sin(0.4) ** 2)
    assert term("orientation", make_state(projected_gravity=np.tile([0.0, 1.0, 0.0], (4, 1)))) == pytest.approx(1.0)
    assert term("base_height", make_state(base_height=np.full(4, 0.77))) == pytest.approx(0.25)
    assert term("base_height", make_state(base_height=np.full(4, 0.5))) == pytest.approx(1.0)
    assert term("lin_vel_z", make_state(base_lin_vel=np.tile([0.6, 0, 0.25], (4, 1)))) == pytest.approx(0.25)
    assert term("ang_vel_xy", make_state(base_ang_vel=np.tile([2.0, 0, 0], (4, 1)))) == pytest.approx(0.5)


def test_contact_phase_rewards_the_clock_and_punishes_swapped_feet():
    left_stance = np.tile([True, False], (4, 1))
    assert term("contact_phase", make_state(foot_contact=left_stance)) == pytest.approx(1.0)
    assert term("contact_phase", make_state(foot_contact=~left_stance)) == pytest.approx(0.0)
    assert term("contact_phase", make_state(gait_phase=np.full(4, 0.75), foot_contact=~left_stance)) == pytest.approx(1.0)
    both = np.ones((4, 2), bool)
    assert term("contact_phase", make_state(foot_contact=both)) == pytest.approx(0.5)  # mid-swing foot still down
    assert term("contact_phase", make_state(gait_phase=np.full(4, 0.02), foot_contact=both)) == pytest.approx(1.0)
    assert term("contact_phase", make_state(gait_phase=np.full(4, 0.02), foot_contact=both), double_support=0.0) \
        == pytest.approx(0.5)
    standing = make_state(command=np.zeros((4, 3)), foot_contact=both)
    assert term("contact_phase", standing) == pytest.approx(1.0)
    assert term("contact_phase", dataclasses.replace(standing, foot_contact=left_stance)) == pytest.approx(0.5)


def test_feet_clearance_rewards_lifting_the_clock_swing_foot():
    # phase 0.25: the clock has the right foot in swing
    lifted = make_state().foot_pos.copy()
    lifted[:, 1, 2] = SOLE_Z + 0.06
    assert term("feet_clearance", make_state(foot_pos=lifted)) == pytest.approx(1.0)
    assert term("feet_clearance", make_state()) == pytest.approx(0.0)  # shuffling: swing foot on the ground
    lifted[:, 1, 2] = SOLE_Z + 0.03
    assert term("feet_clearance", make_state(foot_pos=lifted)) == pytest.approx(0.5)
    lifted[:, 1, 2] = SOLE_Z + 0.12
    assert term("feet_clearance", make_state(foot_pos=lifted)) == pytest.approx(1.0)  # plateau up to 2x height
    lifted[:, 1, 2] = SOLE_Z + 0.15
    assert term("feet_clearance", make_state(foot_pos=lifted)) == pytest.approx(0.5)  # high marching loses it
    lifted[:, 1, 2] = SOLE_Z + 0.3
    assert term("feet_clearance", make_state(foot_pos=lifted)) == pytest.approx(0.0)
    wrong_foot = make_state().foot_pos.copy()
    wrong_foot[:, 0, 2] = SOLE_Z + 0.06
    assert term("feet_clearance", make_state(foot_pos=wrong_foot)) == pytest.approx(0.0)
    assert term("feet_clearance", make_state(command=np.zeros((4, 3)))) == pytest.approx(1.0)  # standing: feet down
    assert term("feet_clearance", make_state(command=np.zeros((4, 3)), foot_pos=wrong_foot)) == pytest.approx(0.5)


def test_feet_air_time_on_touchdown():
    touch = np.tile([False, True], (4, 1))
    target = 0.4 * 0.7
    full = make_state(first_contact=touch, foot_air_time=np.full((4, 2), target))
    assert term("feet_air_time", full) == pytest.approx(1.0)
    half = make_state(first_contact=touch, foot_air_time=np.full((4, 2), target / 2))
    assert term("feet_air_time", half) == pytest.approx(0.25)
    assert term("feet_air_time", make_state(foot_air_time=np.full((4, 2), target))) == pytest.approx(0.0)
    assert term("feet_air_time", dataclasses.replace(full, command=np.zeros((4, 3)))) == pytest.approx(0.0)
    assert term("feet_air_time", half, target_air_time=target / 2) == pytest.approx(1.0)


def test_foot_slip_and_contact_forces():
    vel = np.zeros((4, 2, 3))
    vel[:, 0, 0] = 0.1   # stance foot sliding at 0.1 m/s
    vel[:, 1, 0] = 2.0   # swing foot moving fast: not slip
    s = make_state(foot_vel=vel, foot_contact=np.tile([True, False], (4, 1)))
    assert term("foot_slip", s) == pytest.approx(0.5 * 0.1 / 0.5)
    assert term("foot_slip", make_state()) == pytest.approx(0.0)
    assert term("feet_contact_forces", make_state()) == pytest.approx(0.0)
    hard = make_state(foot_contact_force=np.tile([750.0, 100.0], (4, 1)))
    assert term("feet_contact_forces", hard) == pytest.approx(0.5 * 0.5)


def test_touchdown_speed_counts_only_the_landing_sample():
    vel = np.zeros((4, 2, 3))
    vel[:, 0, :2] = [0.6, 0.8]   # left foot lands at 1.0 m/s horizontal
    vel[:, 1, 0] = 0.3           # right foot slides in stance: foot_slip's business, not this term's
    landing = np.tile([True, False], (4, 1))
    s = make_state(foot_vel=vel, first_contact=landing)
    assert term("touchdown_speed", s) == pytest.approx(1.0 / 1.5)
    assert term("touchdown_speed", make_state(foot_vel=vel)) == pytest.approx(0.0)
    assert term("touchdown_speed", s, speed_scale=0.5) == pytest.approx(1.0)  # clipped


def test_feet_and_knee_distance():
    assert term("feet_distance", make_state()) == pytest.approx(0.0)
    narrow = make_state().foot_pos.copy()
    narrow[:, :, 1] = [0.02, -0.02]
    assert term("feet_distance", make_state(foot_pos=narrow)) == pytest.approx(0.8)
    # base turned 90 deg left: lateral is world -x, feet placed accordingly are fine
    yaw90 = np.tile([np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)], (4, 1))
    turned = np.zeros((4, 2, 3))
    turned[:, 0, 0], turned[:, 1, 0] = -0.09, 0.09
    assert term("feet_distance", make_state(base_quat=yaw90, foot_pos=turned)) == pytest.approx(0.0)
    assert term("feet_distance", make_state(foot_pos=turned)) == pytest.approx(1.0)
    assert term("knee_distance", make_state()) == pytest.approx(0.0)
    q = make_state().joint_pos.copy()
    q[:, joint("left_hip_roll")], q[:, joint("right_hip_roll")] = -0.2, 0.2  # knees inward
    spacing = 0.18 - 2 * 0.34 * np.sin(0.2)
    assert term("knee_distance", make_state(joint_pos=q)) == pytest.approx((0.12 - spacing) / 0.1)


def test_posture_terms():
    q = make_state().joint_pos.copy()
    q[:, [joint("left_hip_yaw"), joint("right_hip_yaw")]] = 0.3
    assert term("default_pose", make_state()) == pytest.approx(0.0)
    assert term("default_pose", make_state(joint_pos=q)) == pytest.approx(0.5)  # 2 of 4 hip joints at scale
    assert term("default_pose", make_state(joint_pos=q), joints=["all"]) == pytest.approx(2 / 12)
    assert term("toe_direction", make_state()) == pytest.approx(1.0)
    q[:, joint("right_hip_yaw")] = -0.3
    assert term("toe_direction", make_state(joint_pos=q), toe_out=0.3) == pytest.approx(1.0)
    assert term("toe_direction", make_state(joint_pos=q)) == pytest.approx(np.exp(-0.09 / 0.15 ** 2))
    with pytest.raises(ValueError, match="no joint"):
        term("default_pose", make_state(), joints=["elbow"])


def test_knee_extension_and_ankle_stance():
    q = make_state().joint_pos.copy()
    kl, kr = joint("left_knee"), joint("right_knee")
    assert term("knee_extension", make_state()) == pytest.approx(np.exp(-1.0))  # default knees 0.4 rad
    q[:, [kl, kr]] = 0.1
    assert term("knee_extension", make_state(joint_pos=q)) == pytest.approx(1.0)
    q[:, kr] = 1.2  # bent swing knee does not count
    left_only = np.tile([True, False], (4, 1))
    assert term("knee_extension", make_state(joint_pos=q, foot_contact=left_only)) == pytest.approx(1.0)
    assert term("knee_extension", make_state(joint_pos=q, foot_contact=np.zeros((4, 2), bool))) == pytest.approx(0.0)
    assert term("ankle_stance", make_state()) == pytest.approx(1.0)  # default pose has flat feet
    q = make_state().joint_pos.copy()
    q[:, joint("left_ankle_pitch")] += 0.15
    assert term("ankle_stance", make_state(joint_pos=q)) == pytest.approx((1 + np.exp(-1.0)) / 2)
    # pelvis pitched forward with a matching ankle: foot still flat
    g = np.tile([np.sin(0.15), 0, -np.cos(0.15)], (4, 1))
    assert term("ankle_stance", make_state(joint_pos=q, projected_gravity=g, foot_contact=left_only)) \
        == pytest.approx(np.exp(-(0.3 ** 2) / 0.15 ** 2))
    q[:, joint("left_ankle_pitch")] -= 0.3
    assert term("ankle_stance", make_state(joint_pos=q, projected_gravity=g, foot_contact=left_only)) == pytest.approx(1.0)


def _fold_legs(q: np.ndarray, left: float, right: float) -> np.ndarray:
    """Joint positions with each leg folded by `left` / `right` rad as the reference gait folds it."""
    q = q.copy()
    for side, a in (("left", left), ("right", right)):
        q[:, joint(f"{side}_hip_pitch")] -= a
        q[:, joint(f"{side}_knee")] += 2 * a
        q[:, joint(f"{side}_ankle_pitch")] -= a
    return q


def test_reference_gait_follows_the_clock_swing_leg():
    q0 = make_state().joint_pos
    # phase 0.25: the right foot is mid-swing, the left in stance
    assert term("reference_gait", make_state(joint_pos=_fold_legs(q0, 0.0, 0.35))) == pytest.approx(1.0)
    standing_still = term("reference_gait", make_state())
    # the right hip, knee and ankle are off by 0.35 / 0.7 / 0.35 rad, the left leg by nothing: 6 joints in the mean
    assert standing_still == pytest.approx(np.exp(-((0.35 ** 2 + 0.7 ** 2 + 0.35 ** 2) / 6) / 0.3 ** 2))
    assert (term("reference_gait", make_state(joint_pos=_fold_legs(q0, 0.35, 0.0))) < standing_still).all()  # wrong leg
    # half a cycle later the roles swap; at lift-off the reference is the default pose
    assert term("reference_gait", make_state(joint_pos=_fold_legs(q0, 0.35, 0.0), gait_phase=np.full(4, 0.75))) \
        == pytest.approx(1.0)
    assert term("reference_gait", make_state(gait_phase=np.full(4, 0.5))) == pytest.approx(1.0)
    # no command: both legs at the default pose
    assert term("reference_gait", make_state(command=np.zeros((4, 3)))) == pytest.approx(1.0)
    assert (term("reference_gait", make_state(joint_pos=_fold_legs(q0, 0.0, 0.1))) > standing_still).all()


def test_reference_gait_fold_lifts_a_level_sole_under_the_hip():
    """The docstring's geometry on the compiled model: 0.35 rad lifts the sole ~9 cm, level, not forward."""
    import mujoco

    from motionvl.sim.model import SOLE_SITES, build_model
    model = build_model(ROBOT)
    data = mujoco.MjData(model)
    site = model.site(SOLE_SITES[1]).id

    def sole(fold: float):
        mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
        q = _fold_legs(ROBOT.default_pose[None], 0.0, fold)[0]
        data.qpos[[model.jnt_qposadr[model.joint(n).id] for n in ROBOT.joint_names]] = q
        mujoco.mj_kinematics(model, data)
        return data.site_xpos[site].copy(), data.site_xmat[site].reshape(3, 3).copy()

    (p0, r0), (p1, r1) = sole(0.0), sole(0.35)
    assert p1[2] - p0[2] == pytest.approx(0.087, abs=0.01)
    assert abs(p1[0] - p0[0]) < 0.01
    np.testing.assert_allclose(r1, r0, atol=1e-6)


def test_smoothness_and_limit_terms():
    J = ROBOT.num_joints
    s = make_state()
    for name in ("action_rate", "torques", "joint_vel", "joint_acc", "joint_limits", "collision", "termination"):
        assert term(name, s) == pytest.approx(0.0), name
    assert term("action_rate", make_state(action=np.full((4, J), 0.25))) == pytest.approx(0.25)
    assert term("torques", make_state(joint_torque=np.tile(ROBOT.effort_limit / 2, (4, 1)))) == pytest.approx(0.25)
    assert term("joint_vel", make_state(joint_vel=np.full((4, J), 5.0))) == pytest.approx(0.25)
    assert term("joint_acc", make_state(joint_acc=np.full((4, J), 600.0))) == pytest.approx(1.0)
    q = make_state().joint_pos.copy()
    q[:, joint("left_knee")] = ROBOT.upper[joint("left_knee")]
    assert term("joint_limits", make_state(joint_pos=q)) == pytest.approx(1 / J)
    fallen = make_state(terminated=np.array([True, False, False, False]), body_collision=np.array([True, 0, 0, 0], bool))
    np.testing.assert_allclose(term("termination", fallen), [1, 0, 0, 0])
    np.testing.assert_allclose(term("collision", fallen), [1, 0, 0, 0])
    np.testing.assert_allclose(term("alive", fallen), [0, 1, 1, 1])


# ----------------------------------------------------------------------------- specs
def test_reference_and_variant_specs_load():
    ref = load_reward_spec(None)
    assert ref.name == "rl_base_walk" and all(0 <= w <= 1 for w in ref.weights.values())
    for key in ("tracking_lin_vel", "contact_phase", "feet_clearance", "foot_slip", "termination"):
        assert ref.weights[key] > 0, key
    assert ref.weights["tracking_lin_vel"] == max(ref.weights.values())
    knees = load_reward_spec("config/rewards/straight_knees.yaml")
    assert knees.weights["knee_extension"] > 0 and "knee_extension" not in ref.weights
    ref.check(make_state())
    knees.check(make_state())


def test_sign_convention_and_contributions():
    spec = RewardSpec([TermSpec("alive", 0.5), TermSpec("termination", 1.0), TermSpec("foot_slip", 0.0)], scale=2.0)
    s = make_state(terminated=np.array([True, False, False, False]))
    total, contrib = spec(s)
    np.testing.assert_allclose(contrib["alive"], 2.0 * DT * 0.5 * np.array([0, 1, 1, 1]))
    np.testing.assert_allclose(contrib["termination"], -2.0 * DT * np.array([1, 0, 0, 0]))
    np.testing.assert_allclose(contrib["foot_slip"], 0.0)  # weight 0 still reported
    np.testing.assert_allclose(total, sum(contrib.values()))
    assert spec.sign("termination") == -1 and spec.sign("alive") == 1
    clipped = RewardSpec(spec.terms, scale=2.0, only_positive=True)
    assert clipped(s)[0].min() == 0.0


def test_params_override_defaults():
    vel = np.zeros((4, 2, 3))
    vel[:, :, 0] = 0.1
    s = make_state(foot_vel=vel)
    loose = reward_spec_from_text("terms: {foot_slip: {weight: 1.0, params: {speed_scale: 1.0}}}")
    assert -loose(s)[0] / DT == pytest.approx(0.1)
    default = reward_spec_from_text("terms: {foot_slip: 1.0}")
    assert -default(s)[0] / DT == pytest.approx(0.2)


@pytest.mark.parametrize("text, message", [
    ("terms: {tracking_lin_vle: 1.0}", "did you mean 'tracking_lin_vel'"),
    ("terms: {alive: 1.5}", "outside [0, 1]"),
    ("terms: {alive: -0.1}", "outside [0, 1]"),
    ("terms: {alive: high}", "expected a weight"),
    ("terms: {alive: {weight: true}}", "must be a number"),
    ("terms: {alive: {weight: 0.2, params: {sigma: 1}}}", "unknown param 'sigma'"),
    ("terms: {foot_slip: {weight: 0.2, params: {sped_scale: 1}}}", "did you mean 'speed_scale'"),
    ("terms: {foot_slip: {weight: 0.2, params: {speed_scale: -1}}}", "must be > 0"),
    ("terms: {foot_slip: {weight: 0.2, params: {speed_scale: fast}}}", "finite number"),
    ("terms: {default_pose: {weight: 0.2, params: {joints: knee}}}", "list of strings"),
    ("terms: {alive: {wieght: 0.2}}", "unknown keys"),
    ("terms: {alive: {weight: 0.2, source: llm}}", "source must be one of"),
    ("terms: {my_term: {weight: 0.2, source: generated}}", "has no code"),
    ("terms: {alive: 0.2, survival: 0.2}", "appears twice"),
    ("terms: {}", "no terms"),
    ("terms: [alive]", "'terms' must be a mapping"),
    ("weights: {alive: 1}", "unknown keys ['weights']"),
    ("scale: 0\nterms: {alive: 1}", "scale 0 outside [0.1, 10]"),
    ("scale: 1000\nterms: {alive: 1}", "scale 1000 outside [0.1, 10]"),
    ("terms: {alive: [1, 2", "not valid YAML"),
    ("- alive", "expected a mapping"),
])
def test_validation_errors_are_clear(text, message):
    with pytest.raises(RewardSpecError) as err:
        reward_spec_from_text(text, where="candidate 3")
    assert message in str(err.value) and "candidate 3" in str(err.value)


def test_validation_lists_every_problem():
    with pytest.raises(RewardSpecError) as err:
        reward_spec_from_text("terms: {alive: 2, foot_slp: 0.1, orientation: {weight: 0.1, params: {tilt: 1}}}")
    msg = str(err.value)
    assert "alive" in msg and "foot_slp" in msg and "'tilt'" in msg


def test_aliases_resolve_to_library_names():
    spec = reward_spec_from_text("terms: {feet_contact: 0.5, survival: 0.1}")
    assert dict(spec.weights) == {"contact_phase": 0.5, "alive": 0.1}


def test_check_reports_runtime_failures_by_term():
    spec = reward_spec_from_text("terms: {default_pose: {weight: 0.2, params: {joints: [elbow]}}}")
    with pytest.raises(RewardSpecError, match="default_pose.*no joint"):
        spec.check(make_state())


def test_round_trip_yaml_and_json(tmp_path):
    ref = load_reward_spec()
    for suffix in (".yaml", ".json"):
        path = ref.save(tmp_path / f"spec{suffix}")
        again = load_reward_spec(path)
        assert again == ref and again.to_dict() == ref.to_dict()
        s = make_state()
        np.testing.assert_allclose(again(s)[0], ref(s)[0])
    written = yaml.safe_load((package_root() / "config/rewards/reference.yaml").read_text())
    assert json.loads((tmp_path / "spec.json").read_text())["terms"]["feet_clearance"]["params"] == \
        written["terms"]["feet_clearance"]["params"], "parameters survive the round trip as written"
    assert pickle.loads(pickle.dumps(ref)) == ref
    bad = tmp_path / "bad.yaml"
    bad.write_text("terms: {alive: [")
    with pytest.raises(RewardSpecError, match="not valid YAML"):
        load_reward_spec(bad)
    with pytest.raises(RewardSpecError, match="not found"):
        load_reward_spec(tmp_path / "missing.yaml")


def test_with_weights_returns_a_new_validated_spec():
    ref = load_reward_spec()
    original = ref.weights["foot_slip"]
    mutated = ref.with_weights({"foot_slip": 0.8, "alive": 0.0})
    assert original != 0.8, "the test needs a weight that changes"
    assert mutated.weights["foot_slip"] == 0.8 and ref.weights["foot_slip"] == original
    assert list(mutated.weights) == list(ref.weights)
    assert mutated.term("feet_clearance").params == ref.term("feet_clearance").params, "params are kept"
    with pytest.raises(RewardSpecError, match="did you mean 'foot_slip'"):
        ref.with_weights({"foot_slipp": 0.1})
    with pytest.raises(RewardSpecError, match="outside"):
        ref.with_weights({"alive": 3.0})


def test_describe_for_prompts():
    ref = load_reward_spec()
    text = ref.describe()
    assert "+ tracking_lin_vel" in text and "- foot_slip" in text and "w=1.00" in text
    assert f"height={ref.term('feet_clearance').params['height']:g}" in text and "scale x dt" not in text and "x dt x sum" in text


# ----------------------------------------------------------------------------- environment
def _env(spec, n=8):
    off = RandomizationConfig(friction=False, gain_scale=False, joint_friction=False, push=False, latency=False)
    return LocomotionEnv(ROBOT, EnvConfig(num_envs=n, num_threads=1, randomization=off, seed=1), reward_fn=spec)


def test_reference_spec_in_the_environment():
    spec = load_reward_spec()
    env = _env(spec)
    rng = np.random.default_rng(0)
    returns = np.zeros(env.num_envs)
    for _ in range(20):
        _, reward, term_, trunc, _ = env.step(rng.uniform(-0.3, 0.3, (env.num_envs, env.num_joints)))
        assert reward.shape == (env.num_envs,) and np.all(np.isfinite(reward))
        assert not (term_ | trunc).any()  # 0.4 s of small random actions: no falls, sums not reset
        returns += reward
    assert list(env.episode_sums) == list(spec.weights)
    for name, s in env.episode_sums.items():
        assert np.all(np.isfinite(s)) and np.all(np.sign(s) * spec.sign(name) >= 0), name
    np.testing.assert_allclose(sum(env.episode_sums.values()), returns)
    assert env.episode_sums["alive"] == pytest.approx(np.full(8, 20 * env.dt * 0.2))


GENERATED = '''
def _reward_upright_bonus(state):
    return np.exp(-4.0 * np.sum(state.projected_gravity[:, :2] ** 2, axis=1))

def _cost_pelvis_low(state):
    return np.clip(0.80 - state.base_height, 0.0, 1.0)
'''


def test_generated_terms_end_to_end():
    pytest.importorskip("motionvl.rewards.sandbox")
    text = ("name: with_code\nterms:\n  tracking_lin_vel: 1.0\n  upright_bonus: {weight: 0.4, source: generated}\n"
            "  pelvis_low: {weight: 0.5, source: generated}\ncode: |\n" +
            "".join(f"  {line}\n" for line in GENERATED.strip("\n").splitlines()))
    spec = reward_spec_from_text(text)
    assert spec.sign("upright_bonus") == 1 and spec.sign("pelvis_low") == -1
    low = make_state(base_height=np.full(4, 0.7))
    total, contrib = spec(low)
    np.testing.assert_allclose(contrib["upright_bonus"], DT * 0.4)
    np.testing.assert_allclose(contrib["pelvis_low"], -DT * 0.5 * 0.1)
    assert RewardSpec.from_dict(spec.to_dict()) == spec
    assert "generated" in spec.describe()
    env = _env(spec, n=4)
    for _ in range(5):
        _, reward, *_ = env.step(np.zeros((4, env.num_joints)))
        assert np.all(np.isfinite(reward))
    assert set(env.episode_sums) == {"tracking_lin_vel", "upright_bonus", "pelvis_low"}
    with pytest.raises(RewardSpecError, match="not defined by the generated code"):
        reward_spec_from_text(text.replace("pelvis_low: {", "pelvis_lo: {"))
    with pytest.raises(RewardSpecError, match="generated code rejected"):
        reward_spec_from_text("terms: {x: {weight: 0.1, source: generated}}\ncode: 'import os'\n")

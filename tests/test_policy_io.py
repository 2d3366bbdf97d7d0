"""motionvl.policy_io against goldens recorded from the environment before the module existed
(tests/data/policy_io_golden.py), the contract's metadata round trip and its refusals."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from motionvl.envs.config import CommandConfig, EnvConfig, RandomizationConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.policy_io import (ActionLaw, ContractError, ObservationBuilder, PolicyContract, PolicyIO,
                                gait_feedforward_offsets)
from motionvl.robot import load_robot_config

GOLDEN = Path(__file__).parent / "data" / "policy_io_golden.npz"


@pytest.fixture(scope="module")
def robot():
    return load_robot_config()


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as f:
        return {k: f[k] for k in f.files}


def recorded_env_config() -> EnvConfig:
    """The observation and action settings of config/training.yaml when the goldens were recorded."""
    return EnvConfig(obs_history=5, heading_observation=True, gait_period_s=0.7, gait_feedforward=0.2,
                     gait_stride_feedforward=0.1, gait_stand_below=-1.0)


@pytest.fixture(scope="module")
def contract(robot):
    return PolicyContract.for_training(robot, recorded_env_config())


def test_training_contract_has_the_recorded_layout(contract, golden):
    """The layout the contract writes is the one the exporter wrote before (names, sizes, scales, clip)."""
    recorded = json.loads(str(golden["metadata_json"]))
    written = contract.to_metadata()
    assert written["obs_layout"] == recorded["obs_layout"]
    for key in ("joint_names", "default_pose", "kp", "kd", "effort_limit", "action_scale", "action_mode", "control_dt",
                "num_obs", "obs_history", "heading_observation", "gait_period", "gait_feedforward",
                "gait_stride_feedforward", "gait_stand_below", "action_clip"):
        assert written[key] == recorded[key], key


def test_observations_match_the_recorded_environment(contract, golden):
    """Every observation the environment built (history, clock, clipped heading error, resets
    between builds) from the state it held, bit for bit."""
    builds, num_envs = golden["obs_obs"].shape[:2]
    builder = ObservationBuilder(contract, num_envs)
    assert builder.num_obs == golden["obs_obs"].shape[2]
    assert np.abs(golden["obs_heading_error"]).max() > 1.0, "the goldens exercise the heading clip"
    for k in range(builds):
        reset = np.flatnonzero(golden["obs_reset"][k])
        if reset.size:
            builder.reset(reset)
        obs = builder.build(**{name: golden[f"obs_{name}"][k] for name in (
            "base_ang_vel", "projected_gravity", "command", "joint_pos", "joint_vel", "last_action", "gait_phase",
            "heading_error")})
        np.testing.assert_array_equal(obs, golden["obs_obs"][k], err_msg=f"build {k}")


def test_joint_targets_match_the_recorded_environment(contract, golden):
    """Targets the environment sent to the PD loop (clip of the action, feed-forward with its stride,
    joint-limit clip) from the action, joint positions, command and clock it used. That environment clipped
    targets to the hard limits (target_limit_factor 1); the robot's factor clips the same targets tighter."""
    assert (np.abs(golden["step_action"]) > 1.0).any(), "the goldens exercise the action clip"
    lower, upper = contract.target_limits()
    assert contract.target_limit_factor < 1 and np.all(lower > contract.joint_pos_lower)
    as_recorded, law = ActionLaw(dataclasses.replace(contract, target_limit_factor=1.0)), ActionLaw(contract)
    tighter = 0
    for k in range(len(golden["step_action"])):
        inputs = dict(joint_pos=golden["step_joint_pos"][k], command=golden["step_command"][k],
                      gait_phase=golden["step_gait_phase"][k])
        target = as_recorded.targets(golden["step_action"][k], **inputs)
        np.testing.assert_array_equal(target, golden["step_target"][k], err_msg=f"step {k}")
        clipped = law.targets(golden["step_action"][k], **inputs)
        np.testing.assert_array_equal(clipped, np.clip(golden["step_target"][k], lower, upper), err_msg=f"step {k}")
        tighter += int(np.count_nonzero(clipped != target))
    assert tighter, "the goldens reach beyond the target limits"


def test_feedforward_offsets_match_the_recorded_reference(golden):
    """The resting rule (standing commands) and the stride sweep, as the reward library computed them."""
    amplitude, stand_below, stride = golden["ff_params"]
    offsets = gait_feedforward_offsets(golden["ff_command"], golden["ff_gait_phase"], amplitude, stand_below, stride)
    np.testing.assert_array_equal(offsets, golden["ff_offsets"])
    resting = ~np.any(np.abs(golden["ff_command"]) > stand_below, axis=1)
    assert resting.any() and np.all(offsets[resting] == 0.0)


def test_a_contract_without_target_limit_factor_clips_at_the_hard_limits(contract):
    """Policies exported before the factor was recorded trained with targets clipped to the hard limits."""
    meta = json.loads(json.dumps(contract.to_metadata()))
    assert meta.pop("target_limit_factor") == contract.target_limit_factor < 1
    old = PolicyContract.from_metadata(meta)
    assert old.target_limit_factor == 1.0
    np.testing.assert_array_equal(ActionLaw(old).lower, contract.joint_pos_lower)
    for bad in (0, 1.2, "0.9", True):
        with pytest.raises(ContractError, match="target_limit_factor: expected a number in"):
            PolicyContract.from_metadata({**meta, "target_limit_factor": bad})


def test_contract_round_trip(contract, robot):
    meta = json.loads(json.dumps(contract.to_metadata()))  # as the ONNX metadata props carry it
    assert PolicyContract.from_metadata(meta) == contract
    assert meta["velocity_limit"] == robot.velocity_limit.tolist()
    assert meta["joint_pos_lower"] == robot.lower.tolist() and meta["joint_pos_upper"] == robot.upper.tolist()
    assert meta["command_ranges"] == {"vx": [-0.5, 1.0], "vy": [-0.3, 0.3], "yaw_rate": [-1.0, 1.0]}
    plain = PolicyContract.for_training(robot, EnvConfig(obs_history=0, heading_observation=False, gait_feedforward=0.0,
                                                         gait_stride_feedforward=0.0))
    assert PolicyContract.from_metadata(json.loads(json.dumps(plain.to_metadata()))) == plain
    assert plain.num_obs == 3 + 3 + 3 + 3 * robot.num_joints + 2 and plain.feedforward_joints == ()


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(format="motionvl-policy/1"), "format"),
    (lambda m: m.pop("velocity_limit"), "lacks \\['velocity_limit'\\]"),
    (lambda m: m["obs_layout"].insert(0, {"name": "base_lin_vel", "size": 3, "scale": 2.0}), "'base_lin_vel' cannot"),
    (lambda m: m["obs_layout"][0].update(size=4), "'base_ang_vel' has size 4"),
    (lambda m: m["obs_layout"][-1]["frame"].append({"name": "command", "size": 3, "scale": 1.0}),
     "history frame: block 'command' cannot"),
    (lambda m: m["obs_layout"][-1].update(order="oldest first"), "order"),
    (lambda m: m.update(kp=[1.0]), "kp: expected 12 numbers"),
    (lambda m: m.update(gait_feedforward_joints=[["left_hip_pitch", "left_knee", "left_toe"],
                                                 ["right_hip_pitch", "right_knee", "right_ankle_pitch"]]),
     "left_toe"),
    (lambda m: m.update(num_obs=100), "num_obs 100"),
])
def test_contract_refuses_what_it_cannot_build(contract, change, message):
    meta = json.loads(json.dumps(contract.to_metadata()))
    change(meta)
    with pytest.raises(ContractError, match=message):
        PolicyContract.from_metadata(meta)


def test_every_problem_is_named_at_once(contract):
    meta = json.loads(json.dumps(contract.to_metadata()))
    meta["kd"] = [0.0]
    meta["obs_layout"][1]["name"] = "foot_contact"
    with pytest.raises(ContractError, match="kd: .*foot_contact|foot_contact.*kd: "):
        PolicyContract.from_metadata(meta)


def test_check_robot_names_every_difference(contract, robot):
    contract.check_robot(robot)
    names = list(robot.joint_names)
    names[0], names[1] = names[1], names[0]
    other = dataclasses.replace(contract, joint_names=tuple(names), kp=(1.0,) * robot.num_joints,
                                velocity_limit=(99.0,) * robot.num_joints, control_dt=0.01)
    with pytest.raises(ContractError) as err:
        other.check_robot(robot)
    text = str(err.value)
    for part in ("joint order differs: #0 policy 'left_hip_roll' vs robot 'left_hip_yaw'", "kp:", "velocity_limit:",
                 "control_dt:"):
        assert part in text
    with pytest.raises(ContractError, match="joint count"):
        dataclasses.replace(contract, joint_names=contract.joint_names[:-1]).check_robot(robot)


def test_command_is_clipped_to_the_trained_ranges(contract, robot):
    builder, law = ObservationBuilder(contract), ActionLaw(contract)
    J = robot.num_joints
    state = dict(base_ang_vel=np.zeros(3), projected_gravity=[0, 0, -1.0], joint_pos=robot.default_pose,
                 joint_vel=np.zeros(J), last_action=np.zeros(J), gait_phase=0.25, heading_error=0.0)
    obs = builder.build(command=[3.0, -1.0, 0.2], **state)
    assert obs[0, 6:9].tolist() == pytest.approx([2.0 * 1.0, 2.0 * -0.3, 0.25 * 0.2])
    fast = law.targets(np.zeros(J), command=[3.0, 0.0, 0.0], gait_phase=0.25)
    assert np.array_equal(fast, law.targets(np.zeros(J), command=[1.0, 0.0, 0.0], gait_phase=0.25))
    unclipped = dataclasses.replace(contract, command_ranges=None)
    assert ObservationBuilder(unclipped).build(command=[3.0, -1.0, 0.2], **state)[0, 6] == 6.0


def test_action_law_relative_mode_and_missing_inputs(robot, contract):
    relative = dataclasses.replace(contract, action_mode="relative", gait_feedforward=0.0, gait_stride_feedforward=0.0,
                                   feedforward_joints=())
    law = ActionLaw(relative)
    q = robot.default_pose + 0.1
    a = np.linspace(-2.0, 2.0, robot.num_joints)
    expected = np.clip(q + robot.action_scales * np.clip(a, -1, 1), *robot.target_limits())
    np.testing.assert_array_equal(law.targets(a, joint_pos=q)[0], expected)
    with pytest.raises(ValueError, match="joint_pos"):
        law.targets(a)
    with pytest.raises(ValueError, match="command and gait_phase"):
        ActionLaw(contract).targets(a)
    # phase 0.6: the right foot in stance, the left leg folds; the stride sweeps both hips and ankles
    ff = ActionLaw(contract).feedforward([[0.5, 0.0, 0.0]], [0.6])[0]
    moved = [robot.joint_names[i] for i in np.flatnonzero(ff)]
    assert sorted(moved) == sorted(["left_hip_pitch", "left_knee", "left_ankle_pitch", "right_hip_pitch",
                                    "right_ankle_pitch"])
    assert ff[robot.joint_names.index("left_knee")] > 0.0


def test_history_reset_and_frames(contract, robot):
    J = robot.num_joints
    builder = ObservationBuilder(contract, num_envs=2)
    head = contract.num_obs - contract.history_frames * contract.frame_size
    for k in range(3):
        obs = builder.build(base_ang_vel=np.full((2, 3), k + 1.0), projected_gravity=np.zeros((2, 3)),
                            command=np.zeros((2, 3)), joint_pos=np.zeros((2, J)), joint_vel=np.zeros((2, J)),
                            last_action=np.zeros((2, J)), gait_phase=np.zeros(2), heading_error=np.zeros(2))
    # frames newest first: the builds before this one, base_ang_vel scaled by 0.25
    assert obs[0, head] == 0.25 * 2 and obs[0, head + contract.frame_size] == 0.25 * 1
    assert obs[0, head + 2 * contract.frame_size] == 0.0
    builder.reset([1])
    assert np.all(builder.history[1] == 0.0) and builder.history[0, 0, 0] == 0.25 * 3


def test_policy_io_from_sensors_is_what_evaluation_observes(robot):
    """PolicyIO, fed what a robot measures (joint state, IMU quaternion and gyro, command, time since
    start), gives the observations and joint targets the evaluation environment gives the policy."""
    cfg = dataclasses.replace(recorded_env_config(), num_envs=2, num_threads=1, random_heading=True,
                              commands=CommandConfig(fixed=(0.6, 0.0, 0.3), resample_s=1e9),
                              randomization=RandomizationConfig.disabled())
    contract = PolicyContract.for_training(robot, cfg)
    env = LocomotionEnv(robot, cfg, contract=contract)
    io = PolicyIO(contract, num_envs=2)
    rng = np.random.default_rng(0)
    obs_env = env.observations()
    for k in range(30):
        s = env.state
        obs = io.observe(joint_pos=s.joint_pos, joint_vel=s.joint_vel, imu_quat=s.base_quat,
                         imu_gyro=s.base_ang_vel, command=env.command, time_s=np.full(2, k * env.dt))
        np.testing.assert_allclose(obs, obs_env, atol=1e-12, err_msg=f"step {k}")
        action = np.clip(rng.normal(0.0, 0.2, (2, robot.num_joints)), -1, 1)
        targets = io.targets(action)
        captured = []
        original = env.sim.step
        env.sim.step = lambda n, captured=captured, original=original: (captured.append(env.sim.ctrl.copy()), original(n))
        obs_env, _, terminated, truncated, _ = env.step(action)
        env.sim.step = original
        np.testing.assert_allclose(targets, captured[0], atol=1e-12)
        assert not (terminated | truncated).any()


def test_lateral_stride_puts_the_stance_foot_where_the_robot_steps(robot):
    """The sideways twin of the forward stride: at vy > 0 the stance foot starts its half cycle on the +y side
    of its hip and ends on the -y side (forward kinematics of the robot's own model, so the roll sign
    convention is checked, not assumed), the swing foot the other way round, the soles kept flat; nothing
    at a standing command; the contract carries it through the ONNX metadata and the robot check."""
    import mujoco

    from motionvl.sim.model import build_model
    cfg = EnvConfig(obs_history=0, gait_feedforward=0.0, gait_stride_feedforward=0.0, gait_lateral_stride=0.4,
                    gait_stand_below=0.1)
    contract = PolicyContract.for_training(robot, cfg)
    assert contract.lateral_joints == (("left_hip_roll", "left_ankle_roll"), ("right_hip_roll", "right_ankle_roll"))
    assert PolicyContract.from_metadata(json.loads(json.dumps(contract.to_metadata()))) == contract
    contract.check_robot(robot)
    law = ActionLaw(contract)
    model = build_model(robot)
    data = mujoco.MjData(model)
    feet = [model.body(name).id for name in robot.feet]

    def feet_y(offsets):
        data.qpos[:] = model.key("home").qpos
        data.qpos[7:] += offsets
        mujoco.mj_kinematics(model, data)
        return np.array([data.xpos[b, 1] for b in feet]), np.array([data.xmat[b].reshape(3, 3)[2, 2] for b in feet])

    home, _ = feet_y(np.zeros(robot.num_joints))
    command = np.array([[0.0, 0.2, 0.0]])
    start, upright = feet_y(law.feedforward(command, np.array([0.0]))[0])  # left stance begins, right swing begins
    end, _ = feet_y(law.feedforward(command, np.array([0.4999]))[0])
    assert start[0] - home[0] > 0.01 and end[0] - home[0] < -0.01  # left (stance): +y side to -y side
    assert start[1] - home[1] < -0.01 and end[1] - home[1] > 0.01  # right (swing): the other way round
    np.testing.assert_allclose(upright, 1.0, atol=1e-9)  # ankle roll opposite to hip roll: soles flat
    assert not law.feedforward(np.array([[0.0, 0.05, 0.0]]), np.array([0.0])).any()  # standing: no sweep
    backward = law.feedforward(-command, np.array([0.0]))
    np.testing.assert_allclose(backward, -law.feedforward(command, np.array([0.0])))
    meta = json.loads(json.dumps(contract.to_metadata()))
    meta["gait_lateral_joints"] = [["left_hip_roll"], ["right_hip_roll"]]
    with pytest.raises(ContractError, match="gait_lateral_joints"):
        PolicyContract.from_metadata(meta)

"""The deployment controller without ROS: mapping, modes, faults, and the command builder under
property tests (no command outside the configured limits from any mode or path)."""

from __future__ import annotations

import dataclasses
import math
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from deploy_fixtures import ROBOT, assert_within, mapped_robot
from motionvl.deploy import Controller, DeployConfig, JointMapping, Mode, StandRamp
from motionvl.deploy.commands import CommandBuilder
from motionvl.sim.math import quat_from_euler, quat_multiply
from motionvl.deploy.modes import ModeMachine
from motionvl.robot import ConfigError

J = ROBOT.num_joints
ROBOTS = {"identity": ROBOT, "mapped": mapped_robot()}
# CI explores the same examples every run (a failure there reproduces); elsewhere each run explores anew
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


class FakeClock:
    """Monotonic seconds the test advances by hand."""

    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class ScriptedTargets:
    """Stands in for a policy whose joint targets are whatever the test scripts (any float, NaN
    included) so the command builder has to bound them; `io` answers PolicyIO's calls, `act` returns
    the scripted raw action (checked for NaN/inf before any scaling)."""

    class _Contract:
        command_ranges = None

    class _IO:
        def __init__(self, owner):
            self.owner = owner

        def reset(self):
            pass

        def observe(self, **_):
            return np.zeros((1, 4))

        def targets(self, action):
            return np.asarray(self.owner.target, dtype=float).reshape(1, J)

    def __init__(self, target=None):
        self.path = "scripted"
        self.contract = self._Contract()
        self.target = ROBOT.default_pose.copy() if target is None else target
        self.actions = np.zeros(J)
        self.io = self._IO(self)

    def act(self, obs):
        return np.asarray(self.actions, dtype=float), 0.0


# ---------------------------------------------------------------------- mapping
def test_mapping_round_trips_and_maps_by_name():
    robot = ROBOTS["mapped"]
    m = JointMapping(robot)
    rng = np.random.default_rng(0)
    q = rng.uniform(robot.lower, robot.upper)
    np.testing.assert_allclose(m.from_motor_position(m.to_motor_position(q)), q, atol=1e-12)
    np.testing.assert_allclose(m.from_motor_signed(m.to_motor_signed(q)), q, atol=1e-12)
    # motor 1 drives joint 7 mounted backwards with offset 0.1
    assert m.motor_names[1].endswith(robot.joint_names[7])
    assert m.to_motor_position(q)[1] == pytest.approx(-q[7] + 0.1)
    # a message may list motors in any order (and more of them)
    names = list(m.motor_names[::-1]) + ["wrist"]
    order = m.motor_order(names)
    assert [names[i] for i in order] == list(m.motor_names)
    with pytest.raises(KeyError, match="motor_00"):
        m.motor_order(names[:-2][1:])


def test_imu_mounting_round_trips():
    m = JointMapping(ROBOTS["mapped"])
    base = quat_from_euler(0.1, -0.2, 0.7)
    gyro = np.array([0.3, -0.1, 0.5])
    imu_quat, imu_gyro = m.base_to_imu(base, gyro)
    assert not np.allclose(imu_gyro, gyro)
    back_quat, back_gyro = m.imu_to_base(imu_quat, imu_gyro)
    assert np.allclose(back_quat, base) or np.allclose(back_quat, -base)
    np.testing.assert_allclose(back_gyro, gyro, atol=1e-12)
    # the mounting quaternion composes as the rotation of the IMU frame in the base frame
    np.testing.assert_allclose(imu_quat, quat_multiply(base, m.imu_quat))


def test_mapping_matches_the_hardware_section_written_out_by_hand():
    """The simulator's emulated drives and the controller both use JointMapping, so a wrong formula
    there would cancel out in every round trip and only show on the robot: pin each direction to
    'motor angle = sign x joint angle + offset, velocity and torque = sign x the joint's, gains
    permuted only', written out here from the hardware section's numbers."""
    from deploy_fixtures import MOTOR_OFFSETS, MOTOR_ORDER, MOTOR_SIGNS

    robot = ROBOTS["mapped"]
    m = JointMapping(robot)
    rng = np.random.default_rng(1)
    q, v, g = rng.uniform(-1, 1, J), rng.uniform(-5, 5, J), rng.uniform(0, 50, J)
    motor_q = np.array([MOTOR_SIGNS[k] * q[MOTOR_ORDER[k]] + MOTOR_OFFSETS[k] for k in range(J)])
    motor_v = np.array([MOTOR_SIGNS[k] * v[MOTOR_ORDER[k]] for k in range(J)])
    motor_g = np.array([g[MOTOR_ORDER[k]] for k in range(J)])
    np.testing.assert_allclose(m.to_motor_position(q), motor_q, atol=1e-15)
    np.testing.assert_allclose(m.to_motor_signed(v), motor_v, atol=1e-15)
    np.testing.assert_allclose(m.to_motor_unsigned(g), motor_g, atol=1e-15)
    np.testing.assert_allclose(m.from_motor_position(motor_q), q, atol=1e-15)
    np.testing.assert_allclose(m.from_motor_signed(motor_v), v, atol=1e-15)
    np.testing.assert_allclose(m.from_motor_unsigned(motor_g), g, atol=1e-15)
    assert list(m.motor_names) == [f"motor_{k:02d}_{ROBOT.joint_names[MOTOR_ORDER[k]]}" for k in range(J)]


def test_imu_mounting_agrees_with_physics():
    """Not only a round trip: what the mounted IMU reports must describe the same motion in the world
    (its gyro turned by its orientation equals the base's) and the same gravity direction."""
    from motionvl.sim.math import quat_to_matrix

    m = JointMapping(ROBOTS["mapped"])
    base = quat_from_euler(0.1, -0.2, 0.7)
    gyro = np.array([0.3, -0.1, 0.5])
    imu_quat, imu_gyro = m.base_to_imu(base, gyro)
    np.testing.assert_allclose(quat_to_matrix(imu_quat) @ imu_gyro, quat_to_matrix(base) @ gyro, atol=1e-12)
    down = np.array([0.0, 0.0, -1.0])
    # the IMU's gravity, turned by the mounting (IMU frame -> base frame), is the base's gravity
    np.testing.assert_allclose(m.imu_matrix @ (quat_to_matrix(imu_quat).T @ down), quat_to_matrix(base).T @ down,
                               atol=1e-12)
    # the controller recovers the base's tilt from the mounted IMU (upside down and turned here)
    c = Controller(ROBOTS["mapped"], DeployConfig(), clock=FakeClock())
    c.imu(imu_quat, imu_gyro, 0.0)
    assert c.inputs.tilt() == pytest.approx(math.acos(quat_to_matrix(base)[2, 2]), abs=1e-9)
    np.testing.assert_allclose(c.inputs.base_gyro, gyro, atol=1e-12)


def test_hardware_section_is_validated(tmp_path):
    from deploy_fixtures import write_robot_yaml

    from motionvl.robot import load_robot_config

    section = {"motors": [{"name": "m0", "joint": ROBOT.joint_names[0]}]}
    with pytest.raises(ConfigError, match="exactly one motor"):
        load_robot_config(write_robot_yaml(tmp_path, section))
    with pytest.raises(ConfigError, match="sign must be"):
        load_robot_config(write_robot_yaml(tmp_path, {"motors": [{"name": "m", "joint": ROBOT.joint_names[0],
                                                                   "sign": 2}]}))
    with pytest.raises(ConfigError, match="imu_rpy"):
        load_robot_config(write_robot_yaml(tmp_path, {"imu_rpy": [0, 1]}))


# ---------------------------------------------------------------------- modes
def test_mode_machine_edges_latching_and_rearm_gate():
    m = ModeMachine()
    assert m.request("RUN") == (False, "PASSIVE -> RUN is not allowed (the way up is PASSIVE -> STAND -> RUN)")
    assert m.request("STAND")[0] and m.request("RUN")[0]
    for mode in Mode:  # every mode has an edge to DAMP
        machine = ModeMachine()
        machine.mode = mode
        assert machine.request("DAMP")[0] and machine.mode == Mode.DAMP
    from motionvl.deploy import Fault

    m.fault(Fault("fall", "tilted"))
    assert m.mode == Mode.DAMP
    ok, message = m.request("PASSIVE")
    assert not ok and "latched fault (fall: tilted)" in message
    ok, message = m.rearm()
    assert not ok and "allow_rearm" in message
    allowed = ModeMachine(allow_rearm=True)
    allowed.fault(Fault("fall", "tilted"))
    assert allowed.rearm(conditions=["fall: still tilted"]) == (False, "re-arm refused: still fall: still tilted")
    assert allowed.rearm()[0] and allowed.mode == Mode.DAMP and not allowed.faults
    assert allowed.request("RUN")[0] is False and allowed.request("PASSIVE")[0]
    assert m.request("bogus")[0] is False


def test_the_deployment_passes_every_target_the_trained_action_law_can_send():
    """Training clips targets to the robot's target limits, so the deployment (target_limit_share 1) clips none
    of them; a policy trained to the hard limits, or a deployment set tighter, has targets clipped and counted."""
    from motionvl.envs.config import EnvConfig
    from motionvl.policy_io import ActionLaw, PolicyContract

    contract = PolicyContract.for_training(ROBOT, EnvConfig(gait_feedforward=0.0, gait_stride_feedforward=0.0,
                                                            gait_lateral_stride=0.0))
    actions = np.random.default_rng(0).uniform(-1, 1, (400, J))
    hard = np.clip(ROBOT.default_pose + ROBOT.action_scales * actions, ROBOT.lower, ROBOT.upper)
    assert (ActionLaw(contract).targets(actions) != hard).any(), "the actions reach beyond the target limits"

    def clipped(contract, config):
        builder = CommandBuilder(ROBOT, config)
        for target in ActionLaw(contract).targets(actions):
            builder.clip_target(target)
        return builder.clips["target"]

    assert clipped(contract, DeployConfig()) == 0
    assert clipped(dataclasses.replace(contract, target_limit_factor=1.0), DeployConfig()) > 0
    assert clipped(contract, DeployConfig(target_limit_share=0.9)) > 0


def test_loading_says_when_the_policy_learned_targets_this_deployment_clips(tmp_path):
    from motionvl.deploy.random_policy import write_random_policy

    current = str(write_random_policy(tmp_path / "current.onnx", robot=ROBOT))
    older = str(write_random_policy(tmp_path / "older.onnx", robot=ROBOT, target_limit_factor=1.0))
    for path, config, note in ((current, DeployConfig(), None), (older, DeployConfig(), "100%.* passes 95%"),
                               (current, DeployConfig(target_limit_share=0.9), "95%.* passes 86%")):
        ok, message = Controller(ROBOT, config, clock=FakeClock()).load_policy(path)
        assert ok, message
        if note is None:
            assert "clipped" not in message, message
        else:
            assert re.search(f"trained with targets up to {note}: targets beyond are clipped", message), message


def test_config_is_validated():
    with pytest.raises(ConfigError, match="default pose of .*left_knee.* outside the soft limits"):
        DeployConfig(target_limit_share=0.5).validate(ROBOT)
    with pytest.raises(ConfigError, match="whole multiple"):
        DeployConfig(command_rate_hz=75.0).validate(ROBOT)
    with pytest.raises(ConfigError, match="fall_clear_tilt"):
        DeployConfig(fall_tilt=0.3, fall_clear_tilt=0.5).validate(ROBOT)
    with pytest.raises(ConfigError, match="out_of_order_limit must be >= 1.*out_of_order_window|out_of_order_window"
                                          ".*out_of_order_limit must be >= 1"):
        DeployConfig(out_of_order_limit=0, out_of_order_window=0.0).validate(ROBOT)
    with pytest.raises(ConfigError, match="frozen_samples must be 0 .off. or >= 2"):
        DeployConfig(frozen_samples=1).validate(ROBOT)
    with pytest.raises(ConfigError, match="as long as the watchdog"):
        DeployConfig(policy_deadline_share=5.0, watchdog_periods=5).validate(ROBOT)
    with pytest.raises(ConfigError, match="watchdog_periods must be >= 1"):
        DeployConfig(watchdog_periods=0).validate(ROBOT)
    assert DeployConfig(path="torque").command_period(ROBOT) == ROBOT.sim_dt
    assert DeployConfig(path="pd").decimation(ROBOT) == 1
    assert DeployConfig(path="pd", command_rate_hz=500).decimation(ROBOT) == ROBOT.decimation


# ---------------------------------------------------------------------- the builder, property-tested
finite_or_not = st.floats(allow_nan=True, allow_infinity=True, width=64)
joint_arrays = st.lists(finite_or_not, min_size=J, max_size=J).map(np.array)
configs = st.builds(DeployConfig, path=st.sampled_from(("pd", "torque")),
                    target_limit_share=st.floats(0.5, 1.0), gain_limit_scale=st.floats(0.5, 2.0),
                    damping_scale=st.floats(0.0, 3.0), feedforward_limit=st.floats(0.0, 0.5))


@settings(max_examples=300, deadline=None)
@given(robot_name=st.sampled_from(sorted(ROBOTS)), config=configs, q=joint_arrays, dq=joint_arrays,
       target=joint_arrays, gain_start=st.floats(0.0, 1.0), cycles=st.integers(1, 2000),
       elapsed=st.integers(0, 2000), mode=st.sampled_from(list(Mode)))
def test_no_command_outside_limits_from_any_mode_or_path(robot_name, config, q, dq, target, gain_start, cycles,
                                                          elapsed, mode):
    robot = ROBOTS[robot_name]
    builder = CommandBuilder(robot, config)
    ramp = StandRamp(start=builder.clip_target(np.nan_to_num(target), count=False), gain_start=gain_start,
                     cycles=cycles, elapsed=min(elapsed, cycles))
    command = {Mode.PASSIVE: lambda: builder.passive(q), Mode.DAMP: lambda: builder.damp(q, dq),
               Mode.STAND: lambda: builder.stand(q, dq, ramp), Mode.RUN: lambda: builder.run(q, dq, target)}[mode]()
    assert_within(command, robot, config)
    if command.path == "pd":
        assert np.all(command.dq == 0.0)
        if mode in (Mode.PASSIVE, Mode.DAMP):
            assert np.all(command.kp == 0.0)
    elif mode == Mode.PASSIVE:
        assert np.all(command.tau == 0.0)


@settings(max_examples=200, deadline=None)
@given(q=st.lists(st.floats(-3, 3), min_size=J, max_size=J).map(np.array),
       dq=st.lists(st.floats(-50, 50), min_size=J, max_size=J).map(np.array),
       target=st.lists(st.floats(-3, 3), min_size=J, max_size=J).map(np.array))
def test_host_torque_is_the_pd_law_clipped_exactly(q, dq, target):
    robot = ROBOTS["mapped"]
    config = DeployConfig(path="torque")
    builder = CommandBuilder(robot, config)
    soft_lo, soft_hi = robot.target_limits(config.target_limit_share)
    want = np.clip(robot.kp * (np.clip(target, soft_lo, soft_hi) - q) - robot.kd * dq,
                   -robot.effort_limit, robot.effort_limit)
    tau = JointMapping(robot).from_motor_signed(builder.run(q, dq, target).tau)
    np.testing.assert_array_equal(tau, want)
    damp = JointMapping(robot).from_motor_signed(builder.damp(q, dq).tau)
    np.testing.assert_array_equal(damp, np.clip(-robot.kd * dq, -robot.effort_limit, robot.effort_limit))
    clipped = int(np.count_nonzero(np.abs(robot.kp * (np.clip(target, soft_lo, soft_hi) - q) - robot.kd * dq)
                                   > robot.effort_limit))
    assert builder.clips["torque"] >= clipped


@pytest.mark.parametrize("path", ["pd", "torque"])
def test_stand_ramp_never_jumps(path):
    """From a crouched measured pose: targets move continuously and gains only rise, both paths."""
    robot = ROBOTS["mapped"]
    clock = FakeClock()
    config = DeployConfig(path=path, stand_seconds=0.5)
    c = Controller(robot, config, clock=clock)
    m = c.mapping
    start = robot.lower + 0.3 * (robot.upper - robot.lower)
    feed(c, start, np.zeros(J), clock)
    assert c.cycle().mode == Mode.PASSIVE
    assert c.request_mode("STAND")[0]
    targets, gains = [], []
    for _ in range(c._ramp.cycles + 5):
        feed(c, start, np.zeros(J), clock)
        cmd = c.cycle()
        assert cmd.mode == Mode.STAND
        assert_within(cmd, robot, config)
        if path == "pd":
            targets.append(m.from_motor_position(cmd.q))
            gains.append(m.from_motor_signed(cmd.kp) * m.from_motor_signed(np.ones(J)))
        else:  # tau = Kp s (ramp target - q) with q held at start and dq 0: target = q + tau / (Kp s)
            gains.append(np.abs(m.from_motor_signed(cmd.tau)))
    assert c.stand_complete
    if path == "pd":
        targets = np.array(targets)
        np.testing.assert_allclose(targets[0], start, atol=1e-12)
        np.testing.assert_allclose(targets[-1], robot.default_pose, atol=1e-12)
        steps = np.abs(np.diff(targets, axis=0))
        # smoothstep's steepest slope is 1.5 / cycles of the way per cycle
        assert np.all(steps <= 1.5 / c._ramp.cycles * np.abs(robot.default_pose - start) + 1e-12)
        kp = np.array(gains)
        assert kp[0].max() == 0.0 and np.all(np.diff(kp, axis=0) >= -1e-12)
        np.testing.assert_allclose(kp[-1], robot.kp)
    else:
        tau = np.array(gains)
        assert tau[0].max() == 0.0
        np.testing.assert_allclose(tau[-1], np.minimum(robot.kp * np.abs(robot.default_pose - start),
                                                       robot.effort_limit))


# ---------------------------------------------------------------------- faults, cycle by cycle
def feed(c, q, dq, clock, quat=(1.0, 0.0, 0.0, 0.0), gyro=(0.0, 0.0, 0.0), dt=None, noise=True):
    """One joint state and IMU message (mapped into the robot's motor and IMU space) at the clock's time.
    `noise`: the gyro carries a sensor's noise (a nano-radian per second every other message), so that
    a still robot's IMU is not a frozen one."""
    dt = c.period if dt is None else dt
    clock.t += dt
    m = c.mapping
    stamp = clock.t - 100.0
    jitter = np.array([0.0, 0.0, 1e-9 * (int(round(clock.t / c.period)) % 2)]) if noise else np.zeros(3)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and inf states are meant
        c.joint_state(m.motor_names, m.to_motor_position(q), m.to_motor_signed(dq), stamp)
        imu_quat, imu_gyro = m.base_to_imu(np.asarray(quat, float), np.asarray(gyro, float) + jitter)
    c.imu(imu_quat, imu_gyro, stamp)


def running(path="pd", robot=None, **config):
    """A controller in RUN on a scripted-target policy, fed a standing robot."""
    robot = robot or ROBOTS["mapped"]
    clock = FakeClock()
    c = Controller(robot, DeployConfig(path=path, stand_seconds=0.1, **config), clock=clock)
    policy = ScriptedTargets(robot.default_pose.copy())
    feed(c, robot.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.PASSIVE
    assert c.load_policy(policy)[0]
    assert c.request_mode("STAND")[0]
    while not c.stand_complete:
        feed(c, robot.default_pose, np.zeros(J), clock)
        c.cycle()
    ok, message = c.request_mode("RUN")
    assert ok, message
    feed(c, robot.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.RUN
    return c, clock, policy


def next_policy_step(c, clock):
    """Cycles on a standing robot up to the next policy step (it runs once per decimation cycles), or
    the first DAMP; returns the last command."""
    for _ in range(c.decimation):
        feed(c, ROBOT.default_pose, np.zeros(J), clock)
        cmd = c.cycle()
        if cmd.mode == Mode.DAMP:
            break
    return cmd


BAD_STATES = {
    "non_finite_input": dict(q=np.where(np.arange(J) == 3, np.nan, ROBOT.default_pose)),
    "joint_limit": dict(q=np.where(np.arange(J) == 2, ROBOT.upper[2] + 0.2, ROBOT.default_pose)),
    "joint_velocity": dict(dq=np.where(np.arange(J) == 5, 40.0, 0.0)),
    "gyro": dict(gyro=(0.0, 12.0, 0.0)),
    "fall": dict(quat=tuple(quat_from_euler(0.0, 1.0, 0.0))),
}


@pytest.mark.parametrize("path", ["pd", "torque"])
@pytest.mark.parametrize("kind", sorted(BAD_STATES))
def test_each_bad_state_damps_at_the_next_command(kind, path):
    c, clock, _ = running(path)
    bad = {"q": ROBOT.default_pose, "dq": np.zeros(J), **BAD_STATES[kind]}
    feed(c, **bad, clock=clock)
    cmd = c.cycle()
    assert cmd.mode == Mode.DAMP and c.mode == Mode.DAMP
    assert [f.kind for f in c.modes.faults][0] == kind
    assert_within(cmd, c.robot, c.config)
    # latched: a clean state does not bring RUN back, nor does asking
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.DAMP
    assert not c.request_mode("STAND")[0]


def test_joint_speed_is_bounded_by_the_robots_velocity_limits_which_the_policy_must_share(tmp_path):
    """The velocity fault bound is robot.yaml's per-joint velocity limit x velocity_bound_scale, and a policy
    exported for other velocity limits (its contract carries them) does not load, the difference named."""
    from motionvl.deploy.random_policy import write_random_policy

    slow_knee = dataclasses.replace(ROBOTS["mapped"], joints=tuple(
        dataclasses.replace(j, velocity=4.0) if i == 3 else j for i, j in enumerate(ROBOTS["mapped"].joints)))
    knee_speed = np.where(np.arange(J) == 3, 8.0, 0.0)  # above 1.5 x 4 rad/s, below 1.5 x the shipped 14 rad/s
    for robot, faulted in ((ROBOTS["mapped"], False), (slow_knee, True)):
        c, clock, _ = running("pd", robot=robot)
        feed(c, robot.default_pose, knee_speed, clock)
        assert (c.cycle().mode == Mode.DAMP) == faulted
        if faulted:
            fault = c.modes.faults[0]
            assert fault.kind == "joint_velocity" and robot.joint_names[3] in fault.reason and "bound 6.00" in fault.reason
    c = Controller(slow_knee, DeployConfig(path="pd"), clock=FakeClock())
    ok, message = c.load_policy(str(write_random_policy(tmp_path / "rated_14.onnx", robot=ROBOTS["mapped"])))
    assert not ok and "velocity_limit: policy" in message, message
    assert c.load_policy(str(write_random_policy(tmp_path / "rated_4.onnx", robot=slow_knee)))[0]


def test_non_finite_policy_output_damps_that_cycle():
    c, clock, policy = running("torque")
    policy.actions = np.where(np.arange(J) == 4, np.inf, 0.0)
    cmd = next_policy_step(c, clock)
    assert cmd.mode == Mode.DAMP and c.modes.faults[0].kind == "non_finite_policy"
    assert "before scaling" in c.modes.faults[0].reason and ROBOT.joint_names[4] in c.modes.faults[0].reason


def test_stale_and_frozen_stamps_damp():
    c, clock, _ = running("pd", state_timeout=0.1)
    clock.t += 0.15  # nothing arrives
    assert c.cycle().mode == Mode.DAMP and "silent" in c.modes.faults[0].reason
    c, clock, _ = running("pd", state_timeout=0.1)
    m = c.mapping
    for _ in range(10):  # messages keep coming, stamps stuck
        clock.t += 0.02
        c.joint_state(m.motor_names, m.to_motor_position(ROBOT.default_pose), np.zeros(J), 5.0)
        c.imu(*m.base_to_imu(np.array([1.0, 0, 0, 0]), np.zeros(3)), clock.t)
        cmd = c.cycle()
    assert cmd.mode == Mode.DAMP and "do not advance" in c.modes.faults[0].reason


@pytest.mark.parametrize("path", ["pd", "torque"])
def test_overrun_beyond_k_policy_periods_damps(path):
    c, clock, policy = running(path, overrun_periods=2)
    # a PD cycle several command periods late (a scheduling hiccup) is counted, not a fault
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.cycle(trigger_time=clock.t - 0.9 * ROBOT.control_dt).mode == Mode.RUN
    assert c.stats.overruns == (1 if path == "torque" else 0)
    original = policy.act

    def slow(obs):
        clock.t += 3.5 * ROBOT.control_dt  # the inference takes 3.5 policy periods
        return original(obs)

    policy.act = slow
    for _ in range(c.decimation):  # the next policy step
        feed(c, ROBOT.default_pose, np.zeros(J), clock)
        command = c.cycle()
    assert command.mode == Mode.DAMP and c.modes.faults[0].kind == "overrun"


@pytest.mark.parametrize("path", ["pd", "torque"])
def test_policy_steps_each_late_by_part_of_a_period_add_up_to_a_fault(path):
    """A policy that always needs 1.5 periods misses one period per step: after overrun_periods + 1
    steps the streak is past the limit. On the torque path too, where the PD cycles between two
    policy steps finish in time: they do not end the policy's streak (they did, and such a policy
    ran for ever at two thirds of its rate, the PD loop stalled at each step)."""
    periods = 2
    c, clock, policy = running(path, overrun_periods=periods)
    step = policy.act

    def late_step(obs):
        clock.t += 1.5 * ROBOT.control_dt
        return step(obs)

    policy.act = late_step
    steps = 0
    while c.mode == Mode.RUN and steps < 10:
        command = next_policy_step(c, clock)
        steps += 1
    assert command.mode == Mode.DAMP and c.modes.faults[0].kind == "overrun"
    assert steps == periods + 1


def test_second_writer_estop_and_rearm():
    c, clock, _ = running("pd", allow_rearm=True)
    c.command_writers = 1
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.DAMP and c.modes.faults[0].kind == "second_writer"
    ok, message = c.rearm()
    assert not ok and "other publisher" in message
    c.command_writers = 0
    assert c.rearm()[0]
    assert c.request_mode("STAND")[0]
    c.estop()
    assert not c.request_mode("STAND")[0]  # the e-stop wins
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.DAMP


def test_more_than_one_state_publisher_damps_and_blocks_arming():
    """Two sources on a state topic (a stale bag playing, a simulator left running) interleave: the
    controller would act on whichever came last. A fault in an armed mode, a refusal in PASSIVE, and
    re-arming waits until one source is left."""
    c, clock, _ = running("pd", allow_rearm=True)
    c.state_writers = {"/motor_states": ["/robot/drives"], "/imu/data": ["/robot/drives"]}
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.RUN
    c.state_writers["/motor_states"] = ["/robot/drives", "/bag_player"]
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.DAMP
    fault = c.modes.faults[0]
    assert fault.kind == "second_state_writer" and "2 publishers on /motor_states" in fault.reason
    assert "/bag_player" in fault.reason
    ok, message = c.rearm()
    assert not ok and "/bag_player" in message
    c.state_writers["/motor_states"] = ["/robot/drives"]
    assert c.rearm()[0]

    c = Controller(ROBOT, DeployConfig(), clock=FakeClock())
    feed(c, ROBOT.default_pose, np.zeros(J), c.clock)
    c.state_writers = {"/imu/data": ["/robot/drives", "/simulator"]}
    assert c.cycle().mode == Mode.PASSIVE and not c.modes.faults  # nothing to protect in PASSIVE: a refusal
    ok, message = c.request_mode("STAND")
    assert not ok and "2 publishers on /imu/data" in message


def test_a_state_stamped_older_than_the_one_in_force_is_dropped_and_counted():
    """An older joint state or IMU reading never replaces the newer one: here each would be a fault
    (a joint beyond its limit, a fall) if it were taken. One stray drop is counted, no fault; a
    repeated stamp is taken (a frozen driver is the stale check's business)."""
    c, clock, _ = running("pd")
    m = c.mapping
    newest = c.inputs.joints.last_stamp
    q, quat = c.inputs.joint_pos.copy(), c.inputs.base_quat.copy()
    beyond = np.where(np.arange(J) == 2, ROBOT.upper[2] + 0.5, ROBOT.default_pose)
    c.joint_state(m.motor_names, m.to_motor_position(beyond), np.zeros(J), newest - 0.5)
    c.imu(*m.base_to_imu(quat_from_euler(0.0, 1.2, 0.0), np.zeros(3)), newest - 0.5)
    np.testing.assert_array_equal(c.inputs.joint_pos, q)
    np.testing.assert_array_equal(c.inputs.base_quat, quat)
    assert c.inputs.joints.last_stamp == newest
    assert c.status()["dropped"] == {"motor_states": 1, "imu": 1}
    assert c.cycle().mode == Mode.RUN and not c.modes.faults
    c.joint_state(m.motor_names, m.to_motor_position(beyond), np.zeros(J), newest)  # same stamp: taken
    assert c.cycle().mode == Mode.DAMP and c.modes.faults[0].kind == "joint_limit"


def test_repeated_older_stamps_are_a_fault_until_they_stop():
    c, clock, _ = running("pd", allow_rearm=True, out_of_order_limit=3, out_of_order_window=1.0, state_timeout=10.0)
    m = c.mapping
    old = c.inputs.joints.last_stamp - 1.0
    for k in range(3):  # a bag replaying an hour-old run next to the robot's drives
        clock.t += 0.01
        c.joint_state(m.motor_names, m.to_motor_position(ROBOT.default_pose), np.zeros(J), old + 0.01 * k)
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.DAMP
    fault = c.modes.faults[0]
    assert fault.kind == "out_of_order_state" and fault.reason.startswith("motor_states: 3 messages within 1 s")
    assert f"latest dropped {old + 0.02:.3f}" in fault.reason
    ok, message = c.rearm()
    assert not ok and "out_of_order_state" in message
    clock.t += 1.0  # the window passes with no drop: the condition clears
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.rearm()[0]

    # drops further apart than the window are each only counted
    c, clock, _ = running("pd", out_of_order_limit=2, out_of_order_window=0.1, state_timeout=10.0)
    for _ in range(5):
        c.imu(*m.base_to_imu(np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(3)), c.inputs.imu.last_stamp - 1.0)
        feed(c, ROBOT.default_pose, np.zeros(J), clock, dt=0.15)
        assert c.cycle().mode == Mode.RUN, c.modes.faults
    assert c.status()["dropped"]["imu"] == 5


def test_fall_has_hysteresis():
    c = Controller(ROBOT, DeployConfig(fall_tilt=0.8, fall_clear_tilt=0.4, allow_rearm=True), clock=FakeClock())
    clock = c.clock
    feed(c, ROBOT.default_pose, np.zeros(J), clock, quat=quat_from_euler(0.9, 0, 0))
    c.estop()
    assert "fall" in c.rearm()[1]
    feed(c, ROBOT.default_pose, np.zeros(J), clock, quat=quat_from_euler(0.6, 0, 0))  # below fall, above clear
    assert "fall" in c.rearm()[1]
    feed(c, ROBOT.default_pose, np.zeros(J), clock, quat=quat_from_euler(0.3, 0, 0))
    assert c.rearm()[0]


def test_passive_conditions_block_instead_of_latching():
    clock = FakeClock()
    c = Controller(ROBOT, DeployConfig(), clock=clock)
    assert c.cycle() is None  # nothing measured yet: nothing to command
    ok, message = c.request_mode("STAND")
    assert not ok and "no usable message yet" in message
    feed(c, ROBOT.default_pose, np.zeros(J), clock, gyro=(20.0, 0, 0))
    assert c.cycle().mode == Mode.PASSIVE and not c.modes.faults
    ok, message = c.request_mode("STAND")
    assert not ok and "gyro" in message
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.request_mode("STAND")[0]


def test_load_policy_only_in_passive_or_damp():
    c, clock, policy = running("pd")
    ok, message = c.load_policy(policy)
    assert not ok and "only in PASSIVE or DAMP" in message
    c.request_mode("DAMP")
    assert c.load_policy(policy)[0]


def test_velocity_command_is_clipped_rate_limited_and_zeroed():
    clock = FakeClock()
    c = Controller(ROBOT, DeployConfig(cmd_vel_accel=(1.0, 1.0, 2.0), cmd_vel_timeout=0.5), clock=clock)
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    values = []
    for _ in range(100):  # 2 s at 50 Hz
        feed(c, ROBOT.default_pose, np.zeros(J), clock)
        c.velocity_command(5.0, 0.0, -0.5)
        c.cycle()
        values.append(c.velocity.value.copy())
    values = np.array(values)
    assert np.all(np.abs(np.diff(values[:, 0])) <= 1.0 * c.period + 1e-12)
    assert values[-1, 0] == pytest.approx(c.config.cmd_vel_ranges[0][1])  # clipped to the range
    assert values[-1, 2] == pytest.approx(-0.5)
    clock.t += 1.0  # silent beyond the timeout: back to zero at the same rate
    for _ in range(100):
        feed(c, ROBOT.default_pose, np.zeros(J), clock)
        c.cycle()
    np.testing.assert_allclose(c.velocity.value, 0.0)
    assert not c.velocity_command(math.nan, 0, 0)


# ---------------------------------------------------------------------- the whole controller, stateful
def valid(config) -> bool:
    try:
        config.validate(ROBOT)
    except ConfigError:
        return False
    return True


class ControllerMachine(RuleBasedStateMachine):
    """Any sequence of states (NaN, inf, out of range), targets, mode requests, e-stops, re-arms and
    cycles: every command is within the limits, STAND never jumps, a latched fault keeps DAMP."""

    @initialize(robot_name=st.sampled_from(sorted(ROBOTS)), config=configs.filter(valid), allow_rearm=st.booleans())
    def setup(self, robot_name, config, allow_rearm):
        self.robot = ROBOTS[robot_name]
        self.config = dataclasses.replace(config, allow_rearm=allow_rearm, stand_seconds=0.1)
        self.clock = FakeClock()
        self.c = Controller(self.robot, self.config, clock=self.clock)
        self.policy = ScriptedTargets()
        self.c.load_policy(self.policy)
        self.last = None

    @rule(q=joint_arrays, dq=joint_arrays, gyro=st.lists(finite_or_not, min_size=3, max_size=3),
          tilt=st.floats(0, 3.2))
    def measure(self, q, dq, gyro, tilt):
        feed(self.c, q, dq, self.clock, quat=quat_from_euler(tilt, 0.0, 0.0), gyro=gyro)

    @rule(q=st.lists(st.floats(-0.3, 0.3), min_size=J, max_size=J).map(np.array))
    def measure_sane(self, q):
        feed(self.c, self.robot.default_pose + q, np.zeros(J), self.clock)

    @rule(joint_target=joint_arrays, action=joint_arrays)
    def script_policy(self, joint_target, action):
        self.policy.target, self.policy.actions = joint_target, action

    @rule(mode=st.sampled_from(list(Mode)))
    def request(self, mode):
        before = self.c.mode
        ok, _ = self.c.request_mode(mode)
        if before == Mode.PASSIVE and mode == Mode.RUN:
            assert not ok
        if self.c.modes.faults:
            assert self.c.mode == Mode.DAMP

    @rule()
    def estop(self):
        self.c.estop()
        assert self.c.mode == Mode.DAMP

    @rule()
    def rearm(self):
        ok, _ = self.c.rearm()
        if self.c.modes.faults:
            assert not ok
        if not self.config.allow_rearm and ok:
            assert not self.c.modes.faults

    @rule()
    def stand_up_and_run(self):
        """The operator's sequence on a sane state stream: STAND, wait for the ramp, RUN."""
        feed(self.c, self.robot.default_pose, np.zeros(J), self.clock)
        self.request(Mode.STAND)
        for _ in range(self.c._ramp.cycles + 1 if self.c._ramp else 0):
            feed(self.c, self.robot.default_pose, np.zeros(J), self.clock)
            self.cycle(0.0)
        self.request(Mode.RUN)

    @rule(steps=st.integers(1, 30), q=st.lists(st.floats(-0.2, 0.2), min_size=J, max_size=J).map(np.array))
    def sane_cycles(self, steps, q):
        for _ in range(steps):
            feed(self.c, self.robot.default_pose + q, np.zeros(J), self.clock)
            self.cycle(0.0)

    @rule(late=st.floats(0.0, 10.0))
    def cycle(self, late):
        ramp = self.c._ramp
        command = self.c.cycle(trigger_time=self.clock.t - late * self.c.period)
        if command is None:
            return
        assert_within(command, self.robot, self.config)
        event(f"command in {command.mode.value}")
        if self.c.modes.faults:
            assert command.mode == Mode.DAMP
        # STAND never jumps within one ramp (a new ramp, after DAMP say, starts where the robot is)
        if command.mode == Mode.STAND and self.last is not None and self.last[1] is ramp is not None \
                and command.path == "pd":
            m = self.c.mapping
            step = np.abs(m.from_motor_position(command.q) - m.from_motor_position(self.last[0].q))
            assert np.all(step <= 1.5 / ramp.cycles * np.abs(self.robot.default_pose - ramp.start) + 1e-9)
        self.last = (command, self.c._ramp if command.mode == Mode.STAND else None)

    @invariant()
    def latched_means_damp(self):
        if hasattr(self, "c") and self.c.modes.faults:
            assert self.c.mode == Mode.DAMP


ControllerMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                               suppress_health_check=[HealthCheck.too_slow])
TestControllerMachine = ControllerMachine.TestCase


# ---------------------------------------------------------------------- review: faults between cycles,
# damping without a velocity, a policy step that raises, the mapping pinned by hand
@pytest.mark.parametrize("path", ["pd", "torque"])
def test_a_bad_message_superseded_before_the_cycle_still_damps(path):
    """A NaN IMU reading or a joint-speed spike that a clean message replaced before the next cycle
    is still a fault at that cycle (the IMU usually comes faster than the command cycles)."""
    c, clock, _ = running(path)
    m = c.mapping
    c.imu(np.array([np.nan, 0.0, 0.0, 0.0]), np.zeros(3), clock.t - 100.0)
    feed(c, ROBOT.default_pose, np.zeros(J), clock)  # a clean IMU and joint state follow, newer
    cmd = c.cycle()
    assert cmd.mode == Mode.DAMP and c.modes.faults[0].kind == "non_finite_input"

    c, clock, _ = running(path)
    spike = np.where(np.arange(J) == 5, 40.0, 0.0)
    c.joint_state(m.motor_names, m.to_motor_position(ROBOT.default_pose), m.to_motor_signed(spike), clock.t - 100.0)
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    cmd = c.cycle()
    assert cmd.mode == Mode.DAMP and c.modes.faults[0].kind == "joint_velocity"


def test_passive_forgets_a_superseded_bad_message_once_cycled():
    """In PASSIVE the same faults only block leaving it; one cycle later a clean stream may stand."""
    clock = FakeClock()
    c = Controller(ROBOT, DeployConfig(), clock=clock)
    feed(c, ROBOT.default_pose, np.zeros(J), clock, gyro=(20.0, 0.0, 0.0))
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.PASSIVE and not c.modes.faults
    assert c.request_mode("STAND")[0]




@pytest.mark.parametrize("path", ["pd", "torque"])
def test_a_policy_step_that_raises_damps_that_cycle(path):
    """ONNX Runtime or the observation builder raising is a fault like any other: DAMP at once,
    latched as 'internal', instead of an exception that ends the control loop."""
    c, clock, policy = running(path)

    def broken(obs):
        raise RuntimeError("onnxruntime: bad allocation")

    policy.act = broken
    cmd = next_policy_step(c, clock)
    assert cmd.mode == Mode.DAMP and c.modes.faults[0].kind == "internal"
    assert "bad allocation" in c.modes.faults[0].reason
    assert_within(cmd, c.robot, c.config)


def test_internal_fault_gives_damping_from_any_state():
    c, clock, _ = running("pd")
    cmd = c.internal_fault("cycle raised ZeroDivisionError")
    assert cmd.mode == Mode.DAMP and c.mode == Mode.DAMP and c.modes.faults[0].kind == "internal"
    assert np.all(cmd.kp == 0) and np.all(cmd.kd > 0)
    assert not c.request_mode("STAND")[0]



@pytest.mark.parametrize("path", ["pd", "torque"])
def test_a_non_finite_joint_target_from_a_finite_action_damps(path):
    """The NaN check before scaling cannot see an action law that makes NaN of a finite action (a
    non-finite clip or feed-forward amplitude in the metadata): the targets are checked too."""
    c, clock, policy = running(path)
    policy.target = np.where(np.arange(J) == 2, np.nan, ROBOT.default_pose)
    cmd = next_policy_step(c, clock)
    assert cmd.mode == Mode.DAMP and c.modes.faults[0].kind == "non_finite_policy"
    assert "action law" in c.modes.faults[0].reason and ROBOT.joint_names[2] in c.modes.faults[0].reason


def test_torque_path_damping_needs_a_fresh_velocity():
    """Host-side damping is -Kd dq of a velocity measured now: with the joint states silent, or the
    newest one unusable, the velocity is unknown and DAMP (and the exit) command zero torque, not a
    constant -Kd dq of an old reading."""
    c, clock, _ = running("torque", state_timeout=0.1)
    moving = np.full(J, 2.0)
    feed(c, ROBOT.default_pose, moving, clock)
    assert c.cycle().mode == Mode.RUN
    clock.t += 0.15  # silent
    cmd = c.cycle()
    assert cmd.mode == Mode.DAMP and c.modes.faults[0].kind == "stale_state"
    np.testing.assert_array_equal(cmd.tau, 0.0)
    np.testing.assert_array_equal(c.damping_command().tau, 0.0)

    c, clock, _ = running("torque")
    feed(c, ROBOT.default_pose, moving, clock)
    c.cycle()
    feed(c, np.where(np.arange(J) == 3, np.nan, ROBOT.default_pose), moving, clock)
    cmd = c.cycle()
    assert cmd.mode == Mode.DAMP
    np.testing.assert_array_equal(cmd.tau, 0.0)
    # a fresh, usable state: damping acts on it again
    feed(c, ROBOT.default_pose, moving, clock)
    tau = c.mapping.from_motor_signed(c.cycle().tau)
    np.testing.assert_allclose(tau, np.clip(-ROBOT.kd * c.config.damping_scale * moving, -ROBOT.effort_limit,
                                            ROBOT.effort_limit))



# ---------------------------------------------------------------------- pacing by the state stream
@pytest.mark.parametrize("per_period", [1, 2, 10])
def test_state_pacer_keeps_the_command_rate_when_states_come_faster(per_period):
    """Drives publishing 1, 2 or 10 states per command period: one cycle per period, on states a
    whole period apart by their stamps (the second may come up to the slack early: the phase)."""
    from motionvl.deploy.scheduling import StatePacer

    period = ROBOT.control_dt
    pacer = StatePacer(period)
    stamps = 5.0 + np.arange(100 * per_period) * (period / per_period)
    due = np.array([s for s in stamps if pacer.due(s)])
    assert abs(len(due) - 100) <= 1
    assert np.diff(due)[0] >= (1 - 0.25) * period - 1e-9
    np.testing.assert_allclose(np.diff(due)[1:], period, atol=1e-9)


def test_state_pacer_follows_slower_or_irregular_states_without_bursts():
    from motionvl.deploy.scheduling import StatePacer

    period = 0.02
    pacer = StatePacer(period)
    slow = np.arange(50) * 0.03  # slower than the command rate: each state is a cycle
    assert all(pacer.due(s) for s in slow)
    pacer = StatePacer(period)
    gap = np.concatenate([np.arange(0.0, 1.0, 0.002), np.arange(1.5, 2.5, 0.002)])  # 10x, then 0.5 s of silence
    due = np.array([s for s in gap if pacer.due(s)])
    assert np.diff(due).min() >= 0.5 * period  # no burst after the gap
    assert len(due) <= 2.0 / period + 2
    rng = np.random.default_rng(0)
    jittered = np.arange(200) * period + rng.uniform(-0.1, 0.1, 200) * period  # one a period, stamps jitter
    pacer = StatePacer(period)
    assert all(pacer.due(s) for s in jittered)


def test_stand_ramp_takes_its_time_however_fast_the_states_come():
    """The STAND ramp counts cycles: with one cycle per joint state, a drive publishing at 10x the
    command rate would finish a 0.2 s ramp in 0.02 s on a 40 kg robot."""
    from motionvl.deploy.scheduling import StatePacer

    clock = FakeClock()
    c = Controller(ROBOT, DeployConfig(path="pd", stand_seconds=0.2), clock=clock)
    pacer = StatePacer(c.period)
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    c.cycle()
    assert c.request_mode("STAND")[0]
    start = clock.t
    while not c.stand_complete:
        feed(c, ROBOT.default_pose, np.zeros(J), clock, dt=c.period / 10)
        if pacer.due(clock.t - 100.0):  # feed's stamp
            c.cycle()
    assert clock.t - start >= 0.2 - 2 * c.period  # the ramp's first command comes at once, its last a period on


# ---------------------------------------------------------------------- policy steps beside the loop
def running_on_a_worker(path="torque", **config):
    """`running`, with the policy's steps on a PolicyWorker thread (as in the node) that the test holds."""
    import threading

    from motionvl.deploy.inference import PolicyWorker

    robot = ROBOTS["mapped"]
    clock = FakeClock()
    c = Controller(robot, DeployConfig(path=path, stand_seconds=0.1, **config), clock=clock, runner=PolicyWorker)
    policy = ScriptedTargets(robot.default_pose + 0.05)
    gate, entered = threading.Event(), threading.Event()
    gate.set()
    act = policy.act

    def held(obs):
        entered.set()
        assert gate.wait(60.0)
        return act(obs)

    policy.act = held
    feed(c, robot.default_pose, np.zeros(J), clock)
    c.cycle()
    assert c.load_policy(policy)[0] and c.request_mode("STAND")[0]
    while not c.stand_complete:
        feed(c, robot.default_pose, np.zeros(J), clock)
        c.cycle()
    assert c.request_mode("RUN")[0]
    return c, clock, gate, entered


@pytest.fixture
def on_a_worker():
    """running_on_a_worker, its step released and its worker thread ended after the test (none outlives it)."""
    made = []

    def make(*args, **config):
        made.append(running_on_a_worker(*args, **config))
        return made[-1]

    yield make
    for c, _, gate, _ in made:
        gate.set()
        assert c.close(timeout=10.0), "the policy worker thread did not end"


def test_a_worker_ends_on_close_idle_with_a_result_taken_or_not():
    """The node closes its controller on deactivate and at exit, often with a step's result not yet taken: the
    worker thread ends then too (it used to wait for work forever, and the node warned of a hung step)."""
    from waiting import wait_for

    from motionvl.deploy.inference import PolicyWorker, StepRequest

    for steps, take in [(0, False), (1, True), (1, False)]:
        worker = PolicyWorker(object())  # no policy I/O: each step returns its problem, quickly
        for _ in range(steps):
            worker.submit(StepRequest(0, *(np.zeros(3) for _ in range(5)), time_s=0.0))
            assert wait_for(lambda w=worker: not w._done.locked()), "the step did not come back"
            if take:
                assert worker.poll().problem.startswith("policy step raised")
        assert worker.close(timeout=5.0), (steps, take)


def test_a_late_step_damps_on_schedule_and_its_target_serves_the_rest_of_its_period(on_a_worker):
    """Torque path, ten PD cycles a policy period: a step's target takes effect one cycle after the state
    it was computed from (the first RUN cycle commands the default pose). The step is held, so the cycles
    that need it damp (RUN kept); once it is back, the rest of its period runs on its target."""
    from waiting import wait_for

    c, clock, gate, entered = on_a_worker("torque")
    gate.clear()
    feed(c, ROBOT.default_pose, np.zeros(J), clock)
    assert c.cycle().mode == Mode.RUN  # RUN's entry target; the step of period 0 starts
    assert entered.wait(10.0)
    for late in (1, 2):  # they need that step: damping on schedule, RUN kept
        feed(c, ROBOT.default_pose, np.zeros(J), clock)
        assert c.cycle().mode == Mode.DAMP and c.mode == Mode.RUN and c.stats.late_cycles == late
    gate.set()
    assert wait_for(lambda: not c.runner._done.locked()), "the step did not come back"
    for k in range(3, c.decimation + 1):  # cycles 3..10: RUN on its target (cycle 10 starts the next step)
        if k == c.decimation:  # (that step may be back within the cycle that starts it: count before)
            assert c._policy_steps == 1
        feed(c, ROBOT.default_pose, np.zeros(J), clock)
        command = c.cycle()
        assert command.mode == Mode.RUN
    np.testing.assert_allclose(c._target, ROBOT.default_pose + 0.05)
    assert c.stats.late_cycles == 2 and not c.modes.faults


def test_a_hung_step_faults_after_overrun_periods_and_is_cancelled_and_blocks_run(on_a_worker):
    c, clock, gate, entered = on_a_worker("pd", overrun_periods=2, allow_rearm=True)
    gate.clear()
    try:
        feed(c, ROBOT.default_pose, np.zeros(J), clock)
        assert c.cycle().mode == Mode.DAMP and c.mode == Mode.RUN  # late: damping, RUN kept
        assert entered.wait(10.0)
        for _ in range(2):  # each a policy period later, the same step still out (and none started beside it)
            feed(c, ROBOT.default_pose, np.zeros(J), clock)
            assert c.cycle().mode == Mode.DAMP and c.mode == Mode.RUN
        assert c.stats.skipped_steps == 2
        feed(c, ROBOT.default_pose, np.zeros(J), clock, dt=0.5 * ROBOT.control_dt)  # now past 2 periods late
        assert c.cycle().mode == Mode.DAMP and c.mode == Mode.DAMP
        fault = c.modes.faults[0]
        assert fault.kind == "overrun" and "(limit 2 policy periods" in fault.reason and "cancelled" in fault.reason
        assert c.rearm()[0] and c.request_mode("STAND")[0]
        while not c.stand_complete:
            feed(c, ROBOT.default_pose, np.zeros(J), clock)
            c.cycle()
        ok, message = c.request_mode("RUN")
        assert not ok and "still running" in message  # a scripted step is no ONNX run: it cannot be cancelled
    finally:
        gate.set()


def test_the_watchdog_faults_a_stalled_loop_in_stand_and_run_only():
    c, clock, _ = running("pd", watchdog_periods=5)
    assert not c.loop_awake(clock.t)
    clock.t += 4 * ROBOT.control_dt
    assert not c.loop_awake(clock.t)
    clock.t += 6 * ROBOT.control_dt  # the process did not run for 6 periods
    assert c.loop_awake(clock.t)
    feed(c, ROBOT.default_pose, np.zeros(J), clock, dt=0.0)
    assert c.cycle().mode == Mode.DAMP and c.modes.faults[0].kind == "watchdog"
    c = Controller(ROBOT, DeployConfig(watchdog_periods=5), clock=FakeClock())  # PASSIVE: nothing to protect
    c.loop_awake(0.0)
    assert not c.loop_awake(10.0)


def test_frozen_values_fault_the_imu_always_and_joint_states_in_run():
    c, clock, _ = running("pd", frozen_samples=4)  # (it fed the first state of RUN)
    more = 0  # joints frozen before RUN did not count; the IMU is noisy
    while c.mode == Mode.RUN and more < 10:
        feed(c, ROBOT.default_pose, np.zeros(J), clock)
        c.cycle()
        more += 1
    assert more == 3, "not at the 4th identical joint state of RUN"
    assert c.modes.faults[0].kind == "frozen_state" and c.modes.faults[0].reason.startswith("motor_states: 4 ")

    c = Controller(ROBOT, DeployConfig(frozen_samples=4), clock=FakeClock())
    clock = c.clock
    for _ in range(4):  # in PASSIVE a stuck IMU blocks STAND
        feed(c, ROBOT.default_pose, np.zeros(J), clock, noise=False)
        c.cycle()
    ok, message = c.request_mode("STAND")
    assert not ok and "imu: 4 messages in a row" in message


def test_joint_names_twice_are_unusable_and_other_names_counted_or_refused():
    m = JointMapping(ROBOTS["mapped"])
    names = list(m.motor_names)
    with pytest.raises(KeyError, match="more than once"):
        m.motor_order(names + names[:1])
    assert m.extra_names(names + ["head"]) == ["head"]
    for strict in (False, True):
        c, clock, _ = running("pd", strict_joint_names=strict)
        q = m.to_motor_position(ROBOT.default_pose)
        clock.t += c.period
        c.joint_state(names + ["left_hand"], list(q) + [0.0], [0.0] * (J + 1), clock.t - 100.0)
        if strict:
            assert c.inputs.bad_joint_message and "strict_joint_names" in c.inputs.bad_joint_message
            assert c.inputs.bad_joint_kind == "unusable_input"
        else:
            assert c.inputs.bad_joint_message is None and c.inputs.extra_names == {"left_hand": 1}


def test_joint_positions_are_read_from_joint_space_only():
    mapping = JointMapping(ROBOTS["mapped"])
    q = np.linspace(-0.5, 0.5, mapping.num_joints)
    motor = mapping.to_motor_position(q)
    # joint space (joint_states), extra names ignored, any order
    assert np.allclose(mapping.joint_positions([*mapping.joint_names, "head"], [*q, 9.0]), q)
    assert np.allclose(mapping.joint_positions(list(reversed(mapping.joint_names)), q[::-1]), q)
    # motor space (the drives' motor_states) is never taken for joint space: no guessing between the two
    assert mapping.joint_positions(mapping.motor_names, motor) is None, "motor names are not joint names"
    assert mapping.joint_positions(mapping.joint_names[:-1], q[:-1]) is None, "a joint missing"
    assert mapping.joint_positions([*mapping.joint_names, mapping.joint_names[0]], [*q, 0.0]) is None, "a name twice"
    assert mapping.joint_positions(mapping.joint_names, q[:-1]) is None, "fewer positions than names"

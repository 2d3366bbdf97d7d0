"""The deployment node with policies over real DDS: the contract check, a policy that emits NaN, a
policy that overruns, faults in RUN, and swapping policies. The policies are small ONNX graphs
built in the test with the robot's contract (deploy_fixtures.write_random_policy)."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytest.importorskip("motionvl.policy_io", reason="the policy I/O module (motionvl.policy_io) is not on this branch yet")

from rclpy.parameter import Parameter  # noqa: E402

from deploy_fixtures import ROBOT, mapped_robot, write_random_policy  # noqa: E402
from motionvl.deploy import Mode  # noqa: E402
from motionvl.robot import ConfigError  # noqa: E402
from motionvl.ros.deployment_node import DeploymentNode  # noqa: E402
from test_deployment_node import assert_damping, deployment, stand  # noqa: E402,F401

J = ROBOT.num_joints


def run_mode(node, drives, q=None):
    """STAND, then RUN; returns the first RUN command."""
    stand(node, drives, q)
    response = drives.call("set_mode/run")
    assert response.success, response.message
    return drives.step(ROBOT.default_pose if q is None else q)


def test_contract_mismatch_is_refused_naming_each_difference(deployment, tmp_path, ros_context):
    kp = tuple(v * (1.5 if i == 3 else 1.0) for i, v in enumerate(ROBOT.kp))
    wrong = write_random_policy(tmp_path / "wrong.onnx", robot=mapped_robot(), kp=kp, control_dt=0.025)
    with pytest.raises(ConfigError) as refused:
        DeploymentNode(context=ros_context, namespace="/refused", parameter_overrides=[
            Parameter("policy", value=str(wrong)), Parameter("realtime_priority", value=0),
            Parameter("writer_discovery_seconds", value=0.0)])
    assert "kp: policy" in str(refused.value) and "control_dt: policy" in str(refused.value)

    node, drives = deployment("pd")
    node.set_parameters([Parameter("policy", value=str(wrong))])
    response = drives.call("load_policy")
    assert not response.success and "kp: policy" in response.message and "control_dt" in response.message
    good = write_random_policy(tmp_path / "good.onnx", robot=mapped_robot())
    response = drives.call("load_policy", path=str(good))  # the request names the file: one call
    assert response.success, response.message
    assert node.get_parameter("policy").value == str(good)  # the parameter names what is loaded


@pytest.mark.parametrize("path", ["pd", "torque"])
def test_nan_from_the_policy_damps_at_the_next_command(deployment, tmp_path, path):
    policy = write_random_policy(tmp_path / "nan.onnx", robot=mapped_robot(), kind="nan")
    node, drives = deployment(path, policy=str(policy), stand_seconds=0.1 if path == "pd" else 0.02)
    command = run_mode(node, drives)  # the first RUN cycle runs the policy
    if path == "torque":  # (its target, NaN here, would take effect at the next PD cycle)
        assert node.controller.mode == Mode.RUN
        command = drives.step(ROBOT.default_pose)
    assert_damping(command, drives, node)
    fault = node.controller.modes.faults[0]
    assert fault.kind == "non_finite_policy" and "before scaling" in fault.reason
    assert ROBOT.joint_names[3] in fault.reason


@pytest.mark.parametrize("path", ["pd", "torque"])
def test_policy_overrunning_its_periods_damps(deployment, tmp_path, path):
    """A policy step not back by its deadline: its cycle commands damping on schedule (RUN kept), and
    so does every cycle after it until the overrun fault latches, once overrun_periods policy periods
    have passed without a step of their own. Each step sleeps overrun_periods + 2 periods: time.sleep
    never returns early, so it overruns on any machine (a heavy graph did not on a fast one)."""
    periods = 2
    policy = write_random_policy(tmp_path / "p.onnx", robot=mapped_robot())
    node, drives = deployment(path, policy=str(policy), overrun_periods=periods, policy_deadline_share=0.5,
                              stand_seconds=0.1 if path == "pd" else 0.02)
    deployed = node.controller.policy
    step = deployed.act

    def overrunning_step(obs):
        time.sleep((periods + 2) * ROBOT.control_dt)
        return step(obs)

    deployed.act = overrunning_step  # fault injection into the core's policy, the node untouched
    command = run_mode(node, drives)
    if path == "torque":  # the first PD cycle commands RUN's entry target; the next ones need the step
        assert node.controller.mode == Mode.RUN and node.controller.stats.late_cycles == 0
        command = drives.step(ROBOT.default_pose)
    assert_damping(command, drives, node, mode=None)  # the step is late
    commands = 1
    while not node.controller.modes.faults and commands < 10_000:
        assert_damping(drives.step(ROBOT.default_pose), drives, node, mode=None)
        commands += 1
    fault = node.controller.modes.faults[0]
    assert fault.kind == "overrun" and f"(limit {periods} policy periods" in fault.reason, fault
    assert node.controller.stats.late_cycles >= 1
    assert_damping(drives.step(ROBOT.default_pose), drives, node)


def test_faults_in_run_and_a_swap_in_damp(deployment, tmp_path):
    policy = write_random_policy(tmp_path / "p.onnx", robot=mapped_robot())
    node, drives = deployment("torque", policy=str(policy), stand_seconds=0.02)
    first = run_mode(node, drives)
    assert node.controller.mode == Mode.RUN and np.any(first.tau != 0)
    response = drives.call("load_policy")
    assert not response.success and "only in PASSIVE or DAMP" in response.message
    bad = np.where(np.arange(J) == 9, ROBOT.upper[9] + 0.4, ROBOT.default_pose)
    assert_damping(drives.step(bad), drives, node)
    assert node.controller.modes.faults[0].kind == "joint_limit"
    other = write_random_policy(tmp_path / "other.onnx", robot=mapped_robot(), seed=1)
    node.set_parameters([Parameter("policy", value=str(other))])
    response = drives.call("load_policy")  # in DAMP: allowed, the fault stays latched
    assert response.success, response.message
    assert not drives.call("set_mode/stand").success


def with_metadata(source, target, **values) -> str:
    """`source` written to `target` with metadata entries replaced by raw JSON text."""
    import onnx

    model = onnx.load(str(source))
    for prop in model.metadata_props:
        if prop.key in values:
            prop.value = values[prop.key]
    onnx.save(model, str(target))
    return str(target)


def test_a_contract_of_wrong_types_or_non_finite_numbers_is_refused(deployment, tmp_path):
    """A malformed contract is a refusal naming it, never an exception out of the service (which would
    end the node: the robot left to its drives' watchdog); a NaN action clip or gait period, which
    no robot-side comparison sees, is refused at load rather than found in RUN."""
    good = write_random_policy(tmp_path / "good.onnx", robot=mapped_robot())
    node, drives = deployment("pd")
    cases = {"control_dt": ('"fast"', "unreadable policy contract"), "action_clip": ("NaN", "action_clip"),
             "gait_period": ("Infinity", "gait_period")}
    for key, (raw, named) in cases.items():
        bad = with_metadata(good, tmp_path / f"bad_{key}.onnx", **{key: raw})
        node.set_parameters([Parameter("policy", value=bad)])
        response = drives.call("load_policy")
        assert not response.success and named in response.message, response.message
    assert node.controller.policy is None
    drives.step(ROBOT.default_pose)  # the node still answers

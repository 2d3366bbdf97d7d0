"""The deployment node's real-time promises over real DDS, in order and counts (cycle indices from
~/cycle), never wall time: a hung policy step holds neither the commands nor the e-stop; joint
names given twice are refused and names of other joints ignored and counted; frozen values are a
fault (the IMU always, joint states in RUN); cmd_vel as Twist or TwistStamped, and a publisher of
the other type reported. The processes' own promises (exit damping after a hung step and when the
shutdown budget runs out; no RUN after a stall) are in test_deployment_exit.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from geometry_msgs.msg import Twist, TwistStamped  # noqa: E402
from rclpy.node import Node  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from deploy_fixtures import ROBOT, mapped_robot, write_random_policy  # noqa: E402
from motionvl.deploy import Mode  # noqa: E402
from test_deployment_node import assert_damping, deployment, enter_stand, stand  # noqa: E402,F401
from waiting import wait_for  # noqa: E402

J = ROBOT.num_joints


def cycle_of(drives, count_before: int) -> tuple[int, str]:
    """The ~/cycle message that follows the command counted at `count_before` (index, command mode)."""
    assert wait_for(lambda: len(drives.cycles) > count_before), "no ~/cycle after the command"
    with drives.lock:
        return drives.cycles[count_before]


@pytest.mark.parametrize("deadline_share", [0.5, 500.0], ids=["deadline", "waiting"])
def test_estop_is_answered_while_a_policy_step_hangs(deployment, tmp_path, deadline_share):
    """A policy step that never returns (until the test lets it): with the default deadline every state
    is still answered on schedule, by damping (RUN kept), one cycle each; with a deadline long enough for
    the cycle to be waiting on the step, the e-stop ends the wait. Either way the e-stop is answered while
    the step hangs, and the command of the very next cycle is damping, latched."""
    policy = write_random_policy(tmp_path / "p.onnx", robot=mapped_robot())
    node, drives = deployment("pd", policy=str(policy), publish_cycle_stamps=True,
                              policy_deadline_share=deadline_share)
    stand(node, drives)
    step, entered, release = node.controller.policy.act, threading.Event(), threading.Event()

    def hung_step(obs):
        entered.set()
        release.wait(120.0)
        return step(obs)

    node.controller.policy.act = hung_step  # fault injection into the core's policy, the node untouched
    try:
        assert drives.call("set_mode/run").success
        before = len(drives.cycles)
        if deadline_share < 1:
            first = drives.step(ROBOT.default_pose)  # the first RUN cycle starts the step that hangs
            assert wait_for(entered.is_set), "the policy step did not start"
            assert_damping(first, drives, node, mode=Mode.RUN)
            for _ in range(5):  # on schedule: a cycle per state, each damping, the indices consecutive
                assert_damping(drives.step(ROBOT.default_pose), drives, node, mode=Mode.RUN)
            with drives.lock:
                indices = [i for i, _ in drives.cycles[before:before + 6]]
                modes = {m for _, m in drives.cycles[before:before + 6]}
            assert indices == list(range(indices[0], indices[0] + 6)) and modes == {"DAMP"}
            assert node.controller.stats.late_cycles >= 6
        else:
            drives.publish(ROBOT.default_pose)  # the first RUN cycle waits for the step
            assert wait_for(entered.is_set), "the policy step did not start"
        response = drives.call("estop")
        assert not release.is_set() and response.success, response.message  # answered while the step hangs
        latched_after = int(response.message.rsplit("after cycle ", 1)[1])
        if deadline_share >= 1:  # the cycle that waited ended with damping, just after the e-stop
            cycle, mode = cycle_of(drives, before)
            assert (cycle, mode) == (latched_after, "DAMP")
        count = len(drives.cycles)
        command = drives.step(ROBOT.default_pose)
        assert_damping(command, drives, node)
        assert cycle_of(drives, count) == (latched_after + 1, "DAMP")  # at most one cycle later
        assert "estop" in node.controller.modes.faults[0].kind
    finally:
        release.set()
    # the hung step's late result changes nothing: still damping, latched
    assert_damping(drives.step(ROBOT.default_pose), drives, node)
    assert not drives.call("set_mode/stand").success


def joint_state(drives, names, positions, stamp_step: float = 0.02) -> JointState:
    drives.stamp += stamp_step
    msg = JointState(name=list(names), position=[float(v) for v in positions], velocity=[0.0] * len(names))
    msg.header.stamp.sec, msg.header.stamp.nanosec = int(drives.stamp), int(round((drives.stamp % 1) * 1e9))
    return msg


def step_message(drives, msg):
    """Publish the IMU of a still robot and `msg`; the command it triggered."""
    before = drives.count()
    drives.publish(ROBOT.default_pose, stamp=drives.stamp, joints=False)  # the IMU of a still robot
    drives.state_pub.publish(msg)
    assert wait_for(lambda: drives.count() > before, timeout=10.0), "no command answered the state"
    return drives.command(before)


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
def test_joint_names_twice_are_refused_and_other_joints_ignored_and_counted(deployment, strict):
    """A driver that also reports hands and head: our motors are taken from the message and the other
    names counted on /diagnostics (strict_joint_names refuses such a message). A name given twice (which
    value is the motor's?) is refused: the command it triggers damps, and the wrong value is never used."""
    node, drives = deployment("pd", strict_joint_names=strict)
    m = drives.mapping
    stand(node, drives)
    motor_pos = m.to_motor_position(ROBOT.default_pose)
    extra = joint_state(drives, [*m.motor_names, "left_hand", "head_yaw"], [*motor_pos, 0.3, -0.2])
    command = step_message(drives, extra)
    if strict:
        assert_damping(command, drives, node)
        fault = node.controller.modes.faults[0]
        assert fault.kind == "unusable_input" and "left_hand" in fault.reason and "strict_joint_names" in fault.reason
        return
    assert np.any(command.kp > 0), "extra names must not stop the robot"
    assert node.controller.inputs.extra_names == {"left_hand": 1, "head_yaw": 1}
    assert wait_for(lambda: "left_hand (" in drives.diagnostic_values().get("extra_joint_names", ""))
    knee = m.motor_names[0]  # given twice: the second value far off
    twice = joint_state(drives, [*m.motor_names, knee], [*motor_pos, motor_pos[0] + 1.0])
    command = step_message(drives, twice)
    assert_damping(command, drives, node)
    fault = node.controller.modes.faults[0]
    assert fault.kind == "unusable_input" and "more than once" in fault.reason and knee in fault.reason


def test_frozen_imu_faults_always_and_frozen_joints_only_in_run(deployment, tmp_path):
    """frozen_samples readings in a row with every value bit-identical: a stuck driver that still stamps.
    The IMU: a fault in STAND. Joint states: no fault in STAND (a robot may hang still), a fault in RUN,
    at the command of the frozen_samples-th identical state (counted from RUN on)."""
    n = 5
    node, drives = deployment("pd", frozen_samples=n)
    enter_stand(drives)
    for _ in range(3 * n):  # still joints in STAND (the IMU noisy): no fault
        assert np.any(drives.step(ROBOT.default_pose).kp >= 0) and not node.controller.modes.faults
    damped_at = None
    for k in range(1, n + 3):  # now the IMU stuck too
        command = drives.step(ROBOT.default_pose, noise=False)
        if command.mode == Mode.DAMP:
            damped_at = k
            break
    # the IMU comes on its own best-effort topic: the n-th reading reaches the same or the next cycle
    assert damped_at in (n - 1, n, n + 1), damped_at  # (the first reading of the run may repeat the last noisy one)
    fault = node.controller.modes.faults[0]
    assert fault.kind == "frozen_state" and fault.reason.startswith("imu:"), fault

    policy = write_random_policy(tmp_path / "p.onnx", robot=mapped_robot())
    node, drives = deployment("pd", policy=str(policy), frozen_samples=n)
    stand(node, drives)
    assert drives.call("set_mode/run").success
    commands = [drives.step(ROBOT.default_pose) for _ in range(n)]  # n identical joint states in RUN
    assert all(np.any(c.kp > 0) for c in commands[:-1]), "damped before n identical states"
    assert_damping(commands[-1], drives, node)
    fault = node.controller.modes.faults[0]
    assert fault.kind == "frozen_state" and fault.reason.startswith("motor_states:"), fault


@pytest.mark.parametrize("kind", ["twist", "twist_stamped"])
def test_cmd_vel_of_either_type_and_a_wrong_type_publisher_reported(deployment, kind):
    """The publisher of the other type is another process's (one DDS participant refuses two types on a
    topic): here a node on a context of its own."""
    node, drives = deployment("pd", cmd_vel_type=kind)
    right, wrong = (Twist, TwistStamped) if kind == "twist" else (TwistStamped, Twist)
    publisher = drives.node.create_publisher(right, "cmd_vel", 1)
    other = rclpy.Context()
    rclpy.init(context=other)
    stranger = Node(f"stranger_{kind}", namespace=drives.node.get_namespace(), context=other)
    intruder = stranger.create_publisher(wrong, "cmd_vel", 1)
    msg = right()
    twist = msg if right is Twist else msg.twist
    twist.linear.x, twist.angular.z = 0.4, -0.3

    def heard() -> bool:
        publisher.publish(msg)
        drives.step(ROBOT.default_pose)  # the loop takes cmd_vel at its wakes
        return np.allclose(node.controller.velocity.requested, [0.4, 0.0, -0.3])

    assert wait_for(heard, timeout=20.0), f"{kind} on cmd_vel not heard"
    wrong_type = f"geometry_msgs/msg/{wrong.__name__}"
    assert wait_for(lambda: wrong_type in drives.diagnostic_values().get("cmd_vel_wrong_type", ""), timeout=20.0)
    assert stranger.get_name() in drives.diagnostic_values()["cmd_vel_wrong_type"]
    stranger.destroy_publisher(intruder)
    stranger.destroy_node()
    rclpy.try_shutdown(context=other)
    assert wait_for(lambda: drives.diagnostic_values().get("cmd_vel_wrong_type") == "none", timeout=20.0)


def test_cpu_affinity_pins_the_control_loop_and_a_bad_list_is_refused(deployment, ros_context):
    import os

    cpu = sorted(os.sched_getaffinity(0))[-1]
    node, drives = deployment("pd", cpu_affinity=[cpu], gil_switch_interval=0.001)
    drives.step(ROBOT.default_pose)
    assert wait_for(lambda: f"CPUs [{cpu}]" in drives.diagnostic_values().get("loop_thread", "")), \
        drives.diagnostic_values().get("loop_thread")
    assert drives.diagnostic_values()["gil_switch_interval_ms"] == "1.0"
    from rclpy.parameter import Parameter

    from motionvl.robot import ConfigError
    from motionvl.ros.deployment_node import DeploymentNode

    with pytest.raises(ConfigError, match="cpu_affinity"):
        DeploymentNode(context=ros_context, namespace="/bad_cpus", parameter_overrides=[
            Parameter("cpu_affinity", value=["one"]), Parameter("realtime_priority", value=0)])

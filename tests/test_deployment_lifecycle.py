"""The deployment node as a lifecycle node over real DDS: a lifecycle client (lifecycle_msgs/srv/ChangeState,
what `ros2 lifecycle set` and lifecycle managers call) drives it while the test's drives record what reaches the
motors in each state (see the lifecycle in motionvl/ros/deployment_node.py's docstring)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from lifecycle_msgs.msg import Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState, GetState  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from deploy_fixtures import ROBOT, mapped_robot, write_random_policy  # noqa: E402
from motionvl.deploy import Mode  # noqa: E402
from test_deployment_node import assert_damping, deployment, stand  # noqa: E402,F401
from waiting import wait_for  # noqa: E402

CONFIGURE, ACTIVATE = Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE
DEACTIVATE, CLEANUP = Transition.TRANSITION_DEACTIVATE, Transition.TRANSITION_CLEANUP


class Lifecycle:
    """The deployment node's lifecycle services, called from the drives' node."""

    def __init__(self, drives):
        self.drives = drives
        self.change = drives.node.create_client(ChangeState, "deployment/change_state")
        self.get = drives.node.create_client(GetState, "deployment/get_state")

    def _call(self, client, request):
        assert client.wait_for_service(timeout_sec=10.0), f"no service {client.srv_name}"
        future = client.call_async(request)
        assert wait_for(future.done, timeout=30.0), f"{client.srv_name} did not answer"
        return future.result()

    def set(self, transition: int) -> bool:
        return self._call(self.change, ChangeState.Request(transition=Transition(id=transition))).success

    def state(self) -> str:
        return self._call(self.get, GetState.Request()).current_state.label

    def writers(self) -> int:
        """Publishers on the drives' command topic."""
        return self.drives.node.count_publishers(f"{self.drives.node.get_namespace()}/{self.drives.topic}")


def assert_zero_torque(command) -> None:
    """PASSIVE's command: no stiffness, no damping, no torque."""
    assert np.all(command.kp == 0) and np.all(command.kd == 0) and np.all(command.tau_ff == 0)


def commands_since(drives, index: int) -> list:
    return [drives.command(i) for i in range(index, drives.count())]


def assert_silent(drives, life, q) -> None:
    """States reach an inactive node and no command answers them (checked after a round trip to it)."""
    before = drives.count()
    for _ in range(5):
        drives.publish(q)
    assert life.state() == "inactive"
    assert drives.count() == before


def test_commands_flow_only_while_active_passive_first_and_damping_on_deactivate(deployment, tmp_path):
    policy = write_random_policy(tmp_path / "p.onnx", robot=mapped_robot())
    node, drives = deployment("pd", bring_up="unconfigured", policy=str(policy))
    life, q = Lifecycle(drives), ROBOT.default_pose

    # unconfigured: no command publisher exists, nothing can reach the motors; requests say what to do
    assert life.state() == "unconfigured" and node.controller is None and life.writers() == 0
    refused = drives.call("set_mode/stand")
    assert not refused.success and "configure" in refused.message, refused.message
    assert drives.call("estop").success
    assert not drives.call("rearm").success
    assert not drives.call("load_policy", path=str(policy)).success

    # configure: the policy loaded and checked, the publishers made; still no command
    assert life.set(CONFIGURE)
    assert life.state() == "inactive" and node.controller.policy is not None
    assert wait_for(lambda: life.writers() == 1)
    refused = drives.call("set_mode/stand")
    assert not refused.success and "activate" in refused.message, refused.message
    other = write_random_policy(tmp_path / "other.onnx", robot=mapped_robot(), seed=1)
    loaded = drives.call("load_policy", path=str(other))  # inactive: loads (and the 'policy' parameter names it)
    assert loaded.success and str(node.controller.policy.path) == str(other), loaded.message
    assert node.get_parameter("policy").value == str(other)
    assert_silent(drives, life, q)
    assert drives.count() == 0

    # activate: the loop in PASSIVE (zero torque) until the operator stands the robot up
    assert life.set(ACTIVATE) and life.state() == "active"
    assert_zero_torque(drives.step(q))
    assert node.controller.mode == Mode.PASSIVE
    standing = stand(node, drives)
    assert np.all(standing[-1].kp > 0)

    # deactivate from STAND: DAMP, the exit window's damping commands (and their joint-space twins), then silence
    before = drives.count()
    assert life.set(DEACTIVATE) and life.state() == "inactive"
    damping = node.exit_commands  # the exit window's
    assert damping >= 1
    assert wait_for(lambda: drives.count() == before + damping)
    for command in commands_since(drives, before):
        assert_damping(command, drives, node)
    assert wait_for(lambda: len(drives.joint_commands) == drives.count())
    assert drives.status()["mode"] == "DAMP"
    assert_silent(drives, life, q)

    # activate again: from DAMP back to PASSIVE
    assert life.set(ACTIVATE)
    assert_zero_torque(drives.step(q))
    assert node.controller.mode == Mode.PASSIVE

    # an e-stop while inactive latches: the next activate commands damping, not PASSIVE
    assert life.set(DEACTIVATE)
    estop = drives.call("estop")
    assert estop.success and "latched" in estop.message, estop.message
    assert life.set(ACTIVATE)
    assert_damping(drives.step(q), drives, node)
    assert [f.kind for f in node.controller.modes.faults] == ["estop"]

    # cleanup: the publishers go (a restart's clean slate: configure and activate start in PASSIVE again)
    assert life.set(DEACTIVATE) and life.set(CLEANUP)
    assert life.state() == "unconfigured" and node.controller is None
    assert wait_for(lambda: life.writers() == 0)
    assert life.set(CONFIGURE) and life.set(ACTIVATE)
    assert wait_for(lambda: life.writers() == 1)
    assert_zero_torque(drives.step(q))

    # shutdown from active: deactivate's damping, then finalized with nothing left to command
    before = drives.count()
    assert life.set(Transition.TRANSITION_ACTIVE_SHUTDOWN) and life.state() == "finalized"
    assert wait_for(lambda: drives.count() > before)
    for command in commands_since(drives, before):
        assert np.all(command.kp == 0) and np.all(command.kd > 0)
    assert wait_for(lambda: life.writers() == 0)


def test_a_policy_that_cannot_load_fails_configure_and_the_node_stays_unconfigured(deployment, tmp_path):
    missing = tmp_path / "missing.onnx"
    node, drives = deployment("pd", bring_up="unconfigured", policy=str(missing))
    life = Lifecycle(drives)
    assert not life.set(CONFIGURE)
    assert life.state() == "unconfigured" and node.controller is None and life.writers() == 0
    assert str(missing) in node._configure_error, node._configure_error
    wrong = write_random_policy(tmp_path / "wrong.onnx", robot=mapped_robot(), control_dt=0.025)
    node.set_parameters([Parameter("policy", value=str(wrong))])
    assert not life.set(CONFIGURE)
    assert life.state() == "unconfigured" and "policy refused" in node._configure_error, node._configure_error
    # alive: its services answer, and a good policy configures
    assert drives.call("estop").success
    node.set_parameters([Parameter("policy", value=str(write_random_policy(tmp_path / "p.onnx",
                                                                            robot=mapped_robot())))])
    assert life.set(CONFIGURE) and life.state() == "inactive"
    assert wait_for(lambda: life.writers() == 1)


def test_a_transition_that_errs_damps_and_leaves_the_node_unconfigured(deployment):
    """A deactivation whose control loop does not end (its wait hangs): the damping goes out from the
    transition's thread, the transition errs, on_error releases everything."""
    node, drives = deployment("pd", exit_damping_seconds=0.1)
    life = Lifecycle(drives)
    assert life.state() == "active"  # bring_up's default
    stand(node, drives)
    released = threading.Event()

    def hang(timeout):
        released.wait()
        return 0

    node.owned.wait = hang  # the loop's next wake never comes
    before = drives.count()
    try:
        assert not life.set(DEACTIVATE)
        assert life.state() == "unconfigured" and node.controller is None
        sent = round(0.1 / ROBOT.control_dt)  # exit_damping_seconds at the pd path's command rate
        assert wait_for(lambda: drives.count() >= before + sent)
        commands = commands_since(drives, before)
        assert len(commands) == sent
        for command in commands:
            assert np.all(command.kp == 0) and np.all(command.kd > 0) and np.all(command.tau_ff == 0)
        assert wait_for(lambda: life.writers() == 0)
    finally:
        released.set()

"""launch_testing check of deploy.launch.py sim:=true, for a ROS 2 Kilted install (colcon test / pytest).

launch, launch_ros and launch_testing are not on PyPI: in the pip-only route this module is
skipped with that reason, and `motionvl deploy-sim` (tests/test_deploy_sim.py) runs the same
nodes composed in one process instead. Run it after `colcon build`:

    colcon test --packages-select motionvl --pytest-args ros_tests
    # or: source install/setup.bash && python -m pytest ros_tests/test_deploy_launch.py

It builds a small random policy with the robot's contract, launches the deployment node with the
simulated robot (hardware emulation, gantry), and checks that the node reaches RUN, publishes
drive commands and diagnostics, and that every process exits cleanly on shutdown (the deployment
node damps first).
"""

import os
import tempfile
import time
import unittest
from pathlib import Path

import pytest

launch_testing = pytest.importorskip(
    "launch_testing", reason="launch_testing is not installed (not on PyPI): needs a ROS 2 distribution install")
launch_ros = pytest.importorskip("launch_ros", reason="launch_ros is not installed (not on PyPI)")

import launch  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from motionvl.msg import DeploymentStatus, LowCommand  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
from motionvl.deploy.random_policy import write_random_policy  # noqa: E402

POLICY = Path(tempfile.mkdtemp()) / "random_policy.onnx"
RUN_COMMANDS = 20  # drive commands seen in RUN before the graph is judged to drive the simulated robot


@pytest.mark.launch_test
def generate_test_description():
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    write_random_policy(POLICY)
    deploy = launch.actions.IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(ROOT / "launch" / "deploy.launch.py")),
        launch_arguments={"sim": "true", "policy": str(POLICY), "path": "pd"}.items())
    return launch.LaunchDescription([deploy, launch_testing.actions.ReadyToTest()])


class TestDeployGraph(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("deploy_launch_probe")

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def test_reaches_run_and_commands_the_simulated_drives(self, proc_output):
        # counts, not time: spin until RUN is reported and drive commands arrived after it (a status and the
        # commands travel on different topics, so the first RUN status can come before any RUN command)
        statuses, commands = [], []
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)

        def on_command(msg):
            if any(s.get("mode") == "RUN" for s in statuses):
                commands.append(msg)
        subs = [self.node.create_subscription(DeploymentStatus, "/deployment/status",
                                              lambda m: statuses.append({"mode": m.mode_name}), latched),
                self.node.create_subscription(LowCommand, "/low_command", on_command, 10)]
        try:
            end = time.monotonic() + 120.0
            while time.monotonic() < end and len(commands) < RUN_COMMANDS:
                rclpy.spin_once(self.node, timeout_sec=0.1)
        finally:
            for sub in subs:
                self.node.destroy_subscription(sub)
        self.assertTrue(any(s.get("mode") == "RUN" for s in statuses), f"never reached RUN: {statuses[-3:]}")
        self.assertGreaterEqual(len(commands), RUN_COMMANDS, "too few drive commands in RUN")
        self.assertEqual(len(commands[-1].motor_cmd), 12)
        proc_output.assertWaitFor("gantry released", timeout=30, stream="stderr")


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_exit_codes(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[launch_testing.asserts.EXIT_OK])

    def test_deployment_damps_on_exit(self, proc_output):
        # ROS logging writes to stderr
        launch_testing.asserts.assertInStderr(proc_output, "damping commands", "deployment_node")

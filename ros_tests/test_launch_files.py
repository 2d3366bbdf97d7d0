"""launch_testing checks of the launch files, for a ROS 2 Kilted install (colcon test / pytest).

launch, launch_ros and launch_testing are not on PyPI, so in the pip-only route this module
is skipped (`make test` only collects tests/, where tests/launch_model.py evaluates the launch files
and tests/test_launch_arguments.py starts their node command lines, and tests/test_search_loop.py runs the
same nodes without launch). Run it after
`colcon build`:

    colcon test --packages-select motionvl --pytest-args ros_tests
    # or: source install/setup.bash && python -m pytest ros_tests

It starts train.launch.py with the offline backends and playback:=ros on a tiny search (one iteration of
one candidate, a few PPO iterations of 16 environments) and checks that a policy_trainer beats its heartbeat,
that the simulator publishes /joint_states with the robot's 12 joints once a playback starts it, that the search's first iteration
is decided and that the search finishes with an exported policy, then that every process exits
cleanly.
"""

import json
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
import yaml  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from motionvl.msg import JsonRecord, TrainerHeartbeat  # noqa: E402

LAUNCH_DIR = Path(__file__).resolve().parents[1] / "launch"
WORK = Path(tempfile.mkdtemp(prefix="motionvl_train_launch_"))
RUN_DIR = WORK / "run"
# tests/data/search_tiny.yaml, one candidate, the final training one iteration
TINY = {**yaml.safe_load((Path(__file__).resolve().parents[1] / "tests" / "data" / "search_tiny.yaml").read_text()),
        "candidates": 1, "final_iterations": 1}


@pytest.mark.launch_test
def generate_test_description():
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    settings = WORK / "tiny.yaml"
    settings.write_text(yaml.safe_dump(TINY))
    train = launch.actions.IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH_DIR / "train.launch.py")),
        launch_arguments={"task": "walk forward with straight knees", "run_dir": str(RUN_DIR),
                          "settings_file": str(settings), "record": "true", "playback": "ros"}.items())
    return launch.LaunchDescription([train, launch_testing.actions.ReadyToTest()])


class TestTrainGraph(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("train_launch_probe")

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def _collect(self, msg_type, topic, qos, until, timeout):
        received = []
        sub = self.node.create_subscription(msg_type, topic, received.append, qos)
        try:
            end = time.monotonic() + timeout
            while time.monotonic() < end and not until(received):
                rclpy.spin_once(self.node, timeout_sec=0.1)
        finally:
            self.node.destroy_subscription(sub)
        return received

    def test_the_graph_comes_up_and_the_search_finishes(self, proc_output):
        beats = self._collect(TrainerHeartbeat, "/trainer/heartbeat", 10, lambda r: len(r) >= 1, 60.0)
        self.assertTrue(beats, "no policy_trainer heartbeat")
        # the simulator is held until the first playback (after the start reward's training) resets it
        joints = self._collect(JointState, "/joint_states", 10, lambda r: len(r) >= 10, 600.0)
        self.assertGreaterEqual(len(joints), 10, "no /joint_states from the simulator")
        self.assertEqual(len(joints[-1].name), 12)
        latched = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)

        def decided(records):
            return any(json.loads(r.json)["kind"] == "decided" for r in records)
        records = self._collect(JsonRecord, "/search/ledger", latched, decided, 600.0)
        self.assertTrue(decided(records), "the search's first iteration was not decided")
        proc_output.assertWaitFor("search finished", timeout=600, stream="stderr")
        self.assertTrue((RUN_DIR / "policy.onnx").exists() and (RUN_DIR / "report.html").exists())


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_exit_codes(self, proc_info):
        # the orchestrator ends the launch; every node stops cleanly and exits 0 (motionvl.ros.runtime)
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=[launch_testing.asserts.EXIT_OK])

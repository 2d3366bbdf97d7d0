"""The simulator node over real DDS: rclpy nodes in one process, each on its own executor thread.

Each test runs the node in its own namespace and rclpy Context (see conftest.ros_context).
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from geometry_msgs.msg import Twist, TwistStamped  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rcl_interfaces.msg import Log  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import Imu, JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from motionvl.robot import load_robot_config  # noqa: E402
from motionvl.ros.simulator_node import SimulatorNode  # noqa: E402
from spinning import Spinners  # noqa: E402
from waiting import wait_for  # noqa: E402

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
ROSOUT = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
ROBOT = load_robot_config()


class Probe:
    """A test node that records what the simulator publishes and sends it commands.

    It also reads the simulator's log lines on /rosout: a refused command is logged in the
    callback that refused it, so "the command arrived and was refused" is seen, not assumed
    from a quiet moment (the command subscriptions keep only the newest message, so a later
    good command could replace a bad one before it is read, and a test would pass untested).
    """

    def __init__(self, context, namespace: str):
        self.node = Node(f"probe_{uuid.uuid4().hex[:6]}", namespace=namespace, context=context)
        self.lock = threading.Lock()
        self.joint_states: list = []
        self.imu: list = []
        self.odom: list = []
        self.command: list = []
        self.clock: list = []
        self.log: list = []
        self.logger_name = f"{namespace.strip('/')}.simulator"
        n = self.node
        n.create_subscription(JointState, "joint_states", self._keep(self.joint_states), RELIABLE)
        n.create_subscription(Imu, "imu/data", self._keep(self.imu), qos_profile_sensor_data)
        n.create_subscription(Odometry, "odom", self._keep(self.odom), RELIABLE)
        n.create_subscription(TwistStamped, "simulator/command", self._keep(self.command), RELIABLE)
        n.create_subscription(Clock, "/clock", self._keep(self.clock), qos_profile_sensor_data)
        n.create_subscription(Log, "/rosout", self._keep(self.log), ROSOUT)
        self.position_pub = n.create_publisher(Float64MultiArray, "joint_position_commands", 1)
        self.effort_pub = n.create_publisher(Float64MultiArray, "joint_effort_commands", 1)
        self.named_pub = n.create_publisher(JointState, "joint_commands", 1)
        self.cmd_vel_pub = n.create_publisher(Twist, "cmd_vel", 1)
        self.reset_client = n.create_client(Trigger, "simulator/reset")

    def _keep(self, store: list):
        def callback(msg):
            with self.lock:
                store.append((time.monotonic(), msg))
        return callback

    def last(self, store: list):
        with self.lock:
            return store[-1][1] if store else None

    def refused(self, *what: str) -> bool:
        """Whether the simulator logged that it ignored a command of one of `what` (e.g. "cmd_vel"): its inbox's
        "<topic>: dropped a message (N so far): <what> ignored, ..." line, throttled per topic."""
        with self.lock:
            return any(m.name == self.logger_name and "dropped a message" in m.msg
                       and any(f"{w} ignored" in m.msg for w in what) for _, m in self.log)

    def connected(self) -> bool:
        return all(p.get_subscription_count() > 0 for p in
                   (self.position_pub, self.effort_pub, self.named_pub, self.cmd_vel_pub))

    def send(self, pub, data) -> None:
        pub.publish(Float64MultiArray(data=[float(v) for v in data]))


@pytest.fixture
def ros_graph(ros_context):
    """start(**params) -> (simulator node, probe), each spinning on its own executor thread."""
    spinners = Spinners(ros_context)

    def start(**params):
        ns = f"/t{uuid.uuid4().hex[:8]}"
        sim = SimulatorNode(context=ros_context, namespace=ns,
                            parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        probe = Probe(ros_context, ns)
        spinners.add(sim, threads=1)  # as simulator_node's main() spins it
        spinners.add(probe.node)
        assert wait_for(lambda: probe.connected() and probe.last(probe.joint_states) is not None), "no discovery"
        return sim, probe

    yield start
    spinners.shutdown()


def test_publishes_the_robot_state(ros_graph):
    """What is published (the rate in real time is a benchmark matter; the simulated-time rate is
    checked exactly in test_as_fast_as_possible_with_clock)."""
    sim, probe = ros_graph(publish_rate_hz=40.0)
    assert wait_for(lambda: len(probe.joint_states) >= 20, timeout=30.0)
    with probe.lock:
        stamps = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in probe.joint_states])
    assert np.all(np.diff(stamps) > 0), "stamps (simulated time) increase message by message"
    js = probe.last(probe.joint_states)
    assert list(js.name) == list(ROBOT.joint_names) and len(js.name) == 12
    assert len(js.position) == len(js.velocity) == len(js.effort) == 12
    np.testing.assert_allclose(js.position, ROBOT.default_pose, atol=0.1)
    # the other streams flow too, stamped with simulated time
    assert wait_for(lambda: probe.last(probe.imu) is not None and probe.last(probe.odom) is not None
                    and probe.last(probe.clock) is not None)
    imu, odom = probe.last(probe.imu), probe.last(probe.odom)
    assert imu.linear_acceleration.z == pytest.approx(9.81, abs=1.5)  # standing still: specific force up
    assert odom.pose.pose.position.z > 0.75 and odom.child_frame_id == ROBOT.base_link
    stamp = js.header.stamp.sec + js.header.stamp.nanosec * 1e-9
    assert 0.0 < stamp <= sim.sim.data.time, "stamped with simulated time (not the wall clock), never ahead of it"


def test_reset_service(ros_graph):
    sim, probe = ros_graph()
    assert probe.reset_client.wait_for_service(timeout_sec=5.0)
    probe.send(probe.position_pub, ROBOT.default_pose + 0.2 * (ROBOT.upper - ROBOT.default_pose))
    assert wait_for(lambda: not np.allclose(sim.sim.target, ROBOT.default_pose))
    future = probe.reset_client.call_async(Trigger.Request())
    assert wait_for(future.done, timeout=5.0)
    assert future.result().success, future.result().message
    np.testing.assert_allclose(sim.sim.target, ROBOT.default_pose)
    before = probe.last(probe.clock).clock

    def later(clock):
        return (clock.sec, clock.nanosec) > (before.sec, before.nanosec)

    assert wait_for(lambda: later(probe.last(probe.clock).clock), timeout=10.0), "the clock must keep going after a reset"


def test_bad_commands_ignored_robot_stays_upright(ros_graph):
    sim, probe = ros_graph()
    nan = [math.nan] * 12
    for _ in range(20):
        probe.send(probe.position_pub, nan)
        probe.send(probe.position_pub, [0.1] * 11)  # wrong length
        probe.send(probe.position_pub, [math.inf] + [0.0] * 11)
        probe.named_pub.publish(JointState(name=["left_wing"], position=[0.3]))  # unknown joint
        probe.effort_pub.publish(Float64MultiArray(data=[1.0] * 12))  # wrong mode
        time.sleep(0.05)
    assert wait_for(lambda: probe.refused("joint_position_commands", "joint_commands (position)",
                                          "joint_effort_commands"), timeout=10.0)
    np.testing.assert_allclose(sim.sim.target, ROBOT.default_pose)
    odom = probe.last(probe.odom)
    assert odom.pose.pose.position.z > 0.75, "the robot must stay up on its last good target"
    js = probe.last(probe.joint_states)
    assert np.all(np.isfinite(js.position)) and np.all(np.isfinite(js.effort))

    # a good named command for one joint does go through, the others are held
    knee = ROBOT.joint_names.index("left_knee")
    probe.named_pub.publish(JointState(name=["left_knee"], position=[0.6]))
    assert wait_for(lambda: abs(probe.last(probe.joint_states).position[knee] - 0.6) < 0.05, timeout=5.0)
    expected = ROBOT.default_pose.copy()
    expected[knee] = 0.6
    np.testing.assert_allclose(sim.sim.target, expected)


def test_effort_mode_applies_torques(ros_graph):
    sim, probe = ros_graph(mode="effort", command_timeout=1.0)
    assert sim.sim.actuation == "damping"  # no torque command yet: the emulated driver damps
    torque = np.linspace(-4.0, 4.0, 12)
    torque[3] = 1000.0  # far over the knee's effort limit: clipped
    expected = torque.copy()
    expected[3] = ROBOT.effort_limit[3]

    def applied():
        probe.send(probe.effort_pub, torque)
        js = probe.last(probe.joint_states)
        return np.allclose(js.effort, expected, atol=1e-6)

    assert wait_for(applied, timeout=5.0, period=0.05), probe.last(probe.joint_states).effort
    assert sim.sim.actuation == "torque"
    # position commands are refused in effort mode
    probe.send(probe.position_pub, ROBOT.upper)
    assert wait_for(lambda: probe.refused("joint_position_commands"), timeout=10.0)
    np.testing.assert_allclose(sim.sim.target, ROBOT.default_pose)
    # stop sending: after command_timeout the watchdog switches to damping
    assert wait_for(lambda: sim.sim.actuation == "damping", timeout=5.0)


def test_cmd_vel_accepted(ros_graph):
    sim, probe = ros_graph(command_timeout=0.0)  # 0: keep the last command forever

    def twist(vx, vy, wz):
        msg = Twist()
        msg.linear.x, msg.linear.y, msg.angular.z = vx, vy, wz
        return msg

    probe.cmd_vel_pub.publish(twist(0.6, -0.1, 0.3))
    assert wait_for(lambda: probe.last(probe.command) is not None
                    and probe.last(probe.command).twist.linear.x == pytest.approx(0.6), timeout=5.0)
    cmd = probe.last(probe.command).twist
    assert (cmd.linear.y, cmd.angular.z) == (pytest.approx(-0.1), pytest.approx(0.3))
    probe.cmd_vel_pub.publish(twist(math.nan, 0.0, 0.0))  # rejected: the last good one stays
    assert wait_for(lambda: probe.refused("cmd_vel"), timeout=10.0)
    np.testing.assert_allclose(sim.sim.command, [0.6, -0.1, 0.3])


def test_cmd_vel_times_out(ros_graph):
    sim, probe = ros_graph(command_timeout=0.3)
    msg = Twist()
    msg.linear.x = 0.5
    probe.cmd_vel_pub.publish(msg)
    assert wait_for(lambda: sim.sim.command[0] == pytest.approx(0.5), timeout=5.0)
    assert wait_for(lambda: not sim.sim.command.any(), timeout=5.0)


@pytest.mark.parametrize("content, message", [
    (None, "robot config not found"),
    ("joints: [unclosed", "not valid YAML"),
])
def test_bad_robot_config_exits_nonzero(tmp_path, content, message):
    path = tmp_path / "robot.yaml"
    if content is not None:
        path.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "motionvl.ros.simulator_node", "--ros-args",
                           "-p", f"robot_config:={path}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc
    assert message in proc.stderr + proc.stdout


@pytest.mark.parametrize("param, message", [
    ("mode:=torque", "mode must be one of"),
    ("publish_rate_hz:=fast", "parameter publish_rate_hz"),
])
def test_bad_parameter_exits_nonzero(param, message):
    proc = subprocess.run([sys.executable, "-m", "motionvl.ros.simulator_node", "--ros-args", "-p", param],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert message in proc.stderr + proc.stdout


def test_as_fast_as_possible_with_clock(ros_graph):
    """Without real time every tick adds exactly one publish period (1 / publish_rate_hz) of
    simulated time (a whole number of physics steps at 50 Hz).

    Checked on the stamps, not against the wall clock, so a loaded machine cannot fail it.
    """
    sim, probe = ros_graph(realtime=False, publish_rate_hz=50.0)
    assert wait_for(lambda: len(probe.joint_states) >= 30, timeout=30.0)
    with probe.lock:
        stamps = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for _, m in probe.joint_states])
    steps = np.diff(stamps) / 0.02
    assert np.all(steps >= 1 - 1e-6), "simulated time only moves forward"
    assert np.allclose(steps, np.round(steps), atol=1e-6), "stamps advance in whole publish periods"
    c = probe.last(probe.clock).clock
    assert c.sec + c.nanosec * 1e-9 >= stamps[0]
    assert probe.last(probe.odom).pose.pose.position.z > 0.75

def test_lockstep_publishes_one_state_per_command(ros_graph):
    """Lockstep: after each state physics waits for a command, so (as fast as possible, a state per
    1 ms tick otherwise) each command brings exactly one state, one publish period later in
    simulated time. lockstep_wait_s covers the start, before the probe hears the first state."""
    sim, probe = ros_graph(mode="effort", realtime=False, publish_rate_hz=50.0, lockstep=True, lockstep_wait_s=5.0)
    with probe.lock:
        start = len(probe.joint_states)
    for _ in range(5):
        with probe.lock:
            before = len(probe.joint_states)
        probe.send(probe.effort_pub, np.zeros(12))
        assert wait_for(lambda before=before: len(probe.joint_states) > before), "no state answered the command"
    with probe.lock:
        states = [m for _, m in probe.joint_states[start - 1:]]
    assert len(states) == 1 + 5, "one state per command"
    stamps = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in states])
    np.testing.assert_allclose(np.diff(stamps), 0.02, atol=1e-6)


def _call(probe, client) -> str:
    assert client.wait_for_service(timeout_sec=10.0)
    future = client.call_async(Trigger.Request())
    assert wait_for(future.done, timeout=10.0)
    assert future.result().success, future.result().message
    return future.result().message


def test_hold_stops_the_simulation_until_reset(ros_graph, ros_context):
    """A held simulator steps and publishes nothing (the playback graph idles between candidates); ~/reset runs
    it again; with hold_until_reset it starts held."""
    sim, probe = ros_graph()
    hold = probe.node.create_client(Trigger, "simulator/hold")
    _call(probe, hold)
    held_at, received = sim.sim.data.time, len(probe.joint_states)
    time.sleep(0.5)  # ticks that would have stepped: none runs
    assert sim.sim.data.time == held_at and len(probe.joint_states) <= received + 1  # one may have been in flight
    _call(probe, probe.reset_client)
    assert wait_for(lambda: sim.sim.data.time > held_at and len(probe.joint_states) > received + 2, timeout=10.0)

    spinners = Spinners(ros_context)
    held = spinners.add(SimulatorNode(context=ros_context, namespace=f"/t{uuid.uuid4().hex[:8]}",
                                      parameter_overrides=[Parameter("hold_until_reset", value=True)]))
    try:
        time.sleep(0.5)  # spinning, not stepping
        assert held.sim.data.time == 0.0
    finally:
        spinners.shutdown()

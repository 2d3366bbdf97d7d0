"""The deployment node over real DDS: a test node plays the robot's drives (joint states in motor
space, IMU in its mounted frame) with real publishers and reads the node's commands.

Faults are counted in command cycles: the test sends one joint state, waits for the one command
it triggers, and so knows which command answered which state. The robot config in most tests has
a non-identity hardware section (motor order, signs, offsets, IMU mounting).
"""

from __future__ import annotations

import threading
import uuid

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Imu, JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, Header  # noqa: E402

from motionvl.msg import DeploymentStatus, JointCommand, LowCommand  # noqa: E402
from motionvl.ros.messages import deployment_status_from_msg, drive_command_from_msg  # noqa: E402
from motionvl.srv import LoadPolicy  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from deploy_fixtures import ROBOT, assert_within, hardware_section, mapped_robot, write_robot_yaml  # noqa: E402
from motionvl.deploy import Command, DeployConfig, JointMapping, Mode  # noqa: E402
from motionvl.sim.math import quat_from_euler  # noqa: E402
from motionvl.robot import ConfigError  # noqa: E402
from motionvl.ros.deployment_node import DeploymentNode  # noqa: E402
from spinning import Spinners  # noqa: E402
from waiting import wait_for  # noqa: E402

J = ROBOT.num_joints
RELIABLE = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
TOPICS = {"pd": "low_command", "torque": "joint_effort_commands"}
TYPES = {"pd": LowCommand, "torque": Float64MultiArray}
UPRIGHT = (1.0, 0.0, 0.0, 0.0)


class Drives:
    """A test node standing in for the robot's drive bridge: publishes motor states and IMU as the
    mapped hardware reports them, records every command (and on the pd path its joint-space twin) and
    status the deployment node sends."""

    def __init__(self, context, namespace: str, robot, path: str):
        self.node = Node(f"drives_{uuid.uuid4().hex[:6]}", namespace=namespace, context=context)
        self.robot, self.path, self.mapping = robot, path, JointMapping(robot)
        self.lock = threading.Lock()
        self.commands: list = []
        self.joint_commands: list = []
        self.statuses: list = []
        self.diagnostics: list = []
        self.stamp = 1.0
        self.published = 0
        n = self.node
        self.state_pub = n.create_publisher(JointState, "motor_states", 10)
        self.imu_pub = n.create_publisher(Imu, "imu/data", 10)
        self.topic = TOPICS[path]
        n.create_subscription(TYPES[path], self.topic, self._keep(self.commands), RELIABLE)
        n.create_subscription(JointCommand, "joint_command", self._keep(self.joint_commands), RELIABLE)
        n.create_subscription(DeploymentStatus, "deployment/status",
                              lambda m: self._keep(self.statuses)(deployment_status_from_msg(m)), LATCHED)
        n.create_subscription(DiagnosticArray, "/diagnostics", self._keep(self.diagnostics), 10)
        self.cycles: list = []  # (cycle index, command mode) from ~/cycle (publish_cycle_stamps)
        n.create_subscription(Header, "deployment/cycle", lambda m: self._keep(self.cycles)(
            (int(m.frame_id.split()[1]), m.frame_id.split()[0])), RELIABLE)
        self.clients = {}

    def _keep(self, store):
        def callback(msg):
            with self.lock:
                store.append(msg)
        return callback

    def connected(self, commands: bool = True) -> bool:
        return (self.state_pub.get_subscription_count() > 0 and self.imu_pub.get_subscription_count() > 0
                and (not commands or self.node.count_publishers(f"{self.node.get_namespace()}/{self.topic}") > 0))

    # ------------------------------------------------------------------ the robot's side
    def publish(self, q, dq=None, quat=UPRIGHT, gyro=(0.0, 0.0, 0.0), stamp=None, noise=True, joints=True) -> None:
        """One IMU reading and one joint state (joint space in, motor space out), a new stamp. `noise`:
        the gyro carries a sensor's noise (a nano-radian per second every other reading), so that a
        still robot's IMU is not a frozen one. `joints` False: the IMU reading only."""
        m = self.mapping
        dq = np.zeros(J) if dq is None else np.asarray(dq, float)
        self.stamp = self.stamp + 0.02 if stamp is None else stamp
        self.published += 1
        sec, nsec = int(self.stamp), int(round((self.stamp % 1) * 1e9))
        jitter = np.array([0.0, 0.0, 1e-9 * (self.published % 2)]) if noise else np.zeros(3)
        imu_quat, imu_gyro = m.base_to_imu(np.asarray(quat, float), np.asarray(gyro, float) + jitter)
        imu = Imu()
        imu.header.stamp.sec, imu.header.stamp.nanosec = sec, nsec
        imu.orientation.w, imu.orientation.x, imu.orientation.y, imu.orientation.z = (float(v) for v in imu_quat)
        imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = (float(v) for v in imu_gyro)
        self.imu_pub.publish(imu)
        if not joints:
            return
        js = JointState(name=list(m.motor_names))
        js.header.stamp.sec, js.header.stamp.nanosec = sec, nsec
        with np.errstate(invalid="ignore"):
            js.position = [float(v) for v in m.to_motor_position(q)]
            js.velocity = [float(v) for v in m.to_motor_signed(dq)]
        self.state_pub.publish(js)

    def step(self, q, dq=None, **imu) -> Command:
        """Publish one state and return the command it triggered (decoded, motor space)."""
        before = self.count()
        self.publish(q, dq, **imu)
        assert wait_for(lambda: self.count() > before, timeout=10.0), "no command answered the state"
        return self.command(before)

    def next_command(self, timeout: float = 10.0) -> Command:
        before = self.count()
        assert wait_for(lambda: self.count() > before, timeout=timeout), "no command came"
        return self.command(before)

    def count(self) -> int:
        with self.lock:
            return len(self.commands)

    def command(self, index: int = -1) -> Command:
        with self.lock:
            msg = self.commands[index]
        if self.path == "pd":
            assert list(msg.motor_names) == list(self.mapping.motor_names)
            fields = drive_command_from_msg(msg, self.mapping.motor_names)
            mode = Mode.DAMP if np.all(fields["kp"] == 0) and np.any(fields["kd"] > 0) else None
            return Command(mode, "pd", **fields)
        data = np.asarray(msg.data, dtype=float)
        assert [d.label for d in msg.layout.dim] == ["joints"]
        return Command(None, "torque", tau=data)

    def status(self) -> dict:
        with self.lock:
            return self.statuses[-1] if self.statuses else {}

    def diagnostic_values(self) -> dict:
        """key -> value of the newest /diagnostics the node published ({} before the first)."""
        with self.lock:
            return {kv.key: kv.value for kv in self.diagnostics[-1].status[0].values} if self.diagnostics else {}

    # ------------------------------------------------------------------ services
    def call(self, service: str, timeout: float = 10.0, path: str = ""):
        """Call deployment/<service>: a Trigger, or LoadPolicy (with `path`) for load_policy."""
        kind = LoadPolicy if service == "load_policy" else Trigger
        if service not in self.clients:
            self.clients[service] = self.node.create_client(kind, f"deployment/{service}")
        client = self.clients[service]
        assert client.wait_for_service(timeout_sec=timeout), f"no service {service}"
        future = client.call_async(LoadPolicy.Request(path=path) if kind is LoadPolicy else Trigger.Request())
        assert wait_for(future.done, timeout=timeout), f"{service} did not answer"
        return future.result()


@pytest.fixture
def deployment(ros_context, tmp_path):
    """start(path=..., mapped=True, **params) -> (node, drives), each spinning on its own thread."""
    spinners = Spinners(ros_context)
    yaml_mapped = write_robot_yaml(tmp_path, hardware_section())

    def start(path: str = "pd", mapped: bool = True, namespace: str | None = None, **params):
        ns = namespace or f"/t{uuid.uuid4().hex[:8]}"
        robot = mapped_robot() if mapped else ROBOT
        # the node's cycles answer states a test thread sends on a shared machine: the test's pauses
        # (service calls, policy loads) and a cycle delayed by the load must not read as a silent
        # stream, a stalled loop, a late policy step or an overrun; the tests of those set their own bounds
        values = {"robot_config": str(yaml_mapped) if mapped else "", "path": path, "realtime_priority": 0,
                  "state_timeout": 60.0, "overrun_periods": 10_000, "policy_deadline_share": 500.0,
                  "watchdog_periods": 10_000, "stand_seconds": 0.1,
                  "writer_discovery_seconds": 0.0, **params}
        drives = Drives(ros_context, ns, robot, path)
        node = DeploymentNode(context=ros_context, namespace=ns,
                              parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
        spinners.add(node)
        spinners.add(drives.node)
        commands = not values.get("dry_run") and values.get("bring_up") != "unconfigured"  # (no publisher yet)
        assert wait_for(lambda: drives.connected(commands=commands)), "no discovery"
        return node, drives

    yield start
    spinners.shutdown()


def enter_stand(drives, q=None):
    """PASSIVE -> STAND: a state, then the request until the node has taken a state and an IMU reading."""
    q = ROBOT.default_pose if q is None else q
    drives.step(q)
    for _ in range(50):
        response = drives.call("set_mode/stand")
        if response.success:
            return
        # with a short state_timeout a slow test thread may also find the stream stale: a fresh state clears it
        assert "no usable message yet" in response.message or "silent" in response.message, response.message
        drives.step(q)
    raise AssertionError(f"STAND refused: {response.message}")


def stand(node, drives, q=None):
    """PASSIVE -> STAND, then states until the ramp completes; returns the STAND commands."""
    q = ROBOT.default_pose if q is None else q
    enter_stand(drives, q)
    commands = []
    ramp_cycles = round(config_of(node).stand_seconds / node.controller.period)
    while not node.controller.stand_complete:
        assert node.controller.mode == Mode.STAND and len(commands) <= ramp_cycles, node.controller.modes.faults
        commands.append(drives.step(q))
    commands.append(drives.step(q))  # the ramp's end: at the default pose with full gains
    return commands


def config_of(node) -> DeployConfig:
    return node.controller.config


# ---------------------------------------------------------------------- STAND and torque law
@pytest.mark.parametrize("path", ["pd", "torque"])
def test_stand_ramp_never_jumps_and_stays_within_limits(deployment, path):
    node, drives = deployment(path, stand_seconds=0.2 if path == "pd" else 0.04)
    robot, m = drives.robot, drives.mapping
    crouch = robot.lower + 0.35 * (robot.upper - robot.lower)
    commands = stand(node, drives, crouch)
    assert len(commands) >= 5
    for command in commands:
        assert_within(command, robot, config_of(node))
    if path == "pd":
        start = node.controller.builder.clip_target(crouch, count=False)
        targets = np.array([m.from_motor_position(c.q) for c in commands])
        kp = np.array([m.from_motor_unsigned(c.kp) for c in commands])
        np.testing.assert_allclose(targets[0], start, atol=1e-12)
        np.testing.assert_allclose(targets[-1], robot.default_pose, atol=1e-12)
        steps = np.abs(np.diff(targets, axis=0))
        assert np.all(steps <= 1.5 / (len(commands) - 1) * np.abs(robot.default_pose - start) + 1e-9)
        assert np.all(kp[0] == 0) and np.all(np.diff(kp, axis=0) >= -1e-12)
        np.testing.assert_allclose(kp[-1], robot.kp)
    else:
        tau = np.array([m.from_motor_signed(c.tau) for c in commands])
        assert np.all(tau[0] == 0)  # gain share 0 at the first STAND cycle, robot at rest


def test_the_pd_path_sends_each_command_in_motor_space_and_its_twin_in_joint_space(deployment):
    """On a mapped robot (motors reordered, signed, offset): low_command carries the motor names and motor
    space, joint_command the same command per joint in joint space, one of each per cycle."""
    node, drives = deployment("pd", stand_seconds=0.2)
    robot, m = drives.robot, drives.mapping
    crouch = robot.lower + 0.35 * (robot.upper - robot.lower)
    stand(node, drives, crouch)
    assert wait_for(lambda: len(drives.joint_commands) >= drives.count())
    with drives.lock:
        lows, joints = list(drives.commands), list(drives.joint_commands)
    assert len(lows) == len(joints) and len(lows) >= 5
    assert list(m.motor_names) != list(robot.joint_names), "the test robot's motors are named for themselves"
    for low, joint in zip(lows, joints):
        assert list(joint.joint_names) == list(robot.joint_names)
        motor = drive_command_from_msg(low, m.motor_names)
        twin = drive_command_from_msg(joint, robot.joint_names)
        np.testing.assert_allclose(twin["q"], m.from_motor_position(motor["q"]), atol=1e-12)
        np.testing.assert_allclose(m.to_motor_position(twin["q"]), motor["q"], atol=1e-12)
        np.testing.assert_allclose(m.to_motor_unsigned(twin["kp"]), motor["kp"])
        np.testing.assert_allclose(m.to_motor_unsigned(twin["kd"]), motor["kd"])
        np.testing.assert_allclose(m.to_motor_signed(twin["dq"]), motor["dq"])
        np.testing.assert_allclose(m.to_motor_signed(twin["tau_ff"]), motor["tau_ff"])
        assert low.header.stamp == joint.header.stamp
    # the ramp's end in joint space: the default pose at the configured gains, in the URDF's order
    np.testing.assert_allclose(twin["q"], robot.default_pose, atol=1e-12)
    np.testing.assert_allclose(twin["kp"], robot.kp)


def test_states_faster_than_the_command_rate_do_not_speed_up_the_ramp(deployment):
    """Drives often publish joint states at 500 Hz-1 kHz: at ten states per command period the
    STAND ramp must still take stand_seconds (of the states' own stamps), not a tenth of it."""
    node, drives = deployment("pd", stand_seconds=0.2)
    drives.step(ROBOT.default_pose)
    assert wait_for(lambda: drives.call("set_mode/stand").success)
    start = drives.stamp
    while not node.controller.stand_complete and drives.stamp - start < 1.0:
        stamp = drives.stamp + ROBOT.control_dt / 10
        drives.publish(ROBOT.default_pose, stamp=stamp)
        assert wait_for(lambda stamp=stamp: abs(node.controller.inputs.joints.last_stamp - stamp) < 1e-6), \
            "state not taken"
    assert node.controller.stand_complete
    assert drives.stamp - start >= 0.2 - 2 * ROBOT.control_dt


def test_torque_clipping_is_exact(deployment):
    """STAND complete (target = default pose, full gains): tau = clip(Kp (default - q) - Kd dq) to
    the bit, in motor order and sign, with joints far enough off for the clip to act."""
    node, drives = deployment("torque", stand_seconds=0.02)
    robot, m = drives.robot, drives.mapping
    stand(node, drives)
    rng = np.random.default_rng(3)
    for _ in range(5):
        q = np.clip(robot.default_pose + rng.uniform(-0.5, 0.5, J), robot.lower, robot.upper)
        dq = rng.uniform(-5, 5, J)
        command = drives.step(q, dq)
        q, dq = m.from_motor_position(m.to_motor_position(q)), m.from_motor_signed(m.to_motor_signed(dq))  # as received
        want = np.clip(robot.kp * (robot.default_pose - q) - robot.kd * dq, -robot.effort_limit, robot.effort_limit)
        np.testing.assert_array_equal(m.from_motor_signed(command.tau), want)
    assert node.controller.builder.clips["torque"] > 0


# ---------------------------------------------------------------------- faults, each at the next command
STATE_FAULTS = {
    "non_finite_input": dict(q=np.where(np.arange(J) == 3, np.nan, ROBOT.default_pose)),
    "joint_limit": dict(q=np.where(np.arange(J) == 9, ROBOT.upper[9] + 0.3, ROBOT.default_pose)),
    "joint_velocity": dict(q=ROBOT.default_pose, dq=np.where(np.arange(J) == 1, 30.0, 0.0)),
}


@pytest.mark.parametrize("path", ["pd", "torque"])
@pytest.mark.parametrize("kind", sorted(STATE_FAULTS))
def test_bad_joint_state_damps_the_command_it_triggers(deployment, kind, path):
    node, drives = deployment(path)
    stand(node, drives)
    good = drives.step(ROBOT.default_pose)
    assert good.mode != Mode.DAMP and (path == "torque" or np.any(good.kp > 0))
    command = drives.step(**STATE_FAULTS[kind])
    assert_damping(command, drives, node, dq=STATE_FAULTS[kind].get("dq"))
    assert wait_for(lambda: kind in " ".join(drives.status().get("faults", [])))
    # latched: clean states keep it damping, and STAND is refused
    assert_damping(drives.step(ROBOT.default_pose), drives, node)
    response = drives.call("set_mode/stand")
    assert not response.success and "latched fault" in response.message


def assert_damping(command, drives, node, dq=None, mode=Mode.DAMP):
    """The command is pure damping and within the limits: on the torque path -Kd_damp dq of the joint
    velocity `dq` the test sent with the state (default: at rest), to the bit. `mode`: the node's mode
    then (None: any; a late policy step damps in RUN)."""
    assert_within(command, drives.robot, config_of(node))
    if command.path == "pd":
        assert np.all(command.kp == 0) and np.all(command.kd > 0) and np.all(command.tau_ff == 0)
    else:
        robot, config = drives.robot, config_of(node)
        dq = np.zeros(J) if dq is None else np.asarray(dq, float)
        want = np.clip(-robot.kd * config.damping_scale * dq, -robot.effort_limit, robot.effort_limit)
        np.testing.assert_array_equal(drives.mapping.from_motor_signed(command.tau), want)
    if mode is not None:
        assert node.controller.mode == mode


@pytest.mark.parametrize("kind,imu", [("fall", dict(quat=tuple(quat_from_euler(0.0, 1.2, 0.0)))),
                                      ("gyro", dict(gyro=(0.0, 0.0, 15.0)))])
def test_bad_imu_damps_within_cycles(deployment, kind, imu):
    """The IMU comes on its own topic (best effort): its fault reaches the command of the same or the
    next joint state, never later than a few cycles."""
    node, drives = deployment("pd")
    stand(node, drives)
    cycles = 0
    command = drives.step(ROBOT.default_pose, **imu)
    while command.mode != Mode.DAMP and cycles < 3:
        command = drives.step(ROBOT.default_pose, **imu)
        cycles += 1
    assert_damping(command, drives, node)
    assert wait_for(lambda: kind in " ".join(drives.status().get("faults", [])))


def test_silent_and_frozen_state_streams_damp(deployment):
    """In STAND (the ramp need not complete: a pause of the test thread longer than the timeout is
    the same fault), states stop or repeat one stamp: the node cycles on its own clock once the
    timeout has passed, and that first command already damps."""
    node, drives = deployment("pd", state_timeout=0.3)
    enter_stand(drives)
    before = drives.count()
    assert wait_for(lambda: drives.count() > before), "no command after the stream went silent"
    assert_damping(drives.command(before), drives, node)
    assert node.controller.modes.faults[0].kind == "stale_state"
    assert wait_for(lambda: "silent" in " ".join(drives.status().get("faults", [])))

    node, drives = deployment("pd", state_timeout=0.3)
    enter_stand(drives)
    frozen, before = drives.stamp, drives.count()

    def frozen_state_answered() -> bool:  # a driver that keeps publishing one stamp: these trigger no cycle
        drives.publish(ROBOT.default_pose, stamp=frozen)
        return drives.count() > before

    assert wait_for(frozen_state_answered), "no command while the stamps were frozen"
    assert_damping(drives.command(before), drives, node)
    assert node.controller.modes.faults[0].kind == "stale_state"  # which reason: pinned by the core's test


def test_a_cycle_that_raises_damps_and_the_loop_goes_on(deployment):
    """A bug in a cycle must not end the control thread (the drives would hold the last command,
    full gains, with no watchdog behind a forward command controller): that cycle sends damping,
    latches an 'internal' fault, and the next states are still answered."""
    node, drives = deployment("pd")
    stand(node, drives)

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    node.controller.velocity.update = broken  # fault injection into the core, not a mock of ROS
    assert_damping(drives.step(ROBOT.default_pose), drives, node)
    fault = node.controller.modes.faults[0]
    assert fault.kind == "internal" and "ZeroDivisionError" in fault.reason
    assert_damping(drives.step(ROBOT.default_pose), drives, node)  # still cycling
    assert wait_for(lambda: "internal" in " ".join(drives.status().get("faults", [])))


def test_estop_wins_and_rearm_is_refused_unless_allowed(deployment):
    node, drives = deployment("pd")
    stand(node, drives)
    assert drives.call("estop").success
    assert_damping(drives.step(ROBOT.default_pose), drives, node)
    response = drives.call("set_mode/stand")
    assert not response.success and "estop" in response.message
    response = drives.call("rearm")
    assert not response.success and "allow_rearm" in response.message

    node, drives = deployment("pd", allow_rearm=True)
    stand(node, drives)
    assert drives.call("estop").success
    assert drives.call("rearm").success
    assert drives.call("set_mode/stand").success
    drives.step(ROBOT.default_pose)
    drives.step(ROBOT.default_pose)
    assert np.any(drives.command().kp > 0)  # the ramp's gains rise again


def test_second_writer_damps_and_refuses_the_start(deployment, ros_context):
    node, drives = deployment("pd")
    stand(node, drives)
    intruder = drives.node.create_publisher(TYPES["pd"], drives.topic, 1)
    for _ in range(500):  # discovery takes its time: states until the node has seen the intruder
        command = drives.step(ROBOT.default_pose)
        if command.mode == Mode.DAMP:
            break
    assert_damping(command, drives, node)
    assert node.controller.modes.faults[0].kind == "second_writer"
    drives.node.destroy_publisher(intruder)

    ns = f"/t{uuid.uuid4().hex[:8]}"
    squatter = Node(f"squatter_{uuid.uuid4().hex[:6]}", namespace=ns, context=ros_context)
    squatter.create_publisher(LowCommand, "low_command", 1)
    with pytest.raises(ConfigError, match="another publisher.*squatter"):
        DeploymentNode(context=ros_context, namespace=ns, parameter_overrides=[
            Parameter("realtime_priority", value=0), Parameter("writer_discovery_seconds", value=3.0)])
    squatter.destroy_node()
    # an old params file's tighter clip is refused, not dropped (its key now means nothing)
    with pytest.raises(ConfigError, match=r"soft_limit_factor \(0.9\) is retired: set target_limit_share"):
        DeploymentNode(context=ros_context, namespace=f"/t{uuid.uuid4().hex[:8]}", parameter_overrides=[
            Parameter("realtime_priority", value=0), Parameter("soft_limit_factor", value=0.9)])


def test_second_state_publisher_damps_and_blocks_rearming_while_it_stays(deployment, ros_context):
    """A stale bag playing or a simulator left running beside the drives: its states would interleave
    with the robot's. A second publisher on motor_states damps, with the reason on ~/status and
    /diagnostics; re-arming is refused while it is there, and once it is gone the node stands again."""
    node, drives = deployment("pd", allow_rearm=True)
    stand(node, drives)
    stale_bag = Node(f"stale_bag_{uuid.uuid4().hex[:6]}", namespace=drives.node.get_namespace(), context=ros_context)
    stale_bag.create_publisher(JointState, "motor_states", 10)  # it need not publish: being there is the fault
    for _ in range(500):  # discovery takes its time: states until the node has seen it
        command = drives.step(ROBOT.default_pose)
        if command.mode == Mode.DAMP:
            break
    assert_damping(command, drives, node)
    fault = node.controller.modes.faults[0]
    assert fault.kind == "second_state_writer", fault
    assert f"2 publishers on {drives.node.get_namespace()}/motor_states" in fault.reason
    assert stale_bag.get_name() in fault.reason
    assert wait_for(lambda: stale_bag.get_name() in " ".join(drives.status().get("faults", [])))
    assert wait_for(lambda: stale_bag.get_name() in drives.diagnostic_values().get("faults", ""))
    response = drives.call("rearm")
    assert not response.success and stale_bag.get_name() in response.message
    stale_bag.destroy_node()
    assert wait_for(lambda: drives.call("rearm").success), "re-arm still refused after the second publisher left"
    enter_stand(drives)


def test_older_joint_states_are_dropped_and_repeated_ones_fault(deployment):
    """A joint state stamped older than the one in force changes nothing: here it is beyond a joint
    limit, a fault if it were taken, yet the next (newer) state, the sentinel, is answered with the
    torque law of that sentinel's own state, undamped. The drop is counted on /diagnostics; three
    within out_of_order_window damp, with the reason."""
    node, drives = deployment("torque", stand_seconds=0.02, out_of_order_window=600.0)
    robot, m = drives.robot, drives.mapping
    stand(node, drives)
    beyond = np.where(np.arange(J) == 9, ROBOT.upper[9] + 0.3, ROBOT.default_pose)

    def publish_older(dropped: int) -> None:
        newest = drives.stamp
        drives.publish(beyond, stamp=newest - 0.5)
        drives.stamp = newest  # the drives' own stream goes on from where it was
        # the node's subscription keeps one message: each older one is waited for before the next
        assert wait_for(lambda: node.controller.inputs.joints.dropped == dropped), "older state not seen"

    publish_older(1)
    sentinel = robot.default_pose + np.where(np.arange(J) % 2 == 0, 0.05, -0.05)
    command = drives.step(sentinel)
    q = m.from_motor_position(m.to_motor_position(sentinel))  # as received
    want = np.clip(robot.kp * (robot.default_pose - q), -robot.effort_limit, robot.effort_limit)
    np.testing.assert_array_equal(m.from_motor_signed(command.tau), want)
    assert node.controller.mode == Mode.STAND and not node.controller.modes.faults
    assert wait_for(lambda: drives.diagnostic_values().get("dropped_motor_states") == "1")

    publish_older(2)
    publish_older(3)
    assert_damping(drives.step(ROBOT.default_pose), drives, node)
    fault = node.controller.modes.faults[0]
    assert fault.kind == "out_of_order_state" and fault.reason.startswith("motor_states: 3 messages"), fault
    assert wait_for(lambda: "older than the newest taken" in " ".join(drives.status().get("faults", [])))


def test_load_policy_refused_outside_passive_and_damp(deployment):
    node, drives = deployment("pd")
    response = drives.call("load_policy")
    assert not response.success and "no file named" in response.message
    node.set_parameters([Parameter("policy", value="/nonexistent/policy.onnx")])
    stand(node, drives)
    response = drives.call("load_policy")
    assert not response.success and "only in PASSIVE or DAMP" in response.message
    response = drives.call("set_mode/run")
    assert not response.success and "no policy loaded" in response.message


def test_dry_run_runs_everything_and_publishes_no_command(deployment):
    node, drives = deployment("pd", dry_run=True, autostart="stand")
    status = lambda: drives.status()  # noqa: E731

    def stand_completed() -> bool:
        drives.publish(ROBOT.default_pose)
        return bool(status().get("stand_complete"))

    assert wait_for(stand_completed), status()
    assert status().get("dry_run")
    assert node.controller.stats.cycles > 5
    # no publisher on the command topic at all (nothing can arrive)
    assert drives.node.count_publishers(f"{drives.node.get_namespace()}/{drives.topic}") == 0
    assert wait_for(lambda: any(s.name.endswith("controller") for d in drives.diagnostics for s in d.status))
    values = drives.diagnostic_values()
    for key in ("mode", "latency_p99_ms", "period_p99_ms", "overruns", "clips_target", "realtime"):
        assert key in values


def test_every_controller_setting_is_declared_once_and_the_params_file_only_overrides_it():
    """DeployConfig declares the controller's settings (default and description); the node's parameters are
    derived from it, and config/nodes.yaml's deployment section (if any) only holds values other than those."""
    import dataclasses
    from pathlib import Path

    import yaml

    from motionvl.ros.deployment_node import PARAMETERS, POLICY_PARAMETER, SHAPED_FIELDS, deploy_config

    defaults = DeployConfig()
    for field in dataclasses.fields(DeployConfig):
        if field.name not in SHAPED_FIELDS:
            default, description = PARAMETERS[field.name]
            assert default == getattr(defaults, field.name) and description, field.name
    values = {name: default for name, (default, _text) in PARAMETERS.items()}
    assert deploy_config(values) == defaults
    section = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "nodes.yaml").read_text())
    for name, value in section.get("/**/deployment", {}).get("ros__parameters", {}).items():
        if name != POLICY_PARAMETER:
            assert value != PARAMETERS[name][0] and not (value is None and PARAMETERS[name][0] == []), name

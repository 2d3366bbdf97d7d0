"""The simulator's hardware emulation: drive-side PD commands, the inverse joint mapping and IMU
mounting of a configured hardware section, and the virtual gantry; core and node over DDS."""

from __future__ import annotations

import threading
import uuid

import numpy as np
import pytest

from deploy_fixtures import ROBOT, hardware_section, mapped_robot, write_robot_yaml
from motionvl.deploy import JointMapping
from motionvl.sim.single import CommandError, SingleSim

J = ROBOT.num_joints


def test_drive_side_pd_is_the_position_law_to_the_bit():
    """Drive commands with the configured gains act exactly as the position actuators (what
    training and `motionvl eval` simulate): the drive path adds nothing of its own."""
    position, drive = SingleSim(ROBOT, mode="position"), SingleSim(ROBOT, mode="effort")
    rng = np.random.default_rng(0)
    for _ in range(50):
        target = ROBOT.default_pose + rng.uniform(-0.2, 0.2, J)
        position.set_position_targets(target)
        drive.set_drive_commands(target, np.zeros(J), ROBOT.kp, ROBOT.kd, np.zeros(J))
        position.step(10)
        drive.step(10)
    np.testing.assert_array_equal(position.data.qpos, drive.data.qpos)
    assert drive.actuation == "drive"


def test_drive_commands_are_validated_and_watched():
    sim = SingleSim(ROBOT, mode="effort", command_timeout=0.05)
    with pytest.raises(CommandError, match="negative drive gains"):
        sim.set_drive_commands(ROBOT.default_pose, np.zeros(J), -ROBOT.kp, ROBOT.kd, np.zeros(J))
    with pytest.raises(CommandError, match="non-finite"):
        sim.set_drive_commands(np.full(J, np.nan), np.zeros(J), ROBOT.kp, ROBOT.kd, np.zeros(J))
    with pytest.raises(CommandError, match="position"):
        SingleSim(ROBOT).set_drive_commands(ROBOT.default_pose, np.zeros(J), ROBOT.kp, ROBOT.kd, np.zeros(J))
    sim.set_drive_commands(ROBOT.default_pose, np.zeros(J), ROBOT.kp, ROBOT.kd, np.zeros(J))
    sim.step(10)
    assert sim.actuation == "drive"
    sim.step(30)  # commands stopped: the drive's watchdog damps
    assert sim.actuation == "damping"
    sim.set_efforts(np.zeros(J))  # torques take over from drive commands and back
    assert sim.actuation == "torque"


def test_gantry_holds_the_pelvis_until_released():
    sim = SingleSim(ROBOT, mode="effort", gantry=True)
    sim.set_efforts(np.zeros(J))  # limp
    sim.step(400)
    assert sim.gantry and abs(sim.data.qpos[2] - ROBOT.init_base_height) < 0.01
    sim.release_gantry()
    sim.set_efforts(np.zeros(J))
    sim.step(400)
    assert not sim.gantry and sim.data.qpos[2] < ROBOT.init_base_height - 0.2
    sim.reset()
    assert sim.gantry


# ---------------------------------------------------------------------- the node over DDS
rclpy = pytest.importorskip("rclpy")

from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Imu, JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

from motionvl.msg import Actuation, DeploymentStatus, JointCommand, LowCommand  # noqa: E402

from motionvl.ros.messages import DriveCommandWriter, actuation_from_msg  # noqa: E402
from motionvl.ros.simulator_node import SimulatorNode  # noqa: E402
from spinning import Spinners  # noqa: E402
from waiting import wait_for  # noqa: E402

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


@pytest.fixture
def emulated(ros_context, tmp_path):
    spinners = Spinners(ros_context)
    yaml = write_robot_yaml(tmp_path, hardware_section())
    ns = f"/t{uuid.uuid4().hex[:8]}"
    sim = SimulatorNode(context=ros_context, namespace=ns, parameter_overrides=[
        Parameter(k, value=v) for k, v in dict(robot_config=str(yaml), mode="effort", emulate_hardware=True,
                                                gantry=True, command_timeout=5.0).items()])
    probe = Node(f"probe_{uuid.uuid4().hex[:6]}", namespace=ns, context=ros_context)
    got = {"js": None, "ms": None, "imu": None}
    lock = threading.Lock()

    def keep(key):
        def callback(msg):
            with lock:
                got[key] = msg
        return callback

    probe.create_subscription(JointState, "joint_states", keep("js"), 10)
    probe.create_subscription(JointState, "motor_states", keep("ms"), 10)
    probe.create_subscription(Imu, "imu/data", keep("imu"), qos_profile_sensor_data)
    spinners.add(sim)
    spinners.add(probe)
    assert wait_for(lambda: None not in got.values()), "no state"
    yield sim, probe, got, lock
    spinners.shutdown()


def test_emulated_hardware_speaks_motor_space_and_maps_commands_back(emulated):
    sim, probe, got, lock = emulated
    robot = mapped_robot()
    m = JointMapping(robot)
    with lock:
        js, ms, imu = got["js"], got["ms"], got["imu"]
    assert list(ms.name) == list(m.motor_names), "motor_states: the drives' names"
    assert list(js.name) == list(robot.joint_names), "joint_states: the joints' names"

    def lag():  # the newest reports against the simulation now: the joints still settle in the gantry
        with lock:
            motors = m.from_motor_position(got["ms"].position)
            joints = np.asarray(got["js"].position)
        now = sim.sim.state().joint_pos
        return max(np.abs(motors - now).max(), np.abs(joints - now).max())
    # motor_states is the simulated joints in motor order, sign and offset, joint_states the joints themselves
    # (a wrong order, sign or offset stays 0.05-0.8 rad off; a report a few steps old on a loaded machine only
    # until the joints settle)
    assert wait_for(lambda: lag() < 2e-3, timeout=30), f"reported joints {lag():.4f} rad off the simulation"
    q_imu = np.array([imu.orientation.w, imu.orientation.x, imu.orientation.y, imu.orientation.z])
    base, _ = m.imu_to_base(q_imu)
    assert abs(abs(base[0]) - 1.0) < 1e-3  # upright pelvis in the gantry
    assert abs(abs(q_imu[0]) - 1.0) > 0.1  # the IMU itself is mounted turned

    drive_pub = probe.create_publisher(LowCommand, "low_command", 1)
    assert wait_for(lambda: drive_pub.get_subscription_count() > 0)
    assert probe.count_subscribers(sim.resolve_topic_name("joint_command")) == 0, "the hardware speaks motor space"
    target = ROBOT.default_pose + 0.05
    # in motor space, and in an order of its own: the drives go by name
    order = np.arange(J)[::-1]
    low = DriveCommandWriter(LowCommand, [m.motor_names[k] for k in order])
    msg = low.fill(m.to_motor_position(target)[order], np.zeros(J), m.to_motor_unsigned(ROBOT.kp)[order],
                   m.to_motor_unsigned(ROBOT.kd)[order], m.to_motor_signed(np.full(J, 1.5))[order])
    bad = DriveCommandWriter(LowCommand, list(robot.joint_names)).fill(target, np.zeros(J), ROBOT.kp, ROBOT.kd,
                                                                      np.zeros(J))
    drive_pub.publish(bad)  # joint names are no motor names: refused and counted
    assert wait_for(lambda: sim.inbox.bad[sim.resolve_topic_name("low_command")] == 1)
    assert sim.sim.drive is None
    drive_pub.publish(msg)
    assert wait_for(lambda: sim.sim.drive is not None)
    q, dq, kp, kd, tau_ff = sim.sim.drive
    np.testing.assert_allclose(q, target, atol=1e-12)
    np.testing.assert_allclose(kp, ROBOT.kp)
    np.testing.assert_allclose(kd, ROBOT.kd)
    np.testing.assert_allclose(tau_ff, 1.5)

    effort_pub = probe.create_publisher(Float64MultiArray, "joint_effort_commands", 1)
    assert wait_for(lambda: effort_pub.get_subscription_count() > 0)
    torques = np.linspace(-3.0, 3.0, J)
    effort_pub.publish(Float64MultiArray(data=m.to_motor_signed(torques).tolist()))
    assert wait_for(lambda: sim.sim.drive is None and np.allclose(sim.sim.effort, torques))


def test_the_emulated_drives_damp_when_commands_stop_and_say_so(ros_context):
    """A drive's own watchdog (the host cannot damp after kill -9 or a power loss): drive commands flowing,
    then none for command_timeout: the emulated drives damp, and ~/actuation says each change in order."""
    spinners = Spinners(ros_context)
    ns = f"/t{uuid.uuid4().hex[:8]}"
    sim = spinners.add(SimulatorNode(context=ros_context, namespace=ns, parameter_overrides=[
        Parameter("mode", value="effort"), Parameter("command_timeout", value=0.2)]))
    probe = spinners.add(Node(f"probe_{uuid.uuid4().hex[:6]}", namespace=ns, context=ros_context))
    said, lock = [], threading.Lock()

    def keep(msg):
        with lock:
            said.append(actuation_from_msg(msg))
            assert msg.regime_name == said[-1]

    probe.create_subscription(Actuation, "simulator/actuation", keep, LATCHED)
    drive_pub = probe.create_publisher(JointCommand, "joint_command", 1)  # no emulation: joint space
    command = DriveCommandWriter(JointCommand, ROBOT.joint_names).fill(ROBOT.default_pose, np.zeros(J), ROBOT.kp,
                                                                        ROBOT.kd, np.zeros(J))
    try:
        assert wait_for(lambda: drive_pub.get_subscription_count() > 0 and said == ["damping"]), said
        stop = threading.Event()

        def drives_commanding():  # the host's commands, until it dies
            while not stop.wait(0.02):
                drive_pub.publish(command)

        host = threading.Thread(target=drives_commanding, daemon=True)
        host.start()
        assert wait_for(lambda: "drive" in said, timeout=20.0), said
        stop.set()
        host.join()
        assert wait_for(lambda: said[-1] == "damping", timeout=20.0), said
        assert said == ["damping", "drive", "damping"] and sim.sim.actuation == "damping"
    finally:
        spinners.shutdown()


def test_gantry_lets_go_when_the_stand_completes(emulated):
    sim, probe, got, lock = emulated
    status_pub = probe.create_publisher(DeploymentStatus, "deployment/status", LATCHED)
    stand = dict(mode=DeploymentStatus.MODE_STAND, mode_name="STAND")
    status_pub.publish(DeploymentStatus(**stand, stand_complete=False))
    status_pub.publish(DeploymentStatus(mode=7, mode_name="FLYING", stand_complete=True))  # counted, never acted on
    assert wait_for(lambda: sim.inbox.bad[sim.resolve_topic_name("deployment/status")] == 1)
    assert sim.sim.gantry
    status_pub.publish(DeploymentStatus(**stand, stand_complete=True))
    assert wait_for(lambda: not sim.sim.gantry)


def test_randomized_drive_strength_scales_every_applied_torque():
    sim = SingleSim(ROBOT, mode="effort")
    draws = sim.randomize(np.random.default_rng(1), strength_range=(0.8, 1.2))
    assert 0.2 <= draws["friction"] <= 1.3 and len(draws["joint_friction_scale"]) == J
    torques = np.linspace(-5.0, 5.0, J)
    sim.set_efforts(torques)
    sim.step(1)
    np.testing.assert_allclose(sim.data.actuator_force[sim.index.actuators], torques * sim.strength, rtol=1e-9)
    before = sim.data.qvel[0:2].copy()
    kick = sim.push(np.random.default_rng(2), 0.5)
    np.testing.assert_allclose(sim.data.qvel[0:2] - before, kick)
    assert np.all(np.abs(kick) <= 0.5)

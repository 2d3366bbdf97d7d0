"""The example LowCommand bridge: LowCommand per motor name into vendor-style motor slots, and its promise that
the drives damp (kp 0, kd > 0) when commands stop or stop being usable; the core on a clock of the test's, the
node over real DDS sending real UDP datagrams."""

from __future__ import annotations

import math
import socket
import threading
import uuid

import numpy as np
import pytest

from deploy_fixtures import hardware_section, mapped_robot, write_robot_yaml
from motionvl.deploy.bridge import MODE_DISABLED, MODE_ENABLED, LowCommandBridge, MotorSlot, unpack_frame
from motionvl.deploy.mapping import JointMapping

ROBOT = mapped_robot()
MAPPING = JointMapping(ROBOT)
J = ROBOT.num_joints
SLOTS = [2 * k + 1 for k in range(J)]  # every other slot of a 25-slot vendor frame, as a vendor numbers its bus
KD = (MAPPING.to_motor_unsigned(ROBOT.kd)).tolist()


class Drive:
    """A DriveCommand stand-in (q, dq, kp, kd, tau_ff)."""

    def __init__(self, q=0.0, dq=0.0, kp=0.0, kd=0.0, tau_ff=0.0):
        self.q, self.dq, self.kp, self.kd, self.tau_ff = q, dq, kp, kd, tau_ff


def running_command(offset: float = 0.0) -> tuple[list, list]:
    """(motor names, drives) of a RUN-like command, in reversed motor order (the bridge goes by name)."""
    q = MAPPING.to_motor_position(ROBOT.default_pose) + offset
    kp, kd = MAPPING.to_motor_unsigned(ROBOT.kp), MAPPING.to_motor_unsigned(ROBOT.kd)
    drives = [Drive(q[k], 0.1, kp[k], kd[k], 0.5) for k in range(J)]
    return list(MAPPING.motor_names)[::-1], drives[::-1]


def assert_damping(frame, bridge, q=None) -> None:
    assert frame.damping
    for k, slot in enumerate(bridge.slots):
        s = frame.motor_cmd[slot]
        assert (s.mode, s.kp, s.dq, s.tau) == (MODE_ENABLED, 0.0, 0.0, 0.0) and s.kd == KD[k] > 0, (k, s)
        if q is not None:
            assert s.q == q[k]
    assert all(frame.motor_cmd[i] == MotorSlot() for i in range(bridge.num_slots) if i not in bridge.slots)


# ---------------------------------------------------------------------------------------------- the core
def test_frames_carry_the_newest_command_into_its_slots_and_damp_when_commands_stop():
    sent = []
    bridge = LowCommandBridge(MAPPING.motor_names, SLOTS, KD, timeout_s=0.1, num_slots=25, send=sent.append)
    assert_damping(bridge.frame(0.0), bridge)  # before any command: the drives damp
    names, drives = running_command()
    bridge.command(names, drives, now=1.0)
    for now in (1.0, 1.05, 1.0999):  # younger than the timeout: passed through, slot by slot
        frame = bridge.frame(now)
        assert not frame.damping
        for k, name in enumerate(MAPPING.motor_names):
            d = drives[names.index(name)]
            assert frame.motor_cmd[SLOTS[k]] == MotorSlot(MODE_ENABLED, d.q, d.dq, d.tau_ff, d.kp, d.kd)
        assert all(frame.motor_cmd[i].mode == MODE_DISABLED for i in range(25) if i not in SLOTS)
    held = [drives[names.index(n)].q for n in MAPPING.motor_names]
    assert_damping(bridge.frame(1.1001), bridge, q=held)  # just past the timeout: damping
    assert_damping(bridge.frame(60.0), bridge, q=held)  # and it stays so
    bridge.command(*running_command(0.01), now=61.0)  # commands again: through again
    assert not bridge.frame(61.0).damping
    assert [f.sequence for f in sent] == list(range(len(sent))) and len(sent) == 7


@pytest.mark.parametrize("bad", ["nan", "negative_kd", "missing_motor", "named_twice", "short"])
def test_a_bad_command_is_refused_and_does_not_feed_the_watchdog(bad):
    bridge = LowCommandBridge(MAPPING.motor_names, SLOTS, KD, timeout_s=0.1)
    names, drives = running_command()
    bridge.command(names, drives, now=0.0)
    good_q = [drives[names.index(n)].q for n in MAPPING.motor_names]
    names, drives = running_command(0.2)
    if bad == "nan":
        drives[3].q = math.nan
    elif bad == "negative_kd":
        drives[0].kd = -1.0
    elif bad == "missing_motor":
        names, drives = names[1:], drives[1:]
    elif bad == "named_twice":
        names[1] = names[0]
    else:
        drives = drives[:-1]
    for now in np.arange(0.02, 1.0, 0.02):  # a steady stream of it
        with pytest.raises(ValueError):
            bridge.command(names, drives, now=float(now))
    assert bridge.refused == len(np.arange(0.02, 1.0, 0.02))
    assert_damping(bridge.frame(1.0), bridge, q=good_q)  # the last good command's targets, nothing of the bad


def test_a_frame_packs_and_unpacks_and_a_corrupt_one_is_refused():
    bridge = LowCommandBridge(MAPPING.motor_names, SLOTS, KD, timeout_s=0.1, num_slots=25)
    bridge.command(*running_command(), now=0.0)
    frame = bridge.frame(0.0)
    slots, sequence = unpack_frame(frame.pack())
    assert sequence == 0 and len(slots) == 25
    for got, want in zip(slots, frame.motor_cmd):  # float32 on the wire
        assert got.mode == want.mode
        np.testing.assert_allclose([got.q, got.dq, got.tau, got.kp, got.kd],
                                   [want.q, want.dq, want.tau, want.kp, want.kd], rtol=1e-6)
    data = bytearray(frame.pack())
    data[5] ^= 0xFF
    with pytest.raises(ValueError, match="CRC"):
        unpack_frame(bytes(data))


@pytest.mark.parametrize("kwargs, message", [
    ({"slots": [0] * J}, "distinct"), ({"damping_kd": [0.0] * J}, "damping gains"),
    ({"timeout_s": 0.0}, "timeout_s"), ({"num_slots": 3}, "num_slots")])
def test_a_bridge_that_could_not_damp_or_address_its_motors_is_refused(kwargs, message):
    args = {"motor_names": MAPPING.motor_names, "slots": SLOTS, "damping_kd": KD, "timeout_s": 0.1, **kwargs}
    with pytest.raises(ValueError, match=message):
        LowCommandBridge(**args)


# ---------------------------------------------------------------------------------------------- the node
rclpy = pytest.importorskip("rclpy")

from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import Bool  # noqa: E402

from motionvl.msg import LowCommand  # noqa: E402
from motionvl.ros.low_command_bridge_node import LowCommandBridgeNode  # noqa: E402
from motionvl.ros.messages import DriveCommandWriter  # noqa: E402
from spinning import Spinners  # noqa: E402
from waiting import wait_for  # noqa: E402

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


class Drives:
    """The drives' side of the bridge: a UDP socket on loopback keeping every frame it receives."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.frames: list = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self) -> None:
        while not self.stop.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            with self.lock:
                self.frames.append(unpack_frame(data)[0])

    def count(self) -> int:
        with self.lock:
            return len(self.frames)

    def since(self, start: int) -> list:
        with self.lock:
            return self.frames[start:]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5.0)
        self.sock.close()


def _damps(slots: list, bridge) -> bool:
    return all(slots[s].kp == 0.0 and slots[s].kd > 0.0 and slots[s].tau == 0.0 for s in bridge.slots)


def _runs(slots: list, bridge) -> bool:
    return all(slots[s].kp > 0.0 for s in bridge.slots)


@pytest.mark.parametrize("stop", ["silence", "garbage"])
def test_the_bridge_node_passes_commands_to_the_drives_and_damps_when_they_stop(ros_context, tmp_path, stop):
    """LowCommands flowing from a controller reach the drives in their slots; then the controller goes silent
    (or keeps sending commands with a NaN): the frames that follow damp (kp 0, kd > 0), ~/damping says so, and the
    bridge never stops sending."""
    robot_yaml = write_robot_yaml(tmp_path, hardware_section())
    drives = Drives()
    spinners = Spinners(ros_context)
    ns = f"/t{uuid.uuid4().hex[:8]}"
    try:
        bridge_node = spinners.add(LowCommandBridgeNode(context=ros_context, namespace=ns, parameter_overrides=[
            Parameter("robot_config", value=str(robot_yaml)), Parameter("sender", value="udp"),
            Parameter("udp_address", value=drives.address), Parameter("slots", value=SLOTS),
            Parameter("num_slots", value=25), Parameter("rate_hz", value=100.0), Parameter("timeout_s", value=0.3)]))
        bridge = bridge_node.bridge
        controller = spinners.add(Node(f"controller_{uuid.uuid4().hex[:6]}", namespace=ns, context=ros_context))
        said, lock = [], threading.Lock()

        def keep(msg):
            with lock:
                said.append(msg.data)
        controller.create_subscription(Bool, "low_command_bridge/damping", keep, LATCHED)
        pub = controller.create_publisher(LowCommand, "low_command", 1)
        assert wait_for(lambda: pub.get_subscription_count() > 0 and drives.count() > 0 and said == [True])
        assert _damps(drives.since(0)[0], bridge), "before the first command the drives damp"

        names, cmds = running_command()
        writer = DriveCommandWriter(LowCommand, names)
        fields = [np.array([getattr(d, f) for d in cmds]) for f in ("q", "dq", "kp", "kd", "tau_ff")]
        good = writer.fill(*fields)
        bad_fields = [f.copy() for f in fields]
        bad_fields[0][2] = math.nan
        bad = DriveCommandWriter(LowCommand, names).fill(*bad_fields)
        halt = threading.Event()
        sending = {"msg": good}

        def controller_loop():  # a 50 Hz controller, until it dies or goes wrong
            while not halt.wait(0.02):
                pub.publish(sending["msg"])

        loop = threading.Thread(target=controller_loop, daemon=True)
        loop.start()
        try:
            assert wait_for(lambda: said[-1:] == [False], timeout=20.0), said
            start = drives.count()
            assert wait_for(lambda: drives.count() >= start + 5), "frames stopped"
            frame = drives.since(start)[-1]
            assert _runs(frame, bridge)
            for k, name in enumerate(MAPPING.motor_names):  # the command's motor in its slot (float32)
                d = cmds[names.index(name)]
                s = frame[SLOTS[k]]
                np.testing.assert_allclose([s.q, s.dq, s.tau, s.kp, s.kd], [d.q, d.dq, d.tau_ff, d.kp, d.kd],
                                           rtol=1e-6)
            assert all(frame[i].mode == MODE_DISABLED for i in range(25) if i not in SLOTS)
            if stop == "silence":
                halt.set()
            else:
                sending["msg"] = bad
            assert wait_for(lambda: said[-1:] == [True], timeout=20.0), said
            after = drives.count()
            assert wait_for(lambda: drives.count() >= after + 10), "the bridge stopped sending"
            kinds = ["run" if _runs(f, bridge) else "damp" if _damps(f, bridge) else "other" for f in drives.since(start)]
            switch = kinds.index("damp")
            assert set(kinds[:switch]) == {"run"} and set(kinds[switch:]) == {"damp"}, kinds
            assert len(kinds) - switch >= 10
            assert said == [True, False, True]
            if stop == "garbage":
                assert bridge_node.inbox.bad[bridge_node.resolve_topic_name("low_command")] > 0
        finally:
            halt.set()
            loop.join(timeout=5.0)
    finally:
        spinners.shutdown()
        drives.close()

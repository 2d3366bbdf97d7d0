"""low_command_bridge: an example bridge from the deployment node's LowCommand to a vendor-style low-level
command, damping when commands stop (a thin adapter over `motionvl.deploy.bridge.LowCommandBridge`).

    ros2 run motionvl low_command_bridge_node --ros-args -p robot_config:=robot.yaml -p sender:=udp

Subscribes:
  low_command  motionvl/LowCommand  the deployment node's pd path (motor space, by motor name). Reliable,
                                    depth 1. A command missing a motor, with a value not finite or a negative
                                    gain is logged, counted and refused (it does not feed the watchdog); a
                                    publisher of another type is reported.
Publishes:
  ~/damping    std_msgs/Bool        whether the frames damp: on every change, transient local (depth 1).
Sends a frame (`motionvl.deploy.bridge.VendorLowCommand`: per vendor motor slot mode, q, dq, tau, kp, kd,
the shape of Unitree's low-level command) every 1 / rate_hz s on the steady clock, whatever arrives:
the newest good command while it is younger than timeout_s, else damping (kp 0, kd = damping_scale x the
robot config's Kd; also before the first command). `sender` says where frames go:
  log              nowhere: counted, and the damping changes logged (a dry run of the bridge)
  udp              packed (`VendorLowCommand.pack`, this module's layout, no vendor's) to udp_address
  package.module:factory   factory(parameters dict) -> send(frame): your SDK's send (e.g. filling
                   unitree_sdk2's LowCmd_ from the frame's slots and writing it)
The drives' own watchdog (a bridge process killed with kill -9 sends nothing at all) belongs in the
drives or their firmware; this bridge covers the host side: a controller that stops or sends garbage.
"""

from __future__ import annotations

import importlib
import socket
import sys
import time

from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Bool

from motionvl.deploy.bridge import LowCommandBridge
from motionvl.deploy.mapping import JointMapping
from motionvl.msg import LowCommand
from motionvl.robot import ConfigError, load_robot_config
from motionvl.ros.inbox import Inbox
from motionvl.ros.params import declare_parameters
from motionvl.ros.runtime import run_node

NODE_NAME = "low_command_bridge"

# name -> (default, description); read-only after start
PARAMETERS = {
    "robot_config": ("", "Robot YAML (motor names and Kd from its hardware section); empty = the package's "
                         "config/robot.yaml."),
    "rate_hz": (500.0, "Frames per second sent to the drives (a vendor's low-level loop runs at its own fixed "
                       "rate, faster than the policy's 50 Hz commands)."),
    "timeout_s": (0.1, "s without a good LowCommand after which every frame damps: 5 command periods of the pd "
                       "path at 50 Hz."),
    "damping_scale": (1.0, "Damping gain = this x the robot config's Kd, per motor (as the deployment node's DAMP)."),
    "slots": ([-1], "Vendor motor slot of each motor, in the robot config's motor order; [-1]: slot k for motor k."),
    "num_slots": (0, "Motor slots in the vendor frame (e.g. 20 for unitree_go, 35 for unitree_hg); 0: one past "
                     "the highest slot."),
    "sender": ("log", "'log': frames counted, none sent; 'udp': packed to udp_address; 'package.module:factory': "
                      "factory(parameters) returns send(frame)."),
    "udp_address": ("127.0.0.1:15000", "host:port the 'udp' sender sends to."),
}

COMMAND_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
LATCHED_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)


def udp_sender(address: str):
    """send(frame): the packed frame as one UDP datagram to host:port."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"parameter udp_address must be host:port, got {address!r}")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    target = (host, int(port))

    def send(frame) -> None:
        sock.sendto(frame.pack(), target)
    send.close = sock.close
    return send


def make_sender(p: dict):
    """The send callable `p['sender']` names (None for 'log')."""
    kind = p["sender"]
    if kind == "log":
        return None
    if kind == "udp":
        return udp_sender(p["udp_address"])
    module, _, name = kind.partition(":")
    if not module or not name:
        raise ConfigError(f"parameter sender must be 'log', 'udp' or 'package.module:factory', got {kind!r}")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"parameter sender {kind!r}: {exc}") from exc
    return factory(dict(p))


class LowCommandBridgeNode(Node):
    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self._send = None
        p = declare_parameters(self, PARAMETERS)
        if p["rate_hz"] <= 0:
            raise ConfigError(f"parameter rate_hz must be > 0, got {p['rate_hz']}")
        robot = load_robot_config(p["robot_config"] or None)
        mapping = JointMapping(robot)
        slots = list(range(mapping.num_joints)) if p["slots"] == [-1] else list(p["slots"])
        kd = mapping.to_motor_unsigned(robot.kd) * p["damping_scale"]
        self._send = make_sender(p)
        try:
            self.bridge = LowCommandBridge(mapping.motor_names, slots, kd.tolist(), p["timeout_s"],
                                           num_slots=p["num_slots"] or None, send=self._send)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        self.inbox = Inbox(self)
        self.inbox.subscribe(LowCommand, "low_command", self._on_command, COMMAND_QOS)
        self.damping_pub = self.create_publisher(Bool, "~/damping", LATCHED_QOS)
        self._damping = None
        self.frames = 0
        # the steady clock: a bridge on simulated time must still send when /clock stops
        self.create_timer(1.0 / p["rate_hz"], self._tick, clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.get_logger().info(
            f"{len(slots)} motors into slots {slots} of {self.bridge.num_slots}, a frame every "
            f"{1e3 / p['rate_hz']:g} ms to {p['sender']}{' (' + p['udp_address'] + ')' if p['sender'] == 'udp' else ''}; "
            f"damping after {p['timeout_s']:g} s without a command")

    def _on_command(self, msg: LowCommand) -> None:
        self.bridge.command(msg.motor_names, msg.motor_cmd, time.monotonic())  # refused: counted by the inbox

    def _tick(self) -> None:
        now = time.monotonic()
        frame = self.bridge.frame(now)
        self.frames += 1
        if frame.damping != self._damping:
            self._damping = frame.damping
            self.damping_pub.publish(Bool(data=frame.damping))
            if not frame.damping:
                self.get_logger().info("commands arriving: passing them to the drives")
            elif self.bridge.last_command_at is None:
                self.get_logger().warning("no LowCommand yet: the drives damp")
            else:
                self.get_logger().error(f"no good LowCommand for {now - self.bridge.last_command_at:.3f} s: the drives "
                                        "damp")

    def destroy_node(self) -> None:
        close = getattr(self._send, "close", None)
        if close is not None:
            close()
        super().destroy_node()


def main(args=None) -> int:
    return run_node(LowCommandBridgeNode, NODE_NAME, args, threads=1)


if __name__ == "__main__":
    sys.exit(main())

"""recorder: records the training loop's topics into a rosbag2 bag (MCAP or sqlite3), without rosbag2.

A thin adapter over `motionvl.bags.BagRecorder` (the pure-Python `rosbags` writer; the bag is
readable by `ros2 bag` and by `motionvl.bags.read_bag`).

Subscribes (raw: the exact CDR wire bytes go into the bag, nothing is deserialized):
  every name in `topics` (plus camera/image_raw with `record_images`), once a publisher of it
  appears in the graph (checked every `discovery_period_s`, so topics that appear later are
  picked up). The message type comes from the graph. QoS follows the publishers, as rosbag2
  does: reliable only if every publisher is reliable, transient-local only if every publisher
  is (so latched messages published before the recorder started are recorded too); depth 100.
  If a publisher that the subscription cannot match appears later (best effort, or volatile
  against a transient-local subscription), the subscription is recreated with the weaker QoS.
  Relative names resolve in the recorder's namespace, like the other nodes' topics.
Services:
  ~/stop  std_srvs/Trigger  close the bag (metadata.yaml and index written) and stop recording.
The bag is also closed when the node shuts down (SIGINT/SIGTERM, destroy_node).

Timestamps are receive times on the node clock, in ns: simulated time under use_sim_time
(config/nodes.yaml sets it; messages received before the first /clock get timestamp 0, and a recorder
on simulated time that sees no /clock publisher 2 s after start says so as an error).
Message types must be in rosbags' ROS 2 Kilted typestore (all standard interfaces) or MotionVL's own
(msg/*.msg, their definitions written into the bag); a topic of another type is skipped with a warning.
Crash safety: the bag is flushed every `flush_period_s` (see `motionvl.bags`); after a crash,
`motionvl.bags.recover_bag(path)` rebuilds a complete bag from what was flushed.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass

import rclpy
import rclpy.logging
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_srvs.srv import Trigger

from motionvl.bags import COMPRESSIONS, STORAGES, BagError, BagRecorder, new_bag_path, qos
from motionvl.robot import ConfigError
from motionvl.ros.runtime import run_node
from motionvl.ros.params import declare_parameters

NODE_NAME = "recorder"

# the training loop's topics (relative names resolve in the recorder's namespace; /clock is global). The actions'
# feedback and status topics: every trainer's (one action per trainer node, hence the pattern), the synthesizer's
# and the critic's; their goals and results travel as services (the search's ledger has them: search/ledger; the
# critic's results are also published on critic/feedback and critic/comparison).
DEFAULT_TOPICS = [
    "joint_states", "imu/data", "odom", "/clock", "cmd_vel", "camera/camera_info",
    "deployment/status", "motor_states", "low_command", "joint_command",  # ROS playback: what the robot was sent
    "critic/feedback", "critic/comparison", "rollout/boundary", "trainer/heartbeat",
    "*/train_candidate/_action/feedback", "*/train_candidate/_action/status",
    "synthesize/_action/feedback", "synthesize/_action/status",
    "vlm_critic/critique/_action/feedback", "vlm_critic/critique/_action/status",
    "vlm_critic/compare/_action/feedback", "vlm_critic/compare/_action/status", "search/state", "search/ledger",
]
IMAGE_TOPIC = "camera/image_raw"
CLOCK_WAIT_S = 2.0
"""Seconds after start by which a recorder on simulated time expects a /clock publisher."""

# name -> (default, description); all read-only after start (declared by motionvl.ros.params)
PARAMETERS = {
    "output_dir": ("runs/bags", "Directory that receives the bag directory (created if missing)."),
    "bag_name": ("", "Name of the bag directory in output_dir; empty = recorder_<YYYYmmdd_HHMMSS>. "
                     "An existing bag is never overwritten: the node refuses to start."),
    "storage": ("mcap", "rosbag2 storage: 'mcap' or 'sqlite3'."),
    "compression": ("none", "'none' or 'zstd' (MCAP chunk compression; mcap storage only)."),
    "record_images": (False, "Also record camera/image_raw (large: width*height*3 bytes per frame)."),
    "discovery_period_s": (1.0, "Wall-clock seconds between looks at the ROS graph for wanted topics that "
                                "have a publisher."),
    "flush_period_s": (1.0, "Wall-clock seconds between flushes to disk; a crash loses at most this much. "
                            "0 = only on close."),
}
TOPICS_DESCRIPTION = ("Topics to record (string array). Relative names resolve in the node's namespace; '*' stands "
                      "for one name component (e.g. '*/train_candidate/_action/feedback': every trainer's). "
                      "Default: the training loop's topics except camera/image_raw (see record_images).")

DEPTH = 100  # per subscription: a burst must not overflow while the bag writes


@dataclass
class Recorded:
    msgtype: str
    qos: QoSProfile
    subscription: object


def message_class(msgtype: str):
    """The Python class of "pkg/msg/Type" or of an action's "pkg/action/Type_FeedbackMessage" (rosidl_runtime_py
    where installed, else importlib)."""
    try:
        from rosidl_runtime_py.utilities import get_message
    except ImportError:
        pkg, kind, name = msgtype.split("/")
        module = importlib.import_module(f"{pkg}.{kind}")
        if kind == "action" and not hasattr(module, name):  # Type_FeedbackMessage: the action's own module has it
            action, _, part = name.rpartition("_")
            return getattr(getattr(module, action).Impl, part) if part == "FeedbackMessage" else \
                getattr(getattr(module, action), part)
        return getattr(module, name)
    return get_message(msgtype)


def topic_pattern(name: str, namespace: str) -> re.Pattern:
    """A topic name with '*' components as a pattern of full names ('*': one component)."""
    full = name if name.startswith("/") else f"{namespace.rstrip('/')}/{name}"
    return re.compile("/".join("[^/]+" if part == "*" else re.escape(part) for part in full.split("/")))


def subscription_qos(offered: list[QoSProfile]) -> QoSProfile:
    """A subscription QoS every offered publisher QoS can match (rosbag2's adaptive choice)."""
    reliable = all(p.reliability == ReliabilityPolicy.RELIABLE for p in offered)
    latched = all(p.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in offered)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=DEPTH,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def compatible(sub: QoSProfile, want: QoSProfile) -> bool:
    """Whether `sub` still matches every publisher that `want` was computed from."""
    too_reliable = sub.reliability == ReliabilityPolicy.RELIABLE and want.reliability != ReliabilityPolicy.RELIABLE
    too_durable = (sub.durability == DurabilityPolicy.TRANSIENT_LOCAL
                   and want.durability != DurabilityPolicy.TRANSIENT_LOCAL)
    return not (too_reliable or too_durable)


def bag_qos(offered: list[QoSProfile]) -> list:
    """The publishers' QoS as rosbags records (stored in the bag, used by `ros2 bag play`)."""
    return [qos(reliable=p.reliability == ReliabilityPolicy.RELIABLE,
                transient_local=p.durability == DurabilityPolicy.TRANSIENT_LOCAL, depth=max(p.depth, 1))
            for p in offered]


class RecorderNode(Node):
    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self.bag: BagRecorder | None = None  # set last: a node that failed to start has no bag
        p = declare_parameters(self, PARAMETERS)
        self.declare_parameter("topics", list(DEFAULT_TOPICS), ParameterDescriptor(
            description=TOPICS_DESCRIPTION, read_only=True, dynamic_typing=True))
        topics = self.get_parameter("topics").value
        if not isinstance(topics, (list, tuple)) or not all(isinstance(t, str) and t for t in topics):
            raise ConfigError(f"parameter topics must be an array of topic names, got {topics!r}")
        if p["storage"] not in STORAGES:
            raise ConfigError(f"parameter storage must be one of {sorted(STORAGES)}, got {p['storage']!r}")
        if p["compression"] not in COMPRESSIONS:
            raise ConfigError(f"parameter compression must be one of {COMPRESSIONS}, got {p['compression']!r}")
        if p["compression"] != "none" and p["storage"] != "mcap":
            raise ConfigError("parameter compression needs storage 'mcap'")
        if p["discovery_period_s"] <= 0 or p["flush_period_s"] < 0:
            raise ConfigError("parameters discovery_period_s must be > 0 and flush_period_s >= 0")
        names = list(topics) + ([IMAGE_TOPIC] if p["record_images"] else [])
        try:
            self.wanted = sorted({self.resolve_topic_name(t) for t in names if "*" not in t.split("/")})
        except Exception as exc:  # rclpy's invalid-name exceptions
            raise ConfigError(f"parameter topics: {exc}") from exc
        self.patterns = [topic_pattern(t, self.get_namespace()) for t in names if "*" in t.split("/")]

        try:
            path = new_bag_path(p["output_dir"], p["bag_name"], prefix=NODE_NAME)
            self.bag = BagRecorder(path, storage=p["storage"], compression=p["compression"],
                                   flush_period_s=p["flush_period_s"])
        except (BagError, OSError) as exc:
            raise ConfigError(str(exc)) from exc
        self.recorded: dict[str, Recorded] = {}
        self._skipped: set[str] = set()
        self._messages = MutuallyExclusiveCallbackGroup()  # writes; the service and timers run beside them

        self.create_service(Trigger, "~/stop", self._on_stop)
        # wall-clock timers: under use_sim_time they must run before /clock exists, at real-time pace
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._timers = [self.create_timer(p["discovery_period_s"], self.discover, clock=steady)]
        if p["flush_period_s"] > 0:
            self._timers.append(self.create_timer(p["flush_period_s"], self.bag.flush, clock=steady))
        if self.get_parameter("use_sim_time").value:  # stamps would all be 0 without a /clock publisher
            self._clock_check = self.create_timer(CLOCK_WAIT_S, self._check_clock, clock=steady)
        self.get_logger().info(f"recording to {path} ({p['storage']}): "
                               f"{', '.join(self.wanted + [t for t in names if '*' in t.split('/')])}")
        self.discover()

    def _check_clock(self) -> None:
        self._clock_check.cancel()
        if not self.count_publishers("/clock"):
            self.get_logger().error(f"use_sim_time is set but nothing publishes /clock after {CLOCK_WAIT_S:g} s: "
                                    "every message is stamped 0 until a simulator starts (on a robot, record "
                                    "with use_sim_time false)")

    # ------------------------------------------------------------------ graph
    def discover(self) -> None:
        """Subscribe to wanted topics that have publishers; weaken QoS where a new publisher needs it."""
        if self.bag.closed:
            return
        graph = dict(self.get_topic_names_and_types())
        matched = [t for t in sorted(graph) if t not in self.wanted and any(p.fullmatch(t) for p in self.patterns)]
        for topic in self.wanted + matched:
            if topic not in graph or topic in self._skipped:
                continue
            publishers = self.get_publishers_info_by_topic(topic)
            if not publishers:
                continue  # only subscribers so far: no QoS to match yet
            known = self.recorded.get(topic)
            msgtype = known.msgtype if known else publishers[0].topic_type
            offered = [e.qos_profile for e in publishers if e.topic_type == msgtype]
            others = {e.topic_type for e in publishers} - {msgtype}
            if others and not known:
                self.get_logger().warning(f"{topic} has publishers of several types; recording {msgtype}, "
                                          f"not {sorted(others)}")
            want = subscription_qos(offered)
            if known is None:
                self._subscribe(topic, msgtype, want, offered)
            elif not compatible(known.qos, want):
                self.get_logger().info(f"{topic}: a publisher needs weaker QoS ({want.reliability.name.lower()}, "
                                       f"{want.durability.name.lower()}); resubscribing")
                self.destroy_subscription(known.subscription)
                known.qos = want
                known.subscription = self._create_subscription(topic, msgtype, want)

    def _subscribe(self, topic: str, msgtype: str, want: QoSProfile, offered: list[QoSProfile]) -> None:
        if not self.bag.has_type(msgtype):
            self._skip(topic, f"type {msgtype} is not a standard ROS 2 Kilted interface")
            return
        try:
            self.bag.add_topic(topic, msgtype, bag_qos(offered))
            subscription = self._create_subscription(topic, msgtype, want)
        except (BagError, ImportError, AttributeError, ValueError) as exc:
            self._skip(topic, str(exc))
            return
        self.recorded[topic] = Recorded(msgtype, want, subscription)
        self.get_logger().info(f"recording {topic} ({msgtype}, {want.reliability.name.lower()}, "
                               f"{want.durability.name.lower()})")

    def _create_subscription(self, topic: str, msgtype: str, want: QoSProfile):
        return self.create_subscription(message_class(msgtype), topic, lambda data: self._on_message(topic, data),
                                        want, raw=True, callback_group=self._messages)

    def _skip(self, topic: str, reason: str) -> None:
        self._skipped.add(topic)
        self.get_logger().warning(f"not recording {topic}: {reason}")

    # ------------------------------------------------------------------ recording
    def _on_message(self, topic: str, data: bytes) -> None:
        self.bag.write(topic, self.get_clock().now().nanoseconds, data)

    def stop(self) -> str:
        """Close the bag and stop recording; returns a summary."""
        for timer in self._timers:
            timer.cancel()
        for rec in self.recorded.values():
            self.destroy_subscription(rec.subscription)
        self.bag.close()
        counts = ", ".join(f"{t} {n}" for t, n in sorted(self.bag.counts.items()))
        return f"closed {self.bag.path}: {sum(self.bag.counts.values())} messages ({counts or 'no topics'})"

    def _on_stop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        if self.bag.closed:
            response.success, response.message = False, f"not recording: {self.bag.path} is closed"
            return response
        try:
            response.message = self.stop()
            response.success = True
        except BagError as exc:
            response.success, response.message = False, str(exc)
        self.get_logger().info(response.message)
        return response

    def destroy_node(self):
        if self.bag is not None and not self.bag.closed:
            # after a signal the context is already shut down: log without /rosout then
            logger = self.get_logger() if self.context.ok() else rclpy.logging.get_logger(f"{NODE_NAME}_shutdown")
            try:
                logger.info(self.stop())
            except BagError as exc:
                logger.error(str(exc))
        return super().destroy_node()


def main(args=None) -> int:
    return run_node(RecorderNode, NODE_NAME, args, threads=None)


if __name__ == "__main__":
    sys.exit(main())

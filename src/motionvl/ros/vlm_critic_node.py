"""vlm_critic: collects one rollout between boundaries and publishes what a motion critic says
about it, and compares two rollouts on request (a thin adapter over `motionvl.critic.service`).

Subscribes:
  rollout/boundary    std_msgs/String  JSON {"event": "start" | "end", "task": "...",
                                       "command": [vx, vy, yaw_rate], "id": ..., "previous_best":
                                       {MotionFeedback}} (reliable, depth 10). "start" clears the
                                       buffers and begins collecting; "end" stops and queues a
                                       critique. "task" (either message; "end" wins) overrides the
                                       `task` parameter; "command" (optional) overrides the
                                       recorded velocity command; "id" is echoed in the feedback's
                                       meta and names the rollout for comparisons; "previous_best"
                                       (optional) is the best feedback so far, which the critique
                                       judges this rollout against (better_than_best).
  critic/compare      std_msgs/String  JSON {"id": ..., "task": "...", "first": ROLLOUT,
                                       "second": ROLLOUT}, ROLLOUT = {"rollout_id": ...} (one of
                                       the last `keep_rollouts` this node critiqued) or {"path":
                                       DIR} (a rollout saved with `rollout_dir` or Rollout.save);
                                       reliable, depth 10. The node keeps no best of its own: the
                                       orchestrator names both rollouts (r*'s among them) each time.
  camera/image_raw    sensor_msgs/Image  frames (rgb8/bgr8/rgba8/bgra8/mono8), kept at most one
                                       per `frame_interval_s` of stamp time; image backends only.
  joint_states        sensor_msgs/JointState  \\ the rollout's states (reliable, depth 100); the
  odom                nav_msgs/Odometry       / kinematic critic rebuilds the Trajectory from them
  <command_topic>     geometry_msgs/TwistStamped  the command in effect (default simulator/command)
Publishes:
  critic/feedback     motionvl/MotionFeedback  the critic's MotionFeedback (motionvl.critic.schema;
                                       bookkeeping such as meta["rollout_id"] in `meta`, a JsonRecord
                                       of kind "critic_meta", version 1), reliable, transient-local,
                                       depth 1: a late subscriber gets the last one.
  critic/comparison   motionvl/Comparison  the Comparison, meta["request_id"] = the request's id;
                                       every request gets one (valid=false with the error when the
                                       request or a rollout is unusable); reliable, transient-local,
                                       depth 10.
Services:
  ~/critique          std_srvs/Trigger  critique what has been collected so far (the current
                                       rollout, or else the last finished one); answers at once,
                                       the feedback follows on critic/feedback.

Parameter `backend` picks the critic: "kinematic" (offline gait analysis of the states; no
model, not a VLM), "transformers" (`model` = a local model directory) or "openai" (`base_url`,
`model`). After a VLM critique the kinematic measurements are merged in when states were
received (`merge_kinematics`), flagging descriptors that contradict them.

Critiques and comparisons run one at a time in a worker thread, so a slow model never blocks the
executor: subscriptions keep collecting the next rollout meanwhile. Every "end" gets a feedback,
an invalid one (valid=false, error says why) when there was nothing to judge.
"""

from __future__ import annotations

import os
import queue
import sys
import threading

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

import numpy as np  # noqa: E402
from geometry_msgs.msg import TwistStamped  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from motionvl.backend_names import backends_help, kind_settings, model_parameters, model_settings  # noqa: E402
from motionvl.critic.rollouts import CollectLimits, RolloutCollector, json_object, parse_boundary  # noqa: E402
from motionvl.critic.schema import Comparison, MotionFeedback  # noqa: E402
from motionvl.critic.service import BACKENDS, CriticService, backend_factory, parse_comparison_request  # noqa: E402
from motionvl.deploy.mapping import JointMapping  # noqa: E402
from motionvl.msg import Comparison as ComparisonMsg  # noqa: E402
from motionvl.msg import MotionFeedback as MotionFeedbackMsg  # noqa: E402
from motionvl.robot import ConfigError, load_robot_config  # noqa: E402
from motionvl.ros.messages import comparison_msg, feedback_msg  # noqa: E402
from motionvl.ros.params import declare_parameters  # noqa: E402
from motionvl.ros.runtime import abandon_work, run_node, time_left  # noqa: E402
from motionvl.ros.terrain import TERRAIN_PARAMETERS, node_terrain  # noqa: E402
from motionvl.sim.model import build_model  # noqa: E402

NODE_NAME = "vlm_critic"

PARAMETERS = {
    "backend": ("kinematic", f"Critic: {backends_help('critic')}."),
    **model_parameters(kind_settings("critic")),  # model, base_url, device, timeouts (motionvl.backend_names)
    "use_contact_sheet": (False, "VLM backends: send one timestamped grid image instead of one image per frame."),
    "task": ("", "Task sentence used when a boundary message carries none."),
    "frame_interval_s": (0.1, "Keep at most one camera frame per this many seconds of stamp time (paper: 0.1)."),
    "max_frames": (600, "Most frames kept per rollout; later frames are dropped (the VLM backends thin further)."),
    "max_samples": (30000, "Most joint-state samples kept per rollout (10 min at 50 Hz)."),
    "merge_kinematics": (True, "After a VLM critique, cross-check its claims with the kinematic measurements: "
                               "contradictions marked, its alignment scaled by the share of measurable claims "
                               "confirmed (motionvl.critic.crosscheck)."),
    "command_topic": ("simulator/command", "geometry_msgs/TwistStamped topic of the velocity command in effect."),
    "keep_rollouts": (4, "Finished rollouts kept for comparisons by id (memory: their frames)."),
    "rollout_dir": ("", "Save every critiqued rollout (frames + trajectory) under this directory; its path goes in "
                        "the feedback's meta.rollout_path. Empty = do not save."),
    "robot_config": ("", "Robot YAML; empty = the package's config/robot.yaml."),
    **TERRAIN_PARAMETERS,  # the ground its rollouts' foot contacts and heights are found against
}

FEEDBACK_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                          history=HistoryPolicy.KEEP_LAST)
# the search asks for a comparison in both orders back to back: both answers must reach it
COMPARISON_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                            durability=DurabilityPolicy.TRANSIENT_LOCAL, history=HistoryPolicy.KEEP_LAST)
BOUNDARY_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
STATE_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


def _stamp_s(stamp) -> float:
    return float(stamp.sec) + float(stamp.nanosec) * 1e-9


def image_to_rgb(msg: Image) -> np.ndarray:
    """sensor_msgs/Image -> H x W x 3 uint8 RGB (rgb8, bgr8, rgba8, bgra8, mono8)."""
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
    enc = msg.encoding.lower()
    if enc not in channels:
        raise ValueError(f"unsupported image encoding {msg.encoding!r}")
    c = channels[enc]
    buf = np.frombuffer(bytes(msg.data) if not isinstance(msg.data, (bytes, bytearray)) else msg.data, dtype=np.uint8)
    rows = buf.reshape(msg.height, msg.step)[:, : msg.width * c]
    img = rows.reshape(msg.height, msg.width, c)
    if enc == "mono8":
        return np.repeat(img, 3, axis=2)
    img = img[:, :, :3]
    if enc.startswith("bgr"):
        img = img[:, :, ::-1]
    return np.ascontiguousarray(img)


class VlmCriticNode(Node):
    def __init__(self, critic_factory=None, **kwargs):
        """`critic_factory()` (optional) builds the critic instead of the `backend` parameter (tests)."""
        super().__init__(NODE_NAME, **kwargs)
        p = declare_parameters(self, PARAMETERS)
        if p["frame_interval_s"] < 0:
            raise ConfigError("parameter frame_interval_s must be >= 0")
        if p["backend"] not in BACKENDS:
            raise ConfigError(f"parameter backend must be one of {BACKENDS}, got {p['backend']!r}")
        if critic_factory is None:
            try:
                critic_factory = backend_factory(p["backend"], model_settings(p),
                                                 use_contact_sheet=bool(p["use_contact_sheet"]))
            except ValueError as exc:
                raise ConfigError(f"parameters: {exc}") from None
        self.p = p
        self.backend = p["backend"]
        self.robot = load_robot_config(p["robot_config"] or None)
        self.mapping = JointMapping(self.robot)
        floor = node_terrain(p)
        self.service = CriticService(critic_factory, model=build_model(self.robot, floor), robot=self.robot,
                                     default_task=p["task"], merge_kinematics=p["merge_kinematics"],
                                     keep_rollouts=p["keep_rollouts"], rollout_dir=p["rollout_dir"] or None)
        self.collector = RolloutCollector(CollectLimits(frame_interval_s=p["frame_interval_s"],
                                                        max_frames=p["max_frames"], max_samples=p["max_samples"]))
        self.feedback_count = 0
        self.last_feedback: MotionFeedback | None = None
        self.comparison_count = 0

        self.feedback_pub = self.create_publisher(MotionFeedbackMsg, "critic/feedback", FEEDBACK_QOS)
        self.comparison_pub = self.create_publisher(ComparisonMsg, "critic/comparison", COMPARISON_QOS)
        self.create_subscription(String, "rollout/boundary", self._on_boundary, BOUNDARY_QOS)
        self.create_subscription(String, "critic/compare", self._on_compare, BOUNDARY_QOS)
        if self.backend != "kinematic":
            self.create_subscription(Image, "camera/image_raw", self._on_image, qos_profile_sensor_data)
        self.create_subscription(JointState, "joint_states", self._on_joint_state, STATE_QOS)
        self.create_subscription(Odometry, "odom", self._on_odom, STATE_QOS)
        self.create_subscription(TwistStamped, p["command_topic"], self._on_command, BOUNDARY_QOS)
        self.create_service(Trigger, "~/critique", self._on_critique)

        self._jobs: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._work, name="vlm_critic_worker", daemon=True)
        self._worker.start()
        self.get_logger().info(f"critic backend '{self.backend}'"
                               + (" (offline gait analysis, not a VLM)" if self.backend == "kinematic" else ""))

    def collected(self) -> dict:
        """What the current rollout has so far: collecting, task, frames, states, odom (for tests, logs)."""
        return self.collector.status()

    # ------------------------------------------------------------------ inputs
    def _t(self, stamp) -> float:
        t = _stamp_s(stamp)
        return t if t > 0.0 else self.get_clock().now().nanoseconds * 1e-9

    def _on_boundary(self, msg: String) -> None:
        try:
            boundary = parse_boundary(msg.data)
        except ValueError as exc:
            self.get_logger().warning(f"rollout/boundary ignored: {exc}: {msg.data[:200]!r}")
            return
        if boundary.event == "start":
            if self.collector.start(boundary):
                self.get_logger().warning("rollout start while collecting: the unfinished rollout is dropped")
            return
        collected, started = self.collector.end(boundary)
        if not started:
            self.get_logger().warning("rollout end without a start: critiquing nothing")
        self._jobs.put(("critique", collected, "boundary"))

    def _on_compare(self, msg: String) -> None:
        try:
            request = parse_comparison_request(msg.data)
        except ValueError as exc:
            request_id = _request_id(msg.data)
            self.get_logger().warning(f"critic/compare: unusable request: {exc}")
            self._publish_comparison(Comparison.invalid(self.backend, "", f"unusable request: {exc}",
                                                        meta={"request_id": request_id}))
            return
        self._jobs.put(("compare", request, None))

    def _on_image(self, msg: Image) -> None:
        try:
            self.collector.add_frame(self._t(msg.header.stamp), lambda: image_to_rgb(msg))
        except ValueError as exc:
            self.get_logger().warning(f"camera frame ignored: {exc}", throttle_duration_sec=5.0)

    def _on_joint_state(self, msg: JointState) -> None:
        q = self.mapping.joint_positions(msg.name, msg.position)
        if q is None:
            self.get_logger().warning("joint_states without every robot joint ignored",
                                      throttle_duration_sec=5.0)
            return
        self.collector.add_joint_state(self._t(msg.header.stamp), q.tolist())

    def _on_odom(self, msg: Odometry) -> None:
        p, o = msg.pose.pose.position, msg.pose.pose.orientation
        self.collector.add_odometry(self._t(msg.header.stamp), (p.x, p.y, p.z, o.w, o.x, o.y, o.z))

    def _on_command(self, msg: TwistStamped) -> None:
        self.collector.add_command(self._t(msg.header.stamp),
                                   (msg.twist.linear.x, msg.twist.linear.y, msg.twist.angular.z))

    def _on_critique(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        collected = self.collector.snapshot()
        if collected is None:
            response.success, response.message = False, "nothing collected yet (no rollout/boundary start)"
            return response
        self._jobs.put(("critique", collected, "service"))
        counts = collected.counts()
        response.success = True
        response.message = (f"critique queued: {counts['frames']} frames, {counts['states']} states, "
                            f"task {collected.task or self.p['task']!r}; the feedback follows on critic/feedback")
        return response

    # ------------------------------------------------------------------ the worker
    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            kind, item, trigger = job
            if kind == "compare":
                self._publish_comparison(self.service.compare(item))
                continue
            feedback = self.service.critique(item)
            feedback.meta.update(trigger=trigger, backend=self.backend)
            self.feedback_pub.publish(feedback_msg(feedback, self.get_clock().now().to_msg()))
            self.last_feedback = feedback
            self.feedback_count += 1
            self.get_logger().info(f"feedback #{feedback.meta['rollout_index']} ({trigger}): valid={feedback.valid} "
                                   f"alignment={feedback.alignment_score:.2f}"
                                   + (f" error: {feedback.error}" if feedback.error else ""))

    def _publish_comparison(self, comparison: Comparison) -> None:
        comparison.meta["backend"] = self.backend
        self.comparison_pub.publish(comparison_msg(comparison, self.get_clock().now().to_msg()))
        self.comparison_count += 1
        self.get_logger().info(f"comparison {comparison.meta.get('request_id')!r}: valid={comparison.valid} "
                               f"preferred={comparison.preferred} confidence={comparison.confidence:.2f}"
                               + (f" error: {comparison.error}" if comparison.error else ""))

    def destroy_node(self):
        # the critique in flight finishes and is published if it ends within the shutdown budget; otherwise (a model call
        # that waits) it is abandoned with the process: the search asks again after a resume
        self._jobs.put(None)
        self._worker.join(timeout=max(0.0, time_left() - 0.5))
        if self._worker.is_alive():
            abandon_work("the critique in flight")
        return super().destroy_node()


def _request_id(text: str):
    """The id of a request that could not be used, if its JSON has one."""
    try:
        return json_object(text).get("id")
    except ValueError:
        return None


def main(args=None) -> int:
    return run_node(VlmCriticNode, NODE_NAME, args, threads=2)


if __name__ == "__main__":
    sys.exit(main())

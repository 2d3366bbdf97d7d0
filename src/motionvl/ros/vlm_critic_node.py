"""vlm_critic: collects one rollout between boundaries and publishes what a motion critic says
about it (a thin adapter over `motionvl.critic`).

Subscribes:
  rollout/boundary    std_msgs/String  JSON {"event": "start" | "end", "task": "...",
                                       "command": [vx, vy, yaw_rate], "id": ...} (reliable,
                                       depth 10). "start" clears the buffers and begins
                                       collecting; "end" stops and queues a critique. "task"
                                       (either message; "end" wins) overrides the `task`
                                       parameter; "command" (optional) overrides the recorded
                                       velocity command; "id" is echoed in the feedback's meta.
  camera/image_raw    sensor_msgs/Image  frames (rgb8/bgr8/rgba8/bgra8/mono8), kept at most one
                                       per `frame_interval_s` of stamp time; image backends only.
  joint_states        sensor_msgs/JointState  \\ the rollout's states (reliable, depth 100); the
  odom                nav_msgs/Odometry       / kinematic critic rebuilds the Trajectory from them
  <command_topic>     geometry_msgs/TwistStamped  the command in effect (default simulator/command)
Publishes:
  critic/feedback     std_msgs/String  the MotionFeedback JSON (motionvl.critic.schema), reliable,
                                       transient-local, depth 1: a late subscriber gets the last one.
Services:
  ~/critique          std_srvs/Trigger  critique what has been collected so far (the current
                                       rollout, or else the last finished one); answers at once,
                                       the feedback follows on critic/feedback.

Parameter `backend` picks the critic: "kinematic" (offline gait analysis of the states; no
model, not a VLM), "transformers" (`model` = a local model directory) or "openai" (`base_url`,
`model`). After a VLM critique the kinematic measurements are merged in when states were
received (`merge_kinematics`), flagging descriptors that contradict them.

Critiques run one at a time in a worker thread, so a slow model never blocks the executor:
subscriptions keep collecting the next rollout meanwhile. Every "end" gets a feedback, an
invalid one (valid=false, error says why) when there was nothing to judge. The best valid
feedback per task is passed to the next critique as `previous_best` (MoVLR's judge).
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import sys
import threading
import time

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

from motionvl.critic.kinematic import KinematicCritic  # noqa: E402
from motionvl.critic.schema import MotionFeedback, merge_measurements  # noqa: E402
from motionvl.render.rollout import trajectory_from_poses  # noqa: E402
from motionvl.robot import ConfigError, load_robot_config
from motionvl.ros.params import declare_parameters
from motionvl.ros.runtime import run_node  # noqa: E402
from motionvl.sim.model import TerrainConfig, build_model, single_floor  # noqa: E402

NODE_NAME = "vlm_critic"
BACKENDS = ("kinematic", "transformers", "openai")

PARAMETERS = {
    "backend": ("kinematic", "Critic: 'kinematic' (offline gait analysis, no model, not a VLM), 'transformers' "
                             "(local model directory) or 'openai' (OpenAI-compatible endpoint)."),
    "model": ("", "transformers: the model directory; openai: the model name the server expects."),
    "base_url": ("", "openai: the endpoint, e.g. http://127.0.0.1:8000/v1."),
    "device": ("auto", "transformers: 'auto', 'cpu', 'cuda:0', ..."),
    "use_contact_sheet": (False, "VLM backends: send one timestamped grid image instead of one image per frame."),
    "task": ("", "Task sentence used when a boundary message carries none."),
    "frame_interval_s": (0.1, "Keep at most one camera frame per this many seconds of stamp time (paper: 0.1)."),
    "max_frames": (600, "Most frames kept per rollout; later frames are dropped (the VLM backends thin further)."),
    "max_samples": (30000, "Most joint-state samples kept per rollout (10 min at 50 Hz)."),
    "merge_kinematics": (True, "After a VLM critique, cross-check its descriptors with the kinematic measurements."),
    "command_topic": ("simulator/command", "geometry_msgs/TwistStamped topic of the velocity command in effect."),
    "robot_config": ("", "Robot YAML; empty = the package's config/robot.yaml."),
    "terrain": ("flat", "'flat' or 'rough' (the floor used to find foot contacts; match the simulator's)."),
}

FEEDBACK_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                          history=HistoryPolicy.KEEP_LAST)
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


@dataclasses.dataclass
class RolloutBuffer:
    """What was received for one rollout."""

    task: str = ""
    rollout_id: object = None
    command: tuple | None = None
    frames: list = dataclasses.field(default_factory=list)
    frame_stamps: list = dataclasses.field(default_factory=list)
    joint_t: list = dataclasses.field(default_factory=list)
    joint_pos: list = dataclasses.field(default_factory=list)
    odom_t: list = dataclasses.field(default_factory=list)
    odom_pose: list = dataclasses.field(default_factory=list)  # (x, y, z, qw, qx, qy, qz)
    cmd_t: list = dataclasses.field(default_factory=list)
    cmd: list = dataclasses.field(default_factory=list)
    dropped_frames: int = 0
    dropped_samples: int = 0

    def snapshot(self) -> "RolloutBuffer":
        return dataclasses.replace(self, frames=list(self.frames), frame_stamps=list(self.frame_stamps),
                                   joint_t=list(self.joint_t), joint_pos=list(self.joint_pos),
                                   odom_t=list(self.odom_t), odom_pose=list(self.odom_pose),
                                   cmd_t=list(self.cmd_t), cmd=list(self.cmd))


class VlmCriticNode(Node):
    def __init__(self, critic_factory=None, **kwargs):
        """`critic_factory()` (optional) builds the critic instead of the `backend` parameter (tests)."""
        super().__init__(NODE_NAME, **kwargs)
        p = declare_parameters(self, PARAMETERS)
        if p["backend"] not in BACKENDS:
            raise ConfigError(f"parameter backend must be one of {BACKENDS}, got {p['backend']!r}")
        if p["frame_interval_s"] < 0:
            raise ConfigError("parameter frame_interval_s must be >= 0")
        if p["backend"] == "transformers" and not p["model"] and critic_factory is None:
            raise ConfigError("backend 'transformers' needs the parameter model (a local model directory)")
        if p["backend"] == "openai" and not (p["model"] and p["base_url"]) and critic_factory is None:
            raise ConfigError("backend 'openai' needs the parameters base_url and model")
        self.p = p
        self.backend = p["backend"]
        self.needs_frames = self.backend != "kinematic"
        self.robot = load_robot_config(p["robot_config"] or None)
        self.model = build_model(self.robot, single_floor(TerrainConfig(kind=p["terrain"])))
        self.kinematic = KinematicCritic()
        self._critic_factory = critic_factory
        self._critic = None
        self._critic_error: str | None = None
        self._lock = threading.Lock()
        self._collecting = False
        self._buffer = RolloutBuffer()
        self._last_finished: RolloutBuffer | None = None
        self._best: dict[str, MotionFeedback] = {}
        self._rollouts = 0
        self.feedback_count = 0
        self.last_feedback: MotionFeedback | None = None

        self.feedback_pub = self.create_publisher(String, "critic/feedback", FEEDBACK_QOS)
        self.create_subscription(String, "rollout/boundary", self._on_boundary, BOUNDARY_QOS)
        if self.needs_frames:
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
        with self._lock:
            b = self._buffer
            return {"collecting": self._collecting, "task": b.task, "frames": len(b.frames),
                    "states": len(b.joint_t), "odom": len(b.odom_t)}

    # ------------------------------------------------------------------ inputs
    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _t(self, stamp) -> float:
        t = _stamp_s(stamp)
        return t if t > 0.0 else self._now_s()

    def _on_boundary(self, msg: String) -> None:
        try:
            data = json.loads(msg.data)
            if not isinstance(data, dict):
                raise ValueError("expected a JSON object")
            event = str(data.get("event", "")).lower()
            if event not in ("start", "end"):
                raise ValueError(f"event must be 'start' or 'end', got {data.get('event')!r}")
            command = data.get("command")
            if command is not None:
                command = tuple(float(c) for c in command)
                if len(command) != 3:
                    raise ValueError("command must be [vx, vy, yaw_rate]")
        except (ValueError, TypeError) as exc:
            self.get_logger().warning(f"rollout/boundary ignored: {exc}: {msg.data[:200]!r}")
            return
        task = data.get("task")
        with self._lock:
            if event == "start":
                if self._collecting:
                    self.get_logger().warning("rollout start while collecting: the unfinished rollout is dropped")
                self._buffer = RolloutBuffer(task=str(task) if task else "", rollout_id=data.get("id"),
                                             command=command)
                self._collecting = True
                return
            if not self._collecting:
                self.get_logger().warning("rollout end without a start: critiquing nothing")
                buf = RolloutBuffer(task=str(task) if task else "", rollout_id=data.get("id"), command=command)
            else:
                buf = self._buffer
                if task:
                    buf.task = str(task)
                if command is not None:
                    buf.command = command
                if data.get("id") is not None:
                    buf.rollout_id = data.get("id")
            self._collecting = False
            self._buffer = RolloutBuffer()
            self._last_finished = buf
        self._jobs.put((buf, "boundary"))

    def _on_image(self, msg: Image) -> None:
        with self._lock:
            if not self._collecting:
                return
            buf = self._buffer
            t = self._t(msg.header.stamp)
            if buf.frame_stamps and t - buf.frame_stamps[-1] < 0.9 * self.p["frame_interval_s"]:
                return
            if len(buf.frames) >= self.p["max_frames"]:
                buf.dropped_frames += 1
                return
        try:
            frame = image_to_rgb(msg)
        except ValueError as exc:
            self.get_logger().warning(f"camera frame ignored: {exc}", throttle_duration_sec=5.0)
            return
        with self._lock:
            if self._collecting and buf is self._buffer:
                buf.frames.append(frame)
                buf.frame_stamps.append(t)

    def _on_joint_state(self, msg: JointState) -> None:
        index = {n: i for i, n in enumerate(msg.name)}
        if any(n not in index for n in self.robot.joint_names) or len(msg.position) != len(msg.name):
            self.get_logger().warning("joint_states without every robot joint ignored", throttle_duration_sec=5.0)
            return
        q = [msg.position[index[n]] for n in self.robot.joint_names]
        with self._lock:
            if not self._collecting:
                return
            buf = self._buffer
            if len(buf.joint_t) >= self.p["max_samples"]:
                buf.dropped_samples += 1
                return
            buf.joint_t.append(self._t(msg.header.stamp))
            buf.joint_pos.append(q)

    def _on_odom(self, msg: Odometry) -> None:
        p, o = msg.pose.pose.position, msg.pose.pose.orientation
        with self._lock:
            if not self._collecting:
                return
            self._buffer.odom_t.append(self._t(msg.header.stamp))
            self._buffer.odom_pose.append((p.x, p.y, p.z, o.w, o.x, o.y, o.z))

    def _on_command(self, msg: TwistStamped) -> None:
        with self._lock:
            if not self._collecting:
                return
            self._buffer.cmd_t.append(self._t(msg.header.stamp))
            self._buffer.cmd.append((msg.twist.linear.x, msg.twist.linear.y, msg.twist.angular.z))

    def _on_critique(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._lock:
            buf = self._buffer.snapshot() if self._collecting else self._last_finished
            if buf is None:
                response.success, response.message = False, "nothing collected yet (no rollout/boundary start)"
                return response
            buf = buf.snapshot()
            if not buf.task:
                buf.task = self.p["task"]
        self._jobs.put((buf, "service"))
        response.success = True
        response.message = (f"critique queued: {len(buf.frames)} frames, {len(buf.joint_t)} states, "
                            f"task {buf.task!r}; the feedback follows on critic/feedback")
        return response

    # ------------------------------------------------------------------ the worker
    def _get_critic(self):
        if self._critic is not None or self._critic_error is not None:
            return self._critic
        try:
            if self._critic_factory is not None:
                self._critic = self._critic_factory()
            elif self.backend == "kinematic":
                self._critic = self.kinematic
            else:
                from motionvl.critic.base import create_critic

                if self.backend == "transformers":
                    self._critic = create_critic("transformers", model_dir=self.p["model"], device=self.p["device"],
                                                 use_contact_sheet=bool(self.p["use_contact_sheet"]))
                else:
                    self._critic = create_critic("openai", base_url=self.p["base_url"], model=self.p["model"],
                                                 use_contact_sheet=bool(self.p["use_contact_sheet"]))
        except Exception as exc:  # noqa: BLE001 - report in every feedback, keep the node up
            self._critic_error = f"cannot create the {self.backend} critic: {type(exc).__name__}: {exc}"
            self.get_logger().error(self._critic_error)
        return self._critic

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            buf, trigger = job
            try:
                fb = self.critique(buf)
            except Exception as exc:  # noqa: BLE001 - every request gets an answer
                fb = MotionFeedback.invalid(self.backend, buf.task or self.p["task"],
                                            f"critique failed: {type(exc).__name__}: {exc}")
            with self._lock:
                self._rollouts += 1
                fb.meta.update(trigger=trigger, rollout_id=buf.rollout_id, rollout_index=self._rollouts,
                               frames=len(buf.frames), states=len(buf.joint_t), backend=self.backend)
            self.feedback_pub.publish(String(data=fb.to_json()))
            self.last_feedback = fb
            self.feedback_count += 1
            self.get_logger().info(f"feedback #{self._rollouts} ({trigger}): valid={fb.valid} "
                                   f"alignment={fb.alignment_score:.2f}" + (f" error: {fb.error}" if fb.error else ""))

    def trajectory(self, buf: RolloutBuffer):
        """The rollout's Trajectory from its joint states paired with the nearest odom (None if too little)."""
        if len(buf.joint_t) < 2 or not buf.odom_t:
            return None
        jt = np.asarray(buf.joint_t)
        order = np.argsort(jt, kind="stable")
        jt = jt[order]
        joints = np.asarray(buf.joint_pos)[order]
        ot = np.asarray(buf.odom_t)
        oorder = np.argsort(ot, kind="stable")
        ot, poses = ot[oorder], np.asarray(buf.odom_pose)[oorder]
        k = np.clip(np.searchsorted(ot, jt), 0, len(ot) - 1)
        prev = np.clip(k - 1, 0, len(ot) - 1)
        k = np.where(np.abs(ot[prev] - jt) < np.abs(ot[k] - jt), prev, k)
        keep = np.concatenate([[True], np.diff(jt) > 1e-9])  # duplicate stamps
        jt, joints, k = jt[keep], joints[keep], k[keep]
        if len(jt) < 2:
            return None
        if buf.command is not None:
            command = np.tile(buf.command, (len(jt), 1))
        elif buf.cmd_t:
            ct = np.asarray(buf.cmd_t)
            idx = np.clip(np.searchsorted(ct, jt, side="right") - 1, 0, len(ct) - 1)
            command = np.asarray(buf.cmd)[idx]
        else:
            command = None
        return trajectory_from_poses(self.model, self.robot, jt, poses[k, 0:3], poses[k, 3:7], joints, command)

    def critique(self, buf: RolloutBuffer) -> MotionFeedback:
        task = buf.task or self.p["task"]
        critic = self._get_critic()
        if critic is None:
            return MotionFeedback.invalid(self.backend, task, self._critic_error or "no critic")
        t0 = time.perf_counter()
        traj = self.trajectory(buf)
        previous = self._best.get(task)
        if self.backend == "kinematic" and self._critic_factory is None:
            if traj is None:
                return MotionFeedback.invalid(critic.name, task, f"the kinematic critic needs joint_states and odom of "
                                              f"the rollout; got {len(buf.joint_t)} joint states, {len(buf.odom_t)} odom")
            fb = critic.critique(traj, task, previous_best=previous)
        else:
            if not buf.frames:
                return MotionFeedback.invalid(getattr(critic, "name", self.backend), task,
                                              "no camera frames were received for this rollout")
            times = [round(t - buf.frame_stamps[0], 6) for t in buf.frame_stamps]
            prev_text = _previous_text(previous) if previous is not None else None
            fb = critic.critique(buf.frames, times, task, previous_best=prev_text, trajectory=traj)
            if fb.valid and traj is not None and self.p["merge_kinematics"] and critic is not self.kinematic:
                fb = merge_measurements(fb, self.kinematic.measure(traj))
        fb.meta["critique_s"] = round(time.perf_counter() - t0, 4)
        if buf.dropped_frames or buf.dropped_samples:
            fb.meta.update(dropped_frames=buf.dropped_frames, dropped_samples=buf.dropped_samples)
        if fb.valid and (previous is None or fb.alignment_score > previous.alignment_score):
            self._best[task] = fb
        return fb

    def destroy_node(self):
        self._jobs.put(None)
        if self._worker.is_alive():
            self._worker.join(timeout=5.0)
        return super().destroy_node()


def _previous_text(fb: MotionFeedback) -> str:
    """The best motion so far, as the text a VLM prompt quotes."""
    parts = [f"alignment score {fb.alignment_score:.2f}"]
    if fb.features:
        parts.append("features: " + ", ".join(f"{lab} ({conf:.2f})" for lab, conf in fb.features))
    notes = [f"{d.label}" + (f" {d.value:g} {d.unit or ''}".rstrip() if d.value is not None else "")
             + (f": {d.note}" if d.note else "") for d in fb.descriptors[:12]]
    if notes:
        parts.append("descriptors: " + "; ".join(notes))
    return ". ".join(parts)


def main(args=None) -> int:
    return run_node(VlmCriticNode, NODE_NAME, args, threads=2)


if __name__ == "__main__":
    sys.exit(main())

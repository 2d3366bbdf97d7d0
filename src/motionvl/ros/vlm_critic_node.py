"""vlm_critic: collects one rollout between boundaries and publishes what a motion critic says
about it, and compares two rollouts on request (a thin adapter over `motionvl.critic.service`).

Subscribes (each through motionvl.ros.inbox: a bad message is logged and counted, never fatal):
  rollout/boundary    motionvl/RolloutBoundary  START clears the buffers and begins collecting a
                                       rollout, END stops (reliable, depth 10); its rollout_id names
                                       the rollout for Critique and Compare goals, its task (END's
                                       wins) and command (optional) override the `task` parameter and
                                       the recorded velocity command.
  camera/image_raw    sensor_msgs/Image  frames (rgb8/bgr8/rgba8/bgra8/mono8), kept at most one
                                       per `frame_interval_s` of stamp time; image backends only.
  joint_states        sensor_msgs/JointState  \\ the rollout's states (reliable, depth 100); the
  odom                nav_msgs/Odometry       / kinematic critic rebuilds the Trajectory from them
  <command_topic>     geometry_msgs/TwistStamped  the command in effect (default simulator/command)
Action servers (goals one at a time on a worker thread, critiques and comparisons in the order they came):
  ~/critique          motionvl/action/Critique  critique the rollout named by rollout_id (a goal before
                                       its END waits for it: feedback "collecting" with the frames,
                                       states and odometry so far), or with rollout_id empty what
                                       has been collected so far; previous_best (optional) is the
                                       best feedback so far, judged against (better_than_best).
                                       Result: the MotionFeedback.
  ~/compare           motionvl/action/Compare  which of two rollouts fulfils the task better, each one
                                       of the last `keep_rollouts` this node critiqued (rollout_id)
                                       or a directory saved with `rollout_dir` or Rollout.save
                                       (path). Result: the Comparison. The node keeps no best of its
                                       own: the orchestrator names both rollouts each time.
  A malformed goal (a rollout named by both or neither of id and path, a rollout the node never
  heard of, a previous_best that is not a valid MotionFeedback) is aborted with the reason in the
  result's error; cancel drops a waiting goal, a call in flight finishes (published below) and the goal
  ends cancelled.
Publishes (the result of every goal that ran, for tools and bags; not refusals):
  critic/feedback     motionvl/MotionFeedback  each critique's MotionFeedback (motionvl.critic.schema;
                                       bookkeeping such as meta["rollout_id"] in `meta`, a JsonRecord
                                       of kind "critic_meta", version 1), reliable, transient-local,
                                       depth 1: a late subscriber gets the last one.
  critic/comparison   motionvl/Comparison  each Comparison, meta["request_id"] = the id the node gave
                                       the goal (compare@...); reliable, transient-local, depth 10.

Parameter `backend` picks the critic: "kinematic" (offline gait analysis of the states; no
model, not a VLM), "transformers" (`model` = a local model directory) or "openai" (`base_url`,
`model`). After a VLM critique the kinematic measurements are merged in when states were
received (`merge_kinematics`), flagging descriptors that contradict them.

Critiques and comparisons run one at a time in a worker thread, so a slow model never blocks the
executor: subscriptions keep collecting the next rollout meanwhile, and a waiting goal holds no
executor thread. Every accepted goal gets an answer, an invalid one (valid=false, error says why)
when there was nothing to judge.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import queue
import sys
import threading
import uuid

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

import numpy as np  # noqa: E402
from geometry_msgs.msg import TwistStamped  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.action import ActionServer, CancelResponse  # noqa: E402
from rclpy.callback_groups import ReentrantCallbackGroup  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402

from motionvl.backend_names import backends_help, kind_settings, model_parameters, model_settings  # noqa: E402
from motionvl.action import Compare, Critique  # noqa: E402
from motionvl.critic.rollouts import CollectLimits, RolloutCollector  # noqa: E402
from motionvl.dataclass_docs import dataclass_parameters  # noqa: E402
from motionvl.critic.schema import Comparison, MotionFeedback  # noqa: E402
from motionvl.critic.service import BACKENDS, CriticService, ServiceSettings, backend_factory  # noqa: E402
from motionvl.deploy.mapping import JointMapping  # noqa: E402
from motionvl.msg import Comparison as ComparisonMsg  # noqa: E402
from motionvl.msg import MotionFeedback as MotionFeedbackMsg  # noqa: E402
from motionvl.msg import RolloutBoundary  # noqa: E402
from motionvl.robot import ConfigError, load_robot_config  # noqa: E402
from motionvl.ros.goals import QueuedGoal, destroy_actions  # noqa: E402
from motionvl.ros.inbox import Inbox  # noqa: E402
from motionvl.ros.messages import (BadMessage, boundary_from_msg, comparison_msg, comparison_request_from_goal,  # noqa: E402
                                   critique_request_from_goal, feedback_msg)
from motionvl.ros.params import declare_parameters  # noqa: E402
from motionvl.ros.runtime import abandon_work, run_node, time_left  # noqa: E402
from motionvl.ros.terrain import TERRAIN_PARAMETERS, node_terrain  # noqa: E402
from motionvl.sim.model import build_model  # noqa: E402

NODE_NAME = "vlm_critic"

PARAMETERS = {
    "backend": ("kinematic", f"Critic: {backends_help('critic')}."),
    **model_parameters(kind_settings("critic")),  # model, base_url, device, timeouts (motionvl.backend_names)
    "use_contact_sheet": (False, "VLM backends: send one timestamped grid image instead of one image per frame."),
    "task": ("", "Task sentence used when neither a goal nor the rollout's boundaries carry one."),
    **dataclass_parameters(CollectLimits),  # frame_interval_s, max_frames, max_samples (motionvl.critic.rollouts)
    **dataclass_parameters(ServiceSettings),  # merge_kinematics, keep_rollouts, rollout_dir (motionvl.critic.service)
    "command_topic": ("simulator/command", "geometry_msgs/TwistStamped topic of the velocity command in effect."),
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
COLLECTING_FEEDBACK_S = 1.0
"""Seconds between feedback messages of a Critique goal waiting for its rollout's end."""


def _dataclass_of(cls, p: dict):
    return cls(**{f.name: p[f.name] for f in dataclasses.fields(cls)})


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
                                     default_task=p["task"], settings=_dataclass_of(ServiceSettings, p))
        self.collector = RolloutCollector(_dataclass_of(CollectLimits, p))
        self.feedback_count = 0
        self.last_feedback: MotionFeedback | None = None
        self.comparison_count = 0

        self._finished: collections.OrderedDict = collections.OrderedDict()  # rollout id -> CollectedRollout
        self._waiting: list = []  # critique goals waiting for their rollout's end
        self._lock = threading.Lock()  # rollouts' ends, goals' arrivals and cancels: one decision at a time
        self._current: _Goal | None = None  # the goal whose call is in flight

        self.inbox = Inbox(self)
        self.feedback_pub = self.create_publisher(MotionFeedbackMsg, "critic/feedback", FEEDBACK_QOS)
        self.comparison_pub = self.create_publisher(ComparisonMsg, "critic/comparison", COMPARISON_QOS)
        self.inbox.subscribe(RolloutBoundary, "rollout/boundary", self._on_boundary, BOUNDARY_QOS)
        if self.backend != "kinematic":
            self.inbox.subscribe(Image, "camera/image_raw", self._on_image, qos_profile_sensor_data)
        self.inbox.subscribe(JointState, "joint_states", self._on_joint_state, STATE_QOS)
        self.inbox.subscribe(Odometry, "odom", self._on_odom, STATE_QOS)
        self.inbox.subscribe(TwistStamped, p["command_topic"], self._on_command, BOUNDARY_QOS)

        self._jobs: queue.Queue = queue.Queue()  # _Goal, one at a time on the worker; None: stop
        self._worker = threading.Thread(target=self._work, name="vlm_critic_worker", daemon=True)
        self._worker.start()
        # goals wait (coroutines) while the worker judges: no goal holds the executor
        goals = ReentrantCallbackGroup()
        self.critique_server = ActionServer(self, Critique, "~/critique", self._execute_critique,
                                            cancel_callback=self._on_cancel, callback_group=goals)
        self.compare_server = ActionServer(self, Compare, "~/compare", self._execute_compare,
                                           cancel_callback=self._on_cancel, callback_group=goals)
        self.create_timer(COLLECTING_FEEDBACK_S, self._collecting_feedback)
        self.get_logger().info(f"critic backend '{self.backend}'"
                               + (" (offline gait analysis, not a VLM)" if self.backend == "kinematic" else "")
                               + f"; goals on {self.resolve_topic_name('~/critique')} and "
                               f"{self.resolve_topic_name('~/compare')}")

    def collected(self) -> dict:
        """What the current rollout has so far: collecting, task, frames, states, odom (for tests, logs)."""
        return self.collector.status()

    # ------------------------------------------------------------------ inputs
    def _t(self, stamp) -> float:
        t = _stamp_s(stamp)
        return t if t > 0.0 else self.get_clock().now().nanoseconds * 1e-9

    def _on_boundary(self, msg: RolloutBoundary) -> None:
        boundary = boundary_from_msg(msg)
        if boundary.event == "start":
            with self._lock:
                unfinished = self.collector.collecting_id()
                if not self.collector.start(boundary):
                    return
                orphans = [g for g in self._waiting if g.rollout_id == unfinished]
                self._waiting = [g for g in self._waiting if g not in orphans]
            self.get_logger().warning(f"rollout start while collecting {unfinished!r}: the unfinished rollout is "
                                      "dropped" + (f", {len(orphans)} goal(s) waiting for it aborted" if orphans else ""))
            for goal in orphans:
                goal.finish(("abort", self._unanswered(goal, f"rollout {unfinished!r} was dropped unfinished: a "
                                                            "rollout/boundary START came before its END")))
            return
        with self._lock:
            collected, started = self.collector.end(boundary)
            if not started:
                self.get_logger().warning(f"rollout end without a start ({boundary.rollout_id!r}): nothing collected")
            if collected.rollout_id is not None:
                self._finished.pop(collected.rollout_id, None)
                self._finished[collected.rollout_id] = collected
                while len(self._finished) > max(1, self.p["keep_rollouts"]):
                    self._finished.popitem(last=False)
            ready = [g for g in self._waiting if g.rollout_id == collected.rollout_id]
            self._waiting = [g for g in self._waiting if g not in ready]
        for goal in ready:
            self._queue(goal, collected)

    def _on_image(self, msg: Image) -> None:
        self.collector.add_frame(self._t(msg.header.stamp), lambda: image_to_rgb(msg))

    def _on_joint_state(self, msg: JointState) -> None:
        q = self.mapping.joint_positions(msg.name, msg.position)
        if q is None or not np.isfinite(q).all():
            raise BadMessage("not one finite position for every robot joint")
        self.collector.add_joint_state(self._t(msg.header.stamp), q.tolist())

    def _on_odom(self, msg: Odometry) -> None:
        p, o = msg.pose.pose.position, msg.pose.pose.orientation
        pose = (p.x, p.y, p.z, o.w, o.x, o.y, o.z)
        if not all(math.isfinite(v) for v in pose):
            raise BadMessage("a pose that is not finite")
        self.collector.add_odometry(self._t(msg.header.stamp), pose)

    def _on_command(self, msg: TwistStamped) -> None:
        command = (msg.twist.linear.x, msg.twist.linear.y, msg.twist.angular.z)
        if not all(math.isfinite(v) for v in command):
            raise BadMessage("a command that is not finite")
        self.collector.add_command(self._t(msg.header.stamp), command)

    # ------------------------------------------------------------------ goals
    async def _execute_critique(self, handle) -> Critique.Result:
        try:
            rollout_id, task, previous_best = critique_request_from_goal(handle.request)
        except BadMessage as exc:
            return self._refuse(handle, Critique.Result(feedback=self._invalid_feedback(handle.request.task,
                                                                                         f"bad request: {exc}")))
        goal = _Goal(handle, self.executor, "critique", rollout_id=rollout_id, task=task, previous_best=previous_best)
        with self._lock:
            if rollout_id is None:
                collected = self.collector.snapshot()
                problem = None if collected is not None else "nothing collected yet (no rollout/boundary START)"
            elif rollout_id in self._finished:
                collected, problem = self._finished[rollout_id], None
            elif self.collector.collecting_id() == rollout_id:
                collected, problem = None, None
                self._waiting.append(goal)
            else:
                collected, problem = None, (f"bad request: no rollout {rollout_id!r} was started on rollout/boundary "
                                            f"(kept: {list(self._finished)})")
        if problem:
            return self._refuse(handle, Critique.Result(feedback=self._invalid_feedback(task, problem)))
        if collected is None:
            handle.publish_feedback(Critique.Feedback(stage="collecting", **self._counts(self.collector.status())))
        else:
            self._queue(goal, collected)
        if handle.is_cancel_requested:  # cancelled between its acceptance and now
            self._on_cancel(handle, goal)
        how, result = await goal.done
        goal.conclude(how)
        return result

    async def _execute_compare(self, handle) -> Compare.Result:
        request_id = f"compare@{uuid.uuid4().hex[:8]}"
        try:
            request = comparison_request_from_goal(handle.request, request_id)
        except BadMessage as exc:
            comparison = Comparison.invalid(self.backend, handle.request.task, f"bad request: {exc}",
                                            meta={"request_id": request_id, "backend": self.backend})
            return self._refuse(handle, Compare.Result(comparison=comparison_msg(comparison)))
        goal = _Goal(handle, self.executor, "compare", request=request)
        handle.publish_feedback(Compare.Feedback(stage="queued"))
        self._jobs.put(goal)
        if handle.is_cancel_requested:
            self._on_cancel(handle, goal)
        how, result = await goal.done
        goal.conclude(how)
        return result

    def _refuse(self, handle, result):
        which = "compare" if isinstance(result, Compare.Result) else "critique"
        error = result.comparison.error if which == "compare" else result.feedback.error
        self.get_logger().warning(f"refused a {which} goal: {error}")
        handle.abort()
        return result

    def _invalid_feedback(self, task: str, error: str) -> MotionFeedbackMsg:
        return feedback_msg(MotionFeedback.invalid(self.backend, task or self.p["task"], error),
                            self.get_clock().now().to_msg())

    def _queue(self, goal: "_Goal", collected) -> None:
        """Hand a critique goal its rollout (a copy, with the goal's task and previous best) and queue it."""
        goal.collected = dataclasses.replace(collected.copy(), task=goal.task or collected.task,
                                             previous_best=goal.previous_best)
        goal.handle.publish_feedback(Critique.Feedback(stage="queued", **self._counts(collected.counts())))
        self._jobs.put(goal)

    def _collecting_feedback(self) -> None:
        with self._lock:
            waiting = list(self._waiting)
        if waiting:
            counts = self._counts(self.collector.status())
            for goal in waiting:
                goal.handle.publish_feedback(Critique.Feedback(stage="collecting", **counts))

    @staticmethod
    def _counts(counts: dict) -> dict:
        return {k: int(counts.get(k, 0)) for k in ("frames", "states", "odom")}

    def _on_cancel(self, handle, goal=None) -> CancelResponse:
        goal = goal or self._find(handle)
        if goal is not None:
            with self._lock:
                goal.cancelling = True
                waiting = not goal.started
                if goal in self._waiting:
                    self._waiting.remove(goal)
            if waiting:  # dropped: the worker skips it
                goal.finish(("cancel", self._unanswered(goal, "cancelled before the call")))
        return CancelResponse.ACCEPT

    def _find(self, handle):
        current = self._current
        if current is not None and current.handle is handle:
            return current
        with self._lock:
            waiting = next((g for g in self._waiting if g.handle is handle), None)
        if waiting is not None:
            return waiting
        with self._jobs.mutex:
            return next((g for g in self._jobs.queue if g is not None and g.handle is handle), None)

    def _unanswered(self, goal: "_Goal", why: str):
        """The result of a goal that got no judgement (cancelled, dropped, failed): invalid, saying why."""
        if goal.kind == "compare":
            return Compare.Result(comparison=comparison_msg(Comparison.invalid(self.backend, goal.request.task, why)))
        return Critique.Result(feedback=self._invalid_feedback(goal.task, why))

    # ------------------------------------------------------------------ the worker
    def _work(self) -> None:
        while True:
            goal = self._jobs.get()
            if goal is None:
                return
            with self._lock:
                if goal.cancelling or goal.handle.is_cancel_requested:  # dropped; or cancelled as it was queued
                    goal.finish(("cancel", self._unanswered(goal, "cancelled before the call")))
                    continue
                goal.started, self._current = True, goal
            try:
                result = self._compare(goal) if goal.kind == "compare" else self._critique(goal)
                how = "succeed"
            except Exception as exc:  # noqa: BLE001 - the node answers every goal and keeps running
                result = self._unanswered(goal, f"{goal.kind} failed: {type(exc).__name__}: {exc}")
                how = "abort"
            self._current = None
            if goal.cancelling or goal.handle.is_cancel_requested:
                self.get_logger().info(f"{goal.kind} goal cancelled during the call: its answer is discarded")
                goal.finish(("cancel", self._unanswered(goal, "cancelled during the call; its answer is discarded")))
            else:
                goal.finish((how, result))

    def _critique(self, goal: "_Goal") -> Critique.Result:
        goal.handle.publish_feedback(Critique.Feedback(stage="critiquing", **self._counts(goal.collected.counts())))
        feedback = self.service.critique(goal.collected)
        feedback.meta.update(trigger="goal", backend=self.backend)
        msg = feedback_msg(feedback, self.get_clock().now().to_msg())
        self.feedback_pub.publish(msg)
        self.last_feedback = feedback
        self.feedback_count += 1
        self.get_logger().info(f"feedback #{feedback.meta['rollout_index']} ({feedback.meta.get('rollout_id')!r}): "
                               f"valid={feedback.valid} alignment={feedback.alignment_score:.2f}"
                               + (f" error: {feedback.error}" if feedback.error else ""))
        return Critique.Result(feedback=msg)

    def _compare(self, goal: "_Goal") -> Compare.Result:
        goal.handle.publish_feedback(Compare.Feedback(stage="comparing"))
        return Compare.Result(comparison=self._publish_comparison(self.service.compare(goal.request)))

    def _publish_comparison(self, comparison: Comparison) -> ComparisonMsg:
        comparison.meta["backend"] = self.backend
        msg = comparison_msg(comparison, self.get_clock().now().to_msg())
        self.comparison_pub.publish(msg)
        self.comparison_count += 1
        self.get_logger().info(f"comparison {comparison.meta.get('request_id')!r}: valid={comparison.valid} "
                               f"preferred={comparison.preferred} confidence={comparison.confidence:.2f}"
                               + (f" error: {comparison.error}" if comparison.error else ""))
        return msg

    def destroy_node(self):
        # the critique in flight finishes if it ends within the shutdown budget; otherwise (a model call that waits)
        # it is abandoned with the process: the search asks again after a resume
        self._jobs.put(None)
        self._worker.join(timeout=max(0.0, time_left() - 0.5))
        if self._worker.is_alive():
            abandon_work("the critique in flight")
        else:
            destroy_actions(self)
        return super().destroy_node()


class _Goal(QueuedGoal):
    def __init__(self, handle, executor, kind: str, *, rollout_id=None, task: str = "", previous_best=None,
                 request=None):
        super().__init__(handle, executor)
        self.kind, self.rollout_id, self.task, self.previous_best, self.request = \
            kind, rollout_id, task, previous_best, request
        self.collected = None  # critique: the rollout, once it ended
        self.started = False


def main(args=None) -> int:
    return run_node(VlmCriticNode, NODE_NAME, args, threads=2)


if __name__ == "__main__":
    sys.exit(main())

"""policy_trainer: trains a PPO policy for every reward candidate it is sent.

A thin adapter over `motionvl.rl.jobs.TrainingQueue`: training runs on the queue's worker
thread (the trainer owns its batched simulator; no physics goes through ROS), so the executor
stays free to accept goals, answer cancels and beat its heartbeat while a candidate trains.
Several trainers (processes, or machines on one DDS domain) run side by side under their own
node names (`--ros-args -r __node:=policy_trainer_1`); each is addressed by its own action.

Action server:
  ~/train_candidate   motionvl/action/TrainCandidate (/<node name>/train_candidate). Goal: candidate_id and
                      request_json (the rest of a motionvl.rl.jobs request: spec, optional minutes /
                      max_iterations / iterations / warm_start / overrides / run_dir / evaluate / evaluation;
                      version 1). One goal trains at a time; a goal sent meanwhile is accepted and waits
                      (feedback phase "queued"). Feedback: phase (queued, training, evaluating) and per PPO
                      iteration iteration, steps_per_s, mean_reward (mean episode return), mean_episode_length.
                      Result: state done (succeeded), cancelled (canceled; aborted when the trainer itself
                      stopped it on shutdown), failed or rejected (a malformed goal: aborted, the message says
                      why); policy_path (ONNX), run_dir, iterations, outcome_json (run_job's outcome:
                      start_iteration, stop_reason, selection, evaluation, timings) and term_stats_json (per-term
                      episode reward mean/min/max over the run: the "reward reflection" for the synthesizer).
                      Cancel: a goal in training stops after its current iteration (saved and exported, state
                      cancelled); a waiting goal is dropped at once.
Publishes:
  trainer/heartbeat   motionvl/TrainerHeartbeat every `heartbeat_period_s`: stamp (node clock),
                      trainer (the node's full name), candidate_id (in training; empty: idle),
                      queue_length (goals waiting). Reliable, depth 10. A trainer silent for a few periods
                      has gone (the orchestrator hands its candidate to another).
"""

from __future__ import annotations

import sys
import threading

from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from motionvl.action import TrainCandidate
from motionvl.dataclass_docs import dataclass_parameters
from motionvl.msg import TrainerHeartbeat
from motionvl.rl.jobs import QueueSettings, import_training_stack
from motionvl.robot import ConfigError, load_robot_config
from motionvl.ros.goals import QueuedGoal, destroy_actions
from motionvl.ros.messages import BadMessage, heartbeat_msg, job_from_goal, train_feedback_msg, train_result_msg
from motionvl.ros.runtime import abandon_work, run_node, time_left
from motionvl.ros.params import declare_parameters

NODE_NAME = "policy_trainer"
EXIT_MARGIN_S = 1.5
"""Seconds of the shutdown budget kept for the rest of the exit after waiting for the training thread: the
training thread's longer C calls (an export's parsing, a checkpoint's pickling) hold the GIL for a few tenths
of a second at a time, several times that under load, and the exit waits for them."""

QUEUE_PARAMETERS = dataclass_parameters(QueueSettings)
"""default_minutes, eval_seconds, eval_episodes, eval_command_vx: motionvl.rl.jobs.QueueSettings' fields."""
PARAMETERS = {
    "runs_dir": ("runs/trainer", "Directory holding one run directory per candidate (resumed if it exists)."),
    "training_config": ("", "Training YAML (env + ppo sections); empty = the package's config/training.yaml."),
    "robot_config": ("", "Robot YAML the policies are trained and evaluated on; empty = the package's config/robot.yaml."),
    **QUEUE_PARAMETERS,
    "heartbeat_period_s": (1.0, "Seconds between heartbeats on trainer/heartbeat."),
    "cpu_affinity": ([], "Cores this trainer's process runs on, e.g. [0]; empty: every core it may use. Several trainers "
                         "on one machine get disjoint shares (motionvl train --trainers N, train.launch.py trainers:=N): "
                         "threads of two trainings on one core wait for each other at every barrier."),
}

HEARTBEAT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


class PolicyTrainerNode(Node):
    def __init__(self, node_name: str = NODE_NAME, **kwargs):
        super().__init__(node_name, **kwargs)
        p = declare_parameters(self, PARAMETERS)
        if p["heartbeat_period_s"] <= 0:
            raise ConfigError("heartbeat_period_s must be > 0")
        try:
            settings = QueueSettings(**{name: p[name] for name in QUEUE_PARAMETERS}).validate()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if p["cpu_affinity"]:  # before the training thread starts: it and its physics and torch threads inherit it
            from motionvl.rl.threads import pin_process

            try:
                pin_process(p["cpu_affinity"])
            except (OSError, ValueError) as exc:
                raise ConfigError(f"parameter cpu_affinity {p['cpu_affinity']}: {exc}") from exc
        self.trainer_name = self.get_fully_qualified_name()
        self.heartbeat_pub = self.create_publisher(TrainerHeartbeat, "trainer/heartbeat", HEARTBEAT_QOS)
        self._goals: dict[str, _Goal] = {}  # request id (the goal's id) -> the goal while it waits or trains
        self._goals_lock = threading.Lock()

        from motionvl.rl.jobs import TrainingQueue

        robot = load_robot_config(p["robot_config"] or None)
        self.queue = TrainingQueue(
            p["runs_dir"], train_config=p["training_config"] or None, settings=settings,
            on_status=self._on_status, on_progress=self._on_progress, on_statistics=self._on_statistics,
            on_policy=self._on_policy, robot=robot)
        # goals wait (coroutines) side by side with the cancels and the heartbeat: no goal holds an executor thread
        self.action_server = ActionServer(self, TrainCandidate, "~/train_candidate", self._execute,
                                          cancel_callback=self._on_cancel, callback_group=ReentrantCallbackGroup())
        self.create_timer(p["heartbeat_period_s"], self._beat)
        self.get_logger().info(f"ready: goals on {self.resolve_topic_name('~/train_candidate')}, runs in "
                               f"{p['runs_dir']}")

    def _beat(self) -> None:
        self.heartbeat_pub.publish(heartbeat_msg(self.trainer_name, self.queue.current, self.queue.pending(),
                                                 self.get_clock().now().to_msg()))

    # ------------------------------------------------------------------ goals
    async def _execute(self, handle) -> TrainCandidate.Result:
        rid = bytes(handle.goal_id.uuid).hex()
        try:
            job = job_from_goal(handle.request, request_id=rid)
        except BadMessage as exc:
            self.get_logger().warning(f"rejected goal {handle.request.candidate_id[:80]!r}: {exc}")
            handle.abort()
            return train_result_msg("rejected", str(exc))
        goal = _Goal(handle, self.executor, job)
        with self._goals_lock:
            self._goals[rid] = goal
        self.queue.submit(job)
        if goal.cancelling or handle.is_cancel_requested:  # a cancel that came before the goal was queued
            self._cancel(rid)
        result = await goal.done
        with self._goals_lock:
            self._goals.pop(rid, None)
        goal.conclude({"done": "succeed", "cancelled": "cancel"}.get(result.state, "abort"))
        return result

    def _on_cancel(self, handle) -> CancelResponse:
        rid = bytes(handle.goal_id.uuid).hex()
        with self._goals_lock:
            goal = self._goals.get(rid)
        if goal is not None:
            goal.cancelling = True
        self._cancel(rid)
        return CancelResponse.ACCEPT

    def _cancel(self, rid: str) -> None:
        what = self.queue.cancel(rid)
        if what == "dropped":  # it never trains: its result now
            self._finish(rid, "cancelled", "dropped before training")
        self.get_logger().info(f"cancel of {self._candidate(rid)}: "
                               + {"dropped": "dropped while waiting", "stopping": "stopping after this iteration"}.get(
                                   what, "not waiting or training"))

    def _goal(self, payload: dict):
        with self._goals_lock:
            return self._goals.get(payload.get("request_id"))

    def _candidate(self, rid: str) -> str:
        with self._goals_lock:
            goal = self._goals.get(rid)
        return repr(goal.job.candidate_id) if goal else f"goal {rid[:8]}"

    def _finish(self, rid: str, state: str, message: str) -> None:
        with self._goals_lock:
            goal = self._goals.get(rid)
        if goal is not None:
            goal.finish(train_result_msg(state, message, goal.outcome, goal.term_stats))

    # ------------------------------------------------------------------ the queue's reports (its worker thread)
    def _on_status(self, payload: dict) -> None:
        goal, state = self._goal(payload), payload["state"]
        self.get_logger().info(f"{payload['candidate_id']}: {state}"
                               + (f" ({str(payload.get('message'))[:300]})" if payload.get("message") else ""))
        if goal is None:
            return
        if state in ("queued", "training"):
            goal.feedback(state)
        else:
            self._finish(payload["request_id"], state, str(payload.get("message") or ""))

    def _on_progress(self, payload: dict) -> None:
        goal = self._goal(payload)
        if goal is not None:
            goal.feedback(payload["phase"], payload if payload["phase"] == "training" else goal.last)

    def _on_statistics(self, payload: dict) -> None:
        goal = self._goal(payload)
        if goal is not None:
            goal.term_stats = payload["term_stats"]

    def _on_policy(self, payload: dict) -> None:
        goal = self._goal(payload)
        if goal is not None:
            goal.outcome = {k: v for k, v in payload.items() if k != "request_id"}

    def destroy_node(self):
        # The candidate in training stops after its iteration in flight (saved and exported) if that ends
        # within the shutdown budget; otherwise the iteration is abandoned and the process leaves without it
        # (the run directory keeps its last checkpoint: a resumed search trains the candidate on from there).
        queue = getattr(self, "queue", None)
        if queue is not None:
            queue.shutdown(timeout=max(0.0, time_left() - EXIT_MARGIN_S))
            if queue.busy():
                abandon_work(f"{self.trainer_name}: the training iteration in flight of {queue.current} "
                             "(its run resumes from the last checkpoint)")
                return super().destroy_node()
        destroy_actions(self)
        return super().destroy_node()


class _Goal(QueuedGoal):
    """One accepted goal while it waits or trains: its feedback and what training reported."""

    def __init__(self, handle, executor, job):
        super().__init__(handle, executor)
        self.job = job
        self.outcome: dict | None = None
        self.term_stats: dict | None = None
        self.last: dict | None = None  # the last iteration's record (the evaluation's feedback repeats it)

    def feedback(self, phase: str, record: dict | None = None) -> None:
        if phase == "training" and record is not None:
            self.last = record
        self.handle.publish_feedback(train_feedback_msg(phase, record))


def main(args=None) -> int:
    return run_node(PolicyTrainerNode, NODE_NAME, args, threads=None, prepare=import_training_stack)


if __name__ == "__main__":
    sys.exit(main())

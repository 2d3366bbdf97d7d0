"""policy_trainer: trains a PPO policy for every reward candidate it receives.

A thin adapter over `motionvl.rl.jobs.TrainingQueue`: training runs on the queue's worker
thread (the trainer owns its batched simulator; no physics goes through ROS), so the executor
stays free to accept candidates, answer services and beat its heartbeat while a candidate trains.
Several trainers (processes, or machines on one DDS domain) run side by side under their own
node names (`--ros-args -r __node:=policy_trainer_1`); each is addressed on its own channel.

Subscribes:
  ~/candidates        std_msgs/String  JSON request (see motionvl.rl.jobs): candidate_id, spec,
                                       optional minutes / max_iterations / iterations / warm_start /
                                       overrides / run_dir / evaluate / evaluation. This trainer's own
                                       channel (/<node name>/candidates), what the orchestrator uses.
  reward_candidates   the same, shared by every trainer that has `shared_channel` on (by hand, one
                      trainer). Both reliable, depth 50: candidates must not be dropped.
Publishes (every message names the trainer, the node's full name):
  trainer/heartbeat   motionvl/TrainerHeartbeat every `heartbeat_period_s`: stamp (node clock),
                      trainer, candidate_id (in training; empty: idle), queue_length. Reliable,
                      depth 10. A trainer silent for a few periods has gone (the orchestrator hands
                      its candidate to another).
  the others std_msgs/String, JSON with "trainer":
  trainer/status      {candidate_id, state: queued|training|done|cancelled|rejected|failed, message}
                      Reliable, transient-local depth 50, so a late subscriber sees recent states.
  trainer/progress    one record per PPO iteration: candidate_id, phase "training", iteration,
                      steps_per_s, mean_reward, mean_episode_length, per-term episode rewards; and
                      {candidate_id, phase: "evaluating"} when the evaluation starts. Reliable depth 50.
  trainer/statistics  {candidate_id, term_stats}: per-term episode reward mean/min/max over the
                      run (the "reward reflection" for the synthesizer). Transient-local.
  trainer/policy      {candidate_id, policy_path (ONNX), run_dir, iterations, start_iteration,
                      stop_reason, selected_iteration and selected_actor (held-out selection:
                      'exported' or 'last_iterate', or null), evaluation (reward-free task score),
                      train_wall_s, eval_wall_s}. Transient-local.
Services:
  ~/cancel  std_srvs/Trigger  stop the candidate in training after its current iteration
                              (it is still saved and exported).
"""

from __future__ import annotations

import json
import sys

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
from std_srvs.srv import Trigger

from motionvl.msg import TrainerHeartbeat
from motionvl.robot import ConfigError, load_robot_config
from motionvl.ros.messages import heartbeat_msg
from motionvl.ros.runtime import abandon_work, run_node, time_left
from motionvl.ros.params import declare_parameters
from motionvl.task import DEFAULT_COMMAND

NODE_NAME = "policy_trainer"
EXIT_MARGIN_S = 0.5
"""Seconds of the shutdown budget kept for the rest of the exit after waiting for the training thread."""

PARAMETERS = {
    "runs_dir": ("runs/trainer", "Directory holding one run directory per candidate (resumed if it exists)."),
    "training_config": ("", "Training YAML (env + ppo sections); empty = the package's config/training.yaml."),
    "robot_config": ("", "Robot YAML the policies are trained and evaluated on; empty = the package's config/robot.yaml."),
    "default_minutes": (2.0, "Training budget of a candidate that names none, minutes."),
    "eval_seconds": (10.0, "Length of each evaluation episode after training, seconds."),
    "eval_episodes": (8, "Parallel evaluation episodes after training."),
    "eval_command_vx": (DEFAULT_COMMAND[0], "Forward velocity command of the evaluation of a request that names no "
                                            "command, m/s (the search's requests carry their task's)."),
    "shared_channel": (True, "Also take candidates from the shared reward_candidates topic (one trainer, by hand)."),
    "heartbeat_period_s": (1.0, "Seconds between heartbeats on trainer/heartbeat."),
    "cpu_affinity": ([], "Cores this trainer's process runs on, e.g. [0]; empty: every core it may use. Several trainers "
                         "on one machine get disjoint shares (motionvl train --trainers N, train.launch.py trainers:=N): "
                         "threads of two trainings on one core wait for each other at every barrier."),
}

REQUEST_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
STREAM_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
LATCHED_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)


HEARTBEAT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


class PolicyTrainerNode(Node):
    def __init__(self, node_name: str = NODE_NAME, **kwargs):
        super().__init__(node_name, **kwargs)
        p = declare_parameters(self, PARAMETERS)
        if p["default_minutes"] <= 0 or p["eval_episodes"] < 1 or p["heartbeat_period_s"] <= 0:
            raise ConfigError("default_minutes and heartbeat_period_s must be > 0 and eval_episodes >= 1")
        if p["cpu_affinity"]:  # before the training thread starts: it and its physics and torch threads inherit it
            from motionvl.rl.threads import pin_process

            try:
                pin_process(p["cpu_affinity"])
            except (OSError, ValueError) as exc:
                raise ConfigError(f"parameter cpu_affinity {p['cpu_affinity']}: {exc}") from exc
        self.trainer_name = self.get_fully_qualified_name()
        self.status_pub = self.create_publisher(String, "trainer/status", LATCHED_QOS)
        self.progress_pub = self.create_publisher(String, "trainer/progress", STREAM_QOS)
        self.stats_pub = self.create_publisher(String, "trainer/statistics", LATCHED_QOS)
        self.policy_pub = self.create_publisher(String, "trainer/policy", LATCHED_QOS)
        self.heartbeat_pub = self.create_publisher(TrainerHeartbeat, "trainer/heartbeat", HEARTBEAT_QOS)

        from motionvl.rl.jobs import TrainingQueue

        robot = load_robot_config(p["robot_config"] or None)
        self.queue = TrainingQueue(
            p["runs_dir"], train_config=p["training_config"] or None, default_minutes=p["default_minutes"],
            eval_seconds=p["eval_seconds"], eval_episodes=p["eval_episodes"],
            eval_command=(p["eval_command_vx"], 0.0, 0.0),
            on_status=self._publisher(self.status_pub, log=True), on_progress=self._publisher(self.progress_pub),
            on_statistics=self._publisher(self.stats_pub), on_policy=self._publisher(self.policy_pub, log=True),
            robot=robot)
        self.create_subscription(String, "~/candidates", self._on_candidate, REQUEST_QOS)
        if p["shared_channel"]:
            self.create_subscription(String, "reward_candidates", self._on_candidate, REQUEST_QOS)
        self.create_service(Trigger, "~/cancel", self._on_cancel)
        self.create_timer(p["heartbeat_period_s"], self._beat)
        channels = [self.resolve_topic_name("~/candidates")] + (
            [self.resolve_topic_name("reward_candidates")] if p["shared_channel"] else [])
        self.get_logger().info(f"ready: candidates on {', '.join(channels)}, runs in {p['runs_dir']}")

    def _beat(self) -> None:
        self.heartbeat_pub.publish(heartbeat_msg(self.trainer_name, self.queue.current, self.queue.pending(),
                                                 self.get_clock().now().to_msg()))

    def _publisher(self, pub, log: bool = False):
        def publish(payload: dict) -> None:
            text = json.dumps({"trainer": self.trainer_name, **payload}, default=float)
            pub.publish(String(data=text))
            if log:
                self.get_logger().info(f"{pub.topic_name}: {text[:300]}")
        return publish

    def _on_candidate(self, msg: String) -> None:
        self.queue.submit_json(msg.data)

    def _on_cancel(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success = self.queue.cancel_current()
        response.message = "cancelling after the current iteration" if response.success else "nothing is training"
        return response

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


def main(args=None) -> int:
    return run_node(PolicyTrainerNode, NODE_NAME, args, threads=None)


if __name__ == "__main__":
    sys.exit(main())

"""orchestrator: owns the reward search and r* (a thin adapter over `motionvl.search`).

Runs `motionvl.search.loop.Search` on a worker thread with its backends on the graph: candidates go to
the policy_trainer nodes as goals of each one's own action (/<trainer>/train_candidate), one at a time per
trainer; proposals come from the reward_synthesizer node's synthesize action (or an in-process synthesizer
with `synthesizer_node` false); with `playback` ros every candidate is played by the deployment node on the
simulator node and judged by vlm_critic, r*'s rollout sent with each comparison (motionvl.ros.graph_playback:
the sequence, topics and services), with in_process in this process (the deployment controller and the
critic here). Everything the search records is also published. No message ends the node: an unusable one on any
subscribed topic is logged and counted (`inbox.bad`), a publisher of another type reported (motionvl.ros.inbox).

Subscribes:
  trainer/heartbeat    motionvl/TrainerHeartbeat  which trainers are alive and what they train (reliable, depth 10);
                                        a trainer silent for limits.trainer_lost_s is gone and its
                                        candidate goes to another trainer
Action clients:
  /<trainer>/train_candidate  motionvl/action/TrainCandidate  one goal per candidate (a TrainingJob); its
                                        feedback is the candidate's progress (the dispatcher's heartbeat), its
                                        result the outcome; cancelled to stop a stalled or over-time candidate
  synthesize           motionvl/action/Synthesize  one goal per proposal (a SynthesisRequest); cancelled after
                                        synth_timeout_s
  vlm_critic/critique, vlm_critic/compare  motionvl/action/Critique, Compare  (playback ros) one goal per played
                                        rollout and per comparison; cancelled after critic_timeout_s
Publishes:
  search/state         motionvl/SearchState  the loop's state: phase, iteration, best, candidate, ..., run_dir,
                                        task, label (reliable, transient-local depth 1)
  search/ledger        motionvl/JsonRecord  kind "ledger", version 1: every ledger record as it is written: prompts, responses, specs,
                                        validations, statistics, feedback, scores and choices
                                        (reliable, transient-local depth 100), so a bag records the run

When the search ends (`shutdown_when_done`) the node asks its process to stop (motionvl.ros.runtime,
exit status 0 when the search finished, 1 when it failed), so `motionvl train` and a launch with the
orchestrator as its required node end with it; `result` / `error` hold the outcome. Stopped by a signal,
the search ends at its next step (a candidate in training on a trainer node goes on there) and the run
continues with resume.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
import traceback

from action_msgs.msg import GoalStatus
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from motionvl.action import Synthesize, TrainCandidate
from motionvl.backend_names import model_parameters, recorded_parameters
from motionvl.msg import JsonRecord, SearchState, TrainerHeartbeat
from motionvl.robot import ConfigError
from motionvl.ros.goals import ActionClient, destroy_actions, goal_result
from motionvl.ros.inbox import Inbox
from motionvl.ros.messages import (BadMessage, heartbeat_from_msg, ledger_msg, search_state_msg, synthesize_goal,
                                   synthesize_result_from_msg, train_feedback_from_msg, train_goal,
                                   train_result_from_msg)
from motionvl.ros.params import declare_parameters
from motionvl.ros.runtime import abandon_work, request_stop, run_node, time_left
from motionvl.ros.terrain import TERRAIN_PARAMETERS, node_terrain
from motionvl.search.dispatch import SlotState
from motionvl.search.run_args import check_choices, run_dir, run_parameters, settings_keywords

NODE_NAME = "orchestrator"
PARAMETERS = {
    **run_parameters(),  # task, mode, preset, run_dir, resume, ...: motionvl.search.run_args, as motionvl train's
    "synthesizer_node": (True, "Ask the reward_synthesizer node; false: a synthesizer in this process."),
    "synth_timeout_s": (1800.0, "Seconds to wait for the synthesizer node's answer to one request (then its goal is cancelled)."),
    **recorded_parameters(),  # synth_model, synth_base_url, critic_model, critic_base_url (a resume: the recorded)
    **model_parameters(("device",)),  # of the in-process backends
    "playback_step_timeout_s": (15.0, "ros playback: the longest one step may take (a service answer, the STAND "
                                      "ramp); a node missing fails that candidate's playback, not the search."),
    "critic_timeout_s": (600.0, "ros playback: seconds to wait for vlm_critic's answer to a Critique or Compare goal "
                                "(then it is cancelled)."),
    **TERRAIN_PARAMETERS,  # ros playback: the simulator's ground (foot contacts and heights of its rollouts);
                           # the task's is used where they differ (with a warning)
    "shutdown_when_done": (True, "Shut this process's ROS context down when the search ends."),
}

STATE_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                       durability=DurabilityPolicy.TRANSIENT_LOCAL)
LEDGER_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)
HEARTBEAT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


GOAL_ANSWER_S = 15.0
"""Seconds a trainer may take to accept or refuse a goal before the candidate goes to a trainer again."""


class GraphTrainer:
    """One policy_trainer node as a TrainerSlot of the search's dispatcher: a TrainCandidate goal per job on the
    trainer's own action (/<trainer>/train_candidate), its feedback the job's progress, its result the outcome."""

    def __init__(self, node: "OrchestratorNode", name: str):
        self.node, self.name = node, name
        self.client = ActionClient(node, TrainCandidate, f"{name}/train_candidate",
                                   callback_group=node.action_callbacks)
        self.lock = threading.Lock()
        self.job: dict | None = None  # the goal in flight: handle, feedback, result (one dict per start)
        self.sent = 0.0

    def start(self, job) -> None:
        # a trainer just seen may not have matched our action client yet
        self.client.wait_for_server(timeout_sec=10.0)
        self.sent = time.time()
        current = {"candidate_id": job.candidate_id, "last": self.sent, "handle": None, "result": None,
                   "refused": None, "stop": False}
        with self.lock:
            self.job = current
        future = self.client.send_goal_async(train_goal(job), feedback_callback=lambda msg: self._on_feedback(
            current, msg))
        future.add_done_callback(lambda f: self._on_response(current, f))

    def _on_response(self, current: dict, future) -> None:
        try:
            handle = future.result()
        except Exception as exc:  # noqa: BLE001 - the goal request failed on the wire: the job fails
            handle, current["refused"] = None, f"{type(exc).__name__}: {exc}"
        if handle is None:
            return
        if not handle.accepted:
            current["refused"] = "the goal was not accepted"
            return
        with self.lock:
            current["handle"] = handle
            stop = current["stop"]
        if stop:  # stopped before the trainer accepted it
            handle.cancel_goal_async()
            return
        handle.get_result_async().add_done_callback(lambda f: self._on_result(current, f))

    def _on_feedback(self, current: dict, msg) -> None:
        try:
            feedback = train_feedback_from_msg(msg.feedback)
        except BadMessage as exc:
            self.node.get_logger().warning(f"{self.name}: feedback dropped: {exc}")
            return
        with self.lock:
            current["last"] = time.time()
            current["phase"] = feedback["phase"]
            if feedback["iteration"] is not None:
                current["iteration"] = feedback["iteration"]

    def _on_result(self, current: dict, future) -> None:
        try:
            response = future.result()
            result = train_result_from_msg(response.result)
        except BadMessage as exc:
            result = {"state": "failed", "message": f"an unusable result: {exc}", "outcome": None}
        except Exception as exc:  # noqa: BLE001 - the result request failed on the wire
            result = {"state": "failed", "message": f"no result: {type(exc).__name__}: {exc}", "outcome": None}
        with self.lock:
            current["result"], current["last"] = result, time.time()

    def poll(self) -> SlotState:
        with self.lock:
            info = dict(self.job) if self.job is not None else None
        if info is None:
            return SlotState("idle")
        state = self._state(info)
        if state.kind != "running":
            with self.lock:
                if self.job is not None and self.job["handle"] is info["handle"]:
                    self.job["stop"] = True  # a goal accepted after all is cancelled (_on_response)
                    self.job = None
            if state.kind == "gone" and info["handle"] is not None and info["result"] is None:
                # A trainer silent past trainer_lost_s may only have been starved on a loaded machine: cancelled,
                # it stops this goal after the iteration in flight (saved), so the candidate sent again, perhaps
                # to this same trainer, resumes from that checkpoint instead of waiting behind the stale goal.
                info["handle"].cancel_goal_async()
        return state

    def _state(self, info: dict) -> SlotState:
        node = self.node
        with node.lock:
            seen = node.trainers.get(self.name)
        lost_s = node.lost_s
        if seen is None or time.time() - seen["received"] > lost_s:
            return SlotState("gone", reason=f"no heartbeat for {lost_s:.0f} s")
        if info["handle"] is None and info["refused"] is None and time.time() - self.sent > GOAL_ANSWER_S:
            # the goal request was lost (a trainer of this name that just restarted, still in the graph as it was)
            return SlotState("gone", reason=f"no answer to the goal within {GOAL_ANSWER_S:.0f} s")
        if info["refused"] is not None:
            return SlotState("failed", reason=f"{self.name} refused the goal: {info['refused']}")
        result = info["result"]
        if result is not None:
            state = result["state"]
            if state == "done":
                return SlotState("done", outcome=result["outcome"])
            if state == "cancelled":  # not by us (stop() forgets the job): the trainer is shutting down
                return SlotState("gone", reason=f"{self.name} stopped the candidate ({result['message']})")
            return SlotState("failed", reason=f"{self.name} reports {state}: {result['message']}")
        # a trainer that restarted has forgotten the goal: its heartbeat names no job and it has none queued
        if (info["handle"] is not None and seen["received"] > info["last"] + 2.0
                and seen["data"].get("candidate_id") is None and not seen["data"].get("queue_length")):
            return SlotState("gone", reason="the trainer no longer has the candidate (restarted?)")
        return SlotState("running", beat=info["last"], iteration=info.get("iteration"),
                         phase=info.get("phase") or ("queued" if info["handle"] is not None else "starting"))

    def stop(self) -> None:
        with self.lock:
            current, self.job = self.job, None
            if current is None:
                return
            current["stop"] = True
            handle = current["handle"]
        if handle is not None:
            handle.cancel_goal_async()

    def close(self) -> None:
        pass


class SynthesizerClient:
    """The reward_synthesizer node as the search's synthesizer: `propose_record(request)` sends a Synthesize goal
    and returns its result (the synthesis record); a goal not answered within timeout_s is cancelled."""

    def __init__(self, node: "OrchestratorNode", name: str, timeout_s: float):
        self.node, self.name, self.offline, self.timeout_s = node, name, name in ("rules", "replay"), float(timeout_s)
        self.client = ActionClient(node, Synthesize, "synthesize", callback_group=node.action_callbacks)

    def propose_record(self, request) -> dict:
        if not self.client.wait_for_server(timeout_sec=30.0):
            raise TimeoutError(f"no reward_synthesizer node serves {self.node.resolve_topic_name('synthesize')}")
        status, result = goal_result(self.client, synthesize_goal(request), self.timeout_s,
                                     "the reward_synthesizer node")
        if status != GoalStatus.STATUS_SUCCEEDED and not result.record_json:
            raise RuntimeError(f"the reward_synthesizer node refused the request: {result.error}")
        record = synthesize_result_from_msg(result)
        ran = (record.get("synthesizer") or {}).get("backend")  # "rules", "openai:<model>", ...
        if ran is not None and str(ran).split(":")[0] != self.name:  # one run, one model: never mix two silently
            from motionvl.search.loop import SearchError

            raise SearchError(f"the reward_synthesizer node runs backend {ran!r}, this run's is {self.name!r}: start "
                              f"the node with the run's backend (train.launch.py synthesizer:={self.name} and its model)")
        return {k: v for k, v in record.items() if k != "kind"}


class OrchestratorNode(Node):
    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        p = self.p = declare_parameters(self, PARAMETERS)
        self.inbox = Inbox(self)  # every subscription of the node and its graph playback
        from motionvl.search.backends import BackendOptions, load_settings, make_critic, make_synthesizer
        from motionvl.search.config import SearchConfig

        try:
            check_choices(p)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        p["run_dir"] = str(run_dir(p["run_dir"], p["preset"]))
        keywords = settings_keywords(p)
        if p["resume"] and not p["allow_backend_change"]:  # the backend names always have a value: unset them
            keywords.update(synthesizer=None, critic=None)
        self.settings = load_settings(p["run_dir"], **keywords)
        self.robot = self.settings.robot()
        self.cfg = SearchConfig.from_dict(self.settings.config)
        self.lost_s = self.cfg.limits.trainer_lost_s
        options = BackendOptions(device=p["device"])  # models and endpoints: the settings (recorded on resume)
        self.lock = threading.Lock()
        self.trainers: dict[str, dict] = {}  # name -> {"received": time, "data": heartbeat}
        self.slots: dict[str, GraphTrainer] = {}
        self.action_callbacks = ReentrantCallbackGroup()  # the action clients' answers, beside the heartbeats
        if self.settings.mode == "reference":
            self.synthesizer = None
        elif p["synthesizer_node"]:
            self.synthesizer = SynthesizerClient(self, self.settings.synthesizer, p["synth_timeout_s"])
        else:
            self.synthesizer = make_synthesizer(self.settings, options)
        self.graph_playback = None
        if p["playback"] == "ros":
            from motionvl.ros.graph_playback import GraphCritic, GraphPlayback
            from motionvl.search.loop import run_task

            # the graph gives the simulator the task's ground (the recorded task's on resume)
            ground, task = node_terrain(p), run_task(p["run_dir"], self.settings)
            if task.terrain != ground.kind or (task.terrain_level is not None and task.terrain_level != ground.level):
                self.get_logger().warning(f"the task is on {task.terrain!r} ground (level {task.terrain_level}); the "
                                          f"parameters say {ground.kind!r} (level {ground.level}): the playback judges "
                                          "contacts on the task's")
                ground = dataclasses.replace(ground, kind=task.terrain, level=task.terrain_level)
            self.graph_playback = GraphPlayback(self, self.cfg.playback, self.robot,
                                                terrain=ground,
                                                step_timeout_s=p["playback_step_timeout_s"],
                                                critic_timeout_s=p["critic_timeout_s"])
            self.critic = GraphCritic(self.graph_playback, self.settings.critic) if self.settings.mode == "synth+critic" \
                else None
        else:
            self.critic = make_critic(self.settings, options)
        self.state_pub = self.create_publisher(SearchState, "search/state", STATE_QOS)
        self.ledger_pub = self.create_publisher(JsonRecord, "search/ledger", LEDGER_QOS)
        self.inbox.subscribe(TrainerHeartbeat, "trainer/heartbeat", self._on_heartbeat, HEARTBEAT_QOS)
        self.result: dict | None = None
        self.search = None
        self.error: str | None = None
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="search", daemon=True)
        self._starter = self.create_timer(0.2, self._start)  # once spinning: the search may end the context
        self.get_logger().info(f"searching for {self.settings.task!r} ({self.settings.label}, preset "
                               f"{self.settings.preset}) in {p['run_dir']}")

    # ------------------------------------------------------------------ graph input
    def _on_heartbeat(self, msg: TrainerHeartbeat) -> None:
        data = heartbeat_from_msg(msg)
        name = data["trainer"]
        with self.lock:
            self.trainers[name] = {"received": time.time(), "data": data}
            if name not in self.slots:
                self.slots[name] = GraphTrainer(self, name)

    def alive_trainers(self) -> list[GraphTrainer]:
        now = time.time()
        with self.lock:
            return [self.slots[name] for name, seen in sorted(self.trainers.items())
                    if now - seen["received"] <= self.lost_s]

    # ------------------------------------------------------------------ the search
    def _publish_state(self, state: dict) -> None:
        self._publish(self.state_pub, search_state_msg({**state, "time": time.time()}))

    def _publish_record(self, record: dict) -> None:
        self._publish(self.ledger_pub, ledger_msg(record))

    def _publish(self, publisher, msg) -> None:
        try:
            publisher.publish(msg)
        except Exception:  # noqa: BLE001 - the node is being destroyed under the search: the ledger has it all
            if self.search is None or not self.search.stopping:
                raise

    def _start(self) -> None:
        self._starter.cancel()
        if not self._thread.is_alive() and not self.finished.is_set():
            self._thread.start()

    def _run(self) -> None:
        from motionvl.search.loop import Search, SearchStopped
        from motionvl.search.playback import InProcessPlayback

        try:
            self.search = Search(self.p["run_dir"], self.settings, synthesizer=self.synthesizer, critic=self.critic,
                                 playback=self.graph_playback or InProcessPlayback(self.cfg.playback, robot=self.robot),
                                 slots=self.alive_trainers,
                                 resume=self.p["resume"], log=self.get_logger().info, progress=False,
                                 on_record=self._publish_record, on_state=self._publish_state,
                                 no_trainer_s=self.cfg.limits.startup_s,
                                 allow_backend_change=self.p["allow_backend_change"])
            self.result = self.search.run()
            self.get_logger().info(f"search finished: {json.dumps(self.result, default=str)}")
        except SearchStopped:
            self.get_logger().info(f"search stopped; resume continues it in {self.p['run_dir']}")
            return
        except Exception as exc:  # noqa: BLE001 - reported, and the process ends with an error status
            self.error = f"{type(exc).__name__}: {exc}"
            self.get_logger().error(f"search failed: {self.error}\n{traceback.format_exc(limit=4)}")
            self._publish_state({"phase": "failed", "error": self.error})
        finally:
            self.finished.set()
        if self.p["shutdown_when_done"]:
            request_stop("the search ended", exit_code=0 if self.error is None else 1)

    def destroy_node(self):
        """Stop the search at its next step (its ledger is whole: resume continues it), then leave; a step that
        does not end within the shutdown budget (an in-process playback, a model call) is abandoned."""
        if self.search is not None:
            self.search.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=max(0.0, time_left() - 0.5))
            if self._thread.is_alive():
                abandon_work("the search's step in flight (resume redoes it)")
                return super().destroy_node()
        destroy_actions(self)
        return super().destroy_node()


def main(args=None) -> int:
    return run_node(OrchestratorNode, NODE_NAME, args, threads=None, startup_errors=(ConfigError,))


if __name__ == "__main__":
    sys.exit(main())

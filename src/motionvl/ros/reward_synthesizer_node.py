"""reward_synthesizer: proposes reward candidates on request (a thin adapter over `motionvl.synth`).

Action server:
  synthesize   motionvl/action/Synthesize. Goal: request_json, a motionvl.synth.SynthesisRequest (task,
               iteration, num_candidates, optional parent (a reward spec dict), parent_statistics
               (term_stats.json), parent_scores (eval.json), feedback (MotionFeedback dict), seed,
               temperature, tried, from_scratch, environment, gates; version 1). Goals run one at a time
               in the order they came (feedback stage "queued", then "proposing"). Result: record_json,
               the ledger record of the call (`motionvl.synth.replay`: kind, synthesizer, request_key,
               request, candidates [{spec, ok, rejection, prompt, response, attempts, usage, edits,
               rationale, exchanges}], usage, budget, error), candidates and candidates_ok (counts),
               cap_reached, error. A malformed goal is aborted with error "bad request: ..." and no
               record. Cancel: a waiting goal is dropped at once; a call in flight finishes and its
               answer is discarded (canceled, no record).

Parameter `backend` picks the synthesizer: "rules" (offline default: model-free rules, not an LLM),
"openai" (`base_url`, `model`; the API key only from the environment, MOTIONVL_OPENAI_API_KEY or
OPENAI_API_KEY), "transformers" (`model`: a local model directory) or "replay" (`ledger` of an earlier run). Proposals run
one at a time on a worker thread, so a slow model never blocks the executor.
"""

from __future__ import annotations

import dataclasses
import queue
import sys
import threading

from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from motionvl.action import Synthesize
from motionvl.dataclass_docs import dataclass_parameters
from motionvl.backend_names import backends_help, kind_settings, model_parameters, model_settings
from motionvl.robot import ConfigError
from motionvl.ros.goals import QueuedGoal, destroy_actions
from motionvl.ros.messages import BadMessage, synthesis_request_from_goal, synthesize_result_msg
from motionvl.ros.params import declare_parameters
from motionvl.ros.runtime import abandon_work, run_node, time_left
from motionvl.synth import (SynthesisCapReached, SynthesisError, SynthesizerOptions, make_synthesizer,
                            synthesis_record, synthesizer_options)

NODE_NAME = "reward_synthesizer"

PARAMETERS = {
    "backend": ("rules", f"Synthesizer: {backends_help('synth')}."),
    **model_parameters(kind_settings("synth")),  # model, base_url, device, timeouts (motionvl.backend_names)
    "ledger": ("", "replay: the ledger.jsonl of the run to replay."),
    "start_spec": ("", "Reward spec a first proposal starts from; empty = config/rewards/reference.yaml (RL-Base)."),
    "robot_config": ("", "Robot YAML for the prompt's robot summary and the sandbox; empty = config/robot.yaml."),
    "max_calls": (0, "The run's cap on model calls (repairs count); 0 = no cap."),
    "max_tokens": (0, "The run's cap on prompt + completion tokens; 0 = no cap."),
    "max_bytes": (0, "The run's cap on bytes sent to and received from the endpoint; 0 = no cap."),
    **dataclass_parameters(SynthesizerOptions),  # max_repairs, max_new_tokens, max_retries, response_format
}

CAPS = ("max_calls", "max_tokens", "max_bytes")


def _options(p: dict) -> dict:
    """make_synthesizer's options from the node's parameters (empty strings and zero caps mean unset)."""
    robot = None
    if p["robot_config"]:
        from motionvl.robot import load_robot_config

        robot = load_robot_config(p["robot_config"])
    return synthesizer_options(p["backend"], model_settings(p), ledger=p["ledger"], robot=robot,
                               start=p["start_spec"] or None, **{cap: p[cap] or None for cap in CAPS},
                               **{f.name: p[f.name] for f in dataclasses.fields(SynthesizerOptions)})


class RewardSynthesizerNode(Node):
    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        p = declare_parameters(self, PARAMETERS)
        if p["max_calls"] < 0 or p["max_tokens"] < 0 or p["max_bytes"] < 0:
            raise ConfigError("max_calls, max_tokens and max_bytes must be >= 0 (0 = no cap)")
        if not (p["connect_timeout_s"] > 0 and p["read_timeout_s"] > 0):
            raise ConfigError("connect_timeout_s and read_timeout_s must be > 0")
        try:
            self.synthesizer = make_synthesizer(p["backend"], **_options(p))
        except SynthesisError as exc:
            raise ConfigError(str(exc)) from None
        self._jobs: queue.Queue = queue.Queue()  # _Goal, one at a time on the worker; None: stop
        self._lock = threading.Lock()  # a goal's start and its cancel: one decision at a time
        self._current: _Goal | None = None  # the goal whose call is in flight
        self._worker = threading.Thread(target=self._work, name="synthesis", daemon=True)
        self._worker.start()
        # goals wait (coroutines) while the worker proposes: no goal holds the executor
        self.action_server = ActionServer(self, Synthesize, "synthesize", self._execute,
                                          cancel_callback=self._on_cancel, callback_group=ReentrantCallbackGroup())
        kind = "offline, no model" if self.synthesizer.offline else "model-backed"
        self.get_logger().info(f"ready: backend {self.synthesizer.name} ({kind}); goals on "
                               f"{self.resolve_topic_name('synthesize')}")

    async def _execute(self, handle) -> Synthesize.Result:
        try:
            request = synthesis_request_from_goal(handle.request)
        except BadMessage as exc:
            self.get_logger().warning(f"refused a goal: {exc}")
            handle.abort()
            return Synthesize.Result(error=f"bad request: {exc}", record_version=1)
        goal = _Goal(handle, self.executor, request)
        handle.publish_feedback(Synthesize.Feedback(stage="queued"))
        self._jobs.put(goal)
        if handle.is_cancel_requested:  # cancelled between its acceptance and now
            self._on_cancel(handle, goal)
        how, result = await goal.done
        goal.conclude(how)
        return result

    def _on_cancel(self, handle, goal=None) -> CancelResponse:
        goal = goal or self._queued(handle)
        if goal is not None:
            with self._lock:
                goal.cancelling = True
                waiting = not goal.started
            if waiting:  # dropped: the worker skips it
                goal.finish(("cancel", Synthesize.Result(error="cancelled before the call", record_version=1)))
        return CancelResponse.ACCEPT

    def _queued(self, handle):
        current = self._current
        if current is not None and current.handle is handle:
            return current
        with self._jobs.mutex:
            return next((g for g in self._jobs.queue if g is not None and g.handle is handle), None)

    def _work(self) -> None:
        while True:
            goal = self._jobs.get()
            if goal is None:
                return
            with self._lock:
                if goal.cancelling or goal.handle.is_cancel_requested:  # dropped; or cancelled as it was queued
                    goal.finish(("cancel", Synthesize.Result(error="cancelled before the call", record_version=1)))
                    continue
                goal.started, self._current = True, goal
            goal.handle.publish_feedback(Synthesize.Feedback(stage="proposing"))
            try:
                record, cap_reached = self.answer(goal.request)
                how = "succeed"
            except Exception as exc:  # noqa: BLE001 - the node answers every goal and keeps running
                record, cap_reached = {"kind": "synthesis", "candidates": [],
                                       "error": f"synthesis failed: {type(exc).__name__}: {exc}"}, False
                how = "abort"
            self._current = None
            cancelled = goal.cancelling or goal.handle.is_cancel_requested
            ok = sum(1 for c in record.get("candidates") or [] if c.get("ok"))
            self.get_logger().info(f"answered iteration {goal.request.iteration}: {ok} of "
                                   f"{len(record.get('candidates') or [])} candidates ok"
                                   + (f"; error: {record['error'][:200]}" if record.get("error") else "")
                                   + ("; cancelled: the answer is discarded" if cancelled else ""))
            if cancelled:
                goal.finish(("cancel", Synthesize.Result(error="cancelled during the call; its answer is discarded",
                                                         record_version=1)))
            else:
                goal.finish((how, synthesize_result_msg(record, cap_reached)))

    def answer(self, request) -> tuple[dict, bool]:
        """The ledger record of one request's call and whether the run's model-use cap was reached."""
        try:
            candidates = self.synthesizer.propose(request)
        except SynthesisError as exc:
            return (synthesis_record(request, [], self.synthesizer, error=str(exc)),
                    isinstance(exc, SynthesisCapReached))
        return synthesis_record(request, candidates, self.synthesizer), any(c.cap_reached for c in candidates)

    def destroy_node(self):
        # the proposal in flight finishes if it ends within the shutdown budget; otherwise (a model call that waits) it
        # is abandoned with the process: the search asks again after a resume
        self._jobs.put(None)
        self._worker.join(timeout=max(0.0, time_left() - 0.5))
        if self._worker.is_alive():
            abandon_work("the proposal in flight")
        else:
            destroy_actions(self)
        return super().destroy_node()


class _Goal(QueuedGoal):
    def __init__(self, handle, executor, request):
        super().__init__(handle, executor)
        self.request = request
        self.started = False


def main(args=None) -> int:
    return run_node(RewardSynthesizerNode, NODE_NAME, args)


if __name__ == "__main__":
    sys.exit(main())

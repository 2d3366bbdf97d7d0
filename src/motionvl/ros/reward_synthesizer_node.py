"""reward_synthesizer: proposes reward candidates on request (a thin adapter over `motionvl.synth`).

Subscribes:
  synthesizer/request     std_msgs/String  JSON: {"request_id": "iter2", "task": "...", "iteration": 2,
                                           "num_candidates": 4, optional "parent" (a reward spec dict),
                                           "parent_statistics" (term_stats.json), "parent_scores"
                                           (eval.json), "feedback" (MotionFeedback dict), "seed",
                                           "temperature"}. Reliable, depth 50: requests are not dropped.
Publishes:
  synthesizer/candidates  std_msgs/String  JSON, one answer per request: {"request_id", "cap_reached",
                                           **the ledger record of the call} (`motionvl.synth.replay`:
                                           kind, synthesizer, request_key, request, candidates [{spec,
                                           ok, rejection, prompt, response, attempts, usage, edits,
                                           rationale, exchanges}], usage, budget, error). A malformed
                                           request is answered too, with "error" and no candidates.
                                           Reliable, transient-local depth 50: a late subscriber sees
                                           recent answers.

Parameter `backend` picks the synthesizer: "rules" (offline default: model-free rules, not an LLM),
"openai" (`base_url`, `model`; the API key only from the environment, MOTIONVL_OPENAI_API_KEY or
OPENAI_API_KEY), "transformers" (`model`: a local model directory) or "replay" (`ledger` of an earlier run). Proposals run
one at a time on a worker thread, so a slow model never blocks the executor.
"""

from __future__ import annotations

import json
import queue
import sys
import threading

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from motionvl.backend_names import backends_help, kind_settings, model_parameters, model_settings
from motionvl.robot import ConfigError
from motionvl.ros.params import declare_parameters
from motionvl.ros.runtime import abandon_work, run_node, time_left
from motionvl.synth import (SynthesisCapReached, SynthesisError, SynthesisRequest, make_synthesizer,
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
    "max_repairs": (2, "Model backends: repairs per candidate after a rejected answer."),
    "max_new_tokens": (2048, "Model backends: the answer's token limit."),
    "max_retries": (3, "openai: retries with exponential backoff on transport errors, 5xx and 429."),
    "response_format": ("auto", "openai: 'auto' (JSON schema where the server takes it), 'json_schema', "
                                "'json_object' or 'none'."),
}

CAPS = ("max_calls", "max_tokens", "max_bytes")

REQUEST_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
ANSWER_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)


def _options(p: dict) -> dict:
    """make_synthesizer's options from the node's parameters (empty strings and zero caps mean unset)."""
    robot = None
    if p["robot_config"]:
        from motionvl.robot import load_robot_config

        robot = load_robot_config(p["robot_config"])
    return synthesizer_options(p["backend"], model_settings(p), ledger=p["ledger"], robot=robot,
                               start=p["start_spec"] or None, **{cap: p[cap] or None for cap in CAPS},
                               **{name: p[name] for name in ("max_repairs", "max_new_tokens", "max_retries",
                                                              "response_format")})


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
        self.answers = self.create_publisher(String, "synthesizer/candidates", ANSWER_QOS)
        self.create_subscription(String, "synthesizer/request", self._on_request, REQUEST_QOS)
        self._jobs: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._work, name="synthesis", daemon=True)
        self._worker.start()
        kind = "offline, no model" if self.synthesizer.offline else "model-backed"
        self.get_logger().info(f"ready: backend {self.synthesizer.name} ({kind}); requests on "
                               f"{self.resolve_topic_name('synthesizer/request')}")

    def _on_request(self, msg: String) -> None:
        self._jobs.put(msg.data)

    def _work(self) -> None:
        while True:
            text = self._jobs.get()
            if text is None:
                return
            try:
                answer = self.answer(text)
            except Exception as exc:  # noqa: BLE001 - the node answers every request and keeps running
                answer = {"request_id": _peek_id(text), "kind": "synthesis", "candidates": [], "cap_reached": False,
                          "error": f"synthesis failed: {type(exc).__name__}: {exc}"}
            self.answers.publish(String(data=json.dumps(answer, default=str)))
            ok = sum(1 for c in answer.get("candidates") or [] if c.get("ok"))
            self.get_logger().info(f"answered {answer.get('request_id')!r}: {ok} of "
                                   f"{len(answer.get('candidates') or [])} candidates ok"
                                   + (f"; error: {answer['error'][:200]}" if answer.get("error") else ""))

    def answer(self, text: str) -> dict:
        """The answer to one request's JSON text (what is published on synthesizer/candidates)."""
        request_id = _peek_id(text)
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict):
                raise SynthesisError("the request must be a JSON object")
            raw = {k: v for k, v in raw.items() if k != "request_id"}
            request = SynthesisRequest.from_dict(raw)
        except (json.JSONDecodeError, SynthesisError, TypeError) as exc:
            return {"request_id": request_id, "kind": "synthesis", "candidates": [], "cap_reached": False,
                    "error": f"bad request: {exc}"}
        try:
            candidates = self.synthesizer.propose(request)
        except SynthesisError as exc:
            record = synthesis_record(request, [], self.synthesizer, error=str(exc))
            return {"request_id": request_id, **record, "cap_reached": isinstance(exc, SynthesisCapReached)}
        record = synthesis_record(request, candidates, self.synthesizer)
        return {"request_id": request_id, **record, "cap_reached": any(c.cap_reached for c in candidates)}

    def destroy_node(self):
        # the proposal in flight finishes and is published if it ends within the shutdown budget; otherwise (a model call
        # that waits) it is abandoned with the process: the search asks again after a resume
        self._jobs.put(None)
        self._worker.join(timeout=max(0.0, time_left() - 0.5))
        if self._worker.is_alive():
            abandon_work("the proposal in flight")
        return super().destroy_node()


def _peek_id(text: str):
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None
    return raw.get("request_id") if isinstance(raw, dict) else None


def main(args=None) -> int:
    return run_node(RewardSynthesizerNode, NODE_NAME, args)


if __name__ == "__main__":
    sys.exit(main())

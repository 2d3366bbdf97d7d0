"""reward_synthesizer node over real DDS: JSON requests in, one answer (the ledger record) per request out."""

from __future__ import annotations

import json
import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from motionvl.robot import ConfigError  # noqa: E402
from motionvl.ros.reward_synthesizer_node import ANSWER_QOS, REQUEST_QOS, RewardSynthesizerNode  # noqa: E402
from motionvl.synth import Candidate, append_record  # noqa: E402
from spinning import Spinners  # noqa: E402

TASK = "walk forward with straight knees"


class Client(Node):
    """The orchestrator's side: publishes requests, keeps every answer."""

    def __init__(self, context):
        super().__init__("synth_test_client", context=context)
        self.answers: list[dict] = []
        self.lock = threading.Lock()
        self.requests = self.create_publisher(String, "synthesizer/request", REQUEST_QOS)
        self.create_subscription(String, "synthesizer/candidates", self._keep, ANSWER_QOS)

    def _keep(self, msg):
        with self.lock:
            self.answers.append(json.loads(msg.data))

    def send(self, payload) -> None:
        self.requests.publish(String(data=payload if isinstance(payload, str) else json.dumps(payload)))

    def answer_to(self, request_id, timeout=30.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for a in self.answers:
                    if a.get("request_id") == request_id:
                        return a
            time.sleep(0.05)
        raise AssertionError(f"no answer to {request_id!r} within {timeout} s; got {self.answers}")

    def wait_for_subscriber(self, timeout=10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.requests.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.requests.get_subscription_count() > 0, "the synthesizer never subscribed"


@pytest.fixture
def spinners(ros_context):
    s = Spinners(ros_context)
    try:
        yield s
    finally:
        s.shutdown()


def test_requests_get_candidates_and_bad_requests_get_errors(ros_context, spinners, tmp_path):
    spinners.add(RewardSynthesizerNode(context=ros_context))
    client = spinners.add(Client(ros_context))
    client.wait_for_subscriber()
    client.send("{not json")
    client.send({"request_id": "empty", "task": "  ", "iteration": 0, "num_candidates": 2})
    client.send({"request_id": "r1", "task": TASK, "iteration": 0, "num_candidates": 3, "seed": 1})
    answer = client.answer_to("r1")
    assert answer["error"] is None and answer["kind"] == "synthesis" and answer["cap_reached"] is False
    assert answer["synthesizer"] == {"backend": "rules", "offline": True}
    candidates = [Candidate.from_dict(c) for c in answer["candidates"]]
    assert len(candidates) == 3 and all(c.ok for c in candidates)
    assert all(c.spec.term("knee_extension").weight > 0 for c in candidates)
    # answered in order, so the bad requests were answered before r1
    assert "task is empty" in client.answer_to("empty")["error"]
    assert any(a["request_id"] is None and a["error"].startswith("bad request") for a in client.answers)

    # the answer is the ledger record: a replay node reproduces the candidates from it
    ledger = tmp_path / "ledger.jsonl"
    append_record(ledger, {k: v for k, v in answer.items() if k not in ("request_id", "cap_reached")})
    spinners.add(RewardSynthesizerNode(context=ros_context, parameter_overrides=[
        Parameter("backend", value="replay"), Parameter("ledger", value=str(ledger))]))
    replay_seen = time.monotonic() + 10
    while client.requests.get_subscription_count() < 2 and time.monotonic() < replay_seen:
        time.sleep(0.05)
    client.send({"request_id": "r1-again", "task": TASK, "iteration": 0, "num_candidates": 3, "seed": 1})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with client.lock:
            replayed = [a for a in client.answers if a.get("request_id") == "r1-again"
                        and (a.get("synthesizer") or {}).get("backend") == "replay"]
        if replayed:
            break
        time.sleep(0.05)
    assert replayed, "the replay node did not answer"
    again = [Candidate.from_dict(c) for c in replayed[0]["candidates"]]
    assert [c.spec for c in again] == [c.spec for c in candidates]


def test_a_node_with_an_unusable_backend_refuses_to_start(ros_context, tmp_path):
    with pytest.raises(ConfigError, match="unknown synthesizer backend 'gpt'"):
        RewardSynthesizerNode(context=ros_context, parameter_overrides=[Parameter("backend", value="gpt")])
    with pytest.raises(ConfigError, match="does not exist"):
        RewardSynthesizerNode(context=ros_context, parameter_overrides=[
            Parameter("backend", value="transformers"), Parameter("model", value=str(tmp_path / "none"))])


def test_a_synthesizer_node_on_another_backend_than_the_runs_ends_the_search(ros_context, spinners):
    """One run, one model: a resumed openai run whose graph started the node on rules (train.launch.py without
    synthesizer:=) must not take rules' answers as the model's."""
    from motionvl.ros.orchestrator_node import LATCHED_QOS, OrchestratorNode, SynthesizerClient
    from motionvl.search.loop import SearchError
    from motionvl.synth.api import SynthesisRequest

    spinners.add(RewardSynthesizerNode(context=ros_context))  # backend rules
    host = Node("orchestrator_side", context=ros_context)
    host.lock, host.waiting, host.answers = threading.Lock(), {}, {}
    host.create_subscription(String, "synthesizer/candidates", lambda msg: OrchestratorNode._on_answer(host, msg),
                             LATCHED_QOS)
    spinners.add(host)
    request = SynthesisRequest(task=TASK, iteration=1, num_candidates=1)
    assert SynthesizerClient(host, "rules", 60.0).propose_record(request)["candidates"]
    with pytest.raises(SearchError, match="runs backend 'rules', this run's is 'openai'"):
        SynthesizerClient(host, "openai", 60.0).propose_record(request)

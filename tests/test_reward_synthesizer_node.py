"""reward_synthesizer node over real DDS: Synthesize goals in (an rclpy ActionClient), one result (the ledger
record of the call) per goal out; malformed goals refused without the node ending; cancel drops a waiting goal
and discards the answer of a call in flight."""

from __future__ import annotations

import json
import threading

import pytest

rclpy = pytest.importorskip("rclpy")
from action_msgs.msg import GoalStatus  # noqa: E402
from motionvl.ros.goals import ActionClient  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from motionvl.action import Synthesize  # noqa: E402
from motionvl.robot import ConfigError  # noqa: E402
from motionvl.ros.messages import synthesize_goal, synthesize_result_from_msg  # noqa: E402
from motionvl.ros.reward_synthesizer_node import RewardSynthesizerNode  # noqa: E402
from motionvl.synth import Candidate, append_record  # noqa: E402
from motionvl.synth.api import SynthesisRequest  # noqa: E402
from spinning import Spinners  # noqa: E402
from waiting import wait_for  # noqa: E402

TASK = "walk forward with straight knees"


class Goal:
    """One goal as the client sees it: its acceptance, its feedback stages, its result."""

    def __init__(self, client: ActionClient, goal: Synthesize.Goal):
        self.stages: list[str] = []
        self.handle = self.response = None
        client.send_goal_async(goal, feedback_callback=lambda m: self.stages.append(m.feedback.stage)) \
            .add_done_callback(self._on_response)

    def _on_response(self, future) -> None:
        self.handle = future.result()
        self.handle.get_result_async().add_done_callback(lambda f: setattr(self, "response", f.result()))

    def finished(self, timeout: float = 30.0):
        assert wait_for(lambda: self.response is not None, timeout=timeout), f"no result; stages {self.stages}"
        return self.response.status, self.response.result


def _goal(**request) -> Synthesize.Goal:
    return Synthesize.Goal(request_json=json.dumps(request), request_version=1)


@pytest.fixture
def spinners(ros_context):
    s = Spinners(ros_context)
    try:
        yield s
    finally:
        s.shutdown()


def _client(spinners, ros_context, action: str = "/synthesize") -> ActionClient:
    node = spinners.add(Node("synth_test_client", context=ros_context))
    client = ActionClient(node, Synthesize, action)
    assert client.wait_for_server(timeout_sec=10), f"nothing serves {action}"
    return client


def test_goals_get_candidates_and_malformed_goals_are_refused(ros_context, spinners, tmp_path):
    spinners.add(RewardSynthesizerNode(context=ros_context))
    client = _client(spinners, ros_context)
    bad = {"not json": Synthesize.Goal(request_json="{not json", request_version=1),
           "another version": Synthesize.Goal(request_json=json.dumps({"task": TASK}), request_version=7),
           "an empty task": _goal(task="  ", iteration=0, num_candidates=2)}
    refused = {what: Goal(client, goal) for what, goal in bad.items()}
    good = Goal(client, _goal(task=TASK, iteration=0, num_candidates=3, seed=1))
    status, result = good.finished()
    assert status == GoalStatus.STATUS_SUCCEEDED and result.error == "" and not result.cap_reached
    assert result.candidates == result.candidates_ok == 3 and good.stages[-1] == "proposing"
    record = synthesize_result_from_msg(result)
    assert record["kind"] == "synthesis" and record["synthesizer"] == {"backend": "rules", "offline": True}
    candidates = [Candidate.from_dict(c) for c in record["candidates"]]
    assert all(c.ok for c in candidates) and all(c.spec.term("knee_extension").weight > 0 for c in candidates)
    for what, goal in refused.items():
        status, result = goal.finished()
        assert status == GoalStatus.STATUS_ABORTED and result.error.startswith("bad request"), what
        assert not result.record_json, what
    assert "not JSON" in refused["not json"].response.result.error
    assert "version 7" in refused["another version"].response.result.error
    assert "task is empty" in refused["an empty task"].response.result.error

    # the result is the ledger record: a replay node (its own namespace: one server per action name) reproduces it
    ledger = tmp_path / "ledger.jsonl"
    append_record(ledger, {k: v for k, v in record.items() if k != "cap_reached"})
    spinners.add(RewardSynthesizerNode(context=ros_context, namespace="/replay", parameter_overrides=[
        Parameter("backend", value="replay"), Parameter("ledger", value=str(ledger))]))
    replay = _client(spinners, ros_context, "/replay/synthesize")
    status, result = Goal(replay, _goal(task=TASK, iteration=0, num_candidates=3, seed=1)).finished()
    again = synthesize_result_from_msg(result)
    assert status == GoalStatus.STATUS_SUCCEEDED and again["synthesizer"]["backend"] == "replay"
    assert [Candidate.from_dict(c).spec for c in again["candidates"]] == [c.spec for c in candidates]


def test_cancel_drops_a_waiting_goal_and_discards_the_answer_of_a_call_in_flight(ros_context, spinners):
    node = RewardSynthesizerNode(context=ros_context)
    gate, calls = threading.Event(), []
    propose = node.synthesizer.propose

    def held_propose(request):  # the rules backend, held until the test lets it answer (a slow model's call)
        calls.append(request.iteration)
        assert gate.wait(60), "never released"
        return propose(request)

    node.synthesizer.propose = held_propose
    spinners.add(node)
    client = _client(spinners, ros_context)
    in_flight = Goal(client, _goal(task=TASK, iteration=1, num_candidates=1))
    assert wait_for(lambda: in_flight.stages == ["queued", "proposing"] and calls == [1], timeout=30), in_flight.stages
    waiting = Goal(client, _goal(task=TASK, iteration=2, num_candidates=1))
    assert wait_for(lambda: waiting.stages == ["queued"], timeout=30)
    waiting.handle.cancel_goal_async()
    status, result = waiting.finished()
    assert status == GoalStatus.STATUS_CANCELED and "before the call" in result.error and not result.record_json
    in_flight.handle.cancel_goal_async()
    assert wait_for(lambda: in_flight.handle.status == GoalStatus.STATUS_CANCELING, timeout=30)
    assert in_flight.response is None, "the call in flight is not abandoned"
    gate.set()
    status, result = in_flight.finished()
    assert status == GoalStatus.STATUS_CANCELED and "discarded" in result.error and not result.record_json
    after = Goal(client, _goal(task=TASK, iteration=3, num_candidates=1))
    status, result = after.finished()
    assert status == GoalStatus.STATUS_SUCCEEDED and result.candidates_ok == 1
    assert calls == [1, 3], "the dropped goal was never proposed"


def test_a_node_with_an_unusable_backend_refuses_to_start(ros_context, tmp_path):
    with pytest.raises(ConfigError, match="unknown synthesizer backend 'gpt'"):
        RewardSynthesizerNode(context=ros_context, parameter_overrides=[Parameter("backend", value="gpt")])
    with pytest.raises(ConfigError, match="does not exist"):
        RewardSynthesizerNode(context=ros_context, parameter_overrides=[
            Parameter("backend", value="transformers"), Parameter("model", value=str(tmp_path / "none"))])


def test_a_synthesizer_node_on_another_backend_than_the_runs_ends_the_search(ros_context, spinners):
    """One run, one model: a resumed openai run whose graph started the node on rules (train.launch.py without
    synthesizer:=) must not take rules' answers as the model's."""
    from rclpy.callback_groups import ReentrantCallbackGroup

    from motionvl.ros.orchestrator_node import SynthesizerClient
    from motionvl.search.loop import SearchError

    spinners.add(RewardSynthesizerNode(context=ros_context))  # backend rules
    host = Node("orchestrator_side", context=ros_context)
    host.action_callbacks = ReentrantCallbackGroup()
    spinners.add(host)
    request = SynthesisRequest(task=TASK, iteration=1, num_candidates=1)
    assert SynthesizerClient(host, "rules", 60.0).propose_record(request)["candidates"]
    with pytest.raises(SearchError, match="runs backend 'rules', this run's is 'openai'"):
        SynthesizerClient(host, "openai", 60.0).propose_record(request)
    assert synthesize_goal(request).request_version == 1

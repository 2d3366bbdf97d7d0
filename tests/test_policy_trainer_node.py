"""policy_trainer node over real DDS: an rclpy ActionClient sends TrainCandidate goals; feedback per iteration,
an ONNX policy and per-term statistics come back; a waiting goal and a training one are cancelled; malformed
goals are refused with a reason and the node trains on."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml

rclpy = pytest.importorskip("rclpy")
from action_msgs.msg import GoalStatus  # noqa: E402
from motionvl.ros.goals import ActionClient  # noqa: E402
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from motionvl.action import TrainCandidate  # noqa: E402
from motionvl.msg import TrainerHeartbeat  # noqa: E402
from motionvl.rewards.spec import load_reward_spec  # noqa: E402
from motionvl.ros.messages import train_result_from_msg  # noqa: E402
from motionvl.ros.policy_trainer_node import HEARTBEAT_QOS, PolicyTrainerNode  # noqa: E402
from waiting import wait_for  # noqa: E402

TINY_TRAINING = {
    "seed": 0, "minutes": 5, "save_interval": 1,
    "env": {"num_envs": 16, "episode_length_s": 2.0},
    "ppo": {"num_steps_per_env": 8, "num_learning_epochs": 1, "num_mini_batches": 2,
            "actor_hidden_dims": [32, 32], "critic_hidden_dims": [32, 32]},
}


class Goal:
    """One goal as the client sees it: its acceptance, every feedback, its result."""

    def __init__(self, client: ActionClient, goal: TrainCandidate.Goal):
        self.feedback: list = []
        self.handle = self.result = None
        self.lock = threading.Lock()
        client.send_goal_async(goal, feedback_callback=self._on_feedback).add_done_callback(self._on_response)

    def _on_feedback(self, msg) -> None:
        with self.lock:
            self.feedback.append(msg.feedback)

    def _on_response(self, future) -> None:
        self.handle = future.result()
        if self.handle.accepted:
            self.handle.get_result_async().add_done_callback(self._on_result)

    def _on_result(self, future) -> None:
        self.result = future.result()  # .status (action_msgs/GoalStatus) and .result

    def phases(self) -> list[tuple[str, int]]:
        with self.lock:
            return [(f.phase, f.iteration) for f in self.feedback]

    def finished(self, timeout: float):
        assert wait_for(lambda: self.result is not None, timeout=timeout), f"no result; feedback {self.phases()}"
        return self.result.status, self.result.result


@pytest.fixture
def graph(ros_context, tmp_path):
    config = tmp_path / "training.yaml"
    config.write_text(yaml.safe_dump(TINY_TRAINING))
    trainer = PolicyTrainerNode(context=ros_context, parameter_overrides=[
        Parameter("runs_dir", value=str(tmp_path / "runs")), Parameter("training_config", value=str(config)),
        Parameter("eval_seconds", value=1.0), Parameter("eval_episodes", value=2),
        Parameter("heartbeat_period_s", value=0.2)])
    client_node = Node("trainer_test_client", context=ros_context)
    client = ActionClient(client_node, TrainCandidate, "/policy_trainer/train_candidate")
    beats: list = []
    client_node.create_subscription(TrainerHeartbeat, "trainer/heartbeat", beats.append, HEARTBEAT_QOS)
    executor = MultiThreadedExecutor(context=ros_context)
    executor.add_node(trainer)
    executor.add_node(client_node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        assert client.wait_for_server(timeout_sec=10), "the trainer serves no train_candidate action"
        yield trainer, client, beats
    finally:
        executor.shutdown()
        thread.join(5)
        trainer.destroy_node()
        client_node.destroy_node()


def _goal(cid: str, **request) -> TrainCandidate.Goal:
    request = {"spec": load_reward_spec(None).to_dict(), **request}
    return TrainCandidate.Goal(candidate_id=cid, request_json=json.dumps(request), request_version=1)


def test_goals_train_one_at_a_time_with_feedback_and_cancel_waiting_or_training(graph):
    trainer, client, beats = graph
    goals = []
    for cid, request in (("first", {"iterations": 2}), ("second", {"iterations": 1000, "evaluate": False}),
                         ("third", {"iterations": 1000})):  # one after another: the trainer takes them in order
        goals.append(Goal(client, _goal(cid, **request)))
        assert wait_for(lambda: goals[-1].handle is not None, timeout=10) and goals[-1].handle.accepted, cid
    first, second, third = goals

    # the third waits behind two: cancelled, it is dropped at once and never trains
    assert wait_for(lambda: ("queued", -1) in third.phases(), timeout=10), third.phases()
    third.handle.cancel_goal_async()
    status, result = third.finished(timeout=10)
    assert status == GoalStatus.STATUS_CANCELED and result.state == "cancelled" and result.iterations == 0
    assert not result.policy_path and third.phases() == [("queued", -1)], "it never trained"

    status, result = first.finished(timeout=240)
    assert status == GoalStatus.STATUS_SUCCEEDED and result.state == "done", result.message
    assert Path(result.policy_path).is_file() and result.iterations == 2
    assert Path(result.run_dir).name == "first"
    report = train_result_from_msg(result)
    assert 0.0 <= report["outcome"]["evaluation"]["fell_fraction"] <= 1.0
    assert report["outcome"]["stop_reason"] == "max iterations"
    spec_terms = set(load_reward_spec(None).to_dict()["terms"])
    assert set(report["outcome"]["term_stats"]["terms"]) == spec_terms, "per-term statistics cover every term"
    phases = first.phases()
    assert [it for phase, it in phases if phase == "training" and it >= 0] == [1, 2], phases
    assert phases.index(("training", 2)) < [p for p, _ in phases].index("evaluating"), "evaluated after training"
    assert all(f.steps_per_s > 0 for f in first.feedback if f.phase == "training" and f.iteration >= 0)

    # the second trains once the first is done; cancelled while training, it stops after its iteration, exported
    assert ("queued", -1) in second.phases()
    assert wait_for(lambda: any(p == "training" and it >= 1 for p, it in second.phases()), timeout=120)
    second.handle.cancel_goal_async()
    status, result = second.finished(timeout=120)
    assert status == GoalStatus.STATUS_CANCELED and result.state == "cancelled", result.message
    trained = max(it for p, it in second.phases() if p == "training")
    assert 1 <= result.iterations < 1000 and result.iterations >= trained and Path(result.policy_path).is_file()
    assert train_result_from_msg(result)["outcome"]["stop_reason"] == "callback"
    assert "evaluating" not in [p for p, _ in second.phases()], "a cancelled run is not evaluated"
    # idle again: the heartbeat names no candidate and no waiting goal
    assert wait_for(lambda: beats and beats[-1].candidate_id == "" and beats[-1].queue_length == 0, timeout=10)
    assert all(b.trainer == "/policy_trainer" for b in beats)


def test_malformed_goals_are_refused_with_a_reason_and_the_trainer_goes_on(graph):
    trainer, client, _ = graph
    spec = load_reward_spec(None).to_dict()
    bad = {
        "not json": TrainCandidate.Goal(candidate_id="a", request_json="{not json", request_version=1),
        "a list": TrainCandidate.Goal(candidate_id="b", request_json="[1, 2]", request_version=1),
        "another version": TrainCandidate.Goal(candidate_id="c", request_json=json.dumps({"spec": spec}),
                                               request_version=2),
        "a bad id": TrainCandidate.Goal(candidate_id="../up", request_json=json.dumps({"spec": spec}),
                                        request_version=1),
        "an unknown term": _goal("bad-term", spec={"terms": {"walk_fast": 1.0}}),
        "an unknown key": _goal("bad-key", speed=3),
    }
    goals = {what: Goal(client, goal) for what, goal in bad.items()}
    reasons = {}
    for what, goal in goals.items():
        status, result = goal.finished(timeout=30)
        assert status == GoalStatus.STATUS_ABORTED and result.state == "rejected", (what, result.state)
        reasons[what] = result.message
    assert "not JSON" in reasons["not json"] and "JSON object" in reasons["a list"]
    assert "version 2" in reasons["another version"] and "candidate_id" in reasons["a bad id"]
    assert "walk_fast" in reasons["an unknown term"] and "speed" in reasons["an unknown key"]
    assert trainer.queue.current is None and trainer.queue.pending() == 0, "nothing was queued"
    # the node still serves: a good goal after the bad ones is taken (cancelled once it waits or trains)
    good = Goal(client, _goal("good", iterations=1000, evaluate=False))
    assert wait_for(lambda: good.phases(), timeout=30), "no feedback for a good goal after bad ones"
    good.handle.cancel_goal_async()
    status, result = good.finished(timeout=120)
    assert status == GoalStatus.STATUS_CANCELED


def test_the_readmes_goal_by_hand_is_a_valid_request():
    """README's `ros2 action send_goal` example (no distribution here to run it): its YAML, as ros2 action
    send_goal reads it, is a goal the trainer takes."""
    import re

    from motionvl.ros.messages import job_from_goal

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    command = re.search(r"`(ros2 action send_goal [^`]*)`", readme.replace("\n", " ")).group(1)
    assert "/policy_trainer/train_candidate motionvl/action/TrainCandidate" in command
    text = command.split('TrainCandidate "', 1)[1].rsplit('"', 1)[0].replace('\\"', '"')  # the shell's unquoting
    job = job_from_goal(TrainCandidate.Goal(**yaml.safe_load(text)))
    assert job.candidate_id == "c1" and job.iterations == 50 and job.spec.term("tracking_lin_vel").weight == 1.0

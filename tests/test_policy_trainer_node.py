"""policy_trainer node over real DDS: a candidate goes in, statistics and an ONNX policy come out."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

rclpy = pytest.importorskip("rclpy")
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from motionvl.rewards.spec import load_reward_spec  # noqa: E402
from motionvl.ros.policy_trainer_node import LATCHED_QOS, REQUEST_QOS, STREAM_QOS, PolicyTrainerNode  # noqa: E402

TINY_TRAINING = {
    "seed": 0, "minutes": 5, "save_interval": 1,
    "env": {"num_envs": 16, "episode_length_s": 2.0},
    "ppo": {"num_steps_per_env": 8, "num_learning_epochs": 1, "num_mini_batches": 2,
            "actor_hidden_dims": [32, 32], "critic_hidden_dims": [32, 32]},
}


class Listener(Node):
    def __init__(self, context):
        super().__init__("trainer_test_listener", context=context)
        self.messages: dict[str, list] = {"status": [], "progress": [], "statistics": [], "policy": []}
        self.lock = threading.Lock()
        for key, topic, qos in (("status", "trainer/status", LATCHED_QOS), ("progress", "trainer/progress", STREAM_QOS),
                                ("statistics", "trainer/statistics", LATCHED_QOS), ("policy", "trainer/policy", LATCHED_QOS)):
            self.create_subscription(String, topic, self._keep(key), qos)
        self.candidates = self.create_publisher(String, "reward_candidates", REQUEST_QOS)
        self.cancel = self.create_client(Trigger, "/policy_trainer/cancel")

    def _keep(self, key):
        def callback(msg):
            with self.lock:
                self.messages[key].append(json.loads(msg.data))
        return callback

    def wait_for(self, key, predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for m in self.messages[key]:
                    if predicate(m):
                        return m
            time.sleep(0.05)
        raise AssertionError(f"no matching {key} message within {timeout} s; got {self.messages}")


@pytest.fixture
def graph(ros_context, tmp_path):
    config = tmp_path / "training.yaml"
    config.write_text(yaml.safe_dump(TINY_TRAINING))
    trainer = PolicyTrainerNode(context=ros_context, parameter_overrides=[
        Parameter("runs_dir", value=str(tmp_path / "runs")), Parameter("training_config", value=str(config)),
        Parameter("eval_seconds", value=1.0), Parameter("eval_episodes", value=2)])
    listener = Listener(ros_context)
    executor = MultiThreadedExecutor(context=ros_context)
    executor.add_node(trainer)
    executor.add_node(listener)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        yield trainer, listener, tmp_path
    finally:
        executor.shutdown()
        trainer.destroy_node()
        listener.destroy_node()
        thread.join(5)


def _wait_for_match(listener, timeout=10.0):
    deadline = time.monotonic() + timeout
    while listener.candidates.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)


def test_candidate_trains_and_publishes_policy(graph):
    _, listener, tmp_path = graph
    _wait_for_match(listener)
    spec = load_reward_spec(None).to_dict()
    listener.candidates.publish(String(data=json.dumps({"candidate_id": "cand-1", "spec": spec, "max_iterations": 2})))

    policy = listener.wait_for("policy", lambda m: m["candidate_id"] == "cand-1", timeout=120)
    assert Path(policy["policy_path"]).is_file()
    assert policy["iterations"] == 2
    assert 0.0 <= policy["evaluation"]["fell_fraction"] <= 1.0
    stats = listener.wait_for("statistics", lambda m: m["candidate_id"] == "cand-1", timeout=5)
    assert set(stats["term_stats"]["terms"]) == set(spec["terms"]), "per-term statistics cover every term of the spec"
    progress = listener.wait_for("progress", lambda m: m["candidate_id"] == "cand-1", timeout=5)
    assert progress["iteration"] >= 1
    # "done" is published after the policy message: wait for it rather than race it
    listener.wait_for("status", lambda m: m["candidate_id"] == "cand-1" and m["state"] == "done", timeout=10)
    with listener.lock:
        states = [m["state"] for m in listener.messages["status"] if m["candidate_id"] == "cand-1"]
    assert states[0] == "queued" and "training" in states and states[-1] == "done"


def test_malformed_candidates_are_rejected_with_a_reason(graph):
    trainer, listener, _ = graph
    _wait_for_match(listener)
    listener.candidates.publish(String(data="{not json"))
    listener.candidates.publish(String(data=json.dumps({"candidate_id": "bad-term", "spec": {"terms": {"walk_fast": 1.0}}})))
    bad_json = listener.wait_for("status", lambda m: m["state"] == "rejected" and m["candidate_id"] is None, timeout=10)
    assert "JSON" in bad_json["message"]
    bad_term = listener.wait_for("status", lambda m: m["candidate_id"] == "bad-term", timeout=10)
    assert bad_term["state"] == "rejected" and "walk_fast" in bad_term["message"]
    assert trainer.queue.current is None, "nothing was trained"

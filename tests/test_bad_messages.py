"""No message ends a node: garbage on every subscribed topic of the orchestrator, its ROS playback and the
simulator is logged and counted, a publisher of another type is reported, and the node goes on working
(motionvl.ros.inbox)."""

from __future__ import annotations

import copy
import math
import os
import signal
import subprocess
import time
import uuid

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, String  # noqa: E402

from motionvl.critic.schema import Comparison, Descriptor, MotionFeedback  # noqa: E402
from motionvl.msg import Comparison as ComparisonMsg  # noqa: E402
from motionvl.msg import DeploymentStatus, JointCommand, TrainerHeartbeat  # noqa: E402
from motionvl.msg import MotionFeedback as MotionFeedbackMsg  # noqa: E402
from motionvl.robot import load_robot_config  # noqa: E402
from motionvl.ros.graph_playback import GraphPlayback  # noqa: E402
from motionvl.ros.messages import DriveCommandWriter, comparison_msg, feedback_msg  # noqa: E402
from motionvl.ros.simulator_node import SimulatorNode  # noqa: E402
from spinning import Spinners  # noqa: E402
from test_node_shutdown import BIN, _search_run  # noqa: E402
from waiting import wait_for  # noqa: E402

# transient-local publishers match the volatile and the latched subscriptions alike
ANY = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


GARBAGE_JSON = ("x", "[1, 2]", '{"request_id": 7}', '{"request_id": "r1", "iteration": "many"}', "{" * 5000)


def test_garbage_on_every_orchestrator_topic_during_a_search_ends_nothing(ros_context, second_ros_context, tmp_path):
    """The search waits for a trainer; the topic it subscribes gets garbage (heartbeats naming no node) and a
    publisher of the JSON it was before, the trainers' old JSON report topics garbage too (nothing reads them now:
    training runs as an action): the process stays up, names the topic, stops cleanly; and no trainer is taken
    from a bad heartbeat."""
    params = _search_run(tmp_path, None)
    args = [str(BIN / "orchestrator_node"), "--ros-args"] + [a for k, v in params.items() for a in ("-p", f"{k}:={v}")]
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    node = Node("garbage", context=ros_context)
    spinners = Spinners(ros_context)
    spinners.add(node)
    topics = ["/trainer/status", "/trainer/progress", "/trainer/statistics", "/trainer/policy", "/synthesizer/candidates"]
    pubs = {t: node.create_publisher(String, t, ANY) for t in topics}
    beats = node.create_publisher(TrainerHeartbeat, "/trainer/heartbeat", ANY)
    bad_beats = [TrainerHeartbeat(trainer=""), TrainerHeartbeat(trainer="policy_trainer"),
                 TrainerHeartbeat(trainer=" /x", candidate_id="c")]
    wrong = Node("garbage_typed", context=second_ros_context).create_publisher(String, "/trainer/heartbeat", ANY)
    said = lambda: err_path.read_text(errors="replace")  # noqa: E731
    try:
        assert wait_for(lambda: "waiting up to" in said() or proc.poll() is not None, timeout=120), said()
        expected = ["/trainer/heartbeat: dropped a message"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not (
                all(e in said() for e in expected) and "publisher(s) of another type" in said()):
            for pub in pubs.values():
                for text in GARBAGE_JSON:
                    pub.publish(String(data=text))
            for beat in bad_beats:
                beats.publish(beat)
            wrong.publish(String(data='{"trainer": "/policy_trainer", "candidate_id": null, "queue_length": 0}'))
            time.sleep(0.5)
        text = said()
        assert proc.poll() is None, f"the orchestrator ended (exit {proc.returncode}):\n{text[-3000:]}"
        for e in expected:
            assert e in text, e
        assert "/trainer/heartbeat: publisher(s) of another type than motionvl/msg/TrainerHeartbeat" in text
        assert "garbage_typed (std_msgs/msg/String)" in text
        assert "not a node's full name" in text
        assert "callback raised" not in text
        assert ": training on " not in text, "a bad heartbeat was taken for a trainer"
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0, said()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        spinners.shutdown()


def test_playback_host_and_simulator_count_bad_messages_and_report_an_untyped_status(ros_context, second_ros_context):
    """The ROS playback's host (the orchestrator's subscriptions of deployment, simulator and critic) and a
    simulator with a gantry get a status naming no mode, NaN and short states, critic answers out of range, NaN,
    off the vocabulary or with bookkeeping of another kind, a command of the wrong length, and nodes of before
    the types (status and critic answers as std_msgs/String): each bad message is counted once on its topic, the
    old publishers reported, and a good status and good answers still act."""
    ns = f"/bad{uuid.uuid4().hex[:6]}"
    robot = load_robot_config()
    host = Node("host", namespace=ns, context=ros_context)
    playback = GraphPlayback(host, robot=robot)
    sim = SimulatorNode(context=ros_context, namespace=ns, parameter_overrides=[
        Parameter("gantry", value=True), Parameter("mode", value="position")])
    probe = Node("garbage", namespace=ns, context=ros_context)
    spinners = Spinners(ros_context)
    for n in (host, sim, probe):
        spinners.add(n)
    try:
        status = probe.create_publisher(DeploymentStatus, "deployment/status", ANY)
        states = probe.create_publisher(JointState, "joint_states", ANY)
        odom = probe.create_publisher(Odometry, "odom", ANY)
        feedback = probe.create_publisher(MotionFeedbackMsg, "critic/feedback", ANY)
        comparison = probe.create_publisher(ComparisonMsg, "critic/comparison", ANY)
        positions = probe.create_publisher(Float64MultiArray, "joint_position_commands", ANY)
        drive = probe.create_publisher(JointCommand, "joint_command", ANY)
        old_node = Node("old_deployment", namespace=ns, context=second_ros_context)
        old = old_node.create_publisher(String, "deployment/status", ANY)
        old_critic = Node("old_critic", namespace=ns, context=second_ros_context)
        old_answers = [old_critic.create_publisher(String, t, ANY) for t in ("critic/feedback", "critic/comparison")]
        J = robot.num_joints
        nan_odom = Odometry()
        nan_odom.pose.pose.position.x = math.nan
        sends = [(status, DeploymentStatus(mode=7, mode_name="FLYING", stand_complete=True)),
                 (status, DeploymentStatus(mode=DeploymentStatus.MODE_RUN, mode_name="STAND")),
                 (states, JointState(name=list(robot.joint_names), position=[math.nan] * J)),
                 (states, JointState(name=list(robot.joint_names), position=[0.0] * (J - 1))),
                 (odom, nan_odom), (positions, Float64MultiArray(data=[0.0] * (J - 1))),
                 (drive, DriveCommandWriter(JointCommand, robot.joint_names).fill(
                     np.full(J, math.nan), np.zeros(J), np.zeros(J), np.zeros(J), np.zeros(J)))]
        good_fb = feedback_msg(MotionFeedback(critic="kinematic", task="walk", alignment_score=0.5,
                                              descriptors=[Descriptor("knee_flexion", "knees", 20.0, "deg", 0.8)],
                                              features=[("knees_straight", 0.8)], meta={"rollout_id": "r1"}))
        bad_feedback = [copy.deepcopy(good_fb) for _ in range(6)]
        bad_feedback[0].alignment_score = math.nan
        bad_feedback[1].alignment_score = 1.5
        bad_feedback[2].descriptors[0].value = math.inf  # NaN is "none stated"; infinity is nothing
        bad_feedback[3].features[0].label = "moonwalking"
        bad_feedback[4].better_than_best = 7
        bad_feedback[5].meta.kind = "ledger"
        good_cmp = comparison_msg(Comparison("first", 0.7, "straighter knees", meta={"request_id": "q1"}))
        bad_comparisons = [copy.deepcopy(good_cmp) for _ in range(4)]
        bad_comparisons[0].preferred = "third"
        bad_comparisons[1].confidence = math.nan
        bad_comparisons[2].meta.json = "[1]"
        bad_comparisons[3].meta.version = 2
        sends += [(feedback, m) for m in bad_feedback] + [(comparison, m) for m in bad_comparisons]
        host_bad = {f"{ns}/deployment/status": 2, f"{ns}/joint_states": 2, f"{ns}/odom": 1,
                    f"{ns}/critic/feedback": len(bad_feedback), f"{ns}/critic/comparison": len(bad_comparisons)}
        # the simulator's loop takes the newest status (depth 1): one or both of the two bad ones
        sim_bad = {f"{ns}/deployment/status": 1, f"{ns}/joint_position_commands": 1, f"{ns}/joint_command": 1}
        assert wait_for(lambda: all(p.get_subscription_count() for p, _ in sends), timeout=15)
        for pub, msg in sends:
            pub.publish(msg)
        old.publish(String(data='{"mode": "RUN", "stand_complete": true}'))
        for pub in old_answers:
            pub.publish(String(data='{"valid": true, "meta": {"rollout_id": "r1", "request_id": "q1"}}'))
        counted = lambda inbox, want: all(inbox.bad[t] >= n for t, n in want.items())  # noqa: E731
        assert wait_for(lambda: counted(playback.inbox, host_bad) and counted(sim.inbox, sim_bad), timeout=15), \
            (playback.inbox.counts(), sim.inbox.counts())
        assert {t: playback.inbox.bad[t] for t in host_bad} == host_bad  # each bad message counted once
        assert sim.inbox.bad[f"{ns}/joint_position_commands"] == 1 and sim.inbox.bad[f"{ns}/deployment/status"] <= 2
        assert sim.sim.gantry, "a status naming no mode (or the old JSON one) released the gantry"
        assert playback._status is None
        old_name = [f"{ns}/old_deployment (std_msgs/msg/String)"]
        for inbox in (playback.inbox, sim.inbox):
            assert wait_for(lambda inbox=inbox: inbox.check_publishers() or
                            inbox.wrong_type.get(f"{ns}/deployment/status") == old_name, timeout=15), inbox.counts()
        old_critic_name = [f"{ns}/old_critic (std_msgs/msg/String)"]
        assert wait_for(lambda: playback.inbox.check_publishers() or all(
            playback.inbox.wrong_type.get(f"{ns}/critic/{t}") == old_critic_name for t in ("feedback", "comparison")),
            timeout=15), playback.inbox.counts()
        assert playback._feedback == {} and playback._comparisons == {}, "a bad or untyped answer was taken"
        # good typed answers still arrive, as the dicts the search records
        feedback.publish(good_fb)
        comparison.publish(good_cmp)
        assert wait_for(lambda: playback._feedback and playback._comparisons, timeout=15)
        (fb,) = playback._feedback.values()
        (cmp,) = playback._comparisons.values()
        assert (fb["alignment_score"], fb["meta"], fb["descriptors"][0]["value"]) == (0.5, {"rollout_id": "r1"}, 20.0)
        assert (cmp["preferred"], cmp["meta"]["request_id"]) == ("first", "q1")
        assert {t: playback.inbox.bad[t] for t in host_bad} == host_bad
        # both still work: a good status reaches the playback and lets the gantry go
        status.publish(DeploymentStatus(mode=DeploymentStatus.MODE_STAND, mode_name="STAND", stand_complete=True))
        assert wait_for(lambda: not sim.sim.gantry and playback._status is not None, timeout=15)
        assert playback._status["mode"] == "STAND" and playback._status["stand_complete"] is True
    finally:
        spinners.shutdown()


@pytest.mark.parametrize("better", [None, True, False])
def test_the_critic_answers_and_the_heartbeat_translate_back_to_what_the_core_keeps(better):
    """feedback, comparison and heartbeat through their messages and back: the same records (None text empty, a
    number none stated NaN on the wire); a heartbeat naming no node is refused."""
    from motionvl.critic.schema import Suggestion, discretise
    from motionvl.ros.messages import (BadMessage, comparison_from_msg, feedback_from_msg, heartbeat_from_msg,
                                       heartbeat_msg)

    descriptors = [Descriptor("knee_flexion", "knees", 35.0, "deg", 0.8, "bent", measured_value=8.0, contradiction=True),
                   Descriptor("torso_upright", "torso", None, None, 0.9)]
    feedback = MotionFeedback(critic="openai:m", task="walk", descriptors=descriptors, features=discretise(descriptors),
                              alignment_score=0.3, suggestions=[Suggestion("knee_extension", "increase", "bent")],
                              better_than_best=better, unjudged=["speed"], raw_text="{...}",
                              meta={"rollout_id": "i1c0", "attempts": 2, "usage": {"tokens": 120}})
    msg = feedback_msg(feedback)
    assert math.isnan(msg.descriptors[1].value) and msg.meta.kind == "critic_meta" and msg.meta.version == 1
    assert feedback_from_msg(msg) == feedback
    for comparison in (Comparison("second", 0.7, "straighter", meta={"request_id": "q"}),
                       Comparison.invalid("kinematic", "walk", "no rollout", meta={"request_id": "q2"})):
        assert comparison_from_msg(comparison_msg(comparison)) == comparison
    beat = heartbeat_from_msg(heartbeat_msg("/ns/policy_trainer_2", "i3c1", 2))
    assert {k: beat[k] for k in ("trainer", "candidate_id", "queue_length")} == \
        {"trainer": "/ns/policy_trainer_2", "candidate_id": "i3c1", "queue_length": 2}
    assert heartbeat_from_msg(heartbeat_msg("/policy_trainer", None, 0))["candidate_id"] is None
    with pytest.raises(BadMessage, match="full name"):
        heartbeat_from_msg(TrainerHeartbeat(trainer="policy_trainer"))


def test_a_trainer_answering_garbage_fails_the_candidate_and_not_the_orchestrator(ros_context, capfd):
    """A trainer (not ours: any TrainCandidate server) sends feedback of an unknown phase and a result of an unknown
    state with a non-object outcome: the orchestrator's slot logs the feedback, reports the candidate failed with
    the reason, and is free for the next candidate; a good trainer's answer after it is taken."""
    import threading

    from rclpy.action import ActionServer
    from rclpy.callback_groups import ReentrantCallbackGroup

    from motionvl.action import TrainCandidate
    from motionvl.rewards.spec import load_reward_spec
    from motionvl.rl.jobs import TrainingJob
    from motionvl.ros.orchestrator_node import GraphTrainer
    from spinning import Spinners

    answers = [TrainCandidate.Result(state="weird", outcome_json="[1]", version=1),
               TrainCandidate.Result(state="done", outcome_json='{"policy_path": "p.onnx", "iterations": 3}',
                                     term_stats_json='{"terms": {}}', version=1)]

    def execute(handle):
        handle.publish_feedback(TrainCandidate.Feedback(phase="flying", iteration=2))
        handle.publish_feedback(TrainCandidate.Feedback(phase="training", iteration=1, steps_per_s=math.inf))
        handle.succeed()
        return answers.pop(0)

    ns = f"/bad{uuid.uuid4().hex[:6]}"
    trainer = Node("policy_trainer", namespace=ns, context=ros_context)
    ActionServer(trainer, TrainCandidate, "~/train_candidate", execute)
    host = Node("orchestrator", namespace=ns, context=ros_context)
    host.lock, host.lost_s, host.action_callbacks = threading.Lock(), 60.0, ReentrantCallbackGroup()
    host.trainers = {f"{ns}/policy_trainer": {"received": time.time(), "data": {"candidate_id": "c", "queue_length": 0}}}
    spinners = Spinners(ros_context)
    spinners.add(trainer)
    spinners.add(host, threads=None)
    try:
        slot = GraphTrainer(host, f"{ns}/policy_trainer")
        job = TrainingJob("c1", load_reward_spec(None), iterations=3)

        def outcome():
            states = []
            assert wait_for(lambda: states.append(slot.poll()) or states[-1].kind != "running", timeout=20), states[-1]
            return states[-1]

        slot.start(job)
        failed = outcome()
        assert failed.kind == "failed" and "state 'weird'" in failed.reason, failed
        assert slot.poll().kind == "idle", "the slot is free again"
        slot.start(job)
        done = outcome()
        assert done.kind == "done" and done.outcome == {"policy_path": "p.onnx", "iterations": 3, "term_stats": {"terms": {}}}
        err = capfd.readouterr().err
        assert "feedback dropped: phase 'flying'" in err and "feedback dropped: steps_per_s: inf" in err, err[-2000:]
    finally:
        spinners.shutdown()

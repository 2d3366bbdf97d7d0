"""No message ends a node: garbage on every subscribed topic of the orchestrator, its ROS playback and the
simulator is logged and counted, a publisher of another type is reported, and the node goes on working
(motionvl.ros.inbox)."""

from __future__ import annotations

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
from motionvl.msg import DeploymentStatus, JointCommand, TrainerHeartbeat  # noqa: E402
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
    """The ROS playback's host (the orchestrator's subscriptions of deployment and simulator) and a simulator
    with a gantry get a status naming no mode, NaN and short states, a command of the wrong length, and a node
    of before the types (status as std_msgs/String): each bad message is counted once on its topic, the old
    publisher reported, and a good status still acts. (The critic's answers are action results: a bad one
    makes an invalid feedback, test_graph_critic_refuses_a_bad_result.)"""
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
        positions = probe.create_publisher(Float64MultiArray, "joint_position_commands", ANY)
        drive = probe.create_publisher(JointCommand, "joint_command", ANY)
        old_node = Node("old_deployment", namespace=ns, context=second_ros_context)
        old = old_node.create_publisher(String, "deployment/status", ANY)
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
        host_bad = {f"{ns}/deployment/status": 2, f"{ns}/joint_states": 2, f"{ns}/odom": 1}
        # the simulator's loop takes the newest status (depth 1): one or both of the two bad ones
        sim_bad = {f"{ns}/deployment/status": 1, f"{ns}/joint_position_commands": 1, f"{ns}/joint_command": 1}
        assert wait_for(lambda: all(p.get_subscription_count() for p, _ in sends), timeout=15)
        for pub, msg in sends:
            pub.publish(msg)
        old.publish(String(data='{"mode": "RUN", "stand_complete": true}'))
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
        # both still work: a good status reaches the playback and lets the gantry go
        status.publish(DeploymentStatus(mode=DeploymentStatus.MODE_STAND, mode_name="STAND", stand_complete=True))
        assert wait_for(lambda: not sim.sim.gantry and playback._status is not None, timeout=15)
        assert playback._status["mode"] == "STAND" and playback._status["stand_complete"] is True
    finally:
        spinners.shutdown()


def test_the_critic_counts_bad_boundaries_and_samples_and_reports_an_untyped_boundary(ros_context, second_ros_context):
    """vlm_critic gets boundaries of an unknown event, with a NaN or short command, NaN and short states, a NaN pose
    and command, and a node of before the types (boundaries as std_msgs/String): each bad message is counted once
    on its topic, the old publisher reported, and the next rollout is still collected and critiqued."""
    from action_msgs.msg import GoalStatus
    from geometry_msgs.msg import TwistStamped
    from motionvl.ros.goals import ActionClient

    from motionvl.action import Critique
    from motionvl.msg import RolloutBoundary
    from motionvl.ros.messages import critique_goal, feedback_from_msg
    from motionvl.ros.vlm_critic_node import VlmCriticNode

    ns = f"/bad{uuid.uuid4().hex[:6]}"
    robot = load_robot_config()
    critic = VlmCriticNode(context=ros_context, namespace=ns, parameter_overrides=[Parameter("backend", value="kinematic")])
    probe = Node("garbage", namespace=ns, context=ros_context)
    spinners = Spinners(ros_context)
    spinners.add(critic, threads=2)
    spinners.add(probe)
    try:
        boundary = probe.create_publisher(RolloutBoundary, "rollout/boundary", ANY)
        states = probe.create_publisher(JointState, "joint_states", ANY)
        odom = probe.create_publisher(Odometry, "odom", ANY)
        command = probe.create_publisher(TwistStamped, "simulator/command", ANY)
        old = Node("old_orchestrator", namespace=ns, context=second_ros_context).create_publisher(
            String, "rollout/boundary", ANY)
        J = robot.num_joints
        nan_odom, nan_command = Odometry(), TwistStamped()
        nan_odom.pose.pose.orientation.w = math.nan
        nan_command.twist.linear.x = math.nan
        sends = [(boundary, RolloutBoundary(event=9, rollout_id="r")),
                 (boundary, RolloutBoundary(event=RolloutBoundary.START, command=[math.nan, 0.0, 0.0])),
                 (boundary, RolloutBoundary(event=RolloutBoundary.START, command=[0.5, 0.0])),
                 (states, JointState(name=list(robot.joint_names), position=[math.nan] * J)),
                 (states, JointState(name=list(robot.joint_names), position=[0.0] * (J - 1))),
                 (odom, nan_odom), (command, nan_command)]
        want = {f"{ns}/rollout/boundary": 3, f"{ns}/joint_states": 2, f"{ns}/odom": 1, f"{ns}/simulator/command": 1}
        assert wait_for(lambda: all(p.get_subscription_count() for p, _ in sends), timeout=15)
        for pub, msg in sends:
            pub.publish(msg)
        old.publish(String(data='{"event": "start", "id": "r"}'))
        assert wait_for(lambda: all(critic.inbox.bad[t] >= n for t, n in want.items()), timeout=15), critic.inbox.counts()
        assert {t: critic.inbox.bad[t] for t in want} == want and not critic.collected()["collecting"]
        assert wait_for(lambda: critic.inbox.check_publishers() or critic.inbox.wrong_type.get(f"{ns}/rollout/boundary")
                        == [f"{ns}/old_orchestrator (std_msgs/msg/String)"], timeout=15), critic.inbox.counts()
        # still at work: a good rollout is collected and critiqued
        boundary.publish(RolloutBoundary(event=RolloutBoundary.START, rollout_id="good", task="stand still"))
        assert wait_for(lambda: critic.collected()["collecting"], timeout=15)
        for i in range(5):
            js = JointState(name=list(robot.joint_names), position=robot.default_pose.tolist())
            pose = Odometry()
            js.header.stamp.sec = pose.header.stamp.sec = 10 + i
            pose.pose.pose.position.z, pose.pose.pose.orientation.w = 0.8, 1.0
            states.publish(js)
            odom.publish(pose)
        assert wait_for(lambda: min(critic.collected()["states"], critic.collected()["odom"]) >= 5, timeout=15)
        boundary.publish(RolloutBoundary(event=RolloutBoundary.END, rollout_id="good"))
        client = ActionClient(probe, Critique, "vlm_critic/critique")
        assert client.wait_for_server(timeout_sec=15)
        answer = {}
        client.send_goal_async(critique_goal("good")).add_done_callback(
            lambda f: f.result().get_result_async().add_done_callback(lambda r: answer.update(r=r.result())))
        assert wait_for(lambda: "r" in answer, timeout=30)
        feedback = feedback_from_msg(answer["r"].result.feedback)
        assert answer["r"].status == GoalStatus.STATUS_SUCCEEDED and feedback.meta["states"] == 5, feedback
    finally:
        spinners.shutdown()


def test_graph_critic_refuses_a_bad_result(ros_context):
    """A critic (not ours: any Critique / Compare server) answers with a feedback out of range and a comparison
    preferring a third rollout: the playback's critique is an invalid feedback saying why, its comparison an error
    the search records; nothing raises in the host."""
    from rclpy.action import ActionServer

    from motionvl.action import Compare, Critique
    from motionvl.ros.graph_playback import PlaybackError
    from motionvl.search.playback import CritiqueRequest

    ns = f"/bad{uuid.uuid4().hex[:6]}"
    host = Node("host", namespace=ns, context=ros_context)
    playback = GraphPlayback(host, robot=load_robot_config(), step_timeout_s=10.0, critic_timeout_s=15.0)
    fake = Node("vlm_critic", namespace=ns, context=ros_context)

    def critique(handle):
        handle.succeed()
        msg = feedback_msg(MotionFeedback(critic="fake", task="walk", alignment_score=0.5))
        msg.alignment_score = math.nan
        return Critique.Result(feedback=msg)

    def compare(handle):
        handle.succeed()
        msg = comparison_msg(Comparison("first", 0.7, "straighter"))
        msg.preferred = "third"
        return Compare.Result(comparison=msg)

    ActionServer(fake, Critique, "~/critique", critique)
    ActionServer(fake, Compare, "~/compare", compare)
    spinners = Spinners(ros_context)
    spinners.add(host)
    spinners.add(fake)
    try:
        answer = playback._critic_feedback("c1@x", CritiqueRequest("walk"))
        assert not answer["valid"] and "alignment" in answer["error"], answer
        with pytest.raises(PlaybackError, match="does not decode: .*third"):
            playback.compare("/a", "/b", "walk")
    finally:
        spinners.shutdown()  # destroys the fake's action servers with it


def test_boundaries_goals_and_actuation_translate_and_refuse_what_they_cannot_carry():
    """A rollout boundary, Critique and Compare goals and the simulator's actuation through their messages and back;
    an unknown event or regime, a command not three finite values, a rollout named by both or neither of id and
    path, a previous best out of range: BadMessage naming the field."""
    from motionvl.action import Compare
    from motionvl.critic.rollouts import Boundary
    from motionvl.critic.service import ComparisonRequest
    from motionvl.msg import Actuation, RolloutBoundary
    from motionvl.ros.messages import (BadMessage, actuation_from_msg, actuation_msg, boundary_from_msg, boundary_msg,
                                       compare_goal, comparison_request_from_goal, critique_goal,
                                       critique_request_from_goal)

    for boundary in (Boundary("start", "walk", "c1@ab", (0.5, 0.0, 0.1)), Boundary("end")):
        assert boundary_from_msg(boundary_msg(boundary)) == boundary
    for msg, error in ((RolloutBoundary(event=0), "event: 0"), (RolloutBoundary(event=9), "event: 9"),
                       (RolloutBoundary(event=1, command=[0.5, 0.0]), "command: 2 values"),
                       (RolloutBoundary(event=2, command=[math.inf, 0.0, 0.0]), "command: 3 values")):
        with pytest.raises(BadMessage, match=error):
            boundary_from_msg(msg)
    best = MotionFeedback(critic="kinematic", task="walk", alignment_score=0.6, meta={"rollout_id": "r0"})
    assert critique_request_from_goal(critique_goal("r1", "walk", best.to_dict())) == ("r1", "walk", best.to_dict())
    assert critique_request_from_goal(critique_goal(None)) == (None, "", None)
    bad = critique_goal("r1", previous_best=best.to_dict())
    bad.previous_best.alignment_score = 2.0
    with pytest.raises(BadMessage, match="previous_best: "):
        critique_request_from_goal(bad)
    request = ComparisonRequest("q", "walk", {"rollout_id": "r1"}, {"path": "/runs/x/best"})
    assert comparison_request_from_goal(compare_goal(request), "q") == request
    for goal, error in ((Compare.Goal(first_rollout_id="a", second_path="/b", second_rollout_id="b"), "second: give"),
                        (Compare.Goal(second_path="/b"), "first: give exactly one")):
        with pytest.raises(BadMessage, match=error):
            comparison_request_from_goal(goal)
    for regime in ("pd", "torque", "drive", "damping"):
        assert actuation_from_msg(actuation_msg(regime)) == regime
    with pytest.raises(BadMessage, match="regime: 4"):
        actuation_from_msg(Actuation(regime=4))


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

    heard = threading.Semaphore(0)  # feedback messages the orchestrator's slot took

    def execute(handle):
        handle.publish_feedback(TrainCandidate.Feedback(phase="flying", iteration=2))
        handle.publish_feedback(TrainCandidate.Feedback(phase="training", iteration=1, steps_per_s=math.inf))
        # the result only after the slot took both: feedback arriving after the goal's end is dropped by rclpy's
        # client, which under load (the status topic overtaking feedback) left nothing to log
        for _ in range(2):
            heard.acquire(timeout=20)
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
        take_feedback = slot._on_feedback

        def counted(current, msg):
            take_feedback(current, msg)
            heard.release()

        slot._on_feedback = counted
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

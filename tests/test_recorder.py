"""Bags: the ROS-free BagRecorder/read_bag/recover_bag, and the recorder node over real DDS."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from motionvl.bags import BagError, BagRecorder, new_bag_path, qos, read_bag, recover_bag, typestore

ROOT = Path(__file__).resolve().parents[1]
JOINTS = ["left_hip_pitch", "left_knee", "right_hip_pitch", "right_knee"]


def _joint_state_cdr(i: int) -> bytes:
    """A JointState serialized by rosbags (exact CDR, no trailing bytes)."""
    ts = typestore()
    t = ts.types
    msg = t["sensor_msgs/msg/JointState"](
        header=t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=i, nanosec=0), frame_id=""),
        name=JOINTS, position=np.arange(4, dtype=float) + i, velocity=np.zeros(4), effort=np.zeros(0))
    return bytes(ts.serialize_cdr(msg, "sensor_msgs/msg/JointState"))


# ---------------------------------------------------------------------------------- ROS-free core
@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_bag_round_trip_from_many_threads(tmp_path, storage):
    bag = BagRecorder(tmp_path / "bag", storage=storage)
    bag.add_topic("/joint_states", "sensor_msgs/msg/JointState", [qos()])
    bag.add_topic("/joint_states", "sensor_msgs/msg/JointState")  # again, same type: no-op

    def writer(k):
        for i in range(50):
            bag.write("/joint_states", k * 1000 + i, _joint_state_cdr(k * 1000 + i))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    bag.close()
    bag.close()  # idempotent
    assert bag.write("/joint_states", 0, _joint_state_cdr(0)) is False, "writes after close are dropped"

    messages = list(read_bag(tmp_path / "bag"))
    assert len(messages) == 200 and bag.counts == {"/joint_states": 200}
    stamps = [m[2] for m in messages]
    assert stamps == sorted(stamps)
    for topic, msgtype, stamp, msg in messages:
        assert (topic, msgtype) == ("/joint_states", "sensor_msgs/msg/JointState")
        assert msg.header.stamp.sec == stamp and list(msg.name) == JOINTS
        assert list(msg.position) == [stamp, stamp + 1, stamp + 2, stamp + 3]


def test_bag_refuses_overwrite_and_bad_input(tmp_path):
    BagRecorder(tmp_path / "bag").close()
    with pytest.raises(BagError, match="exists already"):
        BagRecorder(tmp_path / "bag")
    with pytest.raises(BagError, match="exists already"):
        new_bag_path(tmp_path, "bag")
    a = new_bag_path(tmp_path)
    a.mkdir()
    b = new_bag_path(tmp_path)
    assert a != b and not b.exists(), "an empty name derives a fresh timestamped name"
    with pytest.raises(BagError, match="storage"):
        BagRecorder(tmp_path / "x", storage="rosbag1")
    with pytest.raises(BagError, match="compression"):
        BagRecorder(tmp_path / "y", storage="sqlite3", compression="zstd")
    with BagRecorder(tmp_path / "z", compression="zstd") as bag:
        bag.add_topic("/a", "std_msgs/msg/String")
        with pytest.raises(BagError, match="recorded as"):
            bag.add_topic("/a", "std_msgs/msg/Int32")
        with pytest.raises(BagError, match="typestore"):
            bag.add_topic("/b", "my_pkg/msg/Custom")
        with pytest.raises(BagError, match="not added"):
            bag.write("/c", 0, b"")
    assert list(read_bag(tmp_path / "z")) == []


CRASH = """
import os, sys
sys.path.insert(0, {src!r})
from motionvl.bags import BagRecorder, typestore
ts = typestore()
def cdr(i):
    return bytes(ts.serialize_cdr(ts.types["std_msgs/msg/String"](data=str(i)), "std_msgs/msg/String"))
bag = BagRecorder({path!r}, storage={storage!r}, flush_period_s=0)
bag.add_topic("/status", "std_msgs/msg/String")
for i in range(30):
    bag.write("/status", i, cdr(i))
bag.flush()
for i in range(30, 35):  # never flushed: may be lost in the crash
    bag.write("/status", i, cdr(i))
os._exit(3)  # no close(): no index, no metadata.yaml
"""


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_crashed_bag_recovers_flushed_messages(tmp_path, storage):
    path = tmp_path / "crashed"
    proc = subprocess.run([sys.executable, "-c", CRASH.format(src=str(ROOT / "src"), path=str(path), storage=storage)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    if storage == "mcap":  # killed in the middle of writing a chunk: a cut-off record at the end
        with (path / "crashed.mcap").open("ab") as f:
            f.write(b"\x06" + (5000).to_bytes(8, "little") + b"partial chunk")
    with pytest.raises(BagError, match="recover_bag"):
        list(read_bag(path))
    recovered = recover_bag(path)
    messages = list(read_bag(recovered))
    assert [m.data for *_, m in messages[:30]] == [str(i) for i in range(30)] and len(messages) <= 35
    assert [stamp for _, _, stamp, _ in messages[:30]] == list(range(30))
    assert not (path / "metadata.yaml").exists(), "the crashed bag is left as it was"


# ---------------------------------------------------------------------------------- the node over DDS
rclpy = pytest.importorskip("rclpy")
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Imu, JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from motionvl.robot import ConfigError  # noqa: E402
from motionvl.ros import recorder_node  # noqa: E402
from motionvl.ros.recorder_node import RecorderNode  # noqa: E402

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_recorder_node_records_over_dds(ros_context, tmp_path):
    source = Node("bag_source", context=ros_context)
    # deeper than the burst below: a keep-last writer on a loaded machine may otherwise replace unacked samples
    joints = source.create_publisher(JointState, "/joint_states", QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
    status = source.create_publisher(String, "/trainer/status", LATCHED)
    imu = source.create_publisher(Imu, "/imu/data", qos_profile_sensor_data)
    # latched before the recorder exists: a transient-local subscription must still get these
    for i in range(3):
        status.publish(String(data=json.dumps({"candidate_id": f"c{i}", "state": "queued"})))

    recorder = RecorderNode(context=ros_context, parameter_overrides=[
        Parameter("output_dir", value=str(tmp_path)), Parameter("bag_name", value="run"),
        Parameter("topics", value=["/joint_states", "/trainer/status", "/imu/data", "/late", "/never"]),
        Parameter("discovery_period_s", value=0.1)])
    client = source.create_client(Trigger, "/recorder/stop")
    executor = MultiThreadedExecutor(context=ros_context)
    executor.add_node(source)
    executor.add_node(recorder)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        _wait(lambda: {"/joint_states", "/trainer/status", "/imu/data"} <= set(recorder.recorded), 10, "subscriptions")
        assert recorder.recorded["/imu/data"].qos.reliability == ReliabilityPolicy.BEST_EFFORT
        assert recorder.recorded["/trainer/status"].qos.durability == DurabilityPolicy.TRANSIENT_LOCAL
        assert recorder.recorded["/joint_states"].qos.reliability == ReliabilityPolicy.RELIABLE
        _wait(lambda: joints.get_subscription_count() and imu.get_subscription_count(), 5, "matching")

        late = source.create_publisher(Float64MultiArray, "/late", RELIABLE)  # appears after the start
        for i in range(20):
            js = JointState(name=JOINTS, position=[float(i), 1.0, 2.0, 3.0], velocity=[0.5] * 4)
            js.header.stamp.sec = i
            joints.publish(js)
            m = Imu()
            m.linear_acceleration.z = 9.81 + i
            imu.publish(m)
            time.sleep(0.005)
        _wait(lambda: "/late" in recorder.recorded and late.get_subscription_count(), 10, "the late topic")
        for i in range(5):
            late.publish(Float64MultiArray(data=[float(i), -1.0]))
        status.publish(String(data=json.dumps({"candidate_id": "c0", "state": "done"})))
        _wait(lambda: recorder.bag.counts.get("/joint_states") == 20 and recorder.bag.counts.get("/late") == 5
              and recorder.bag.counts.get("/trainer/status") == 4, 10, f"messages; have {recorder.bag.counts}")

        assert client.wait_for_service(timeout_sec=5)
        response = client.call(Trigger.Request(), timeout_sec=5)
        assert response.success and "closed" in response.message, response.message
        again = client.call(Trigger.Request(), timeout_sec=5)
        assert not again.success and "not recording" in again.message
    finally:
        executor.shutdown()
        recorder.destroy_node()
        source.destroy_node()
        thread.join(5)

    bag = tmp_path / "run"
    by_topic: dict[str, list] = {}
    for topic, msgtype, stamp, msg in read_bag(bag):
        by_topic.setdefault(topic, []).append((msgtype, stamp, msg))
    assert set(by_topic) == {"/joint_states", "/trainer/status", "/imu/data", "/late"}, "/never has no publisher"

    states = by_topic["/joint_states"]
    assert [m.header.stamp.sec for _, _, m in states] == list(range(20))
    assert all(t == "sensor_msgs/msg/JointState" and list(m.name) == JOINTS for t, _, m in states)
    assert [m.position[0] for _, _, m in states] == [float(i) for i in range(20)]
    assert all(list(m.velocity) == [0.5] * 4 and len(m.effort) == 0 for _, _, m in states)
    stamps = [s for _, s, _ in states]
    assert stamps == sorted(stamps) and stamps[0] > 0, "receive time on the node clock"

    # the raw wire bytes are exact CDR: rosbags re-serializes them byte for byte (no trailing junk)
    ts = typestore()
    for *_, raw in read_bag(bag, topics=["/joint_states"], raw=True):
        assert bytes(ts.serialize_cdr(ts.deserialize_cdr(raw, "sensor_msgs/msg/JointState"),
                                      "sensor_msgs/msg/JointState")) == raw

    texts = [json.loads(m.data) for _, _, m in by_topic["/trainer/status"]]
    assert [t["candidate_id"] for t in texts[:3]] == ["c0", "c1", "c2"], "latched messages from before the start"
    assert texts[-1] == {"candidate_id": "c0", "state": "done"}

    accel = [m.linear_acceleration.z for _, _, m in by_topic["/imu/data"]]
    assert 10 <= len(accel) <= 20, "best effort over localhost: most arrive"
    assert set(accel) <= {9.81 + i for i in range(20)} and accel == sorted(accel)
    assert [list(m.data) for _, _, m in by_topic["/late"]] == [[float(i), -1.0] for i in range(5)]


def test_recorder_rejects_bad_config(ros_context, tmp_path):
    with pytest.raises(ConfigError, match="storage"):
        RecorderNode(context=ros_context, parameter_overrides=[
            Parameter("output_dir", value=str(tmp_path)), Parameter("storage", value="rosbag1")])
    with pytest.raises(ConfigError, match="topics"):
        RecorderNode(context=ros_context, parameter_overrides=[
            Parameter("output_dir", value=str(tmp_path)), Parameter("topics", value=[1, 2])])
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConfigError, match="exists already"):
        RecorderNode(context=ros_context, parameter_overrides=[
            Parameter("output_dir", value=str(tmp_path)), Parameter("bag_name", value="taken")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"], "no bag was started"


def test_main_exits_1_on_bad_storage(tmp_path):
    assert recorder_node.main(["recorder_node", "--ros-args", "-p", "storage:=lz4",
                               "-p", f"output_dir:={tmp_path}"]) == 1
    assert list(tmp_path.iterdir()) == []


def test_typed_topics_are_recorded_with_their_definitions(ros_context, tmp_path):
    """search/state, search/ledger, deployment/status, trainer/heartbeat and the critic's answers are MotionVL's
    own types: the recorder writes them with their message definitions (what `ros2 bag` and Foxglove decode
    with), read_bag decodes their fields, nested ones too."""
    from motionvl.critic.schema import Comparison, Descriptor, MotionFeedback
    from motionvl.msg import DeploymentStatus, SearchState
    from motionvl.ros.messages import comparison_msg, feedback_msg, heartbeat_msg, ledger_msg, search_state_msg
    from spinning import Spinners

    source = Node("typed_source", context=ros_context)
    state = source.create_publisher(SearchState, "/search/state", LATCHED)
    ledger = source.create_publisher(type(ledger_msg({})), "/search/ledger", LATCHED)
    status = source.create_publisher(DeploymentStatus, "/deployment/status", LATCHED)
    sent = search_state_msg({"phase": "proposing", "iteration": 2, "best": "i1c0", "task": "stand still"})
    state.publish(sent)
    ledger.publish(ledger_msg({"kind": "decided", "iteration": 2}))
    status.publish(DeploymentStatus(mode=DeploymentStatus.MODE_DAMP, mode_name="DAMP", faults=["fall"]))
    answers = {
        "/trainer/heartbeat": heartbeat_msg("/policy_trainer_1", "i2c0", 1),
        "/critic/feedback": feedback_msg(MotionFeedback(
            critic="kinematic", task="walk", alignment_score=0.25, better_than_best=False,
            descriptors=[Descriptor("knee_flexion", "knees", None, None, 0.6, "bent", measured_value=35.0)],
            features=[("knees_bent", 0.6)], meta={"rollout_id": "i2c0"})),
        "/critic/comparison": comparison_msg(Comparison(None, 0.4, "no clear difference", meta={"request_id": "q"}))}
    for topic, msg in answers.items():
        source.create_publisher(type(msg), topic, LATCHED).publish(msg)
    typed = ["/search/state", "/search/ledger", "/deployment/status", *answers]
    recorder = RecorderNode(context=ros_context, parameter_overrides=[
        Parameter("output_dir", value=str(tmp_path)), Parameter("bag_name", value="typed"),
        Parameter("topics", value=typed), Parameter("discovery_period_s", value=0.1)])
    spinners = Spinners(ros_context)
    spinners.add(source)
    spinners.add(recorder)
    try:
        _wait(lambda: all(recorder.bag.counts.get(t) == 1 for t in typed),
              15, f"the {len(typed)} typed messages; have {recorder.bag.counts}")
        recorder.bag.close()
    finally:
        spinners.shutdown()
    got = {topic: (msgtype, msg) for topic, msgtype, _, msg in read_bag(tmp_path / "typed")}
    assert got["/search/state"][0] == "motionvl/msg/SearchState"
    s = got["/search/state"][1]
    assert (s.phase, s.iteration, s.best, s.task, s.trainer_iteration) == ("proposing", 2, "i1c0", "stand still", -1)
    record = got["/search/ledger"][1]
    assert (record.kind, record.version, json.loads(record.json)) == ("ledger", 1, {"kind": "decided", "iteration": 2})
    d = got["/deployment/status"][1]
    assert (got["/deployment/status"][0], d.mode, d.mode_name, list(d.faults)) == \
        ("motionvl/msg/DeploymentStatus", 3, "DAMP", ["fall"])
    beat = got["/trainer/heartbeat"]
    assert (beat[0], beat[1].trainer, beat[1].candidate_id, beat[1].queue_length) == \
        ("motionvl/msg/TrainerHeartbeat", "/policy_trainer_1", "i2c0", 1)
    fb = got["/critic/feedback"][1]
    assert got["/critic/feedback"][0] == "motionvl/msg/MotionFeedback"
    d = fb.descriptors[0]
    assert (fb.alignment_score, fb.better_than_best, d.label, math.isnan(d.value), d.measured_value) == \
        (0.25, 2, "knee_flexion", True, 35.0)
    assert [(f.label, f.confidence) for f in fb.features] == [("knees_bent", 0.6)]
    assert (fb.meta.kind, fb.meta.version, json.loads(fb.meta.json)) == ("critic_meta", 1, {"rollout_id": "i2c0"})
    c = got["/critic/comparison"][1]
    assert (got["/critic/comparison"][0], c.preferred, c.confidence, json.loads(c.meta.json)) == \
        ("motionvl/msg/Comparison", "", 0.4, {"request_id": "q"})
    # the definition is in the bag itself (a reader without MotionVL's types decodes it from there)
    from rosbags.highlevel import AnyReader

    with AnyReader([tmp_path / "typed"]) as reader:
        defs = {c.msgtype: c.msgdef.data for c in reader.connections}
    assert "uint8 MODE_DAMP=3" in defs["motionvl/msg/DeploymentStatus"]
    assert "int32 trainer_iteration" in defs["motionvl/msg/SearchState"]
    assert "MSG: motionvl/JsonRecord" in defs["motionvl/msg/MotionFeedback"], defs["motionvl/msg/MotionFeedback"]


def test_the_actions_feedback_and_status_are_recorded_for_every_trainer(ros_context, tmp_path):
    """The default topics take the synthesizer's action topics and every trainer's (a pattern: one action per
    trainer node, in the recorder's namespace only), with the feedback messages' definitions."""
    from action_msgs.msg import GoalStatusArray
    from motionvl.ros.goals import ActionClient

    from motionvl.action import Synthesize, TrainCandidate
    from motionvl.ros.reward_synthesizer_node import RewardSynthesizerNode
    from spinning import Spinners

    source = Node("action_source", context=ros_context)
    trainers = {f"/{ns}policy_trainer_{i}/train_candidate/_action/feedback": source.create_publisher(
        TrainCandidate.Impl.FeedbackMessage, f"/{ns}policy_trainer_{i}/train_candidate/_action/feedback", 10)
        for ns, i in (("", 0), ("", 1), ("lab1/", 0))}
    recorder = RecorderNode(context=ros_context, parameter_overrides=[
        Parameter("output_dir", value=str(tmp_path)), Parameter("bag_name", value="actions"),
        Parameter("discovery_period_s", value=0.1)])
    spinners = Spinners(ros_context)
    for node in (source, RewardSynthesizerNode(context=ros_context), recorder):
        spinners.add(node)
    client = ActionClient(source, Synthesize, "/synthesize")
    recorded = lambda topic: recorder.bag.counts.get(topic, 0)  # noqa: E731
    try:
        mine = [t for t in trainers if not t.startswith("/lab1")]
        _wait(lambda: all(t in recorder.recorded for t in mine), 15, f"the trainers' topics; have {recorder.recorded}")
        synth = ("/synthesize/_action/feedback", "/synthesize/_action/status")
        _wait(lambda: all(t in recorder.recorded and recorder.recorded[t].subscription.get_publisher_count()
                          for t in synth), 15, "the synthesizer's topics")
        assert client.wait_for_server(timeout_sec=10)
        client.send_goal_async(Synthesize.Goal(request_json=json.dumps(
            {"task": "walk forward", "iteration": 1, "num_candidates": 1}), request_version=1))
        deadline = time.monotonic() + 15
        while not all(recorded(t) for t in mine) and time.monotonic() < deadline:  # volatile: until matched
            for i, pub in enumerate(trainers.values()):
                msg = TrainCandidate.Impl.FeedbackMessage()
                msg.feedback = TrainCandidate.Feedback(phase="training", iteration=i + 1, steps_per_s=100.0)
                pub.publish(msg)
            time.sleep(0.1)
        _wait(lambda: all(recorded(t) for t in mine) and recorded("/synthesize/_action/feedback") == 2
              and recorded("/synthesize/_action/status") >= 2, 15, f"the actions' messages; have {recorder.bag.counts}")
        recorder.bag.close()
    finally:
        spinners.shutdown()
    assert "/lab1/policy_trainer_0/train_candidate/_action/feedback" not in recorder.recorded, "another namespace's"
    got: dict = {}
    for topic, msgtype, _, msg in read_bag(tmp_path / "actions"):
        got.setdefault(topic, []).append((msgtype, msg))
    feedback = got["/policy_trainer_1/train_candidate/_action/feedback"][0]
    assert feedback[0] == "motionvl/action/TrainCandidate_FeedbackMessage"
    assert (feedback[1].feedback.phase, feedback[1].feedback.iteration) == ("training", 2)
    assert [m.feedback.stage for _, m in got["/synthesize/_action/feedback"]] == ["queued", "proposing"]
    assert got["/synthesize/_action/status"][0][0] == f"action_msgs/msg/{GoalStatusArray.__name__}"
    from rosbags.highlevel import AnyReader

    with AnyReader([tmp_path / "actions"]) as reader:
        defs = {c.msgtype: c.msgdef.data for c in reader.connections}
    assert "float64 mean_episode_length" in defs["motionvl/action/TrainCandidate_FeedbackMessage"]


def test_analyze_reads_the_status_of_old_and_new_bags(tmp_path):
    """`motionvl analyze` reads deployment/status as bags before the types hold it (JSON in std_msgs/String)
    and as they hold it now (motionvl/msg/DeploymentStatus), to the same rows."""
    from motionvl.deploy.analysis import BagData
    from motionvl.robot import load_robot_config

    ts = typestore()
    t = ts.types
    status = {"mode": "RUN", "stand_complete": True, "faults": [], "policy": "/p.onnx", "path": "pd",
              "dry_run": False, "cycle": 40, "transition": {"from": "STAND", "to": "RUN", "why": "asked", "cycle": 39}}
    typed = t["motionvl/msg/DeploymentStatus"](
        header=t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=0, nanosec=0), frame_id=""),
        mode=2, mode_name="RUN", stand_complete=True, faults=[], policy="/p.onnx", path="pd", dry_run=False, cycle=40,
        transition_from="STAND", transition_to="RUN", transition_why="asked", transition_cycle=39)
    bad = t["motionvl/msg/DeploymentStatus"](**{**typed.__dict__, "mode": 9})
    rows = {}
    for name, msgtype, messages in (
            ("old", "std_msgs/msg/String", [t["std_msgs/msg/String"](data=json.dumps(status)),
                                            t["std_msgs/msg/String"](data="x")]),
            ("new", "motionvl/msg/DeploymentStatus", [typed, bad])):
        bag = BagRecorder(tmp_path / name)
        bag.add_topic("/deployment/status", msgtype)
        for i, msg in enumerate(messages):
            bag.write("/deployment/status", 1000 + i, bytes(ts.serialize_cdr(msg, msgtype)))
        bag.close()
        rows[name] = [s for _, s in BagData(tmp_path / name, load_robot_config()).rows["status"]]
    assert rows["old"] == rows["new"] == [status], "one status each; the unreadable one skipped"


def test_analyze_reads_bags_with_the_trainer_and_critic_topics_typed_or_json(tmp_path):
    """A loop's bag holds trainer/heartbeat, the critic's answers, its rollout boundaries, its actions' feedback and the
    simulator's actuation typed (now) or as JSON strings with a critic/compare request topic (before the types):
    every message of both decodes, `motionvl analyze` takes the status and passes over the rest."""
    from rclpy.serialization import serialize_message
    from std_msgs.msg import String

    from motionvl.action import Compare, Critique
    from motionvl.critic.rollouts import Boundary
    from motionvl.critic.schema import Comparison, MotionFeedback
    from motionvl.deploy.analysis import BagData
    from motionvl.msg import DeploymentStatus
    from motionvl.robot import load_robot_config
    from motionvl.ros.messages import actuation_msg, boundary_msg, comparison_msg, feedback_msg, heartbeat_msg

    feedback = MotionFeedback.invalid("kinematic", "walk", "nothing collected", meta={"rollout_id": "r"})
    comparison = Comparison("second", 0.9, "upright", meta={"request_id": "q"})
    old = {"/trainer/heartbeat": String(data=json.dumps({"trainer": "/policy_trainer", "candidate_id": None,
                                                         "queue_length": 0, "time": 1.0})),
           "/critic/feedback": String(data=feedback.to_json()), "/critic/comparison": String(data=comparison.to_json()),
           "/rollout/boundary": String(data=json.dumps({"event": "start", "id": "r", "task": "walk"})),
           "/critic/compare": String(data=json.dumps({"id": "q", "first": {"rollout_id": "r"}, "second": {"path": "/x"}})),
           "/simulator/actuation": String(data="damping")}
    critique_feedback = Critique.Impl.FeedbackMessage()
    critique_feedback.feedback.stage, critique_feedback.feedback.states = "collecting", 12
    compare_feedback = Compare.Impl.FeedbackMessage()
    compare_feedback.feedback.stage = "comparing"
    new = {"/trainer/heartbeat": heartbeat_msg("/policy_trainer", None, 0), "/critic/feedback": feedback_msg(feedback),
           "/critic/comparison": comparison_msg(comparison),
           "/rollout/boundary": boundary_msg(Boundary("start", "walk", "r", (0.5, 0.0, 0.0))),
           "/simulator/actuation": actuation_msg("damping"),
           "/vlm_critic/critique/_action/feedback": critique_feedback,
           "/vlm_critic/compare/_action/feedback": compare_feedback}
    status = DeploymentStatus(mode=DeploymentStatus.MODE_PASSIVE, mode_name="PASSIVE", path="pd", cycle=3)
    rows, decoded = {}, {}
    for name, messages in (("old", old), ("new", new)):
        bag = BagRecorder(tmp_path / name)
        for i, (topic, msg) in enumerate([*messages.items(), ("/deployment/status", status)]):
            kind = type(msg)
            package, _, rest = kind.__module__.partition(".")
            folder = rest.split(".")[0]
            bag.add_topic(topic, f"{package}/{folder}/{kind.__name__.replace('_Impl_', '_')}")
            bag.write(topic, 1000 + i, serialize_message(msg))
        bag.close()
        decoded[name] = {topic: msg for topic, _, _, msg in read_bag(tmp_path / name)}
        assert len(decoded[name]) == len(messages) + 1
        rows[name] = [s["mode"] for _, s in BagData(tmp_path / name, load_robot_config()).rows["status"]]
    assert rows == {"old": ["PASSIVE"], "new": ["PASSIVE"]}
    got = decoded["new"]
    assert (got["/rollout/boundary"].rollout_id, list(got["/rollout/boundary"].command)) == ("r", [0.5, 0.0, 0.0])
    assert got["/simulator/actuation"].regime_name == "damping"
    assert (got["/vlm_critic/critique/_action/feedback"].feedback.stage,
            got["/vlm_critic/critique/_action/feedback"].feedback.states) == ("collecting", 12)
    assert got["/vlm_critic/compare/_action/feedback"].feedback.stage == "comparing"


def test_analyze_reads_the_drive_commands_and_states_of_old_and_new_bags_in_joint_space(tmp_path):
    """A mapped robot (motors reordered, signed, offset). Before the typed command a bag held the 60-value
    Float64MultiArray on joint_drive_commands and joint_states in motor space; now it holds LowCommand (and its
    JointCommand twin) and motor_states, and beside a simulator joint_states in joint space too. `motionvl analyze`
    reads each to the same joint-space rows, each state and command once."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from deploy_fixtures import mapped_robot
    from motionvl.deploy.analysis import BagData
    from motionvl.deploy.mapping import JointMapping
    from motionvl.msg import JointCommand, LowCommand
    from motionvl.ros.messages import DriveCommandWriter

    robot = mapped_robot()
    m, J = JointMapping(robot), robot.num_joints
    q = robot.default_pose + np.linspace(-0.1, 0.1, J)
    target, kp, kd = robot.default_pose + 0.02, robot.kp, robot.kd
    motor = {"q": m.to_motor_position(target), "dq": np.zeros(J), "kp": m.to_motor_unsigned(kp),
             "kd": m.to_motor_unsigned(kd), "tau_ff": np.zeros(J)}
    old_command = Float64MultiArray(data=np.stack(list(motor.values()), axis=1).reshape(-1).tolist())
    low = DriveCommandWriter(LowCommand, m.motor_names).fill(*motor.values())
    twin = DriveCommandWriter(JointCommand, robot.joint_names).fill(target, np.zeros(J), kp, kd, np.zeros(J))
    motor_state = JointState(name=list(m.motor_names), position=m.to_motor_position(q).tolist(),
                             velocity=[0.0] * J, effort=[0.0] * J)
    joint_state = JointState(name=list(robot.joint_names), position=q.tolist(), velocity=[0.0] * J, effort=[0.0] * J)
    bags = {"old": [("/joint_states", motor_state), ("/joint_drive_commands", old_command)],
            "robot": [("/motor_states", motor_state), ("/low_command", low), ("/joint_command", twin)],
            "sim": [("/motor_states", motor_state), ("/joint_states", joint_state), ("/low_command", low),
                    ("/joint_command", twin)]}
    for name, messages in bags.items():
        bag = BagRecorder(tmp_path / name)
        for topic, msg in messages:
            kind = type(msg)
            bag.add_topic(topic, f"{kind.__module__.split('.')[0]}/msg/{kind.__name__}")
        for i in range(3):
            for k, (topic, msg) in enumerate(messages):
                bag.write(topic, 1000 + 10 * i + k, serialize_message(msg))
        bag.close()
        data = BagData(tmp_path / name, robot)
        assert data.path_kind == "pd", name
        t, positions, _ = data.joint_states()
        assert len(t) == 3, (name, "each state once")
        np.testing.assert_allclose(positions, np.tile(q, (3, 1)), atol=1e-12, err_msg=name)
        for key, want in (("q", target), ("kp", kp), ("kd", kd)):
            t, got = data.commands(key)
            assert len(t) == 3, (name, key, "each command once")
            np.testing.assert_allclose(got, np.tile(want, (3, 1)), atol=1e-12, err_msg=f"{name} {key}")

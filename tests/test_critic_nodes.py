"""camera_renderer and vlm_critic nodes over real DDS: rclpy nodes in one process.

Each test runs its nodes in their own namespace and rclpy Context (conftest.ros_context); the
environment keeps discovery on this machine and in this run's domain.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(os.getpid() % 100 + 101))
os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

rclpy = pytest.importorskip("rclpy")

from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image, JointState  # noqa: E402
from action_msgs.msg import GoalStatus  # noqa: E402
from motionvl.ros.goals import ActionClient  # noqa: E402

from motionvl.action import Compare, Critique  # noqa: E402
from motionvl.critic.base import Rollout  # noqa: E402
from motionvl.critic.rollouts import Boundary  # noqa: E402
from motionvl.critic.service import ComparisonRequest  # noqa: E402
from motionvl.critic.schema import Descriptor, MotionFeedback  # noqa: E402
from motionvl.msg import Comparison as ComparisonMsg  # noqa: E402
from motionvl.msg import MotionFeedback as MotionFeedbackMsg  # noqa: E402
from motionvl.msg import RolloutBoundary  # noqa: E402
from motionvl.robot import ConfigError, load_robot_config  # noqa: E402
from motionvl.ros.camera_renderer_node import CameraRendererNode  # noqa: E402
from motionvl.ros.messages import (boundary_msg, compare_goal, comparison_from_msg, critique_goal,  # noqa: E402
                                   feedback_from_msg)
from motionvl.ros.vlm_critic_node import VlmCriticNode, image_to_rgb  # noqa: E402
from spinning import Spinners  # noqa: E402
from waiting import wait_for as _wait_for  # noqa: E402


def wait_for(predicate, timeout: float = 15.0, period: float = 0.02) -> bool:
    return _wait_for(predicate, timeout, period)

ROBOT = load_robot_config()
RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
STATES = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)




class Probe:
    """Plays the simulator and the orchestrator: publishes states, boundaries and frames, records outputs."""

    def __init__(self, context, namespace: str):
        self.node = n = Node(f"probe_{uuid.uuid4().hex[:6]}", namespace=namespace, context=context)
        self.lock = threading.Lock()
        self.images: list = []
        self.infos: list = []
        self.feedback: list = []
        self.comparisons: list = []
        self.js_pub = n.create_publisher(JointState, "joint_states", STATES)
        self.odom_pub = n.create_publisher(Odometry, "odom", STATES)
        self.boundary_pub = n.create_publisher(RolloutBoundary, "rollout/boundary", RELIABLE)
        self.image_pub = n.create_publisher(Image, "camera/image_raw", qos_profile_sensor_data)
        n.create_subscription(Image, "camera/image_raw", self._keep(self.images), qos_profile_sensor_data)
        n.create_subscription(CameraInfo, "camera/camera_info", self._keep(self.infos), qos_profile_sensor_data)
        # typed answers, kept as the core's records they translate to (motionvl.ros.messages)
        n.create_subscription(MotionFeedbackMsg, "critic/feedback", self._keep(self.feedback, feedback_from_msg), LATCHED)
        n.create_subscription(ComparisonMsg, "critic/comparison", self._keep(self.comparisons, comparison_from_msg),
                              LATCHED)
        self.critique_client = ActionClient(n, Critique, "vlm_critic/critique")
        self.compare_client = ActionClient(n, Compare, "vlm_critic/compare")

    def _keep(self, store: list, translate=None):
        def callback(msg):
            with self.lock:
                store.append(translate(msg) if translate else msg)
        return callback

    def count(self, store: list) -> int:
        with self.lock:
            return len(store)

    def last(self, store: list):
        with self.lock:
            return store[-1] if store else None

    def publish_state(self, t: float, x: float = 0.0, knee: float = 0.4) -> None:
        sec, nsec = int(t), int(round((t - int(t)) * 1e9))
        js = JointState()
        js.header.stamp.sec, js.header.stamp.nanosec = sec, nsec
        js.name = list(ROBOT.joint_names)
        q = ROBOT.default_pose.copy()
        q[[3, 9]] = knee
        js.position = q.tolist()
        self.js_pub.publish(js)
        od = Odometry()
        od.header.stamp.sec, od.header.stamp.nanosec = sec, nsec
        od.pose.pose.position.x, od.pose.pose.position.z = x, 0.83
        od.pose.pose.orientation.w = 1.0
        self.odom_pub.publish(od)

    def boundary(self, event: str, task: str = "", id=None, command=None) -> None:
        self.boundary_pub.publish(boundary_msg(Boundary(event, task, id, command)))

    def send(self, client, goal) -> "Goal":
        """Send a goal (its server must be up); the Goal gathers its feedback and result."""
        assert client.wait_for_server(timeout_sec=10.0)
        return Goal().start(client, goal)

    def critique(self, rollout_id=None, task: str = "", previous_best=None) -> "Goal":
        return self.send(self.critique_client, critique_goal(rollout_id, task, previous_best))

    def compare(self, first: dict, second: dict, task: str = "") -> "Goal":
        return self.send(self.compare_client, compare_goal(ComparisonRequest(None, task, first, second)))


class Goal:
    """One goal's feedback messages, handle and result (status, result) as they arrive."""

    def __init__(self):
        self.feedback: list = []
        self.handle = None
        self.response = None

    def start(self, client, goal) -> "Goal":
        def on_handle(future):
            self.handle = future.result()
            if self.handle.accepted:
                self.handle.get_result_async().add_done_callback(lambda f: setattr(self, "response", f.result()))
        client.send_goal_async(goal, feedback_callback=lambda m: self.feedback.append(m.feedback)).add_done_callback(
            on_handle)
        return self

    def stages(self) -> list:
        return [f.stage for f in list(self.feedback)]

    def wait(self, timeout: float = 15.0):
        """(status, the result's MotionFeedback / Comparison as the core's record)."""
        assert wait_for(lambda: self.response is not None, timeout=timeout), "no result"
        result = self.response.result
        answer = feedback_from_msg(result.feedback) if hasattr(result, "feedback") else \
            comparison_from_msg(result.comparison)
        return self.response.status, answer


@pytest.fixture
def graph(ros_context):
    """start(node factories) -> (*nodes, probe) in one namespace, each node on its own executor."""
    spinners = Spinners(ros_context)
    ns = f"/t{uuid.uuid4().hex[:8]}"

    def start(*node_factories):
        made = [f(ns) for f in node_factories]
        probe = Probe(ros_context, ns)
        for n in made:
            spinners.add(n, threads=2 if isinstance(n, VlmCriticNode) else 1)  # as their main()s spin them
        spinners.add(probe.node)
        return (*made, probe)

    yield start
    spinners.shutdown()


def params(**kw):
    return [Parameter(k, value=v) for k, v in kw.items()]


def test_camera_node_publishes_image_and_camera_info(graph, ros_context):
    cam, probe = graph(lambda ns: CameraRendererNode(context=ros_context, namespace=ns, parameter_overrides=params(
        width=160, height=120, frame_interval_s=0.05)))
    assert wait_for(lambda: probe.js_pub.get_subscription_count() > 0 and probe.odom_pub.get_subscription_count() > 0
                    and probe.node.count_publishers("camera/image_raw") > 0)
    time.sleep(0.3)  # frame timers fire with no state yet; the states below are the sentinel
    sent = []

    def publish(t: float) -> None:
        sent.append((int(t), int(round((t - int(t)) * 1e9))))
        probe.publish_state(t)

    def stamps() -> list:
        with probe.lock:
            return [(m.header.stamp.sec, m.header.stamp.nanosec) for m in probe.images]

    # each state gets its own stamp, so a frame says which state it drew
    assert wait_for(lambda: (publish(1.5 + 1e-3 * len(sent)), probe.count(probe.images) > 0)[1], timeout=20.0, period=0.1)
    assert set(stamps()) <= set(sent)  # nothing was drawn before a joint state arrived
    img, info = probe.last(probe.images), probe.last(probe.infos)
    assert wait_for(lambda: probe.last(probe.infos) is not None)
    info = probe.last(probe.infos)
    assert (img.width, img.height, img.encoding, img.step) == (160, 120, "rgb8", 480)
    assert len(img.data) == 160 * 120 * 3
    rgb = image_to_rgb(img)
    assert rgb.std() > 10.0  # not blank
    assert (img.header.stamp.sec, img.header.stamp.nanosec) in sent  # the drawn state's stamp
    assert (info.width, info.height) == (160, 120)
    fy = 60.0 / math.tan(math.radians(45.0) / 2)
    np.testing.assert_allclose(info.k, [fy, 0, 79.5, 0, fy, 59.5, 0, 0, 1], rtol=1e-6)
    # idle: no new state means no new frame. Once the newest state is drawn, leave the camera idle, then
    # send a sentinel state: between the two, at most one more frame of the newest state (its odom may
    # arrive after its joint state), where a camera drawing while idle would have sent about ten
    for _ in range(10):  # the newest state's joint message may be lost (best effort): then send another
        if wait_for(lambda: stamps()[-1] == sent[-1], timeout=2.0):
            break
        publish(1.5 + 1e-3 * len(sent))
    assert stamps()[-1] == sent[-1]
    drawn = len(stamps())
    time.sleep(0.5)
    first_sentinel = len(sent)
    assert wait_for(lambda: (publish(2.25 + 1e-3 * len(sent)), any(s in sent[first_sentinel:] for s in stamps()))[1],
                    timeout=20.0, period=0.1)
    between = [s for s in stamps()[drawn:] if s not in sent[first_sentinel:]]
    assert between in ([], [sent[first_sentinel - 1]]), between
    assert cam.frames_published >= drawn


def feed_rollout(probe: Probe, critic, seconds: float, speed: float = 0.0, knee: float = 0.4, t0: float = 10.0,
                 dt: float = 0.02) -> int:
    """Publish a rollout in chunks, each sent once the critic holds the previous one: a loaded machine
    can let a burst overrun the reliable keep-last queues, which would drop samples."""
    n = int(round(seconds / dt))
    for i in range(n + 1):
        probe.publish_state(t0 + i * dt, x=speed * i * dt, knee=knee)
        if i % 20 == 19:
            assert wait_for(lambda i=i: min(critic.collected()["states"], critic.collected()["odom"]) >= i + 1,
                            timeout=10.0)
    return n + 1


def start_rollout(probe: Probe, critic, **boundary) -> None:
    """A start boundary, and wait until the critic has begun collecting (topics are not ordered across)."""
    probe.boundary(event="start", **boundary)
    assert wait_for(lambda: critic.collected()["collecting"] and critic.collected()["states"] == 0)


@pytest.mark.parametrize("node_class", [CameraRendererNode, VlmCriticNode])
def test_nodes_refuse_the_training_only_mixed_terrain(node_class, ros_context):
    # 'mixed' holds two overlapping floors that only a training batch buries per env
    with pytest.raises(ConfigError, match="batched training"):
        node_class(context=ros_context, namespace=f"/t{uuid.uuid4().hex[:8]}",
                   parameter_overrides=params(terrain="mixed"))


def test_critic_node_critiques_rollouts_as_goals(graph, ros_context):
    critic, probe = graph(lambda ns: VlmCriticNode(context=ros_context, namespace=ns,
                                                   parameter_overrides=params(backend="kinematic")))
    assert wait_for(lambda: probe.boundary_pub.get_subscription_count() > 0 and probe.js_pub.get_subscription_count() > 0
                    and probe.odom_pub.get_subscription_count() > 0)
    start_rollout(probe, critic, task="stand still", id="r1")
    sent = feed_rollout(probe, critic, seconds=2.0)
    assert wait_for(lambda: critic.collected()["states"] >= sent and critic.collected()["odom"] >= sent, timeout=10.0)
    probe.boundary("end")
    assert wait_for(lambda: not critic.collected()["collecting"])
    goal = probe.critique("r1")
    status, fb = goal.wait()
    assert status == GoalStatus.STATUS_SUCCEEDED and goal.stages() == ["queued", "critiquing"]
    assert goal.feedback[-1].states == sent
    assert fb.valid and fb.critic == "kinematic" and fb.task == "stand still"
    assert fb.alignment_score > 0.8, fb.meta
    assert fb.meta["states"] == sent and fb.meta["rollout_id"] == "r1" and fb.meta["trigger"] == "goal"
    knee = next(d for d in fb.descriptors if d.label == "knee_flexion")
    assert knee.value == pytest.approx(math.degrees(0.4), abs=0.5)
    assert wait_for(lambda: probe.count(probe.feedback) >= 1)  # every result is also published
    assert probe.last(probe.feedback).meta["rollout_id"] == "r1"

    # a goal sent while its rollout is collected waits for the END: walking speed from odom, the END's task wins
    start_rollout(probe, critic, task="stand still", id="r2")
    waiting = probe.critique("r2")
    sent = feed_rollout(probe, critic, seconds=2.0, speed=0.5, t0=20.0)
    assert wait_for(lambda: critic.collected()["states"] >= sent and critic.collected()["odom"] >= sent, timeout=10.0)
    assert wait_for(lambda: "collecting" in waiting.stages()) and waiting.response is None
    probe.boundary("end", task="walk forward at 0.5 m/s", id="r2")
    status, fb2 = waiting.wait()
    speed = next(d for d in fb2.descriptors if d.label == "forward_speed")
    assert status == GoalStatus.STATUS_SUCCEEDED and waiting.stages()[-2:] == ["queued", "critiquing"]
    assert fb2.task == "walk forward at 0.5 m/s" and speed.value == pytest.approx(0.5, abs=0.02)

    # no id: what has been collected so far (the last finished rollout); an empty rollout gets an invalid answer
    status, last = probe.critique().wait()
    assert status == GoalStatus.STATUS_SUCCEEDED and last.meta["rollout_id"] == "r2"
    start_rollout(probe, critic, task="stand still", id="empty")
    probe.boundary("end", id="empty")
    status, empty = probe.critique("empty").wait()
    assert status == GoalStatus.STATUS_SUCCEEDED and not empty.valid and "joint_states" in empty.error

    # malformed goals are refused with the reason; the node goes on serving
    status, unknown = probe.critique("never-started").wait()
    assert status == GoalStatus.STATUS_ABORTED and "no rollout 'never-started'" in unknown.error
    bad_best = critique_goal("r1", previous_best=fb.to_dict())
    bad_best.previous_best.better_than_best = 7
    status, refused = probe.send(probe.critique_client, bad_best).wait()
    assert status == GoalStatus.STATUS_ABORTED and "previous_best: better_than_best" in refused.error
    status, again = probe.critique("r1", task="stand still").wait()
    assert status == GoalStatus.STATUS_SUCCEEDED and again.valid
    # a goal whose rollout is dropped unfinished (a START before its END) is not left waiting
    start_rollout(probe, critic, id="r3")
    orphan = probe.critique("r3")
    assert wait_for(lambda: "collecting" in orphan.stages())
    probe.boundary("start", id="r4")
    status, dropped = orphan.wait()
    assert status == GoalStatus.STATUS_ABORTED and "'r3' was dropped unfinished" in dropped.error

    # a late subscriber still gets the last feedback (transient local)
    late = []
    node = Node(f"late_{uuid.uuid4().hex[:6]}", namespace=critic.get_namespace(), context=ros_context)
    node.create_subscription(MotionFeedbackMsg, "critic/feedback", late.append, LATCHED)
    ex = rclpy.executors.SingleThreadedExecutor(context=ros_context)
    ex.add_node(node)
    end = time.monotonic() + 10.0
    while not late and time.monotonic() < end:
        ex.spin_once(timeout_sec=0.1)
    node.destroy_node()
    assert late and feedback_from_msg(late[0]).meta["rollout_id"] == "r1"


def test_critic_node_compares_two_rollouts_named_in_each_goal(graph, ros_context, tmp_path):
    critic, probe = graph(lambda ns: VlmCriticNode(context=ros_context, namespace=ns, parameter_overrides=params(
        backend="kinematic", rollout_dir=str(tmp_path / "rollouts"))))
    assert wait_for(lambda: probe.boundary_pub.get_subscription_count() > 0
                    and probe.js_pub.get_subscription_count() > 0 and probe.odom_pub.get_subscription_count() > 0)
    task = "walk forward at 0.5 m/s"
    judged = []
    for n, (rollout_id, speed) in enumerate((("stood", 0.0), ("moved", 0.5))):
        start_rollout(probe, critic, task=task, id=rollout_id)
        sent = feed_rollout(probe, critic, seconds=2.0, speed=speed, t0=10.0 + 10 * n)
        assert wait_for(lambda sent=sent: min(critic.collected()["states"], critic.collected()["odom"]) >= sent,
                        timeout=10.0)
        probe.boundary("end", id=rollout_id)
        judged.append(probe.critique(rollout_id).wait()[1])
    stood, moved = judged
    # no best kept by the node: nothing to judge the second rollout against unless the goal sends it
    assert stood.better_than_best is None and moved.better_than_best is None
    saved = Rollout.load(stood.meta["rollout_path"])
    assert saved.frames == [] and len(saved.trajectory.time) == stood.meta["states"]

    q1 = probe.compare({"rollout_id": "stood"}, {"rollout_id": "moved"}, task)
    q2 = probe.compare({"rollout_id": "moved"}, {"path": stood.meta["rollout_path"]}, task)  # r* as a saved rollout
    (s1, c1), (s2, c2) = q1.wait(), q2.wait()
    assert s1 == s2 == GoalStatus.STATUS_SUCCEEDED and q1.stages() == ["queued", "comparing"]
    assert c1.valid and c1.preferred == "second" and c1.critic == "kinematic" and c1.task == task
    assert c2.valid and c2.preferred == "first" and c2.confidence == c1.confidence  # asked the other way round
    assert str(c1.meta["request_id"]).startswith("compare@")
    assert wait_for(lambda: probe.count(probe.comparisons) >= 2)  # every result is also published
    # an unknown rollout gets an invalid answer saying so; a malformed goal is refused with the reason
    status, unknown = probe.compare({"rollout_id": "never-seen"}, {"rollout_id": "moved"}, task).wait()
    assert status == GoalStatus.STATUS_SUCCEEDED and not unknown.valid
    assert "no recent rollout with id 'never-seen'" in unknown.error
    malformed = Compare.Goal(task=task, first_rollout_id="stood", first_path="/x", second_rollout_id="moved")
    status, refused = probe.send(probe.compare_client, malformed).wait()
    assert status == GoalStatus.STATUS_ABORTED and "first: give exactly one of" in refused.error
    # the orchestrator sends the best feedback so far with the goal: then the critique judges against it
    start_rollout(probe, critic, task=task, id="again")
    sent = feed_rollout(probe, critic, seconds=2.0, speed=0.0, t0=40.0)
    assert wait_for(lambda: min(critic.collected()["states"], critic.collected()["odom"]) >= sent, timeout=10.0)
    probe.boundary("end", id="again")
    status, against = probe.critique("again", previous_best=moved.to_dict()).wait()
    assert against.better_than_best is False


class SlowFakeVLM:
    """Stands in for a VLM backend: records what it was given, takes its time, answers in the schema."""

    name = "fake-vlm"

    def __init__(self, delay: float = 1.0):
        self.delay = delay
        self.calls: list = []
        self.release = threading.Event()  # set by a test to end a critique early
        self.busy = threading.Event()

    def critique(self, frames, times, task, previous_best=None, **kwargs):
        self.calls.append((len(frames), list(times), task, previous_best, kwargs.get("trajectory")))
        self.busy.set()
        self.release.wait(self.delay)
        self.busy.clear()
        d = [Descriptor("knees_straight", "knees", None, None, 0.9, "the knees look straight")]
        return MotionFeedback(critic=self.name, task=task, descriptors=d, features=[("knees_straight", 0.9)],
                              alignment_score=0.7)


def test_critic_node_vlm_path_collects_frames_and_never_blocks(graph, ros_context):
    fake = SlowFakeVLM(delay=60.0)  # until released: the checks below run while it is busy
    critic, probe = graph(lambda ns: VlmCriticNode(context=ros_context, namespace=ns, critic_factory=lambda: fake,
                                                   parameter_overrides=params(backend="openai", frame_interval_s=0.1)))
    # states published before discovery matched the publisher, or before "start" arrived, are not the rollout's
    assert wait_for(lambda: probe.image_pub.get_subscription_count() > 0 and probe.boundary_pub.get_subscription_count() > 0
                    and probe.js_pub.get_subscription_count() > 0 and probe.odom_pub.get_subscription_count() > 0)
    frame = np.zeros((12, 16, 3), np.uint8)
    frame[:, :, 0] = 200  # red in RGB
    probe.boundary(event="start", task="walk with straight knees")
    assert wait_for(lambda: critic.collected()["collecting"])
    for i in range(21):  # 1 s of frames at 20 Hz, kept every 0.1 s: a lost best-effort frame leaves >= 5
        img = Image(height=12, width=16, encoding="bgr8", step=48, data=frame[:, :, ::-1].tobytes())
        t = 5.0 + 0.05 * i
        img.header.stamp.sec, img.header.stamp.nanosec = int(t), int(round((t - int(t)) * 1e9))
        probe.image_pub.publish(img)
        probe.publish_state(t, knee=1.0)  # bent knees: the kinematics will contradict the fake VLM
        time.sleep(0.03)  # frames are best effort (depth 5): don't outrun a busy executor
    assert wait_for(lambda: critic.collected()["frames"] >= 5 and critic.collected()["states"] >= 21)
    probe.boundary(event="end")
    first = probe.critique()  # what was collected: the last finished rollout
    # while the slow critique runs, the executor still serves the next rollout and other goals
    assert wait_for(fake.busy.is_set, timeout=10.0)
    probe.boundary(event="start", task="second")
    assert wait_for(lambda: critic.collected()["collecting"] and critic.collected()["task"] == "second", timeout=10.0)
    queued, dropped = probe.critique(), probe.critique()  # the current rollout so far, twice
    assert wait_for(lambda: queued.stages() == ["queued"] and dropped.stages() == ["queued"], timeout=10.0), \
        "a goal waited for the critique in flight to be accepted"
    cancel = dropped.handle.cancel_goal_async()  # a waiting goal is dropped at once
    status, cancelled = dropped.wait()
    assert wait_for(cancel.done) and cancel.result().goals_canceling
    assert status == GoalStatus.STATUS_CANCELED and "cancelled before the call" in cancelled.error
    assert fake.busy.is_set(), "answered while the first critique was still running"
    fake.release.set()
    (s1, fb), (s2, now) = first.wait(), queued.wait()
    assert s1 == s2 == GoalStatus.STATUS_SUCCEEDED and now.task == "second" and "no camera frames" in now.error
    assert critic.service.rollouts_critiqued == 2  # the dropped goal never reached the critic
    n_frames, times, task, prev, traj = fake.calls[0]
    assert task == "walk with straight knees" and 5 <= n_frames <= 12
    assert times[0] == 0.0 and all(dt >= 0.09 - 1e-6 for dt in np.diff(times))
    assert traj is not None and len(traj.time) == 21
    assert fb.critic == "fake-vlm" and fb.valid
    assert fb.descriptors[0].contradiction is True  # merged with the kinematic measurement (57 deg knees)
    check = fb.meta["cross_check"]  # its only measurable claim was contradicted: its alignment counts nothing
    assert (check["measurable"], check["confirmed"], check["stated_alignment"]) == (1, 0, 0.7) and fb.alignment_score == 0
    assert fb.meta["frames"] == n_frames and fb.meta["trigger"] == "goal"
    assert image_to_rgb(Image(height=12, width=16, encoding="bgr8", step=48,
                              data=frame[:, :, ::-1].tobytes()))[0, 0].tolist() == [200, 0, 0]


def test_camera_frames_reach_the_critic(graph, ros_context):
    """simulator states -> camera_renderer -> camera/image_raw -> vlm_critic (fake VLM) -> critic/feedback."""
    fake = SlowFakeVLM(delay=0.0)
    cam, critic, probe = graph(
        lambda ns: CameraRendererNode(context=ros_context, namespace=ns, parameter_overrides=params(
            width=96, height=72, frame_interval_s=0.05)),
        lambda ns: VlmCriticNode(context=ros_context, namespace=ns, critic_factory=lambda: fake,
                                 parameter_overrides=params(backend="transformers", frame_interval_s=0.0)))
    assert wait_for(lambda: probe.boundary_pub.get_subscription_count() > 0 and probe.js_pub.get_subscription_count() >= 2
                    and cam.image_pub.get_subscription_count() >= 2)
    start_rollout(probe, critic, task="walk forward")
    for i in range(30):  # 30 states, 0.1 s of stamp time apart, sent every 50 ms of wall time
        probe.publish_state(1.0 + 0.1 * i, x=0.05 * i)
        time.sleep(0.05)
    assert wait_for(lambda: critic.collected()["frames"] >= 5, timeout=10.0)
    probe.boundary(event="end")
    _, fb = probe.critique().wait()
    n_frames, times, task, _, traj = fake.calls[0]
    assert n_frames >= 5 and task == "walk forward" and times == sorted(times)
    assert traj is not None and traj.base_pos[-1, 0] > traj.base_pos[0, 0]
    assert fb.meta["frames"] == n_frames

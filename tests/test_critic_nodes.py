"""camera_renderer and vlm_critic nodes over real DDS: rclpy nodes in one process.

Each test runs its nodes in their own namespace and rclpy Context (conftest.ros_context); the
environment keeps discovery on this machine and in this run's domain.
"""

from __future__ import annotations

import json
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
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from motionvl.critic.base import Rollout  # noqa: E402
from motionvl.critic.schema import Comparison, Descriptor, MotionFeedback  # noqa: E402
from motionvl.msg import Comparison as ComparisonMsg  # noqa: E402
from motionvl.msg import MotionFeedback as MotionFeedbackMsg  # noqa: E402
from motionvl.robot import ConfigError, load_robot_config  # noqa: E402
from motionvl.ros.camera_renderer_node import CameraRendererNode  # noqa: E402
from motionvl.ros.messages import comparison_from_msg, feedback_from_msg  # noqa: E402
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
        self.boundary_pub = n.create_publisher(String, "rollout/boundary", RELIABLE)
        self.image_pub = n.create_publisher(Image, "camera/image_raw", qos_profile_sensor_data)
        n.create_subscription(Image, "camera/image_raw", self._keep(self.images), qos_profile_sensor_data)
        n.create_subscription(CameraInfo, "camera/camera_info", self._keep(self.infos), qos_profile_sensor_data)
        # typed answers, kept as the core's records they translate to (motionvl.ros.messages)
        n.create_subscription(MotionFeedbackMsg, "critic/feedback", self._keep(self.feedback, feedback_from_msg), LATCHED)
        n.create_subscription(ComparisonMsg, "critic/comparison", self._keep(self.comparisons, comparison_from_msg),
                              LATCHED)
        self.compare_pub = n.create_publisher(String, "critic/compare", RELIABLE)
        self.critique_client = n.create_client(Trigger, "vlm_critic/critique")

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

    def boundary(self, **data) -> None:
        self.boundary_pub.publish(String(data=json.dumps(data)))


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


def test_critic_node_kinematic_feedback_after_boundaries(graph, ros_context):
    critic, probe = graph(lambda ns: VlmCriticNode(context=ros_context, namespace=ns,
                                                   parameter_overrides=params(backend="kinematic")))
    assert wait_for(lambda: probe.boundary_pub.get_subscription_count() > 0 and probe.js_pub.get_subscription_count() > 0
                    and probe.odom_pub.get_subscription_count() > 0)
    start_rollout(probe, critic, task="stand still", id="r1")
    sent = feed_rollout(probe, critic, seconds=2.0)
    assert wait_for(lambda: critic.collected()["states"] >= sent and critic.collected()["odom"] >= sent, timeout=10.0)
    probe.boundary(event="end")
    assert wait_for(lambda: probe.count(probe.feedback) >= 1)
    fb = probe.last(probe.feedback)
    assert fb.valid and fb.critic == "kinematic" and fb.task == "stand still"
    assert fb.alignment_score > 0.8, fb.meta
    assert fb.meta["states"] == sent and fb.meta["rollout_id"] == "r1" and fb.meta["trigger"] == "boundary"
    knee = next(d for d in fb.descriptors if d.label == "knee_flexion")
    assert knee.value == pytest.approx(math.degrees(0.4), abs=0.5)

    # a second rollout: walking speed from odom, the end message's task wins; judged against the best
    start_rollout(probe, critic, task="stand still")
    sent = feed_rollout(probe, critic, seconds=2.0, speed=0.5, t0=20.0)
    assert wait_for(lambda: critic.collected()["states"] >= sent and critic.collected()["odom"] >= sent, timeout=10.0)
    probe.boundary(event="end", task="walk forward at 0.5 m/s")
    assert wait_for(lambda: probe.count(probe.feedback) >= 2)
    fb2 = probe.last(probe.feedback)
    speed = next(d for d in fb2.descriptors if d.label == "forward_speed")
    assert fb2.task == "walk forward at 0.5 m/s" and speed.value == pytest.approx(0.5, abs=0.02)

    # the service critiques what is there; an end without data still gets an (invalid) answer
    assert probe.critique_client.wait_for_service(timeout_sec=5.0)
    future = probe.critique_client.call_async(Trigger.Request())
    assert wait_for(future.done)
    assert future.result().success  # the last finished rollout
    assert wait_for(lambda: probe.count(probe.feedback) >= 3)
    assert probe.last(probe.feedback).meta["trigger"] == "service"
    probe.boundary(event="start", task="stand still")
    probe.boundary(event="end")
    assert wait_for(lambda: probe.count(probe.feedback) >= 4)
    empty = probe.last(probe.feedback)
    assert not empty.valid and "joint_states" in empty.error

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
    assert late and feedback_from_msg(late[0]).valid is False


def comparison_for(probe: Probe, request_id) -> Comparison | None:
    with probe.lock:
        found = list(probe.comparisons)
    return next((c for c in found if c.meta.get("request_id") == request_id), None)


def test_critic_node_compares_two_rollouts_named_in_each_request(graph, ros_context, tmp_path):
    critic, probe = graph(lambda ns: VlmCriticNode(context=ros_context, namespace=ns, parameter_overrides=params(
        backend="kinematic", rollout_dir=str(tmp_path / "rollouts"))))
    assert wait_for(lambda: probe.boundary_pub.get_subscription_count() > 0 and probe.compare_pub.get_subscription_count() > 0
                    and probe.js_pub.get_subscription_count() > 0 and probe.odom_pub.get_subscription_count() > 0)
    task = "walk forward at 0.5 m/s"
    for n, (rollout_id, speed) in enumerate((("stood", 0.0), ("moved", 0.5))):
        start_rollout(probe, critic, task=task, id=rollout_id)
        sent = feed_rollout(probe, critic, seconds=2.0, speed=speed, t0=10.0 + 10 * n)
        assert wait_for(lambda sent=sent: min(critic.collected()["states"], critic.collected()["odom"]) >= sent,
                        timeout=10.0)
        probe.boundary(event="end")
        assert wait_for(lambda n=n: probe.count(probe.feedback) >= n + 1)
    stood = probe.feedback[0]
    moved = probe.feedback[1]
    # no best kept by the node: nothing to judge the second rollout against unless the boundary sends it
    assert stood.better_than_best is None and moved.better_than_best is None
    saved = Rollout.load(stood.meta["rollout_path"])
    assert saved.frames == [] and len(saved.trajectory.time) == stood.meta["states"]

    def ask(request_id, first, second, **extra):
        probe.compare_pub.publish(String(data=json.dumps({"id": request_id, "task": task, "first": first,
                                                          "second": second, **extra})))

    ask("q1", {"rollout_id": "stood"}, {"rollout_id": "moved"})
    ask("q2", {"rollout_id": "moved"}, {"path": stood.meta["rollout_path"]})  # r* as a saved rollout
    assert wait_for(lambda: comparison_for(probe, "q1") and comparison_for(probe, "q2"))
    q1, q2 = comparison_for(probe, "q1"), comparison_for(probe, "q2")
    assert q1.valid and q1.preferred == "second" and q1.critic == "kinematic" and q1.task == task
    assert q2.valid and q2.preferred == "first" and q2.confidence == q1.confidence  # asked the other way round
    # bad requests get an answer too, saying what is wrong
    ask("q3", {"rollout_id": "never-seen"}, {"rollout_id": "moved"})
    probe.compare_pub.publish(String(data='{"id": "q4", "first": {}}'))
    assert wait_for(lambda: comparison_for(probe, "q3") and comparison_for(probe, "q4"))
    assert not comparison_for(probe, "q3").valid and "no recent rollout with id 'never-seen'" in comparison_for(probe, "q3").error
    assert not comparison_for(probe, "q4").valid and "first must be" in comparison_for(probe, "q4").error
    # the orchestrator sends the best feedback so far with the boundary: then the critique judges against it
    start_rollout(probe, critic, task=task, id="again")
    sent = feed_rollout(probe, critic, seconds=2.0, speed=0.0, t0=40.0)
    assert wait_for(lambda: min(critic.collected()["states"], critic.collected()["odom"]) >= sent, timeout=10.0)
    probe.boundary(event="end", previous_best=moved.to_dict())
    assert wait_for(lambda: probe.count(probe.feedback) >= 3)
    assert probe.last(probe.feedback).better_than_best is False


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
    # while the slow critique runs, the executor still serves the next rollout and the service
    assert wait_for(fake.busy.is_set, timeout=10.0)
    probe.boundary(event="start", task="second")
    assert wait_for(lambda: critic.collected()["collecting"] and critic.collected()["task"] == "second", timeout=10.0)
    future = probe.critique_client.call_async(Trigger.Request())
    assert wait_for(future.done, timeout=10.0), "the service waited for the critique"
    assert fake.busy.is_set(), "answered while the first critique was still running"
    fake.release.set()
    assert wait_for(lambda: probe.count(probe.feedback) >= 2, timeout=10.0)  # the rollout's, then the service's
    n_frames, times, task, prev, traj = fake.calls[0]
    assert task == "walk with straight knees" and 5 <= n_frames <= 12
    assert times[0] == 0.0 and all(dt >= 0.09 - 1e-6 for dt in np.diff(times))
    assert traj is not None and len(traj.time) == 21
    fb = probe.feedback[0]
    assert fb.critic == "fake-vlm" and fb.valid
    assert fb.descriptors[0].contradiction is True  # merged with the kinematic measurement (57 deg knees)
    check = fb.meta["cross_check"]  # its only measurable claim was contradicted: its alignment counts nothing
    assert (check["measurable"], check["confirmed"], check["stated_alignment"]) == (1, 0, 0.7) and fb.alignment_score == 0
    assert fb.meta["frames"] == n_frames and fb.meta["trigger"] == "boundary"
    assert probe.feedback[1].meta["trigger"] == "service"
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
    assert wait_for(lambda: probe.count(probe.feedback) >= 1)
    n_frames, times, task, _, traj = fake.calls[0]
    assert n_frames >= 5 and task == "walk forward" and times == sorted(times)
    assert traj is not None and traj.base_pos[-1, 0] > traj.base_pos[0, 0]
    assert probe.last(probe.feedback).meta["frames"] == n_frames

"""Every node, as its own process (its console script), exits 0 on SIGINT or SIGTERM at any moment.

Signals are sent the ways they arrive in use, at random moments during start-up and during work:
  terminal        SIGINT to the process group (Ctrl-C)
  terminal-twice  SIGINT to the group, then again a moment later (an impatient Ctrl-C)
  launch          SIGINT to the process, then SIGTERM if it still runs after a timeout (as
                  `ros2 launch` does; the timeout here is short so SIGTERM lands mid-shutdown)
  sigterm         SIGTERM alone (systemd, docker stop, kill)
Each run asserts exit code 0 (so no segfault and no death by the signal), no "Traceback" on
stderr, and for the recorder a bag that rosbags reads in full.

"Start-up" counts from the moment the process catches SIGTERM (its handlers are installed; seen
in /proc/<pid>/status): before that the interpreter is still starting (two interpreter starts,
the ros-wheels bootstrapper re-execs) and no Python code of ours can run.

MOTIONVL_SHUTDOWN_RUNS (default 3) runs per node; MOTIONVL_SHUTDOWN_SEED replays a run's moments
(each failure names its seed). A soak: MOTIONVL_SHUTDOWN_RUNS=40 pytest tests/test_node_shutdown.py
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

rclpy = pytest.importorskip("rclpy")
from nav_msgs.msg import Odometry  # noqa: E402
from motionvl.ros.goals import ActionClient  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image, Imu, JointState  # noqa: E402

from motionvl.action import Critique, Synthesize, TrainCandidate  # noqa: E402
from motionvl.bags import read_bag  # noqa: E402
from motionvl.msg import LowCommand, MotionFeedback, RolloutBoundary  # noqa: E402
from motionvl.rewards.spec import load_reward_spec  # noqa: E402
from motionvl.robot import load_robot_config  # noqa: E402
from spinning import Spinners  # noqa: E402
from waiting import wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RUNS = int(os.environ.get("MOTIONVL_SHUTDOWN_RUNS", "3"))
SEED = int(os.environ.get("MOTIONVL_SHUTDOWN_SEED", str(random.SystemRandom().randrange(1 << 30))))
PATTERNS = ("terminal", "terminal-twice", "launch", "sigterm")
STAGES = ("start-up", "work")
START_UP_S = 2.0  # start-up moments are drawn from [0, START_UP_S) after the handlers are installed
WORK_S = 1.0  # work moments: [0, WORK_S) after the node is seen working
EXIT_TIMEOUT_S = 20.0  # longer than the node's own shutdown budget (motionvl.ros.runtime)
TINY_TRAINING = {"seed": 0, "save_interval": 1, "env": {"num_envs": 8, "episode_length_s": 2.0},
                 "ppo": {"num_steps_per_env": 8, "num_learning_epochs": 1, "num_mini_batches": 2,
                         "actor_hidden_dims": [16, 16], "critic_hidden_dims": [16, 16]}}


class Feeder(Node):
    """What the nodes work on: joint and motor states and odom at 50 Hz, rollouts for the critic, requests
    for the synthesizer, a candidate for the trainer; and what they put out (frames, feedback,
    answers, training progress)."""

    def __init__(self, context):
        super().__init__("shutdown_test_feeder", context=context)
        self.joints = list(load_robot_config().joint_names)
        self.joint_pub = self.create_publisher(JointState, "joint_states", 10)
        self.motor_pub = self.create_publisher(JointState, "motor_states", 10)  # the package robot: motors = joints
        self.odom_pub = self.create_publisher(Odometry, "odom", 10)
        self.imu_pub = self.create_publisher(Imu, "imu/data", qos_profile_sensor_data)
        self.boundary_pub = self.create_publisher(RolloutBoundary, "rollout/boundary", 10)
        self.critic = ActionClient(self, Critique, "/vlm_critic/critique")
        self.trainer = ActionClient(self, TrainCandidate, "/policy_trainer/train_candidate")
        self.synthesizer = ActionClient(self, Synthesize, "/synthesize")
        self.frames = self.feedback = self.progress = self.answers = 0
        self.create_subscription(Image, "camera/image_raw", self._on_frame, qos_profile_sensor_data)
        self.create_subscription(MotionFeedback, "critic/feedback", self._on_feedback, 10)
        self.commands: dict[str, int] = {}  # motor command topic -> messages seen
        self.frame_pub = None  # set by publish_frames(): camera frames for a critic without a renderer
        self._ticks = 0
        self.create_timer(0.02, self._tick)

    def watch_commands(self, topic: str) -> None:
        """Count the LowCommand commands on `topic` (the deployment node's pd path, one topic per run)."""
        self.commands[topic] = 0

        def count(_msg):
            self.commands[topic] += 1

        self.create_subscription(LowCommand, topic, count, 1)

    def publish_frames(self) -> None:
        """Publish a small grey camera frame every tick, as the camera renderer would."""
        self.frame_pub = self.create_publisher(Image, "camera/image_raw", qos_profile_sensor_data)

    def _tick(self) -> None:
        stamp = self.get_clock().now().to_msg()
        if self.frame_pub is not None:
            frame = Image(height=48, width=64, encoding="rgb8", step=64 * 3, data=bytes([128]) * (48 * 64 * 3))
            frame.header.stamp = stamp
            self.frame_pub.publish(frame)
        js = JointState(name=self.joints, position=[0.0] * len(self.joints), velocity=[0.0] * len(self.joints))
        js.header.stamp = stamp
        self.joint_pub.publish(js)
        self.motor_pub.publish(js)
        odom = Odometry()
        odom.header.stamp = stamp
        odom.pose.pose.position.z, odom.pose.pose.orientation.w = 0.8, 1.0
        self.odom_pub.publish(odom)
        imu = Imu()
        imu.header.stamp, imu.orientation.w = stamp, 1.0
        self.imu_pub.publish(imu)
        if self._ticks % 25 == 0:  # every half second: a rollout for the critic, a request for the synthesizer
            rollout = f"r{self._ticks}"
            self.boundary_pub.publish(RolloutBoundary(event=RolloutBoundary.END, rollout_id=f"r{self._ticks - 25}"))
            if self.critic.server_is_ready():
                self.critic.send_goal_async(Critique.Goal(rollout_id=f"r{self._ticks - 25}"))
            self.boundary_pub.publish(RolloutBoundary(event=RolloutBoundary.START, rollout_id=rollout,
                                                      task="stand still"))
            if self.synthesizer.server_is_ready():
                goal = Synthesize.Goal(request_json=json.dumps({"task": "walk forward", "iteration": 0,
                                                                "num_candidates": 2}), request_version=1)
                self.synthesizer.send_goal_async(goal).add_done_callback(self._on_accepted)
        self._ticks += 1

    def train(self, goal: TrainCandidate.Goal):
        """Send a goal to the trainer (every PPO iteration's feedback counts as progress); its acceptance's future."""
        return self.trainer.send_goal_async(goal, feedback_callback=self._on_progress)

    def _on_frame(self, _msg) -> None:
        self.frames += 1

    def _on_feedback(self, _msg) -> None:
        self.feedback += 1

    def _on_progress(self, msg) -> None:
        if msg.feedback.phase == "training" and msg.feedback.iteration >= 1:
            self.progress += 1

    def _on_accepted(self, future) -> None:
        handle = future.result()
        if handle.accepted:
            handle.get_result_async().add_done_callback(self._on_answer)

    def _on_answer(self, _future) -> None:
        self.answers += 1


@dataclass
class NodeCase:
    """How to start one node and how to tell that it is working."""

    params: dict = field(default_factory=dict)
    working: object = None  # (stderr text, feeder) -> bool
    prepare: object = None  # (tmp_path, feeder) -> extra params


def _training_config(tmp_path: Path, _feeder) -> dict:
    path = tmp_path / "training.yaml"
    path.write_text(yaml.safe_dump(TINY_TRAINING))
    return {"runs_dir": str(tmp_path / "runs"), "training_config": str(path), "eval_episodes": 1}


def _deployment_topic(_tmp_path: Path, feeder) -> dict:
    feeder.deployment_topic = f"deploy_{uuid.uuid4().hex[:8]}/commands"
    feeder.watch_commands(feeder.deployment_topic)
    return {"command_topic": feeder.deployment_topic}


def _search_run(tmp_path: Path, _feeder) -> dict:
    """A new tiny search per run (no synthesizer node, no trainer: the search waits for one)."""
    return {"task": "walk forward with straight knees", "run_dir": str(tmp_path / f"search_{uuid.uuid4().hex[:8]}"),
            "settings_file": str(ROOT / "tests" / "data" / "search_tiny.yaml"), "synthesizer_node": False}


CASES = {
    "simulator_node": NodeCase(working=lambda err, feeder: "publishing at" in err),
    "camera_renderer_node": NodeCase(params={"width": 64, "height": 48, "shadows": False, "frame_interval_s": 0.05},
                                     working=lambda err, feeder: feeder.frames > 0),
    "vlm_critic_node": NodeCase(working=lambda err, feeder: feeder.feedback > 0),
    "policy_trainer_node": NodeCase(prepare=_training_config, working=lambda err, feeder: feeder.progress > 0),
    "reward_synthesizer_node": NodeCase(working=lambda err, feeder: feeder.answers > 0),
    # a command topic of its own per run: a publisher left in the graph by the run before must not
    # count as a second writer (the node refuses to start beside one)
    "deployment_node": NodeCase(params={"realtime_priority": 0}, prepare=_deployment_topic,
                                working=lambda err, feeder: feeder.commands[feeder.deployment_topic] > 0),
    "low_command_bridge_node": NodeCase(working=lambda err, feeder: "no LowCommand yet: the drives damp" in err),
    "orchestrator_node": NodeCase(prepare=_search_run, working=lambda err, feeder: "waiting up to" in err),
    "recorder_node": NodeCase(prepare=lambda tmp, _feeder: {"output_dir": str(tmp / "bags"), "bag_name": "bag",
                                                            "discovery_period_s": 0.2},
                              working=lambda err, feeder: "recording /joint_states (" in err),
}


def test_every_node_has_a_case():
    """A node added (a module src/motionvl/ros/<name>_node.py: setup.py and CMakeLists.txt make it an
    executable) joins this test (with what it needs to be seen working)."""
    nodes = {p.stem for p in (ROOT / "src" / "motionvl" / "ros").glob("*_node.py")}
    assert set(CASES) == nodes


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler (ours: Python installs none of its own)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def _send(proc: subprocess.Popen, pattern: str, rng: random.Random) -> None:
    def group(sig):
        os.killpg(proc.pid, sig)

    if pattern == "terminal":
        group(signal.SIGINT)
    elif pattern == "terminal-twice":
        group(signal.SIGINT)
        time.sleep(rng.uniform(0.0, 0.5))
        group(signal.SIGINT)
    elif pattern == "launch":
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(rng.uniform(0.05, 1.0))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)


def run_once(node: str, stage: str, pattern: str, seed: int, tmp_path: Path, feeder: Feeder) -> dict:
    """Start the node, signal it at a random moment of `stage`, return what happened."""
    rng = random.Random(seed)
    case = CASES[node]
    params = {**case.params, **(case.prepare(tmp_path, feeder) if case.prepare else {})}
    args = [str(BIN / node), "--ros-args"] + [a for k, v in params.items() for a in ("-p", f"{k}:={v}")]
    err_path = tmp_path / "stderr.txt"
    feeder.frames = feeder.feedback = feeder.progress = feeder.answers = 0
    with open(err_path, "wb") as err, open(tmp_path / "stdout.txt", "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    try:
        assert wait_for(lambda: _catches_sigterm(proc.pid) or proc.poll() is not None, timeout=30, period=0.002), \
            "no signal handlers after 30 s"
        catching_s = time.monotonic() - t0
        if stage == "start-up":
            time.sleep(rng.uniform(0.0, START_UP_S))
        else:
            if node == "policy_trainer_node":
                _submit_candidate(feeder, err_path, f"candidate-{seed}")
            assert wait_for(lambda: case.working(err_path.read_text(errors="replace"), feeder) or proc.poll() is not None,
                            timeout=120), f"{node} was not seen working within 120 s"
            time.sleep(rng.uniform(0.0, WORK_S))
        assert proc.poll() is None, f"{node} ended before the signal (exit {proc.returncode})"
        signalled = time.monotonic()
        _send(proc, pattern, rng)
        try:
            code = proc.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = "hung"
        return {"code": code, "stderr": err_path.read_text(errors="replace"), "catching_s": catching_s,
                "shutdown_s": time.monotonic() - signalled}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _submit_candidate(feeder: Feeder, err_path: Path, candidate_id: str) -> None:
    """Send one candidate as a goal once the trainer is ready."""
    spec = load_reward_spec(None).to_dict()
    request = json.dumps({"spec": spec, "max_iterations": 10000, "evaluate": False})
    assert wait_for(lambda: "ready: goals on" in err_path.read_text(errors="replace"), timeout=60)
    goal = TrainCandidate.Goal(candidate_id=candidate_id, request_json=request, request_version=1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the trainer process of the run before may still be in the graph: again
        assert feeder.trainer.wait_for_server(timeout_sec=60), "the trainer serves no train_candidate action"
        if wait_for(feeder.train(goal).done, timeout=5):
            return
    raise AssertionError("the trainer never answered the goal")


def schedule(node: str, runs: int) -> list[tuple[str, str]]:
    """(stage, pattern) of each run: every combination in turn, each node starting elsewhere."""
    combos = [(s, p) for p in PATTERNS for s in STAGES]
    start = sorted(CASES).index(node) * 3
    return [combos[(start + i) % len(combos)] for i in range(runs)]


@pytest.fixture
def feeder(ros_context):
    spinners = Spinners(ros_context)
    node = spinners.add(Feeder(ros_context))
    yield node
    spinners.shutdown()


@pytest.mark.parametrize("node", sorted(CASES))
def test_node_exits_cleanly_on_signals(node, feeder, tmp_path):
    failures = []
    for i, (stage, pattern) in enumerate(schedule(node, RUNS)):
        seed = SEED + i
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        result = run_once(node, stage, pattern, seed, run_dir, feeder)
        what = f"{node} run {i} ({stage}, {pattern}, MOTIONVL_SHUTDOWN_SEED={SEED} run {i})"
        problems = []
        if result["code"] != 0:
            problems.append(f"exit code {result['code']}")
        if "Traceback" in result["stderr"]:
            problems.append("a traceback on stderr")
        if node == "recorder_node":
            problems += _bag_problems(run_dir / "bags" / "bag", stage)
        print(f"{what}: exit {result['code']}, handlers after {result['catching_s']:.3f} s, "
              f"stopped {result['shutdown_s']:.2f} s after the signal")
        if problems:
            failures.append(f"{what}: {', '.join(problems)}\n--- stderr ---\n{result['stderr'][-3000:]}")
    assert not failures, "\n\n".join(failures)


def _bag_problems(bag: Path, stage: str) -> list[str]:
    """The recorder's bag must be complete (metadata written) and readable; it exists once the
    node was seen working (a signal before the node was built leaves no bag, which is fine)."""
    if not bag.exists():
        return ["no bag although the recorder was working"] if stage == "work" else []
    try:
        for _ in read_bag(bag):
            pass
    except Exception as exc:  # noqa: BLE001 - any reader error is the failure being looked for
        return [f"bag unreadable: {type(exc).__name__}: {exc}"]
    return []


def test_a_trainer_stopped_mid_iteration_abandons_it_and_exits_0(feeder, tmp_path):
    """An iteration far longer than the shutdown budget is not waited for: the process says it left it
    unfinished (the run resumes from its last checkpoint) and exits 0 within the budget's bound."""
    big = {**TINY_TRAINING, "env": {"num_envs": 512, "episode_length_s": 20.0},
           "ppo": {**TINY_TRAINING["ppo"], "num_steps_per_env": 2000}}  # minutes per iteration on any machine
    path = tmp_path / "training.yaml"
    path.write_text(yaml.safe_dump(big))
    err_path = tmp_path / "stderr.txt"
    args = [str(BIN / "policy_trainer_node"), "--ros-args", "-p", f"runs_dir:={tmp_path / 'runs'}",
            "-p", f"training_config:={path}"]
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(args, stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        _submit_candidate(feeder, err_path, "long-iteration")
        assert wait_for(lambda: "long-iteration: training" in err_path.read_text(errors="replace"), timeout=120), \
            err_path.read_text(errors="replace")[-3000:]
        proc.send_signal(signal.SIGINT)
        code = proc.wait(EXIT_TIMEOUT_S)
        log = err_path.read_text(errors="replace")
        assert code == 0 and "left unfinished" in log and "Traceback" not in log, log[-3000:]
        assert "long-iteration: done" not in log  # the iteration was abandoned, not finished
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_node_dies_with_its_launcher(tmp_path):
    """A launcher killed with SIGKILL (no chance to stop its children) still takes its nodes with it: the
    kernel sends each SIGTERM (motionvl.ros.console), which they take as a clean stop."""
    log = tmp_path / "node.log"
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.Popen(sys.argv[2:], stdout=open(sys.argv[1], 'wb'), "
                               "stderr=subprocess.STDOUT).wait()", str(log), str(BIN / "simulator_node")],
        start_new_session=True)
    try:
        assert wait_for(lambda: "publishing at" in (log.read_text(errors="replace") if log.exists() else ""), timeout=60)
        node_pid = next(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                        and _parent(int(p.name)) == launcher.pid)
        launcher.kill()
        launcher.wait()
        assert wait_for(lambda: not Path(f"/proc/{node_pid}").exists() or _zombie(node_pid), timeout=EXIT_TIMEOUT_S), \
            "the node outlived its launcher"
        text = log.read_text(errors="replace")
        assert "SIGTERM: shutting down" in text and "Traceback" not in text, text[-2000:]
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


HUNG_CALL = {"reward_synthesizer_node": "the proposal in flight", "vlm_critic_node": "the critique in flight"}


@pytest.mark.parametrize("node", sorted(HUNG_CALL))
def test_a_model_node_stopped_during_a_hung_model_call_abandons_it_and_exits_0(node, feeder, tmp_path):
    """A model call that never answers is not waited for past the shutdown budget: the process says it left
    the work unfinished and exits 0 (the search asks again after a resume)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    accepted = []

    def accept():  # takes the request and never answers
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)
    threading.Thread(target=accept, daemon=True).start()
    if node == "vlm_critic_node":
        feeder.publish_frames()
    err_path = tmp_path / "stderr.txt"
    args = [str(BIN / node), "--ros-args", "-p", "backend:=openai", "-p", "model:=m",
            "-p", f"base_url:=http://127.0.0.1:{server.getsockname()[1]}/v1"]
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(args, stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        assert wait_for(lambda: accepted or proc.poll() is not None, timeout=60), "no model call was made: " + err_path.read_text(errors="replace")[-2000:]
        proc.send_signal(signal.SIGINT)
        code = proc.wait(EXIT_TIMEOUT_S)
        log = err_path.read_text(errors="replace")
        assert code == 0 and f"left unfinished: {HUNG_CALL[node]}" in log and "Traceback" not in log, log[-3000:]
    finally:
        server.close()
        for conn in accepted:
            conn.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

"""Launch arguments and `-p` win over config/nodes.yaml: the values nodes really run with.

Every node is started as its own process with the exact command line launch_ros gives it for this
package's launch files (tests/launch_model.py: its params files in order, then the generated `/**` file of
the launch arguments), or with a README command as written, and is asked for its parameters through its
parameter services (what `ros2 param get` reads). Launch arguments that are launch logic (which nodes
start, how many) are listed in LAUNCH_LOGIC and checked for their effect.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

rclpy = pytest.importorskip("rclpy")
from rcl_interfaces.srv import GetParameters  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import parameter_value_to_python  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from motionvl.msg import DeploymentStatus  # noqa: E402
from motionvl.ros.messages import deployment_status_from_msg  # noqa: E402

import launch_model  # noqa: E402
from render_fixtures import egl_works  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TRAIN, DEPLOY = ROOT / "launch" / "train.launch.py", ROOT / "launch" / "deploy.launch.py"
START_TIMEOUT_S = 120.0  # a node's parameter services appear once it is built (imports, a GL context, a model)

# Launch arguments that decide which nodes start, how many, or from where: checked for that effect.
LAUNCH_LOGIC = {
    TRAIN.name: {"record", "trainers", "params_file", "resume", "namespace"},
    DEPLOY.name: {"sim", "record", "params_file", "bag_dir", "namespace", "motor_states"},
}
FLOOR_NODES = ("simulator", "camera_renderer", "vlm_critic")
ROBOT_NODES = ("simulator", "camera_renderer", "vlm_critic", "reward_synthesizer", "deployment", "orchestrator",
               "policy_trainer_0", "policy_trainer_1")


def _train_expectations(values: dict) -> dict:
    """argument -> {node: (parameter, value the node must hold)}: what each argument of train.launch.py sets."""
    def to(*pairs):
        return {node: (param, value) for node, param, value in pairs}

    trainers = ("policy_trainer_0", "policy_trainer_1")
    return {
        # the task also decides the playback nodes' ground (its terrain: uneven ground here)
        "task": to(("orchestrator", "task", values["task"]), *[(n, "terrain", "rough") for n in FLOOR_NODES]),
        "mode": to(("orchestrator", "mode", values["mode"])),
        "preset": to(("orchestrator", "preset", values["preset"])),
        "run_dir": to(("orchestrator", "run_dir", values["run_dir"]), ("recorder", "output_dir", f"{values['run_dir']}/bags"),
                      *[(t, "runs_dir", f"{values['run_dir']}/candidates") for t in trainers]),
        "synthesizer": to(("orchestrator", "synthesizer", values["synthesizer"]),
                          ("reward_synthesizer", "backend", values["synthesizer"])),
        "synth_base_url": to(("orchestrator", "synth_base_url", values["synth_base_url"]),
                             ("reward_synthesizer", "base_url", values["synth_base_url"])),
        "synth_model": to(("orchestrator", "synth_model", values["synth_model"]),
                          ("reward_synthesizer", "model", values["synth_model"])),
        "critic": to(("orchestrator", "critic", values["critic"]), ("vlm_critic", "backend", values["critic"])),
        "critic_base_url": to(("orchestrator", "critic_base_url", values["critic_base_url"]),
                              ("vlm_critic", "base_url", values["critic_base_url"])),
        "critic_model": to(("orchestrator", "critic_model", values["critic_model"]),
                           ("vlm_critic", "model", values["critic_model"])),
        "settings_file": to(("orchestrator", "settings_file", values["settings_file"])),
        "train_config": to(("orchestrator", "train_config", values["train_config"]),
                           *[(t, "training_config", values["train_config"]) for t in trainers]),
        "robot_config": to(*[(n, "robot_config", values["robot_config"]) for n in ROBOT_NODES]),
        "playback": to(("orchestrator", "playback", values["playback"])),
        "allow_backend_change": to(("orchestrator", "allow_backend_change", True)),
    }


# ---------------------------------------------------------------------------------------------- helpers
class Graph:
    """Node processes on a DDS domain of their own, and a client that reads their parameters."""

    def __init__(self, tmp_path: Path, domain: int):
        self.tmp = tmp_path
        self.env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
                    "PYTHONUNBUFFERED": "1"}
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = rclpy.create_node("launch_argument_probe", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.procs: dict[str, subprocess.Popen] = {}
        self.namespace = ""  # where the nodes asked for their parameters live

    def start(self, name: str, argv: list) -> None:
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as out:
            self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                env=self.env, cwd=ROOT, start_new_session=True)

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def parameters(self, name: str, names: list) -> dict:
        client = self.node.create_client(GetParameters, f"{self.namespace}/{name}/get_parameters")
        try:
            end = self._deadline()
            while not client.wait_for_service(timeout_sec=0.5):
                proc = self.procs.get(name)
                assert proc is None or proc.poll() is None, f"{name} exited ({proc.returncode}):\n{self.log(name)[-3000:]}"
                assert self._now() < end, f"{name} offers no parameter service:\n{self.log(name)[-3000:]}"
            while True:  # a request sent just as the service appears can be lost (its reply finds no reader yet)
                future = client.call_async(GetParameters.Request(names=list(names)))
                self.executor.spin_until_future_complete(future, timeout_sec=10.0)
                if future.done() or self._now() >= end:
                    break
            assert future.done(), f"{name} did not answer get_parameters"
            return {n: parameter_value_to_python(v) for n, v in zip(names, future.result().values)}
        finally:
            self.node.destroy_client(client)

    def change_state(self, name: str, label: str) -> bool:
        """A lifecycle transition of node `name` by its label, as `ros2 lifecycle set <node> <label>` asks."""
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        client = self.node.create_client(ChangeState, f"{self.namespace}/{name}/change_state")
        try:
            end = self._deadline()
            while not client.wait_for_service(timeout_sec=0.5):
                assert self._now() < end, f"{name} offers no change_state service:\n{self.log(name)[-3000:]}"
            future = client.call_async(ChangeState.Request(transition=Transition(label=label)))
            self.executor.spin_until_future_complete(future, timeout_sec=30.0)
            assert future.done(), f"{name} did not answer change_state {label}"
            return future.result().success
        finally:
            self.node.destroy_client(client)

    def latched_status(self, topic: str) -> dict:
        got: list = []
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        sub = self.node.create_subscription(DeploymentStatus, topic,
                                            lambda m: got.append(deployment_status_from_msg(m)), qos)
        try:
            end = self._deadline()
            while not got and self._now() < end:
                self.executor.spin_once(timeout_sec=0.2)
        finally:
            self.node.destroy_subscription(sub)
        assert got, f"nothing on {topic}"
        return got[-1]

    def stop(self) -> dict:
        """SIGINT every process (as launch does on shutdown); their exit codes."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                codes[name] = "hung"
        return codes

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)

    @staticmethod
    def _now() -> float:
        import time

        return time.monotonic()

    def _deadline(self) -> float:
        return self._now() + START_TIMEOUT_S


@pytest.fixture
def graph(tmp_path):
    domain = int(os.environ.get("ROS_DOMAIN_ID", "1")) % 100 + 120  # away from the suite's own domain
    made = Graph(tmp_path, domain)
    yield made
    made.close()


def _section(params: dict, key: str) -> dict:
    """A node's `ros__parameters` in a params file's content, made when config/nodes.yaml overrides nothing of it."""
    return params.setdefault(key, {}).setdefault("ros__parameters", {})


def _assert_clean_exits(graph: Graph, codes: dict) -> None:
    bad = {name: code for name, code in codes.items() if code != 0 or "Traceback" in graph.log(name)}
    assert not bad, "\n\n".join(f"{name}: exit {code}\n{graph.log(name)[-2500:]}" for name, code in bad.items())


def _allowed_cpus(pid: int) -> set:
    """The cores every thread of process `pid` may run on."""
    allowed = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        allowed |= os.sched_getaffinity(int(task.name))
    return allowed


def _robot_copy(tmp_path: Path) -> str:
    path = tmp_path / "my_robot.yaml"  # the package's robot under another path: an argument value to spot
    path.write_text((ROOT / "config" / "robot.yaml").read_text().replace(
        "urdf: urdf/", f"urdf: {ROOT / 'urdf'}/", 1))
    return str(path)


def _checked_arguments(launch_file: Path, expectations: dict, workdir: Path) -> None:
    declared = set(launch_model.evaluate(launch_file, {}, workdir=workdir).arguments)
    unaccounted = declared - set(expectations) - LAUNCH_LOGIC[launch_file.name]
    assert not unaccounted, f"{launch_file.name}: arguments neither checked for their value nor listed as launch logic: " \
                            f"{sorted(unaccounted)}"


# ---------------------------------------------------------------------------------------------- train.launch.py
@pytest.mark.skipif(not egl_works(), reason="camera_renderer needs EGL (MUJOCO_GL=egl)")
def test_every_train_launch_argument_reaches_the_nodes_that_take_it(graph, tmp_path):
    training = tmp_path / "training.yaml"
    training.write_text(yaml.safe_dump({"env": {"num_envs": 8}}))
    params_file = tmp_path / "my_nodes.yaml"  # params_file:= is read: a value only it sets shows up
    nodes_yaml = yaml.safe_load((ROOT / "config" / "nodes.yaml").read_text())
    _section(nodes_yaml, "/**/camera_renderer")["frame_interval_s"] = 0.25
    params_file.write_text(yaml.safe_dump(nodes_yaml))
    values = {"task": "walk forward with straight knees on uneven ground", "mode": "synth", "preset": "cpu",
              "run_dir": str(tmp_path / "run"), "synthesizer": "openai", "synth_base_url": "http://127.0.0.1:9/v1",
              "synth_model": "007",  # text that YAML would read as a number
              "critic": "openai", "critic_base_url": "http://127.0.0.1:9/v2",
              "critic_model": "vlm-1", "settings_file": str(ROOT / "tests" / "data" / "search_tiny.yaml"),
              "train_config": str(training), "robot_config": _robot_copy(tmp_path), "playback": "ros",
              "allow_backend_change": "true"}
    expectations = _train_expectations(values)
    _checked_arguments(TRAIN, expectations, tmp_path)
    # namespace:=lab1: every node (and so every topic) under /lab1, the params files' sections still reach them
    launch = launch_model.evaluate(TRAIN, {**values, "record": "true", "trainers": "2", "params_file": str(params_file),
                                           "namespace": "lab1"}, workdir=tmp_path)
    graph.namespace = "/lab1"
    assert {n.name for n in launch.nodes} == {"simulator", "camera_renderer", "vlm_critic", "reward_synthesizer",
                                             "deployment", "policy_trainer_0", "policy_trainer_1", "orchestrator",
                                             "recorder"}
    assert launch.generated("orchestrator")["resume"] is False
    for process in launch.nodes:
        graph.start(process.name, process.argv)
    wanted: dict = {}
    for argument, targets in expectations.items():
        for node, (param, value) in targets.items():
            wanted.setdefault(node, {})[param] = (argument, value)
    problems = []
    for node, params in sorted(wanted.items()):
        got = graph.parameters(node, sorted(params))
        problems += [f"{argument}:={values[argument]!r}: {node}.{param} is {got[param]!r}, not {value!r}"
                     for param, (argument, value) in params.items() if got[param] != value]
    assert graph.parameters("camera_renderer", ["frame_interval_s"]) == {"frame_interval_s": 0.25}, \
        "params_file:= was not read"
    # trainers:=2: each trainer on its own share of the cores, every thread of its process too
    from motionvl.rl.threads import cpu_shares

    for i, share in enumerate(cpu_shares(2)):
        name = f"policy_trainer_{i}"
        assert graph.parameters(name, ["cpu_affinity"]) == {"cpu_affinity": share}
        assert _allowed_cpus(graph.procs[name].pid) == set(share)
    # the playback graph's nodes also take config/simulation_playback.yaml over the params file
    assert graph.parameters("simulator", ["mode", "lockstep"]) == {"mode": "effort", "lockstep": True}
    assert graph.parameters("camera_renderer", ["camera"]) == {"camera": "side"}
    assert graph.parameters("deployment", ["allow_rearm"]) == {"allow_rearm": True}
    _assert_clean_exits(graph, graph.stop())
    assert not problems, "launch arguments lost:\n" + "\n".join(problems)


def test_train_launch_resume_reaches_the_orchestrator(tmp_path):
    launch = launch_model.evaluate(TRAIN, {"resume": "true", "run_dir": str(tmp_path)}, workdir=tmp_path)
    assert launch.generated("orchestrator")["resume"] is True


def test_a_failed_search_ends_the_launch_with_an_error_line_naming_it(tmp_path, caplog):
    """The launch's exit handler: the orchestrator's exit code decides, its output names the failure."""
    launch = launch_model.evaluate(TRAIN, {"task": "x"}, workdir=tmp_path)
    on_output = next(h.kwargs["on_stderr"] for h in launch.handlers if isinstance(h, launch_model.OnProcessIO))
    on_exit = next(h.kwargs["on_exit"] for h in launch.handlers if isinstance(h, launch_model.OnProcessExit))
    orchestrator = launch.node("orchestrator").action
    assert all(h.kwargs["target_action"] is orchestrator for h in launch.handlers)

    class Event:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    on_output(Event(text=b"[INFO] [orchestrator]: searching\n[ERROR] [orchestrator]: search failed: SearchError: "
                         b"--start-run /x: needs a training run directory\n"))
    with caplog.at_level("INFO"):
        actions = on_exit(Event(returncode=1), None)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "exit code 1" in errors[0].message and "--start-run /x" in errors[0].message
    assert isinstance(actions[0].event, launch_model.Shutdown)
    caplog.clear()
    with caplog.at_level("INFO"):
        on_exit(Event(returncode=0), None)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


# ---------------------------------------------------------------------------------------------- deploy.launch.py
@pytest.fixture
def policy(tmp_path) -> str:
    from motionvl.deploy.random_policy import write_random_policy

    return str(write_random_policy(tmp_path / "policy.onnx"))


def _wait_status(graph: Graph, until) -> list:
    """Deployment statuses (latched, one per change) until one satisfies `until`; all of them."""
    seen: list = []
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    sub = graph.node.create_subscription(DeploymentStatus, "/deployment/status",
                                         lambda m: seen.append(deployment_status_from_msg(m)), qos)
    try:
        end = graph._deadline()
        while not any(until(s) for s in seen) and graph._now() < end:
            graph.executor.spin_once(timeout_sec=0.2)
    finally:
        graph.node.destroy_subscription(sub)
    return seen


def test_deploy_launch_in_simulation_reaches_run_and_commands_the_simulated_drives(graph, tmp_path, policy):
    from motionvl.msg import LowCommand

    robot = _robot_copy(tmp_path)
    # a loaded test machine is slower than the drives a robot has: the params file (an argument too) puts the
    # simulator in lockstep with the commands and gives the state stream more time, as simulation_playback.yaml
    params = yaml.safe_load((ROOT / "config" / "nodes.yaml").read_text())
    _section(params, "/**/simulator")["lockstep"] = True
    _section(params, "/**/deployment")["state_timeout"] = 0.5
    params_file = tmp_path / "nodes.yaml"
    params_file.write_text(yaml.safe_dump(params))
    values = {"policy": policy, "robot_config": robot, "sim": "true", "record": "true",
              "bag_dir": str(tmp_path / "bags"), "params_file": str(params_file)}
    launch = launch_model.evaluate(DEPLOY, values, workdir=tmp_path)
    assert {n.name for n in launch.nodes} == {"deployment", "simulator", "recorder"}
    for process in launch.nodes:
        graph.start(process.name, process.argv)
    got = graph.parameters("deployment", ["policy", "path", "robot_config", "autostart", "bring_up", "use_sim_time"])
    assert got == {"policy": policy, "path": "pd", "robot_config": robot, "autostart": "run", "bring_up": "active",
                   "use_sim_time": True}
    got = graph.parameters("simulator", ["mode", "publish_rate_hz", "robot_config", "gantry", "emulate_hardware"])
    assert got == {"mode": "effort", "publish_rate_hz": 50.0, "robot_config": robot, "gantry": True,
                   "emulate_hardware": True}
    got = graph.parameters("recorder", ["output_dir", "use_sim_time"])
    assert got == {"output_dir": str(tmp_path / "bags"), "use_sim_time": True}
    commands: list = []
    graph.node.create_subscription(LowCommand, "/low_command", commands.append, 10)
    statuses = _wait_status(graph, lambda s: s["mode"] == "RUN")
    assert any(s["mode"] == "RUN" for s in statuses), statuses[-3:]
    assert statuses[-1]["policy"] and statuses[-1]["path"] == "pd"
    seen = len(commands)
    end = graph._deadline()
    while len(commands) < seen + 20 and graph._now() < end:  # drive commands keep coming in RUN
        graph.executor.spin_once(timeout_sec=0.2)
    assert len(commands) >= seen + 20 and len(commands[-1].motor_cmd) == 12
    _assert_clean_exits(graph, graph.stop())
    assert "damping commands" in graph.log("deployment")


def test_deploy_launch_on_a_robot_runs_on_the_system_clock_with_every_argument(graph, tmp_path, policy):
    """On a robot under namespace:=robot1 (two robots on one domain): the params file's sections and the arguments
    reach the namespaced nodes, and the status is /robot1/deployment/status. bring_up:=unconfigured: the
    lifecycle transitions a user (`ros2 lifecycle set`) asks for bring the node up."""
    robot = _robot_copy(tmp_path)
    params = yaml.safe_load((ROOT / "config" / "nodes.yaml").read_text())
    _section(params, "/**/deployment")["state_timeout"] = 0.25  # a value only the params file sets
    (tmp_path / "my_nodes.yaml").write_text(yaml.safe_dump(params))
    values = {"policy": policy, "path": "torque", "robot_config": robot, "record": "true",
              "bag_dir": str(tmp_path / "bags"), "namespace": "robot1", "params_file": str(tmp_path / "my_nodes.yaml"),
              "motor_states": "drives/states", "bring_up": "unconfigured"}
    expectations = {"policy": {"deployment": ("policy", policy)}, "path": {"deployment": ("path", "torque")},
                    "robot_config": {"deployment": ("robot_config", robot)},
                    "bring_up": {"deployment": ("bring_up", "unconfigured")}}
    _checked_arguments(DEPLOY, expectations, tmp_path)
    launch = launch_model.evaluate(DEPLOY, values, workdir=tmp_path)
    assert {n.name for n in launch.nodes} == {"deployment", "recorder"}
    for process in launch.nodes:
        graph.start(process.name, process.argv)
    graph.namespace = "/robot1"
    assert graph.parameters("deployment", ["policy", "path", "robot_config", "autostart", "use_sim_time",
                                           "state_timeout", "bring_up"]) == {
        "policy": policy, "path": "torque", "robot_config": robot, "autostart": "", "use_sim_time": False,
        "state_timeout": 0.25, "bring_up": "unconfigured"}
    assert not graph.change_state("deployment", "activate")  # not from unconfigured
    assert graph.change_state("deployment", "configure") and graph.change_state("deployment", "activate")
    assert graph.parameters("recorder", ["output_dir", "use_sim_time"]) == {
        "output_dir": str(tmp_path / "bags"), "use_sim_time": False}
    status = graph.latched_status("/robot1/deployment/status")
    assert status["mode"] == "PASSIVE" and status["path"] == "torque" and status["policy"], status
    # motor_states:= names the driver's topic (relative: under the namespace too)
    def readers() -> set:
        return {f"{i.node_namespace}/{i.node_name}" for i in graph.node.get_subscriptions_info_by_topic(
            "/robot1/drives/states")}
    end = graph._deadline()
    while "/robot1/deployment" not in readers() and graph._now() < end:
        graph.executor.spin_once(timeout_sec=0.2)
    assert "/robot1/deployment" in readers(), readers()
    assert graph.node.count_subscribers("/robot1/motor_states") == 0
    _assert_clean_exits(graph, graph.stop())
    assert "nothing publishes /clock" not in graph.log("recorder")


def test_a_recorder_on_simulated_time_without_a_clock_says_so(graph, tmp_path):
    graph.start("recorder", [str(BIN / "recorder_node"), "--ros-args", "--params-file", str(ROOT / "config" / "nodes.yaml"),
                             "-p", f"output_dir:={tmp_path / 'bags'}", "-p", "discovery_period_s:=0.2"])
    assert graph.parameters("recorder", ["use_sim_time"]) == {"use_sim_time": True}  # nodes.yaml's
    from waiting import wait_for

    assert wait_for(lambda: "nothing publishes /clock" in graph.log("recorder"), timeout=60), graph.log("recorder")
    assert "[ERROR]" in next(line for line in graph.log("recorder").splitlines() if "nothing publishes /clock" in line)
    _assert_clean_exits(graph, graph.stop())


# ---------------------------------------------------------------------------------------------- -p on the pip route
def _readme_node_commands() -> list[list[str]]:
    """Every `<node>_node --ros-args ...` command the README shows, split as a shell would."""
    text = (ROOT / "README.md").read_text()
    return [shlex.split(m) for m in re.findall(r"`(\w+_node --ros-args [^`]+)`", text)]


def test_the_readmes_node_commands_run_as_written(graph):
    commands = _readme_node_commands()
    assert commands, "the README shows no node command line"
    expected = {}
    for argv in commands:
        name = argv[0].removesuffix("_node")
        assert name not in expected, f"two README commands for {argv[0]}: give them separate tests"
        rules = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
        expected[name] = {rule.split(":=", 1)[0]: yaml.safe_load(rule.split(":=", 1)[1]) for rule in rules}
        graph.start(name, [str(BIN / argv[0]), *argv[1:]])
    for name, params in expected.items():
        assert graph.parameters(name, sorted(params)) == params, f"README's {name}_node command"
    if "deployment" in expected and expected["deployment"].get("dry_run"):
        assert graph.latched_status("/deployment/status")["dry_run"] is True
    _assert_clean_exits(graph, graph.stop())


# per-parameter values for -p where a type's generic other value would not be valid
DEPLOYMENT_VALUES = {"path": "torque", "command_topic": "my/commands", "trigger": "clock", "autostart": "stand",
                     "bring_up": "inactive",
                     "command_rate_hz": 250.0, "cmd_vel_type": "twist_stamped",
                     "cpu_affinity": [sorted(os.sched_getaffinity(0))[-1]]}


def _other_value(name: str, default):
    """A valid value other than the default: bools flip, numbers move a little, text comes from the table."""
    if name in DEPLOYMENT_VALUES:
        return DEPLOYMENT_VALUES[name]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return round(default * 0.9, 6) if default else 1.0
    raise AssertionError(f"deployment parameter {name}: give a valid non-default value in DEPLOYMENT_VALUES")


def test_every_deployment_parameter_set_with_p_wins_over_the_params_file(graph, tmp_path, policy):
    from motionvl.ros.deployment_node import PARAMETERS, POLICY_PARAMETER, RETIRED_PARAMETERS

    values = {"robot_config": _robot_copy(tmp_path), POLICY_PARAMETER: policy}
    values.update({name: _other_value(name, default) for name, (default, _text) in PARAMETERS.items()
                   if name not in values and name not in RETIRED_PARAMETERS})  # a retired one stops the node
    argv = [str(BIN / "deployment_node"), "--ros-args", "--params-file", str(ROOT / "config" / "nodes.yaml")]
    for name, value in values.items():
        argv += ["-p", f"{name}:={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"]
    graph.start("deployment", argv)
    got = graph.parameters("deployment", sorted(values))
    assert got == values
    status = graph.latched_status("/deployment/status")
    assert status["path"] == "torque" and status["dry_run"] is True, status
    _assert_clean_exits(graph, graph.stop())


# ---------------------------------------------------------------------------------------------- start-up errors
STARTUP_ERRORS = {  # node executable -> -p rules it cannot start with
    **{node: ["robot_config:=/nonexistent/robot.yaml"] for node in (
        "simulator_node", "camera_renderer_node", "vlm_critic_node", "reward_synthesizer_node", "policy_trainer_node",
        "deployment_node")},
    "orchestrator_node": [],  # no task sentence
    "recorder_node": ["storage:=bogus"],
    "low_command_bridge_node": ["sender:=nowhere"],
}


def test_a_node_that_cannot_start_says_why_in_one_line_and_exits_1(graph, tmp_path):
    nodes = {p.stem for p in (ROOT / "src" / "motionvl" / "ros").glob("*_node.py")}  # the node executables
    assert set(STARTUP_ERRORS) == nodes
    for executable, rules in STARTUP_ERRORS.items():
        argv = [str(BIN / executable), "--ros-args", "--params-file", str(ROOT / "config" / "nodes.yaml"),
                "-p", f"run_dir:={tmp_path / 'run'}", "-p", f"output_dir:={tmp_path / 'bags'}"]
        graph.start(executable, argv + [a for rule in rules for a in ("-p", rule)])
    for executable, proc in graph.procs.items():
        assert proc.wait(START_TIMEOUT_S) == 1, f"{executable}: exit {proc.returncode}\n{graph.log(executable)}"
        log = graph.log(executable)
        problems = [line for line in log.splitlines() if "[ERROR]" in line or "[WARN" in line]
        assert len(problems) == 1 and "cannot start:" in problems[0] and "Traceback" not in log, \
            f"{executable}:\n{log}"


def test_the_deployment_node_refuses_the_retired_soft_limit_factor_from_the_command_line(graph):
    """An old params file or `-p soft_limit_factor:=0.9` (a tighter clip than the robot's) stops the node naming its
    replacement: rclpy would drop the undeclared key, and the operator's clip with it."""
    argv = [str(BIN / "deployment_node"), "--ros-args", "--params-file", str(ROOT / "config" / "nodes.yaml"),
            "-p", "realtime_priority:=0", "-p", "soft_limit_factor:=0.9"]
    graph.start("deployment_node", argv)
    assert graph.procs["deployment_node"].wait(START_TIMEOUT_S) == 1, graph.log("deployment_node")
    assert "soft_limit_factor (0.9) is retired: set target_limit_share" in graph.log("deployment_node")


# Where a node writes by default (relative to its working directory): elsewhere in a test.
WRITES_TO = {"policy_trainer": "runs_dir", "recorder": "output_dir", "orchestrator": "run_dir"}


@pytest.mark.skipif(not egl_works(), reason="camera_renderer needs EGL (MUJOCO_GL=egl)")
def test_every_node_runs_with_the_generated_reference_as_its_params_file(graph, tmp_path):
    """`motionvl params` prints a params file every node accepts: each key one it declares (an undeclared one would
    read back unset), each node up and holding the declared defaults, stopping cleanly. The orchestrator gets a task
    (it needs one) in a namespace of its own, so that it finds no trainer to start a search on."""
    from motionvl.ros.graph import node_section
    from motionvl.ros.params_reference import node_names, node_parameters

    reference = tmp_path / "reference.yaml"
    done = subprocess.run([str(BIN / "motionvl"), "params", "--out", str(reference)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = yaml.safe_load(reference.read_text())
    assert sorted(key.rsplit("/", 1)[-1] for key in loaded) == node_names()
    sections = {}
    for name in node_names():
        section = node_section(loaded, name)
        declared = {param: default for param, (default, _text) in node_parameters(name).items() if default != []}
        assert section == declared, name
        argv = [str(BIN / f"{name}_node"), "--ros-args", "--params-file", str(reference)]
        if name in WRITES_TO:
            argv += ["-p", f"{WRITES_TO[name]}:={tmp_path / name}"]
        if name == "orchestrator":
            argv += ["-p", "task:=walk forward", "-r", "__ns:=/alone"]
        graph.start(name, argv)
        sections[name] = {param: value for param, value in section.items() if param != WRITES_TO.get(name)}
    for name, section in sections.items():
        graph.namespace = "/alone" if name == "orchestrator" else ""
        expected = {**section, "task": "walk forward"} if name == "orchestrator" else section
        assert graph.parameters(name, sorted(expected)) == expected, name
    _assert_clean_exits(graph, graph.stop())


def test_motionvl_train_exits_non_zero_when_the_search_fails(tmp_path):
    """The search fails after the graph started (a start run that is no training run): exit 1, the cause on stderr."""
    (tmp_path / "not_a_run").mkdir()
    env = {**os.environ, "ROS_DOMAIN_ID": str(int(os.environ.get("ROS_DOMAIN_ID", "1")) % 100 + 120)}
    done = subprocess.run([str(BIN / "motionvl"), "train", "--task", "walk forward with straight knees",
                           "--settings", str(ROOT / "tests" / "data" / "search_tiny.yaml"), "--out", str(tmp_path / "run"),
                           "--start-run", str(tmp_path / "not_a_run"), "--no-render"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "search failed" in done.stderr and "--start-run" in done.stderr, done.stderr[-3000:]


def test_motionvl_train_stops_when_no_trainer_process_is_left(tmp_path, capsys):
    """A trainer that cannot start ends the run at once with its reason, instead of a search waiting for it."""
    import threading

    from motionvl.ros import runtime
    from motionvl.ros.train_graph import _watch_trainers

    logs = tmp_path / "logs"
    logs.mkdir()
    with open(logs / "policy_trainer_0.log", "wb") as log:
        child = subprocess.Popen([sys.executable, "-c", "import sys; print('cannot start: bad cpu_affinity'); sys.exit(1)"],
                                 stdout=log, stderr=subprocess.STDOUT)
    child.wait()
    runtime._STOP.reset()
    try:
        watcher = threading.Thread(target=_watch_trainers, args=([child], logs, threading.Event()))
        watcher.start()
        watcher.join(30)
        assert runtime.stop_requested() and runtime._STOP.exit_code == 1
    finally:
        runtime._STOP.reset()
    assert "policy_trainer_0 exited (1): cannot start: bad cpu_affinity" in capsys.readouterr().err


def test_a_resumed_launch_puts_the_playback_nodes_on_the_recorded_tasks_ground(tmp_path):
    from motionvl.search.ledger import Ledger
    from motionvl.task import make_task

    sentence = "climb the stairs at level 3"  # a run's first session records its task in the ledger
    Ledger(tmp_path).append("run", "settings", {"task": sentence, "task_object": make_task(sentence).to_dict()})
    launch = launch_model.evaluate(TRAIN, {"resume": "true", "run_dir": str(tmp_path), "playback": "ros"},
                                   workdir=tmp_path)
    for name in FLOOR_NODES:
        assert {k: launch.generated(name)[k] for k in ("terrain", "terrain_level")} == {"terrain": "stairs_up",
                                                                                     "terrain_level": 3}
    flat = launch_model.evaluate(TRAIN, {"task": "walk forward", "run_dir": str(tmp_path / "new"), "playback": "ros"},
                                 workdir=tmp_path)
    assert flat.generated("simulator")["terrain"] == "flat" and flat.generated("simulator")["terrain_level"] == -1


# ---------------------------------------------------------------------------------------------- one graph, two routes
GRAPHS = [  # (mode, playback, critic, trainers, record, render)
    ("synth+critic", "in_process", "kinematic", 1, False, True),
    ("reference", "in_process", "kinematic", 2, True, True),
    ("synth+critic", "ros", "kinematic", 1, False, True),
    ("synth", "ros", "kinematic", 2, True, False),
    ("synth+critic", "ros", "openai", 1, False, False),
]


def _pip_route_nodes(monkeypatch, tmp_path, mode, playback, critic, trainers, record, render) -> list:
    """The node names `motionvl train`'s graph (motionvl.ros.train_graph) builds for these settings: every node
    class stood in for by one that records its name, the trainer processes by records of theirs."""
    import importlib

    from motionvl.ros import train_graph

    built = []
    classes = {"simulator_node": "SimulatorNode", "deployment_node": "DeploymentNode", "vlm_critic_node": "VlmCriticNode",
               "camera_renderer_node": "CameraRendererNode", "reward_synthesizer_node": "RewardSynthesizerNode",
               "recorder_node": "RecorderNode", "orchestrator_node": "OrchestratorNode",
               "policy_trainer_node": "PolicyTrainerNode"}
    for module, cls in classes.items():
        name = module.removesuffix("_node")
        monkeypatch.setattr(importlib.import_module(f"motionvl.ros.{module}"), cls,
                            lambda *args, name=name, **kwargs: built.append(args[0] if args else name))

    class Exited:
        returncode = 0

        def poll(self):
            return 0

        def wait(self, _timeout=None):
            return 0

    def trainer_process(_params_file, name, _values, _log, _namespace):
        built.append(name)
        return Exited()

    def run_nodes(factories, *_args, prepare=None):
        for factory in factories:
            factory()
        return 0

    monkeypatch.setattr(train_graph, "_trainer_process", trainer_process)
    monkeypatch.setattr(train_graph, "running_search", lambda _namespace: None)
    monkeypatch.setattr("motionvl.ros.runtime.run_nodes", run_nodes)
    orchestrator = {"run_dir": str(tmp_path / "pip"), "task": "walk forward", "mode": mode, "playback": playback,
                    "critic": critic, "render": render}
    synthesizer = {"backend": "rules"} if mode != "reference" else None  # as motionvl train decides
    assert train_graph.run_train_graph(orchestrator, synthesizer=synthesizer, trainers=trainers, record=record) == 0
    return built


@pytest.mark.parametrize("mode,playback,critic,trainers,record,render", GRAPHS)
def test_train_launch_and_motionvl_train_start_the_same_nodes(monkeypatch, tmp_path, mode, playback, critic,
                                                              trainers, record, render):
    from motionvl.ros.graph import training_nodes

    params_file = tmp_path / "nodes.yaml"
    nodes_yaml = yaml.safe_load((ROOT / "config" / "nodes.yaml").read_text())
    _section(nodes_yaml, "/**/orchestrator")["render"] = render
    params_file.write_text(yaml.safe_dump(nodes_yaml))
    launch = launch_model.evaluate(TRAIN, {"task": "walk forward", "run_dir": str(tmp_path / "launch"), "mode": mode,
                                           "playback": playback, "critic": critic, "trainers": str(trainers),
                                           "record": str(record).lower(), "params_file": str(params_file)},
                                   workdir=tmp_path)
    launched = sorted(n.name for n in launch.nodes)
    pip = sorted(_pip_route_nodes(monkeypatch, tmp_path, mode, playback, critic, trainers, record, render))
    described = sorted(n.name for n in training_nodes(synthesizer_node=mode != "reference", playback=playback,
                                                      trainers=trainers, render=render, critic=critic, record=record))
    assert launched == pip == described
    # the launch tells the orchestrator whether a synthesizer node runs, as motionvl train does
    assert launch.generated("orchestrator")["synthesizer_node"] is (mode != "reference")
    if playback == "in_process":
        assert not set(launched) & {"simulator", "camera_renderer", "vlm_critic", "deployment"}

"""The language loop's nodes in one process without `ros2 launch` (the pip route of `motionvl train`).

The same nodes (motionvl.ros.graph.training_nodes decides which, for both routes), node classes and
parameter files (config/nodes.yaml, one section per node name; config/simulation_playback.yaml over it for
the playback's simulated robot) as launch/train.launch.py. Trainers run as child processes by default
(each its own interpreter and its share of the cores, started as the `policy_trainer_node` console script
starts it, dying with this process) or, with `trainers_in_process`, as nodes of this process. The nodes run through
`motionvl.ros.runtime.run_nodes` (each on its own executor thread, one clean way out on SIGINT or
SIGTERM); the orchestrator asks the process to stop when its search ends. A stopped run continues
with `motionvl train --out RUN_DIR --resume`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from motionvl.backend_names import RECORDED
from motionvl.rl.threads import cpu_shares
from motionvl.robot import package_root
from motionvl.ros.graph import namespace as graph_namespace
from motionvl.ros.graph import node_section, training_nodes

NODES_YAML = "config/nodes.yaml"
PLAYBACK_YAML = "config/simulation_playback.yaml"


def node_parameters(params_file: Path, name: str) -> dict:
    """The `ros__parameters` a node named `name` gets from a ROS params file: the whole graph's section (`/**`:
    the robot config, the terrain) overlaid with the node's own ({} without either)."""
    return node_section(yaml.safe_load(params_file.read_text()) or {}, name)


def _parameters(values: dict) -> list:
    from rclpy.parameter import Parameter

    return [Parameter(k, value=v) for k, v in values.items() if v is not None]


TRAINER_ENTRY = "import sys; from motionvl.ros.console import run; sys.exit(run('policy_trainer_node', with_parent=False))"
"""A trainer child's program: the console scripts' entry, which catches signals before the node's imports (its
death signal stays the SIGKILL set before exec)."""


def _trainer_process(params_file: Path, name: str, values: dict, log_path: Path, ns: str = "") -> subprocess.Popen:
    from motionvl.search.dispatch import _die_with_parent

    section = {f"/**/{name}": {"ros__parameters": {**node_parameters(params_file, "policy_trainer"), **values}}}
    handle = tempfile.NamedTemporaryFile("w", suffix=f"_{name}.yaml", delete=False)
    yaml.safe_dump(section, handle)
    handle.close()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen([sys.executable, "-c", TRAINER_ENTRY, "--ros-args",
                                 "--params-file", handle.name, "-r", f"__node:={name}",
                                 *(["-r", f"__ns:={ns}"] if ns else [])],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def running_search(ns: str, wait_s: float = 1.0) -> str | None:
    """The run directory of a search already running in namespace `ns` on this ROS domain, as its orchestrator
    answers (None when no orchestrator shows up within `wait_s` of discovery, or one a killed process left in
    the discovery cache does not answer): a second search there would take the first one's trainers."""
    import rclpy
    from rcl_interfaces.srv import GetParameters
    from rclpy.executors import SingleThreadedExecutor

    context = rclpy.Context()
    rclpy.init(args=[], context=context)
    try:
        node = rclpy.create_node("motionvl_train_probe", namespace=ns or "/", context=context,
                                 enable_rosout=False, start_parameter_services=False)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
            if ("orchestrator", ns or "/") in [tuple(found) for found in node.get_node_names_and_namespaces()]:
                break
        else:
            return None
        client = node.create_client(GetParameters, f"{ns}/orchestrator/get_parameters")
        if not client.wait_for_service(timeout_sec=2.0):
            return None
        future = client.call_async(GetParameters.Request(names=["run_dir"]))
        executor.spin_until_future_complete(future, timeout_sec=2.0)
        if not future.done() or future.result() is None:
            return None
        values = future.result().values
        return (values[0].string_value if values else "") or "?"
    finally:
        rclpy.shutdown(context=context)


def _claim_namespace(ns: str, run_dir: str):
    """This machine's claim on namespace `ns` of this ROS domain: (an open file holding its lock, None), or (None,
    the run directory of the search holding it). The kernel drops the lock with its process, however it ends;
    discovery (`running_search`) covers searches on other machines of the domain."""
    import fcntl

    domain = os.environ.get("ROS_DOMAIN_ID", "0")
    path = Path(tempfile.gettempdir()) / f"motionvl-train-domain{domain}{ns.replace('/', '_') or '_'}.lock"
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        return None, holder
    handle.seek(0)
    handle.truncate()
    handle.write(run_dir)
    handle.flush()
    return handle, None


def _watch_trainers(children: list, logs: Path, ended: threading.Event) -> None:
    """When every trainer process has exited while the search still runs (a trainer that could not start), stop
    the graph with the trainers' last log lines instead of letting the search wait for a trainer."""
    from motionvl.ros.runtime import request_stop

    while not ended.wait(1.0):
        if all(child.poll() is not None for child in children):
            lines = []
            for i, child in enumerate(children):
                log = logs / f"policy_trainer_{i}.log"
                last = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
                lines.append(f"policy_trainer_{i} exited ({child.returncode}): {last[0] if last else 'no output'}")
            print("motionvl train: no trainer process is left: " + "; ".join(lines), file=sys.stderr, flush=True)
            request_stop("no trainer process is left", exit_code=1)
            return


PLAYBACK_CLASSES = {"simulator": ("simulator_node", "SimulatorNode"), "deployment": ("deployment_node", "DeploymentNode"),
                    "vlm_critic": ("vlm_critic_node", "VlmCriticNode"),
                    "camera_renderer": ("camera_renderer_node", "CameraRendererNode")}
"""The playback graph's node classes (module in motionvl.ros, class), by node name."""


def _playback_factory(node, params_file: Path, orchestrator: dict, critic_parameters: dict | None = None):
    """The factory of one playback node (a GraphNode of motionvl.ros.graph): nodes.yaml, the playback file where
    the GraphNode takes it, the task's terrain where it builds a world, the run's robot; vlm_critic with the
    orchestrator's critic and its endpoint's timeouts."""
    import importlib

    values = node_parameters(params_file, node.name)
    if node.playback_layer:
        values.update(node_parameters(package_root() / PLAYBACK_YAML, node.name))
    if node.floor:
        values.update({k: orchestrator[k] for k in ("terrain", "terrain_level") if orchestrator.get(k) is not None})
    if orchestrator.get("robot_config"):
        values["robot_config"] = orchestrator["robot_config"]
    if node.name == "vlm_critic":
        values.update(backend=orchestrator.get("critic") or "kinematic",
                      **{name: orchestrator.get(f"critic_{name}") or "" for name in RECORDED},
                      device=orchestrator.get("device") or "auto", **(critic_parameters or {}))
    module, cls = PLAYBACK_CLASSES[node.name]

    def factory():
        return getattr(importlib.import_module(f"motionvl.ros.{module}"), cls)(parameter_overrides=_parameters(values))
    return factory


def run_train_graph(orchestrator: dict, *, synthesizer: dict | None = None, trainers: int = 1,
                    trainers_in_process: bool = False, record: bool = False, train_config: str | None = None,
                    params_file: str | Path | None = None, robot_config: str | None = None,
                    critic_parameters: dict | None = None, namespace: str = "") -> int:
    """Run the graph until the search ends (every node in `namespace`, '' for the root). orchestrator: its parameter values (task, mode, run_dir, ..., terrain)
    and the task's terrain_level (both passed on to the playback nodes that build a world);
    synthesizer: the reward_synthesizer node's (None: the orchestrator synthesizes in process); robot_config:
    the trainers' robot YAML (None: the params file's, as the other nodes); critic_parameters: more of the
    vlm_critic node's (its ModelSettings: motionvl.backend_names). Returns 0 when the search finished, 1 when it failed or a
    node could not start."""
    from motionvl.ros.orchestrator_node import OrchestratorNode
    from motionvl.ros.runtime import run_nodes

    params_file = Path(params_file) if params_file else package_root() / NODES_YAML
    ns = graph_namespace(namespace)
    claim, other = _claim_namespace(ns, str(orchestrator["run_dir"]))
    other = other or running_search(ns)
    if other:
        if claim is not None:
            claim.close()
        print(f"motionvl train: another search (run directory {other}) runs on this ROS domain (ROS_DOMAIN_ID="
              f"{os.environ.get('ROS_DOMAIN_ID', '0')}) in namespace '{ns or '/'}': two searches in one namespace "
              "would take each other's trainers and answers; give this one its own --namespace NAME (or "
              "ROS_DOMAIN_ID)", file=sys.stderr, flush=True)
        return 1
    run_dir = Path(orchestrator["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer_values = {"runs_dir": str(run_dir / "candidates"), "training_config": train_config or "",
                      **({"robot_config": robot_config} if robot_config else {})}
    nodes = training_nodes(synthesizer_node=synthesizer is not None,
                           playback=orchestrator.get("playback") or "in_process", trainers=trainers,
                           render=bool(orchestrator.get("render", True)),
                           critic=orchestrator.get("critic") or "kinematic", record=record)
    factories, children = [], []
    shares = cpu_shares(trainers) if trainers > 1 else [[]]  # trainers on one machine share its cores on purpose
    for node in nodes:
        if node.section == "policy_trainer":
            i, name = int(node.name.rsplit("_", 1)[1]), node.name
            if trainers_in_process:
                def trainer(name=name):
                    from motionvl.ros.policy_trainer_node import PolicyTrainerNode

                    return PolicyTrainerNode(name, parameter_overrides=_parameters(
                        {**node_parameters(params_file, "policy_trainer"), **trainer_values}))
                factories.append(trainer)
            else:
                pinned = {"cpu_affinity": shares[i]} if shares[i] else {}
                children.append(_trainer_process(params_file, name, {**trainer_values, **pinned},
                                                 run_dir / "logs" / f"{name}.log", ns))
        elif node.name in PLAYBACK_CLASSES:
            factories.append(_playback_factory(node, params_file, orchestrator, critic_parameters))
        elif node.name == "reward_synthesizer":
            def synthesizer_node():
                from motionvl.ros.reward_synthesizer_node import RewardSynthesizerNode

                return RewardSynthesizerNode(parameter_overrides=_parameters(synthesizer))
            factories.append(synthesizer_node)
        elif node.name == "recorder":
            def recorder():
                from motionvl.ros.recorder_node import RecorderNode

                return RecorderNode(parameter_overrides=_parameters({"output_dir": str(run_dir / "bags"),
                                                                     "use_sim_time": False}))
            factories.append(recorder)
        elif node.name == "orchestrator":
            factories.append(lambda: OrchestratorNode(parameter_overrides=_parameters(
                {**orchestrator, "shutdown_when_done": True, "synthesizer_node": synthesizer is not None})))
        else:
            raise AssertionError(f"motionvl.ros.graph names a node this route cannot start: {node.name}")
    ended = threading.Event()
    if children:
        threading.Thread(target=_watch_trainers, args=(children, run_dir / "logs", ended), daemon=True,
                         name="trainer-watch").start()
    prepare = None
    if trainers_in_process:
        from motionvl.rl.jobs import import_training_stack

        prepare = import_training_stack
    try:
        return run_nodes(factories, "motionvl train", ["--ros-args", "--params-file", str(params_file),
                                                       *(["-r", f"__ns:={ns}"] if ns else [])], prepare=prepare)
    finally:
        claim.close()
        ended.set()
        for child in children:  # a trainer stops after its iteration in progress, its checkpoint saved
            if child.poll() is None:
                child.send_signal(signal.SIGINT)
        for child in children:
            try:
                child.wait(20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

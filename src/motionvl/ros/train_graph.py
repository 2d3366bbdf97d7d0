"""The language loop's nodes in one process without `ros2 launch` (the pip route of `motionvl train`).

The same node classes and the same parameter file (config/nodes.yaml, one section per node name) as
launch/train.launch.py: the orchestrator, the reward_synthesizer (when installed and a synthesizer is
needed), the policy_trainer nodes and, with `record`, the recorder. Trainers run as child processes by
default (each its own interpreter and cores: `python -m motionvl.ros.policy_trainer_node`, dying with
this process) or, with `trainers_in_process`, as nodes of this process. Each node spins on its own
executor thread, as each runs in its own process under launch. Returns when the orchestrator's search
ends (0), fails (1) or on Ctrl-C (130, the run resumable with --resume).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import yaml

from motionvl.robot import ConfigError, package_root

NODES_YAML = "config/nodes.yaml"


def node_parameters(params_file: Path, name: str) -> dict:
    """The `ros__parameters` of section `name` of a ROS params file ({} without one)."""
    raw = yaml.safe_load(params_file.read_text()) or {}
    return dict((raw.get(name) or {}).get("ros__parameters") or {})


def _parameters(values: dict) -> list:
    from rclpy.parameter import Parameter

    return [Parameter(k, value=v) for k, v in values.items() if v is not None]


def _trainer_process(params_file: Path, name: str, values: dict, log_path: Path) -> subprocess.Popen:
    from motionvl.search.dispatch import _die_with_parent

    section = {name: {"ros__parameters": {**node_parameters(params_file, "policy_trainer"), **values}}}
    handle = tempfile.NamedTemporaryFile("w", suffix=f"_{name}.yaml", delete=False)
    yaml.safe_dump(section, handle)
    handle.close()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "motionvl.ros.policy_trainer_node", "--ros-args",
                                 "--params-file", handle.name, "-r", f"__node:={name}"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def run_train_graph(orchestrator: dict, *, synthesizer: dict | None = None, trainers: int = 1,
                    trainers_in_process: bool = False, record: bool = False, train_config: str | None = None,
                    params_file: str | Path | None = None) -> int:
    """Run the graph until the search ends. orchestrator: its parameter values (task, mode, run_dir, ...);
    synthesizer: the reward_synthesizer node's (None: the orchestrator synthesizes in process)."""
    import rclpy
    from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor

    from motionvl.ros.orchestrator_node import OrchestratorNode

    params_file = Path(params_file) if params_file else package_root() / NODES_YAML
    run_dir = Path(orchestrator["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    context = rclpy.Context()
    rclpy.init(context=context, args=["--ros-args", "--params-file", str(params_file)])
    nodes, children, spinners = [], [], []
    trainer_values = {"runs_dir": str(run_dir / "candidates"), "training_config": train_config or "",
                      "shared_channel": False}
    try:
        for i in range(trainers):
            name = f"policy_trainer_{i}"
            if trainers_in_process:
                from motionvl.ros.policy_trainer_node import PolicyTrainerNode

                nodes.append((PolicyTrainerNode(name, context=context, parameter_overrides=_parameters(
                    {**node_parameters(params_file, "policy_trainer"), **trainer_values})), None))
            else:
                children.append(_trainer_process(params_file, name, trainer_values, run_dir / "logs" / f"{name}.log"))
        if synthesizer is not None:
            from motionvl.ros.reward_synthesizer_node import RewardSynthesizerNode

            nodes.append((RewardSynthesizerNode(context=context, parameter_overrides=_parameters(synthesizer)), 1))
        if record:
            from motionvl.ros.recorder_node import RecorderNode

            nodes.append((RecorderNode(context=context, parameter_overrides=_parameters(
                {"output_dir": str(run_dir / "bags"), "use_sim_time": False})), 1))
        orch = OrchestratorNode(context=context, parameter_overrides=_parameters(
            {**orchestrator, "shutdown_when_done": True, "synthesizer_node": synthesizer is not None}))
        nodes.append((orch, None))
        for node, threads in nodes:
            executor = SingleThreadedExecutor(context=context) if threads == 1 else \
                MultiThreadedExecutor(num_threads=threads, context=context)
            executor.add_node(node)
            thread = threading.Thread(target=_spin, args=(executor, ExternalShutdownException), daemon=True,
                                      name=f"spin-{node.get_name()}")
            thread.start()
            spinners.append((executor, thread))
        orch.finished.wait()
        return 0 if orch.error is None else 1
    except KeyboardInterrupt:
        print(f"\nmotionvl train: interrupted; `motionvl train --out {run_dir} --resume` continues", file=sys.stderr)
        return 130
    except (ConfigError, ValueError) as exc:  # a node that cannot start with its parameters
        print(f"motionvl train: {exc}", file=sys.stderr)
        return 2
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()
        for executor, _ in spinners:
            executor.shutdown(timeout_sec=2.0)
        for _, thread in spinners:
            thread.join(timeout=5.0)
        for node, _ in nodes:
            node.destroy_node()
        for child in children:
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        rclpy.try_shutdown(context=context)


def _spin(executor, shutdown_exception) -> None:
    try:
        executor.spin()
    except shutdown_exception:
        pass

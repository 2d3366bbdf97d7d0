"""The language loop as separate ROS 2 processes: a task sentence in, an exported ONNX policy and a report out.

    ros2 launch motionvl train.launch.py task:="walk forward with straight knees" [preset:=quick]
        [mode:=synth+critic] [synthesizer:=rules] [critic:=kinematic] [trainers:=1] [run_dir:=runs/search/<preset>]
        [resume:=false] [allow_backend_change:=false] [record:=false] [synth_base_url:=... synth_model:=...] [critic_base_url:=...
        critic_model:=...] [settings_file:=...] [train_config:=...] [params_file:=...] [robot_config:=...]
        [playback:=in_process|ros] [namespace:=...]

Starts the nodes motionvl.ros.graph.training_nodes names, as `motionvl train` does: reward_synthesizer
(unless mode:=reference), `trainers` policy_trainer nodes (policy_trainer_0 ...; each with the policy_trainer
section of the params file and its own candidate channel), the orchestrator, the recorder with record:=true
(its bag in <run_dir>/bags) and, with playback:=ros, the playback graph: simulator, vlm_critic (on the task's
ground), deployment (simulation mode) and camera_renderer when playbacks are rendered or a VLM judges; the
simulator, camera and deployment node take config/simulation_playback.yaml over the params file (hardware
emulation with a gantry; pd path, re-arm allowed, no autostart). With playback:=in_process the orchestrator
plays and critiques in its own process. The launch ends when the orchestrator's search ends, with an ERROR
line naming the failure when it failed. The pip-only route, `motionvl train`, runs the same node classes
with the same params file (config/nodes.yaml) without launch.

Every node gets its params files first and the launch arguments after them (launch_ros writes them to a
`/**` params file given last), so an argument wins over config/nodes.yaml (see the rule at its top).
"""

import yaml
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit, OnProcessIO
from launch.events import Shutdown
from launch.logging import get_logger
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare
from motionvl.backend_names import RECORDED, recorded_parameters
from motionvl.rl.threads import cpu_shares
from motionvl.ros.graph import namespace, node_section, training_nodes
from motionvl.ros.terrain import launch_ground
from motionvl.search.run_args import defaults, launch_arguments, names, run_dir

PACKAGE = "motionvl"
ARGUMENTS = {  # name -> (default, description): the run arguments (motionvl.search.run_args, motionvl train's
    **launch_arguments(),  # options and the orchestrator's parameters too) and the models and endpoints
    **recorded_parameters(),  # synth_model, synth_base_url, critic_model, critic_base_url (motionvl.backend_names)
}
ORCHESTRATOR_ARGUMENTS = (*(name for name in names("node") if name in ARGUMENTS), *recorded_parameters())
"""The launch arguments the orchestrator takes as its parameters of the same name."""
# What each node takes from the launch arguments: parameter -> argument. Text stays text (a model name
# of digits, an empty URL), as launch_ros would otherwise read each value as YAML.
TEXT = {
    "orchestrator": {name: name for name in ORCHESTRATOR_ARGUMENTS if isinstance(defaults().get(name, ""), str)},
    "reward_synthesizer": {"backend": "synthesizer", **{name: f"synth_{name}" for name in RECORDED},
                           "robot_config": "robot_config"},
    "vlm_critic": {"backend": "critic", **{name: f"critic_{name}" for name in RECORDED}, "robot_config": "robot_config"},
    "simulator": {"robot_config": "robot_config"},
    "camera_renderer": {"robot_config": "robot_config"},
    "deployment": {"robot_config": "robot_config"},
    "policy_trainer": {"training_config": "train_config", "robot_config": "robot_config"},
    "recorder": {},
}
# The lines of the orchestrator's output that name why it stopped (motionvl.ros.runtime, orchestrator_node).
FAILURE_MARKS = ("cannot start:", "search failed:", "a callback raised")


def _text(node: str) -> dict:
    return {param: ParameterValue(LaunchConfiguration(arg), value_type=str) for param, arg in TEXT[node].items()}


def _section(path: str, name: str) -> dict:
    with open(path) as f:
        return node_section(yaml.safe_load(f) or {}, name)


def _graph(context, params_file, playback_file):
    """The nodes of motionvl.ros.graph.training_nodes for these arguments, each with its params files and the
    launch arguments it takes; the world-building ones on the task's ground (the sentence's terrain and level,
    or the recorded task's on resume); each trainer under its own name and cores; the search's exit handlers."""
    arg = LaunchConfiguration

    def value(name: str) -> str:
        return arg(name).perform(context)

    path = params_file.perform(context)
    ns = namespace(value("namespace")) or None
    orchestrator_section = _section(path, "orchestrator")
    synthesizer_node = value("mode") != "reference"
    nodes = training_nodes(synthesizer_node=synthesizer_node, playback=value("playback"),
                           trainers=int(value("trainers")), render=bool(orchestrator_section.get("render", True)),
                           critic=value("critic"), record=value("record").lower() in ("true", "1", "yes"))
    run = str(run_dir(value("run_dir"), value("preset")))  # empty: runs/search/<preset>, as motionvl train's
    terrain, level = launch_ground(value("task"), run)
    trainer_section = _section(path, "policy_trainer")
    trainers = sum(node.section == "policy_trainer" for node in nodes)
    # trainers on this machine share its cores on purpose: each gets its own (motionvl.rl.threads.cpu_shares)
    shares = cpu_shares(trainers) if trainers > 1 else [None] * trainers
    actions, orchestrator = [], None
    for node in nodes:
        layers = [params_file, playback_file] if node.playback_layer else [params_file]
        values = _text(node.section)
        if node.floor:
            values.update(terrain=terrain, terrain_level=level)
        if node.section == "policy_trainer":
            share = shares[int(node.name.rsplit("_", 1)[1])]
            values = {**trainer_section, "runs_dir": f"{run}/candidates",
                      **values, **({"cpu_affinity": share} if share else {})}
        elif node.name == "orchestrator":
            values.update({name: arg(name) for name in ORCHESTRATOR_ARGUMENTS if name not in values},
                          run_dir=run, synthesizer_node=synthesizer_node)
        elif node.name == "recorder":
            values["output_dir"] = f"{run}/bags"
        action = Node(package=PACKAGE, executable=node.executable, name=node.name, namespace=ns, output="screen",
                      emulate_tty=True, parameters=[*layers, values])
        if node.name == "orchestrator":
            orchestrator = action
        actions.append(action)
    # the search ends the launch: the orchestrator is its required node
    outcome = SearchOutcome()
    actions.append(RegisterEventHandler(OnProcessIO(target_action=orchestrator, on_stderr=outcome.on_output,
                                                    on_stdout=outcome.on_output)))
    actions.append(RegisterEventHandler(OnProcessExit(target_action=orchestrator, on_exit=outcome.on_exit)))
    return actions


class SearchOutcome:
    """Remembers the orchestrator's last line naming a failure; on its exit, ends the launch with an ERROR
    line naming it (or an INFO line when the search finished)."""

    def __init__(self):
        self.reason = ""

    def on_output(self, event) -> None:
        for line in event.text.decode(errors="replace").splitlines():
            if any(mark in line for mark in FAILURE_MARKS):
                self.reason = line.strip()

    def on_exit(self, event, _context):
        if event.returncode == 0:
            get_logger("train.launch.py").info("the search ended")
            return [EmitEvent(event=Shutdown(reason="the search ended"))]
        reason = self.reason or "see the orchestrator's output above"
        get_logger("train.launch.py").error(f"the search failed (orchestrator exit code {event.returncode}): {reason}")
        return [EmitEvent(event=Shutdown(reason="the search failed"))]


def generate_launch_description():
    params_file = LaunchConfiguration("params_file")
    actions = [
        DeclareLaunchArgument(
            "params_file", default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "nodes.yaml"]),
            description="node parameters (one section per node)"),
        *[DeclareLaunchArgument(name, default_value=default, description=text)
          for name, (default, text) in ARGUMENTS.items()],
    ]
    playback_file = PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "simulation_playback.yaml"])
    actions.append(OpaqueFunction(function=_graph, args=[params_file, playback_file]))
    return LaunchDescription(actions)

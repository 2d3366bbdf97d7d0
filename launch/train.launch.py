"""The language loop as separate ROS 2 processes: a task sentence in, an exported ONNX policy and a report out.

    ros2 launch motionvl train.launch.py task:="walk forward with straight knees" [preset:=quick]
        [mode:=synth+critic] [synthesizer:=rules] [critic:=kinematic] [trainers:=1] [run_dir:=runs/search]
        [resume:=false] [allow_backend_change:=false] [record:=false] [synth_base_url:=... synth_model:=...] [critic_base_url:=...
        critic_model:=...] [settings_file:=...] [train_config:=...] [params_file:=...] [robot_config:=...]
        [playback:=in_process|ros]

Starts simulator, camera_renderer, vlm_critic (on the task's ground), reward_synthesizer, `trainers` policy_trainer nodes
(policy_trainer_0 ...; each with the policy_trainer section of the params file and its own candidate
channel), deployment (simulation mode) and the orchestrator, plus the recorder with record:=true (its
bag in <run_dir>/bags). The launch ends when the orchestrator's search ends, with an ERROR line naming
the failure when it failed. The pip-only route, `motionvl train`, runs the same node classes with the
same params file (config/nodes.yaml) without launch. The simulator and the deployment node take
config/simulation_playback.yaml over the params file (hardware emulation with a gantry; pd path, re-arm
allowed, no autostart): with playback:=ros the orchestrator has each candidate played by the deployment
node on the simulator node and judged by vlm_critic (motionvl.ros.graph_playback); with in_process it
plays and critiques in its own process.

Every node gets its params files first and the launch arguments after them (launch_ros writes them to a
`/**` params file given last), so an argument wins over config/nodes.yaml (see the rule at its top).
"""

import yaml
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit, OnProcessIO
from launch.events import Shutdown
from launch.logging import get_logger
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare
from motionvl.rl.threads import cpu_shares
from motionvl.ros.terrain import launch_ground

PACKAGE = "motionvl"
# (executable, node name): the names are the sections of config/nodes.yaml. The floor nodes build the task's ground.
FLOOR_NODES = (
    ("simulator_node", "simulator"),
    ("camera_renderer_node", "camera_renderer"),
    ("vlm_critic_node", "vlm_critic"),
)
SYNTHESIZER = ("reward_synthesizer_node", "reward_synthesizer")
TRAINER = ("policy_trainer_node", "policy_trainer")
DEPLOYMENT = ("deployment_node", "deployment")
ARGUMENTS = {  # name -> (default, description)
    "task": ("", "the task sentence, e.g. 'walk forward with straight knees' (empty with resume:=true)"),
    "mode": ("synth+critic", "reference (RL-Base) | synth (no critic feedback) | synth+critic"),
    "preset": ("quick", "budget preset of config/search.yaml: quick | cpu | gpu"),
    "run_dir": ("runs/search", "the search's run directory"),
    "resume": ("false", "continue the search recorded in run_dir (its backends, models and endpoints as recorded)"),
    "allow_backend_change": ("false", "with resume: switch to the synthesizer/critic and models given here (recorded)"),
    "record": ("false", "record the loop's topics into <run_dir>/bags"),
    "trainers": ("1", "policy_trainer nodes to start"),
    "synthesizer": ("rules", "reward synthesizer backend: rules (offline, not an LLM) | openai | transformers | replay"),
    "synth_base_url": ("", "openai synthesizer: the endpoint"),
    "synth_model": ("", "openai synthesizer: the model name"),
    "synth_model_dir": ("", "transformers synthesizer: a local model directory"),
    "critic": ("kinematic", "critic backend: kinematic (offline, not a VLM) | transformers | openai"),
    "critic_base_url": ("", "openai critic: the endpoint"),
    "critic_model": ("", "openai critic: the model name; transformers: a local model directory"),
    "settings_file": ("", "YAML of search settings laid over the preset"),
    "train_config": ("", "training YAML of the trainers (empty: config/training.yaml)"),
    "robot_config": ("", "robot YAML of every node (overrides the params file's); empty: the package's"),
    "playback": ("in_process", "where candidates are played back: ros (deployment node on the simulator node, "
                               "judged by vlm_critic) | in_process (in the orchestrator)"),
}
# What each node takes from the launch arguments: parameter -> argument. Text stays text (a model name
# of digits, an empty URL), as launch_ros would otherwise read each value as YAML.
TEXT = {
    "orchestrator": {"task": "task", "mode": "mode", "preset": "preset", "run_dir": "run_dir",
                     "synthesizer": "synthesizer", "synth_model": "synth_model", "synth_base_url": "synth_base_url",
                     "critic": "critic", "critic_model": "critic_model", "critic_base_url": "critic_base_url",
                     "settings_file": "settings_file", "train_config": "train_config", "playback": "playback",
                     "robot_config": "robot_config"},
    "reward_synthesizer": {"backend": "synthesizer", "base_url": "synth_base_url", "model": "synth_model",
                           "model_dir": "synth_model_dir", "robot_config": "robot_config"},
    "vlm_critic": {"backend": "critic", "model": "critic_model", "base_url": "critic_base_url",
                   "robot_config": "robot_config"},
    "simulator": {"robot_config": "robot_config"},
    "camera_renderer": {"robot_config": "robot_config"},
    "deployment": {"robot_config": "robot_config"},
    TRAINER[1]: {"training_config": "train_config", "robot_config": "robot_config"},
}
# The lines of the orchestrator's output that name why it stopped (motionvl.ros.runtime, orchestrator_node).
FAILURE_MARKS = ("cannot start:", "search failed:", "a callback raised")


def _text(node: str) -> dict:
    return {param: ParameterValue(LaunchConfiguration(arg), value_type=str) for param, arg in TEXT[node].items()}


def _floor_nodes(context, params_file, playback_file):
    """simulator, camera_renderer and vlm_critic on the task's ground (the sentence's terrain and level, or the
    recorded task's on resume); the simulator and the camera also take simulation_playback.yaml."""
    terrain, level = launch_ground(LaunchConfiguration("task").perform(context),
                                   LaunchConfiguration("run_dir").perform(context))
    ground = {"terrain": terrain, "terrain_level": level}
    nodes = []
    for executable, name in FLOOR_NODES:
        layers = [params_file, playback_file] if name in ("simulator", "camera_renderer") else [params_file]
        nodes.append(Node(package=PACKAGE, executable=executable, name=name, output="screen", emulate_tty=True,
                          parameters=[*layers, {**_text(name), **ground}]))
    return nodes


def _trainers(context, params_file):
    """The policy_trainer nodes, each with the params file's policy_trainer section under its own name."""
    path = params_file.perform(context)
    with open(path) as f:
        section = ((yaml.safe_load(f) or {}).get(TRAINER[1]) or {}).get("ros__parameters") or {}
    run_dir = LaunchConfiguration("run_dir").perform(context)
    values = {**section, "runs_dir": f"{run_dir}/candidates", "shared_channel": False, **_text(TRAINER[1])}
    count = int(LaunchConfiguration("trainers").perform(context))
    # trainers on this machine share its cores on purpose: each gets its own (motionvl.rl.threads.cpu_shares)
    shares = cpu_shares(count) if count > 1 else [None] * count
    return [Node(package=PACKAGE, executable=TRAINER[0], name=f"{TRAINER[1]}_{i}", output="screen",
                 emulate_tty=True, parameters=[params_file, {**values, **({"cpu_affinity": shares[i]} if shares[i] else {})}])
            for i in range(count)]


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
    arg = LaunchConfiguration
    actions = [
        DeclareLaunchArgument(
            "params_file", default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "nodes.yaml"]),
            description="node parameters (one section per node)"),
        *[DeclareLaunchArgument(name, default_value=default, description=text)
          for name, (default, text) in ARGUMENTS.items()],
    ]
    playback_file = PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "simulation_playback.yaml"])
    actions.append(OpaqueFunction(function=_floor_nodes, args=[params_file, playback_file]))
    actions.append(Node(package=PACKAGE, executable=SYNTHESIZER[0], name=SYNTHESIZER[1], output="screen",
                        emulate_tty=True, parameters=[params_file, _text(SYNTHESIZER[1])]))
    actions.append(Node(package=PACKAGE, executable=DEPLOYMENT[0], name=DEPLOYMENT[1], output="screen", emulate_tty=True,
                        parameters=[params_file, playback_file, _text(DEPLOYMENT[1])]))
    actions.append(OpaqueFunction(function=_trainers, args=[params_file]))
    orchestrator = Node(package=PACKAGE, executable="orchestrator_node", name="orchestrator", output="screen",
                        emulate_tty=True, parameters=[params_file, {**_text("orchestrator"), "resume": arg("resume"),
                                                                    "allow_backend_change": arg("allow_backend_change")}])
    actions.append(orchestrator)
    actions.append(Node(package=PACKAGE, executable="recorder_node", name="recorder", output="screen", emulate_tty=True,
                        condition=IfCondition(arg("record")),
                        parameters=[params_file, {"output_dir": ParameterValue(PathJoinSubstitution([arg("run_dir"), "bags"]),
                                                                            value_type=str)}]))
    # the search ends the launch: the orchestrator is its required node
    outcome = SearchOutcome()
    actions.append(RegisterEventHandler(OnProcessIO(target_action=orchestrator, on_stderr=outcome.on_output,
                                                    on_stdout=outcome.on_output)))
    actions.append(RegisterEventHandler(OnProcessExit(target_action=orchestrator, on_exit=outcome.on_exit)))
    return LaunchDescription(actions)

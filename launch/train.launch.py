"""The language loop as separate ROS 2 processes: a task sentence in, an exported ONNX policy and a report out.

    ros2 launch motionvl train.launch.py task:="walk forward with straight knees" [preset:=quick]
        [mode:=synth+critic] [synthesizer:=rules] [critic:=kinematic] [trainers:=1] [run_dir:=runs/search]
        [resume:=false] [record:=false] [synth_base_url:=... synth_model:=...] [critic_base_url:=...
        critic_model:=...] [settings_file:=...] [train_config:=...] [params_file:=...] [robot_config:=...]
        [playback:=in_process|ros]

Starts simulator, camera_renderer, vlm_critic, reward_synthesizer, `trainers` policy_trainer nodes
(policy_trainer_0 ...; each with the policy_trainer section of the params file and its own candidate
channel), deployment (simulation mode) and the orchestrator, plus the recorder with record:=true (its
bag in <run_dir>/bags). The launch ends when the orchestrator's search ends. The pip-only route,
`motionvl train`, runs the same node classes with the same params file (config/nodes.yaml) without
launch. The simulator and the deployment node take config/simulation_playback.yaml over the params
file (hardware emulation with a gantry; pd path, re-arm allowed, no autostart): with playback:=ros the
orchestrator has each candidate played by the deployment node on the simulator node and judged by
vlm_critic (motionvl.ros.graph_playback); with in_process it plays and critiques in its own process.
"""

import yaml
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

PACKAGE = "motionvl"
# (executable, node name): the names are the sections of config/nodes.yaml
NODES = (
    ("simulator_node", "simulator"),
    ("camera_renderer_node", "camera_renderer"),
    ("vlm_critic_node", "vlm_critic"),
    ("reward_synthesizer_node", "reward_synthesizer"),
)
TRAINER = ("policy_trainer_node", "policy_trainer")
ARGUMENTS = {  # name -> (default, description)
    "task": ("", "the task sentence, e.g. 'walk forward with straight knees' (empty with resume:=true)"),
    "mode": ("synth+critic", "reference (RL-Base) | synth (no critic feedback) | synth+critic"),
    "preset": ("quick", "budget preset of config/search.yaml: quick | cpu | gpu"),
    "run_dir": ("runs/search", "the search's run directory"),
    "resume": ("false", "continue the search recorded in run_dir"),
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
DEPLOYMENT = ("deployment_node", "deployment")


def _trainers(context, params_file):
    """The policy_trainer nodes, each with the params file's policy_trainer section under its own name."""
    path = params_file.perform(context)
    with open(path) as f:
        section = ((yaml.safe_load(f) or {}).get(TRAINER[1]) or {}).get("ros__parameters") or {}
    run_dir = LaunchConfiguration("run_dir").perform(context)
    values = {**section, "runs_dir": f"{run_dir}/candidates", "shared_channel": False,
              "training_config": LaunchConfiguration("train_config").perform(context),
              "robot_config": LaunchConfiguration("robot_config").perform(context)}
    count = int(LaunchConfiguration("trainers").perform(context))
    # the params file for its /** section (the whole graph's), then the policy_trainer section under this name
    return [Node(package=PACKAGE, executable=TRAINER[0], name=f"{TRAINER[1]}_{i}", output="screen",
                 emulate_tty=True, parameters=[params_file, values]) for i in range(count)]


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
    robot = {"robot_config": arg("robot_config")}  # one robot for every node (a node without one ignores it)
    playback_file = PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "simulation_playback.yaml"])
    overrides = {
        "vlm_critic": {"backend": arg("critic"), "model": arg("critic_model"), "base_url": arg("critic_base_url")},
        "reward_synthesizer": {"backend": arg("synthesizer"), "base_url": arg("synth_base_url"),
                               "model": arg("synth_model"), "model_dir": arg("synth_model_dir")},
    }
    for executable, name in NODES:
        layers = [params_file, playback_file] if name == "simulator" else [params_file]
        actions.append(Node(package=PACKAGE, executable=executable, name=name, output="screen",
                            emulate_tty=True, parameters=[*layers, {**robot, **overrides.get(name, {})}]))
    actions.append(Node(package=PACKAGE, executable=DEPLOYMENT[0], name=DEPLOYMENT[1], output="screen", emulate_tty=True,
                        parameters=[params_file, playback_file, robot]))
    actions.append(OpaqueFunction(function=_trainers, args=[params_file]))
    orchestrator = Node(package=PACKAGE, executable="orchestrator_node", name="orchestrator", output="screen",
                        emulate_tty=True, parameters=[params_file, {
                            "task": arg("task"), "mode": arg("mode"), "preset": arg("preset"), "run_dir": arg("run_dir"),
                            "resume": arg("resume"), "synthesizer": arg("synthesizer"), "critic": arg("critic"),
                            "critic_model": arg("critic_model"), "critic_base_url": arg("critic_base_url"),
                            "settings_file": arg("settings_file"), "train_config": arg("train_config"),
                            "playback": arg("playback"), **robot}])
    actions.append(orchestrator)
    actions.append(Node(package=PACKAGE, executable="recorder_node", name="recorder", output="screen", emulate_tty=True,
                        condition=IfCondition(arg("record")),
                        parameters=[params_file, {"output_dir": PathJoinSubstitution([arg("run_dir"), "bags"])}]))
    # the search ends the launch: the orchestrator is its required node
    actions.append(RegisterEventHandler(OnProcessExit(target_action=orchestrator,
                                                      on_exit=[EmitEvent(event=Shutdown(reason="the search ended"))])))
    return LaunchDescription(actions)

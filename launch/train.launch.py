"""The language-guided training loop as separate ROS 2 processes.

    ros2 launch motionvl train.launch.py [params_file:=...] [robot_config:=...]

Starts simulator, camera_renderer, vlm_critic, policy_trainer and recorder with the
parameters of config/nodes.yaml; reward candidates are published to `reward_candidates` by
hand or by a script (see README). Without a ROS 2 distribution (no `launch`), each node runs
as its console script with the same YAML (`simulator_node --ros-args --params-file
config/nodes.yaml`), and `motionvl train` runs the whole reward search in one process.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

PACKAGE = "motionvl"
# (executable, node name): the names are the sections of config/nodes.yaml
NODES = (
    ("simulator_node", "simulator"),
    ("camera_renderer_node", "camera_renderer"),
    ("vlm_critic_node", "vlm_critic"),
    ("policy_trainer_node", "policy_trainer"),
    ("recorder_node", "recorder"),
)


def generate_launch_description():
    params_file = LaunchConfiguration("params_file")
    robot_config = LaunchConfiguration("robot_config")
    actions = [
        DeclareLaunchArgument(
            "params_file", default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "nodes.yaml"]),
            description="node parameters (one section per node)"),
        DeclareLaunchArgument("robot_config", default_value="", description="robot YAML; empty: the package's"),
    ]
    for executable, name in NODES:
        overrides = {"robot_config": robot_config} if executable == "simulator_node" else {}
        actions.append(Node(package=PACKAGE, executable=executable, name=name, output="screen",
                            emulate_tty=True, parameters=[params_file, overrides]))
    return LaunchDescription(actions)

"""Run a trained policy: the deployment node, plus the simulator as the robot when use_sim:=true.

    ros2 launch motionvl deploy.launch.py policy:=/path/policy.onnx [use_sim:=true]

With use_sim:=true the simulator runs in hardware-emulation mode (mode: effort): it takes the
deployment node's torques on joint_effort_commands (std_msgs/Float64MultiArray, 12 values in
robot-config order) and publishes joint_states, imu/data, odom and /clock like the robot's
drivers would; the deployment node then uses simulated time.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

PACKAGE = "motionvl"


def generate_launch_description():
    use_sim = LaunchConfiguration("use_sim")
    params_file = LaunchConfiguration("params_file")
    robot_config = LaunchConfiguration("robot_config")
    return LaunchDescription([
        DeclareLaunchArgument("use_sim", default_value="false",
                              description="true: drive the simulator (hardware emulation) instead of the robot"),
        DeclareLaunchArgument("policy", default_value="", description="ONNX policy to run"),
        DeclareLaunchArgument(
            "params_file", default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "nodes.yaml"]),
            description="node parameters (one section per node)"),
        DeclareLaunchArgument("robot_config", default_value="", description="robot YAML; empty: the package's"),
        Node(package=PACKAGE, executable="deployment_node", name="deployment", output="screen", emulate_tty=True,
             parameters=[params_file, {
                 "policy": LaunchConfiguration("policy"),
                 "robot_config": robot_config,
                 "use_sim_time": ParameterValue(use_sim, value_type=bool),
             }]),
        Node(package=PACKAGE, executable="simulator_node", name="simulator", output="screen", emulate_tty=True,
             condition=IfCondition(use_sim),
             parameters=[params_file, {"mode": "effort", "robot_config": robot_config}]),
    ])

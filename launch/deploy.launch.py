"""The deployment node on a robot, or on the simulated robot over topics.

    ros2 launch motionvl deploy.launch.py policy:=/abs/policy.onnx [path:=pd|torque] [sim:=true] [record:=true]
        [namespace:=robot1] [motor_states:=/your/driver/states] [bring_up:=active|inactive|unconfigured]

Starts the deployment node with its declared defaults and config/nodes.yaml's `deployment` section (policy, path
and robot_config from the launch arguments, which win over the params file). It is a lifecycle node that
configures (loads and checks the policy) and activates itself (bring_up:=active); bring_up:=unconfigured
leaves that to `ros2 lifecycle set /deployment configure|activate` or a lifecycle manager. On a robot it
stays in PASSIVE until an operator calls its services (~/set_mode/stand, then ~/set_mode/run). With sim:=true the
simulator starts too, in hardware emulation (the robot config's hardware section, both command paths, a
virtual gantry released when STAND completes), publishing at the command rate of the path and /clock,
and the deployment node runs PASSIVE -> STAND -> RUN by itself. Every node but the simulator runs on the
simulator's clock with sim:=true and on the system clock on a robot (use_sim_time follows `sim`).
record:=true records the deployment topics into a bag (MCAP) under bag_dir with the recorder. namespace:=NAME
puts every node and topic but /diagnostics (and the simulator's /clock) under NAME: two robots on one domain.
On a robot the deployment node reads the drives' states (sensor_msgs/JointState by motor name) from
`motor_states`; motor_states:=TOPIC names your driver's topic instead (the simulator publishes motor_states).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition, UnlessCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

PACKAGE = "motionvl"
RECORDED = ["motor_states", "joint_states", "imu/data", "odom", "foot_forces", "cmd_vel", "low_command", "joint_command",
            "joint_effort_commands", "joint_effort_commands/joint_names", "deployment/status", "/diagnostics"]


def _text(name: str) -> ParameterValue:
    """A launch argument passed as text (launch_ros would otherwise read it as YAML)."""
    return ParameterValue(LaunchConfiguration(name), value_type=str)


def generate_launch_description():
    params_file = LaunchConfiguration("params_file")
    sim = LaunchConfiguration("sim")
    record = LaunchConfiguration("record")
    namespace = LaunchConfiguration("namespace")
    use_sim_time = ParameterValue(sim, value_type=bool)
    deployment = {"robot_config": _text("robot_config"), "policy": _text("policy"), "path": _text("path"),
                  "bring_up": _text("bring_up"), "use_sim_time": use_sim_time}
    # the simulator publishes a state per command cycle: 50 Hz for drive-side PD, 500 Hz for host torques
    rate = PythonExpression(["500.0 if '", LaunchConfiguration("path"), "' == 'torque' else 50.0"])
    return LaunchDescription([
        DeclareLaunchArgument(
            "params_file", default_value=PathJoinSubstitution([FindPackageShare(PACKAGE), "config", "nodes.yaml"]),
            description="node parameters (one section per node)"),
        DeclareLaunchArgument("robot_config", default_value="", description="robot YAML; empty: the package's"),
        DeclareLaunchArgument("policy", default_value="", description="exported ONNX policy (absolute path)"),
        DeclareLaunchArgument("path", default_value="pd", description="pd (drive-side PD) or torque (host torques)"),
        DeclareLaunchArgument("bring_up", default_value="active",
                              description="the deployment node's lifecycle at start: active | inactive | unconfigured "
                                          "(then ros2 lifecycle set /deployment configure, activate)"),
        DeclareLaunchArgument("sim", default_value="false", description="also start the simulated robot"),
        DeclareLaunchArgument("record", default_value="false", description="record a bag with the recorder"),
        DeclareLaunchArgument("bag_dir", default_value="runs/bags", description="where record:=true writes"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of every node and topic (a robot)"),
        DeclareLaunchArgument("motor_states", default_value="motor_states",
                              description="on a robot: the drives' state topic (JointState by motor name)"),
        Node(package=PACKAGE, executable="deployment_node", name="deployment", namespace=namespace, output="screen",
             emulate_tty=True, remappings=[("motor_states", LaunchConfiguration("motor_states"))],
             parameters=[params_file, deployment], condition=UnlessCondition(sim)),
        Node(package=PACKAGE, executable="deployment_node", name="deployment", namespace=namespace, output="screen",
             emulate_tty=True,
             parameters=[params_file, {**deployment, "autostart": "run"}], condition=IfCondition(sim)),
        Node(package=PACKAGE, executable="simulator_node", name="simulator", namespace=namespace, output="screen",
             emulate_tty=True,
             parameters=[params_file, {"robot_config": _text("robot_config"), "mode": "effort", "gantry": True,
                                       "emulate_hardware": True, "publish_rate_hz": rate}],
             condition=IfCondition(sim)),
        Node(package=PACKAGE, executable="recorder_node", name="recorder", namespace=namespace, output="screen",
             emulate_tty=True,
             parameters=[params_file, {"topics": RECORDED, "output_dir": _text("bag_dir"),
                                       "use_sim_time": use_sim_time}],
             condition=IfCondition(record)),
    ])

"""`motionvl deploy-sim`: the deployment node driving the simulated robot over ROS topics, without launch.

The pip route's counterpart of `ros2 launch motionvl deploy.launch.py sim:=true`: the simulator in
hardware emulation (the robot config's hardware section, a virtual gantry), the deployment node
(autostart through PASSIVE -> STAND -> RUN) and, with --record, the recorder, composed in one
process, each node on its own executor thread. A monitor node publishes the velocity command and
follows /odom and the deployment status. After --seconds of RUN (simulated time) it stops the
nodes (the deployment node damps on its way out) and prints one JSON line last: distance, falls,
mode transitions, faults, loop period and latency p50/p99/max, overruns, clipped commands.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import numpy as np
from rclpy.node import Node

from motionvl.deploy.config import DeployConfig
from motionvl.rl.config import add_dataclass_arguments
from motionvl.sim.math import tilt_of

COMMAND_PUBLISH_HZ = 10.0
REHEARSAL_SETTINGS = ("stand_seconds", "state_timeout", "overrun_periods", "watchdog_periods")
"""The deployment node's settings (DeployConfig) a rehearsal lets one set."""
REHEARSAL_DEFAULTS = {
    "stand_seconds": (1.0, "a rehearsal reaches RUN sooner"),
    "state_timeout": (0.5, "a shared machine's simulator can stall longer than a robot's drives may"),
    "watchdog_periods": (25, "a shared machine's process can stall longer than a robot's may"),
}
"""Where a simulated rehearsal's default differs from the robot's, and why."""


def add_arguments(parser) -> None:
    parser.add_argument("--policy", required=True, help="exported ONNX policy")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of RUN (simulated time)")
    parser.add_argument("--task", default=None,
                        help="the task sentence the policy runs for: its command and terrain (motionvl.task); "
                             "default: the task the policy's metadata records")
    parser.add_argument("--command", type=float, nargs=3, default=None, metavar=("VX", "VY", "YAW"),
                        help="velocity command (m/s, m/s, rad/s); default: the task's, else 0.6 0 0")
    parser.add_argument("--path", choices=("pd", "torque"), default="pd",
                        help="pd: drive-side PD commands at the policy rate; torque: host torques at the PD rate")
    parser.add_argument("--randomize", action="store_true",
                        help="domain randomisation in the simulator (friction, joint friction, drive strength, pushes)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the randomisation")
    parser.add_argument("--record", metavar="BAG", help="record a bag (MCAP) at this directory")
    parser.add_argument("--robot-config", default="", help="robot YAML (default: the package's)")
    add_dataclass_arguments(parser, DeployConfig, names=REHEARSAL_SETTINGS, defaults=REHEARSAL_DEFAULTS)
    parser.add_argument("--lockstep", action="store_true",
                        help="the simulator waits for each command (the host loop's delay is no part of the physics)")
    parser.add_argument("--realtime-priority", type=int, default=0,
                        help="SCHED_FIFO priority for the process's threads (0: none)")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after this many wall seconds")


def run(args) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from motionvl.robot import ConfigError, load_robot_config

    robot = load_robot_config(args.robot_config or None)
    if not Path(args.policy).is_file():
        print(f"motionvl deploy-sim: no policy at {args.policy}", file=sys.stderr)
        return 2
    try:
        task = resolve_task(args)
    except (ConfigError, ValueError) as exc:  # a bad sentence; a file that is no MotionVL policy (ContractError)
        print(f"motionvl deploy-sim: {exc}", file=sys.stderr)
        return 2
    if task is not None:
        print(f"motionvl deploy-sim: task {task.sentence!r}: {task.describe(args.seconds)}", file=sys.stderr)
    context = rclpy.Context()
    rclpy.init(context=context)
    nodes, executors, threads = [], [], []
    try:
        try:
            nodes = build_nodes(args, robot, context)
        except ConfigError as exc:
            print(f"motionvl deploy-sim: {exc}", file=sys.stderr)
            return 1
        for node in nodes:
            executor = SingleThreadedExecutor(context=context)
            executor.add_node(node)
            thread = threading.Thread(target=executor.spin, daemon=True, name=f"spin-{node.get_name()}")
            thread.start()
            executors.append(executor)
            threads.append(thread)
        monitor, deployment = nodes[-1], nodes[1]
        result = monitor.wait(args.seconds, args.timeout)
        with deployment.lock:  # before the graph stops (a stopping simulator would read as a stale stream)
            result.update(loop_figures(deployment.controller.status()))
    finally:
        for executor in executors:
            executor.shutdown(timeout_sec=2.0)
        for thread in threads:
            thread.join(timeout=5.0)
        for node in reversed(nodes):  # the monitor, recorder, deployment (its last action: damping), simulator
            node.destroy_node()
        rclpy.try_shutdown(context=context)
    result["task"] = task.sentence if task is not None else None
    if any(f.startswith("fall") for f in result.get("faults", [])):
        result["falls"] = 1
    if args.record:
        result["bag"] = str(Path(args.record).resolve())
    print(json.dumps(result))
    return 0 if result["reached_run"] else 1


def resolve_task(args):
    """The task (--task, else the policy's metadata; None without either), with `args.command` and `args.terrain`
    (the simulator's floor) filled in from it where the arguments leave them open."""
    from motionvl.rl.export import load_policy
    from motionvl.task import DEFAULT_COMMAND, tool_task

    task = tool_task(args.task, load_policy(args.policy).metadata, args.command)
    args.command = task.command if task is not None else tuple(args.command or DEFAULT_COMMAND)
    args.terrain = task.terrain if task is not None else "flat"
    args.terrain_level = task.terrain_level if task is not None else None
    return task


def build_nodes(args, robot, context) -> list:
    """[simulator, deployment, (recorder,) monitor] for `args`."""
    from rclpy.parameter import Parameter

    from motionvl.deploy import DeployConfig
    from motionvl.ros.deployment_node import DEFAULT_COMMAND_TOPICS, JOINT_COMMAND_TOPIC, STATE_TOPIC, DeploymentNode
    from motionvl.ros.simulator_node import SimulatorNode

    def params(**values):
        return [Parameter(k, value=v) for k, v in values.items()]

    period = DeployConfig(path=args.path).command_period(robot)
    config = str(args.robot_config or "")
    simulator = SimulatorNode(context=context, parameter_overrides=params(
        robot_config=config, mode="effort", publish_rate_hz=1.0 / period, gantry=True,
        emulate_hardware=True, realtime=True, randomize=bool(args.randomize),
        randomization_seed=int(args.seed), lockstep=bool(args.lockstep), terrain=getattr(args, "terrain", "flat"),
        **({"terrain_level": int(args.terrain_level)} if getattr(args, "terrain_level", None) is not None else {})))
    deployment = DeploymentNode(context=context, parameter_overrides=params(
        robot_config=config, policy=str(Path(args.policy).resolve()), path=args.path, autostart="run",
        stand_seconds=float(args.stand_seconds), realtime_priority=int(args.realtime_priority),
        state_timeout=float(args.state_timeout), overrun_periods=int(args.overrun_periods),
        watchdog_periods=int(args.watchdog_periods)))
    nodes = [simulator, deployment]
    if args.record:
        from motionvl.ros.recorder_node import RecorderNode

        bag = Path(args.record).resolve()
        commands = [DEFAULT_COMMAND_TOPICS["pd"], JOINT_COMMAND_TOPIC] if args.path == "pd" else [
            DEFAULT_COMMAND_TOPICS["torque"], DEFAULT_COMMAND_TOPICS["torque"] + "/joint_names"]
        topics = [STATE_TOPIC, "joint_states", "imu/data", "odom", "foot_forces", "cmd_vel", *commands,
                  "deployment/status", "/diagnostics"]
        nodes.append(RecorderNode(context=context, parameter_overrides=params(
            output_dir=str(bag.parent), bag_name=bag.name, topics=topics, discovery_period_s=0.2)))
    nodes.append(Monitor(context, args.command, robot))
    return nodes


def loop_figures(status: dict | None) -> dict:
    if status is None:
        return {}
    return {"cycles": status["cycles"], "policy_steps": status["policy_steps"], "overruns": status["overruns"],
            "late_cycles": status["late_cycles"], "skipped_steps": status["skipped_steps"],
            "clipped_commands": status["clips"], "period_ms": status["period_ms"],
            "period_error_ms": status["period_error_ms"], "latency_ms": status["latency_ms"],
            "inference_ms": status["inference_ms"], "final_mode": status["mode"], "faults": status["faults"]}


class Monitor(Node):
    """Publishes the velocity command, follows /odom and the deployment status."""

    def __init__(self, context, command, robot):
        from geometry_msgs.msg import Twist
        from nav_msgs.msg import Odometry
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from motionvl.msg import DeploymentStatus

        super().__init__("deploy_sim_monitor", context=context)
        self.command = [float(c) for c in command]
        self.robot = robot
        self.lock = threading.Lock()
        self.transitions: list = []
        self.mode = None
        self.run_start: float | None = None  # simulated time of the first odom in RUN
        self.poses: list = []  # (t, x, y, z, qw, qx, qy, qz) from RUN on
        self.fell_at: float | None = None
        self.faults: list = []
        self.done = threading.Event()
        self.seconds = 0.0
        self.cmd_pub = self.create_publisher(Twist, "cmd_vel", 1)
        self.twist = Twist()
        self.twist.linear.x, self.twist.linear.y, self.twist.angular.z = self.command
        self.create_timer(1.0 / COMMAND_PUBLISH_HZ, lambda: self.cmd_pub.publish(self.twist))
        self.create_subscription(Odometry, "odom", self._on_odom, 10)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.create_subscription(DeploymentStatus, "deployment/status", self._on_status, latched)

    def _on_status(self, msg) -> None:
        from motionvl.ros.messages import BadMessage, deployment_status_from_msg

        try:
            status = deployment_status_from_msg(msg)
        except BadMessage:
            return
        with self.lock:
            t = status.get("transition")
            if t and (not self.transitions or self.transitions[-1] != t):
                self.transitions.append(t)
            self.mode = status.get("mode")
            self.faults = status.get("faults", [])
            if (self.mode not in (None, "RUN") and self.run_start is not None) or self.faults:
                self.done.set()  # left RUN, or a fault before it: the run is over

    def _on_odom(self, msg) -> None:
        p, o = msg.pose.pose.position, msg.pose.pose.orientation
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        with self.lock:
            if self.mode != "RUN" or self.done.is_set():
                return
            if self.run_start is None:
                self.run_start = t
            self.poses.append((t, p.x, p.y, p.z, o.w, o.x, o.y, o.z))
            tilt = float(tilt_of((o.w, o.x, o.y, o.z)))
            if self.fell_at is None and (p.z < 0.45 or tilt > 1.0):  # SingleSim.upright's thresholds
                self.fell_at = t - self.run_start
            if t - self.run_start >= self.seconds:
                self.done.set()

    def wait(self, seconds: float, timeout: float) -> dict:
        """Block until `seconds` of RUN (simulated time) have been seen, RUN ended, or `timeout`."""
        from motionvl.deploy.playback import forward_distance

        self.seconds = float(seconds)
        finished = self.done.wait(timeout)
        with self.lock:
            poses = np.array(self.poses) if self.poses else np.zeros((0, 8))
            result = {"command": self.command, "seconds_requested": self.seconds,
                      "reached_run": self.run_start is not None, "timed_out": not finished,
                      "run_seconds": float(poses[-1, 0] - poses[0, 0]) if len(poses) > 1 else 0.0,
                      "distance_m": round(forward_distance(poses[:, 1:4], poses[:, 4:8], self.command), 4)
                      if len(poses) > 1 else 0.0,
                      "falls": int(self.fell_at is not None), "fell_at_s": self.fell_at,
                      "transitions": [f"{t['from']}->{t['to']}" + ("" if t["why"] == "requested" else f" ({t['why']})")
                                      for t in self.transitions]}
        return result

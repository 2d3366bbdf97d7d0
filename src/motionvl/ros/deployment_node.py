"""deployment: the ONNX policy on the robot through a PD joint-to-motor mapping, with hard safety.

A thin adapter over `motionvl.deploy.Controller` (modes, faults, policy, commands; no ROS there).
The control thread owns the command stream: it takes joint_states, imu/data and cmd_vel itself
(its own wait set; no executor runs those subscriptions, so no callback and no lock stands between
a state and its command) and runs one command cycle per new joint state (`trigger: state`, the
drive's stream paces the loop, as ros2_control and vendor bridges do) or on absolute monotonic
deadlines (`trigger: clock`); when the state stream goes silent it keeps cycling on the clock, so
damping goes out even when nothing comes in. Policy steps run on a worker thread below the loop's
priority (`motionvl.deploy.inference`): a step not back by its deadline leaves the loop to command
damping on schedule and then to fault. Services run on the executor and hand their request to the
loop, which answers it at its next wake (at least once a command period), whatever the policy does.
A gap between two wakes of the loop beyond `watchdog_periods` (a stalled process) is a fault.

On exit (SIGINT/SIGTERM through `motionvl.ros.runtime`, or destroy_node) the loop itself sends
damping commands for exit_damping_seconds from the newest state, which it keeps taking (on the
torque path -Kd dq stays computed from a fresh velocity for the whole window), and only then stops.
It starts at the signal, not after the executor has stopped.

A lifecycle (managed) node, brought up the way ros2_control brings up a controller:
  unconfigured  nothing is published to the drives (no command publisher exists); services answer that
                the node must be configured (the e-stop succeeds: this node commands nothing).
  configure     load the robot config, build the controller, load and check the `policy` (its contract
                against the robot), create the command publishers (refused beside another writer). A
                failure names why; the node stays unconfigured and alive.
  inactive      still no command: the loop is not running. ~/load_policy loads; ~/estop latches (activate
                then starts in DAMP until ~/rearm); mode requests are refused.
  activate      start the control loop in PASSIVE (zero torque), from which the operator or `autostart`
                goes on as before.
  deactivate    DAMP, damping commands for exit_damping_seconds (as on exit), then the loop stops: the
                last commands the drives got are damping (a drive bridge that damps when commands stop,
                like low_command_bridge, keeps damping).
  cleanup       release the controller, the policy and the publishers (a later configure starts afresh,
                latched faults included, as a restart would). shutdown: deactivate's damping first.
  on error      (a transition raising) damping as on deactivate, then unconfigured.
`bring_up` (default active) does configure and activate at start, so launch, deploy-sim and every tool
get a running controller as before; bring_up:=unconfigured leaves the transitions to `ros2 lifecycle set`
or a lifecycle manager (launch_ros LifecycleNode(autostart=...), nav2's lifecycle_manager).

Subscribes (motor names and space; see the robot config's `hardware:` section):
  motor_states  sensor_msgs/JointState  position and velocity by motor name, what the drives report
                                        (remap it to your driver's topic). Reliable, depth 1
                                        (only the newest state matters); with trigger 'state' a
                                        message whose stamp advances triggers a cycle, paced to the
                                        command rate by its stamp (a drive publishing faster than
                                        that does not speed up the policy or the STAND ramp).
                                        Names of other joints (hands, head) are ignored and counted
                                        (strict_joint_names refuses them); a name given twice is refused.
                                        On motor_states and imu/data alike: one publisher only (a
                                        second one, e.g. a stale bag playing or a simulator left
                                        running, is a fault), and a message stamped older than the
                                        newest one taken is dropped and counted (out_of_order_limit
                                        of them within out_of_order_window is a fault).
  imu/data      sensor_msgs/Imu         orientation and gyro in the IMU's mounted frame. Sensor-data
                                        QoS (best effort, depth 5).
  cmd_vel       geometry_msgs/Twist or TwistStamped (`cmd_vel_type`)  the velocity command: clipped
                                        to the policy's trained ranges, rate-limited, zeroed when silent.
                                        Reliable, depth 1. A publisher of the other type (DDS never
                                        matches it) is logged and shown on /diagnostics.
Publishes (one command per command cycle while active, none in dry_run; reliable, depth 1):
  path 'pd':
  <command_topic>  motionvl/LowCommand   (default low_command) motor space: per motor name
                   q, dq, kp, kd, tau_ff in the motors' order, sign and zero. What the drives (a bridge
                   to their SDK, `low_command_bridge`, or a hardware interface) take.
  joint_command    motionvl/JointCommand the same command in joint space (joint order, the URDF's sign
                   and zero): for tools and simulators that think in joints. Never for the drives.
  path 'torque':
  <command_topic>  std_msgs/Float64MultiArray  (default joint_effort_commands) per motor tau, motor
                   order: what ros2_control's effort_controllers/JointGroupEffortController takes on its
                   ~/commands (its `joints` list in the motor order).
  <command_topic>/joint_names  sensor_msgs/JointState  the motor names of the torques (names only),
                   transient local: published once.
  ~/status      motionvl/DeploymentStatus  mode, stand_complete, faults, policy, path, dry_run, cycle and
                                     the last transition: on every change, transient local (depth 1);
                                     from configure on (it keeps its last message once unconfigured).
  /diagnostics  diagnostic_msgs/DiagnosticArray  lifecycle state, mode, faults, clips, overruns, late cycles, loop
                                     period and latency p50/p99/max, policy inference time, real-time
                                     status, extra joint names, cmd_vel publishers of the wrong type, the stamps of
                                     the newest motor state and IMU reading taken.
  ~/cycle       std_msgs/Header      (publish_cycle_stamps only) after each command: the stamp of the
                                     motor state it answered, frame_id "<command mode> <cycle index>"
                                     (`motionvl bench deploy` pairs the stamps; tests count cycles).
Services (std_srvs/Trigger but for ~/load_policy; each call is synchronous and answers success plus the
reason for a refusal, from `ros2 service call` and rclpy alike; as below while active, see the lifecycle
above for the other states; besides them the lifecycle's ~/change_state, ~/get_state, ... and the
~/transition_event topic, lifecycle_msgs):
  ~/set_mode/passive, ~/set_mode/stand, ~/set_mode/run, ~/set_mode/damp
                the mode requests (PASSIVE -> RUN and any request while a fault is latched are
                refused; DAMP is always accepted).
  ~/estop       DAMP now, latched; always succeeds (its answer names the cycle after which every
                command damps).
  ~/rearm       clear latched faults (mode stays DAMP): refused unless allow_rearm is true and no
                fault condition is still present.
  ~/load_policy motionvl/srv/LoadPolicy: load the ONNX file the request names (empty: the `policy`
                parameter), only in PASSIVE or DAMP, only after its contract matches the robot; the
                `policy` parameter then names it.
"""

from __future__ import annotations

import array
import collections
import functools
import sys
import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Twist, TwistStamped
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float64MultiArray, Header, MultiArrayDimension
from std_srvs.srv import Trigger

from motionvl.dataclass_docs import dataclass_parameters
from motionvl.deploy import Controller, DeployConfig, Mode
from motionvl.deploy.inference import PolicyWorker
from motionvl.deploy.scheduling import (DeadlineClock, RealtimeStatus, StatePacer, request_realtime,
                                        set_switch_interval, set_thread_scheduling)
from motionvl.msg import DeploymentStatus, JointCommand, LowCommand
from motionvl.robot import ConfigError, load_robot_config
from motionvl.ros import runtime
from motionvl.ros.messages import DriveCommandWriter, deployment_status_msg
from motionvl.ros.owned import OwnedSubscriptions
from motionvl.ros.params import declare_parameters
from motionvl.ros.runtime import run_node
from motionvl.srv import LoadPolicy

NODE_NAME = "deployment"
TRIGGERS = ("state", "clock")
AUTOSTART = ("", "stand", "run")
BRING_UP = ("active", "inactive", "unconfigured")
CMD_VEL_TYPES = {"twist": Twist, "twist_stamped": TwistStamped}
DEFAULT_COMMAND_TOPICS = {"pd": "low_command", "torque": "joint_effort_commands"}
COMMAND_TYPES = {"pd": LowCommand, "torque": Float64MultiArray}
JOINT_COMMAND_TOPIC = "joint_command"
STATE_TOPIC = "motor_states"

# The node's own parameters: name -> (default, description); read-only after start. The controller's settings
# (DeployConfig) are parameters too, declared by the dataclass (CONTROLLER_PARAMETERS).
NODE_PARAMETERS = {
    "robot_config": ("", "Robot YAML (joints, gains, limits, hardware mapping); empty = the package's config/robot.yaml."),
    "command_topic": ("", "Topic of the motor commands; empty = low_command (pd, motionvl/LowCommand) or "
                          "joint_effort_commands (torque, std_msgs/Float64MultiArray)."),
    "trigger": ("state", "'state': the motor states pace the loop (a cycle per state with a new stamp, at most "
                         "the command rate by their stamps); 'clock': absolute monotonic deadlines at command_rate_hz."),
    "autostart": ("", "'' stays in PASSIVE for the operator; 'stand' goes to STAND once the state stream is up; "
                      "'run' then to RUN when the ramp completes (simulation playback)."),
    "bring_up": ("active", "Lifecycle state the node brings itself to at start: 'active' (configure, then activate: "
                           "the loop in PASSIVE), 'inactive' (configured, no command) or 'unconfigured' (nothing "
                           "until `ros2 lifecycle set` or a lifecycle manager asks). 'active' is what launch, "
                           "deploy-sim and the tools expect; a start that cannot configure then ends the process."),
    "cmd_vel_type": ("twist", "'twist': geometry_msgs/Twist; 'twist_stamped': geometry_msgs/TwistStamped."),
    "cmd_vel_accel": (DeployConfig.cmd_vel_accel[0], "m/s^2: rate limit of the commanded vx and vy."),
    "cmd_yaw_accel": (DeployConfig.cmd_vel_accel[2], "rad/s^2: rate limit of the commanded yaw rate."),
    "realtime_priority": (50, "SCHED_FIFO priority asked for every thread of the process (0: ask for nothing); the "
                              "policy worker takes one less. The node says when the system refuses."),
    "lock_memory": (True, "mlockall the process with the real-time request."),
    "cpu_affinity": ([], "CPUs the control loop thread may run on, e.g. [1] or [2, 3] (as ros2_control's "
                         "cpu_affinity); empty: any."),
    "gil_switch_interval": (0.0005, "s: the interpreter's GIL switch interval (sys.setswitchinterval): how long the "
                                    "loop may wait for another thread's Python code. 0: Python's default (5 ms)."),
    "diagnostics_rate_hz": (2.0, "Rate of /diagnostics."),
    "exit_damping_seconds": (0.3, "On exit (SIGINT/SIGTERM, destroy) damping commands go out for this long first."),
    "publish_cycle_stamps": (False, "After each command, publish ~/cycle (std_msgs/Header: the stamp of the joint "
                                    "state it answered; frame_id '<command mode> <cycle>'): for benchmarks and tests."),
    "writer_discovery_seconds": (0.3, "At start, how long to look for another publisher on the command topic "
                                      "(one refuses the start)."),
}
# DeployConfig fields that are not one parameter each: cmd_vel_accel is two (cmd_vel_accel, cmd_yaw_accel),
# cmd_vel_ranges comes from the policy's contract
SHAPED_FIELDS = ("cmd_vel_accel", "cmd_vel_ranges")


CONTROLLER_PARAMETERS = dataclass_parameters(DeployConfig, skip=SHAPED_FIELDS)
"""Every other DeployConfig field as a parameter of the same name: its default and its docstring."""
RETIRED_PARAMETERS = {"soft_limit_factor": (0.0, "Retired: target_limit_share took its place, a share of robot.yaml's "
                                                  "target_limit_factor (0.95 here is 1.0 there); setting it stops "
                                                  "the node rather than drop a tighter clip unnoticed.")}
PARAMETERS = {**NODE_PARAMETERS, **CONTROLLER_PARAMETERS, **RETIRED_PARAMETERS}

POLICY_PARAMETER = "policy"
WRITABLE_PARAMETERS = {POLICY_PARAMETER: ("", "ONNX policy: loaded and checked by configure when set; names what "
                                              "~/load_policy loaded (or loads, given no path).")}
"""Parameters a running node changes (not read-only)."""

COMMAND_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
STATE_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
LATCHED_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
DIAGNOSTICS_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
WRITER_CHECK_PERIOD_S = 0.1
REQUEST_TIMEOUT_S = 2.0
"""How long a service waits for the loop's answer (the loop answers within a command period)."""
JOIN_MARGIN_S = 2.0
"""Beyond exit_damping_seconds, how long destroy_node waits for the loop to end."""


def deploy_config(p: dict) -> DeployConfig:
    """The controller's settings from the node's parameters."""
    return DeployConfig(**{name: p[name] for name in CONTROLLER_PARAMETERS},
                        cmd_vel_accel=(p["cmd_vel_accel"], p["cmd_vel_accel"], p["cmd_yaw_accel"]))


def parse_cpus(cpus: list) -> tuple:
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cpus):
        raise ConfigError(f"parameter cpu_affinity must list CPU numbers ([1] or [2, 3]), got {cpus!r}")
    return tuple(cpus)


def stamp_seconds(header) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


class _Request:
    """A service's request handed to the control loop, and the loop's answer."""

    def __init__(self, action):
        self.action = action
        self.answer: tuple[bool, str] | None = None
        self.done = threading.Event()


class DeploymentNode(LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        # what destroy_node needs, first: a constructor that raises still gets destroyed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.command_pub = None
        self.joint_command_pub = None
        self._names_pub = None
        self.controller = None
        self._configuring = None  # the controller configure is building (released if configure fails)
        self.robot = None
        self.state = "unconfigured"
        """The lifecycle state as this node's requests see it: unconfigured, inactive, active, finalized."""
        self._configure_error = ""
        """Why the last configure failed (logged; raised by bring_up's)."""
        self._bringing_up = False
        self._transition_lock = threading.RLock()
        """Held by each lifecycle transition and by a request deciding where it runs."""
        self._started_at = time.monotonic()
        p = declare_parameters(self, PARAMETERS)
        if p["soft_limit_factor"]:
            raise ConfigError(f"parameter soft_limit_factor ({p['soft_limit_factor']:g}) is retired: set "
                              "target_limit_share, a share of robot.yaml's target_limit_factor (the old 0.95 is 1.0)")
        default, description = WRITABLE_PARAMETERS[POLICY_PARAMETER]
        self.declare_parameter(POLICY_PARAMETER, default, ParameterDescriptor(description=description))
        if p["trigger"] not in TRIGGERS:
            raise ConfigError(f"parameter trigger must be one of {TRIGGERS}, got {p['trigger']!r}")
        if p["autostart"] not in AUTOSTART:
            raise ConfigError(f"parameter autostart must be one of {AUTOSTART}, got {p['autostart']!r}")
        if p["bring_up"] not in BRING_UP:
            raise ConfigError(f"parameter bring_up must be one of {BRING_UP}, got {p['bring_up']!r}")
        if p["cmd_vel_type"] not in CMD_VEL_TYPES:
            raise ConfigError(f"parameter cmd_vel_type must be one of {tuple(CMD_VEL_TYPES)}, got {p['cmd_vel_type']!r}")
        if p["gil_switch_interval"] < 0:
            raise ConfigError(f"parameter gil_switch_interval must be >= 0, got {p['gil_switch_interval']}")
        self.cpus = parse_cpus(p["cpu_affinity"])
        self.params = p
        # real-time first: every thread of the process so far (the middleware's too) takes the priority,
        # threads started later (the loop, the executor's) inherit it; the policy worker drops below it
        self.realtime = request_realtime(p["realtime_priority"], p["lock_memory"]) if p["realtime_priority"] > 0 \
            else RealtimeStatus(0)
        self.switch_interval = set_switch_interval(p["gil_switch_interval"])
        self.status_pub = self.create_publisher(DeploymentStatus, "~/status", LATCHED_QOS)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", DIAGNOSTICS_QOS)
        self.cycle_pub = self.create_publisher(Header, "~/cycle", COMMAND_QOS) if p["publish_cycle_stamps"] else None
        self._cycle_header = Header()

        # taken by the control loop itself while active (see the module docstring)
        self.owned = OwnedSubscriptions(self)
        self.cmd_vel_type = CMD_VEL_TYPES[p["cmd_vel_type"]]
        self._joint_sub = self.owned.add(JointState, STATE_TOPIC, self._on_joint_state, STATE_QOS)
        self._imu_sub = self.owned.add(Imu, "imu/data", self._on_imu, qos_profile_sensor_data, take_all=True)
        self._cmd_vel_sub = self.owned.add(self.cmd_vel_type, "cmd_vel", self._on_cmd_vel, COMMAND_QOS)
        # the resolved names (remappings applied) are what the publisher checks must look at
        self.state_topics = [self._joint_sub.topic_name, self._imu_sub.topic_name]
        self.cmd_vel_topic = self._cmd_vel_sub.topic_name
        self.cmd_vel_wrong_type: list[str] = []
        """Publishers on cmd_vel of the other message type (never heard)."""
        for mode in Mode:
            self.create_service(Trigger, f"~/set_mode/{mode.value.lower()}", self._mode_service(mode))
        self.create_service(Trigger, "~/estop", self._on_estop)
        self.create_service(Trigger, "~/rearm", self._on_rearm)
        self.create_service(LoadPolicy, "~/load_policy", self._on_load_policy)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.create_timer(WRITER_CHECK_PERIOD_S, self._check_writers)
        self.create_timer(1.0 / p["diagnostics_rate_hz"], self._publish_diagnostics)

        self.lock = threading.Lock()
        """Guards the request queue (never held across a cycle)."""
        self._requests: collections.deque = collections.deque()
        self._due: float | None = None  # arrival of a joint state that is due a cycle
        self._autostart = ""
        self._deactivating = False
        self._status_version = None
        self._logged_transitions = 0
        self.loop_scheduling = "not started"
        self.exit_commands = 0
        """Damping commands the exit window of the last activation sent (the loop's count)."""
        if p["realtime_priority"] > 0:  # (rclpy wants one severity per logging call site)
            if self.realtime.granted:
                self.get_logger().info(f"real-time scheduling: {self.realtime.describe()}")
            else:
                self.get_logger().warning(f"real-time scheduling refused: {self.realtime.describe()}")
        # bring_up: the transitions a lifecycle manager would otherwise ask for; a start that cannot
        # configure ends here (launch and the tools report it as today), a manual one stays unconfigured
        if p["bring_up"] in ("inactive", "active"):
            self._bringing_up = True  # (a failure is this constructor's error, reported once by its caller)
            configured = self.trigger_configure()
            self._bringing_up = False
            if configured != TransitionCallbackReturn.SUCCESS:
                raise ConfigError(self._configure_error or "configure failed (see the log)")
        if p["bring_up"] == "active" and self.trigger_activate() != TransitionCallbackReturn.SUCCESS:
            raise ConfigError("activate failed (see the log)")
        if p["bring_up"] == "unconfigured":
            self.get_logger().info("unconfigured: no command is sent until configure and activate (ros2 lifecycle "
                                   f"set {self.get_fully_qualified_name()} configure, then activate)")

    # ------------------------------------------------------------------ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Load the robot config, build the controller, load and check the policy, create the command
        publishers (refused beside another writer of the command topic). No command yet."""
        with self._transition_lock:
            self._configure_error = ""
            try:
                self._configure()
            except (ConfigError, ValueError, OSError) as exc:
                self._configure_error = f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)
                if not self._bringing_up:
                    self.get_logger().error(f"configure failed, still unconfigured: {self._configure_error}")
                self._release()
                return TransitionCallbackReturn.FAILURE
            except Exception as exc:  # noqa: BLE001 - a bug: reported, then on_error cleans up
                self._configure_error = f"{type(exc).__name__}: {exc}"
                self.get_logger().error(f"configure raised: {self._configure_error}")
                return TransitionCallbackReturn.ERROR
            self.state = "inactive"
            self._publish_status()
            self.get_logger().info("configured (inactive: no command until activate)")
            return TransitionCallbackReturn.SUCCESS

    def _configure(self) -> None:
        p = self.params
        self.robot = load_robot_config(p["robot_config"] or None)
        worker_priority = p["realtime_priority"] - 1 if self.realtime.granted and p["realtime_priority"] > 1 else 0
        c = Controller(self.robot, deploy_config(p), runner=functools.partial(PolicyWorker, priority=worker_priority))
        self._configuring = c
        policy = self.get_parameter(POLICY_PARAMETER).value
        if policy:
            ok, message = c.load_policy(policy)
            if not ok:
                raise ConfigError(f"policy refused: {message}")
            self.get_logger().info(message)
        self.command_topic = p["command_topic"] or DEFAULT_COMMAND_TOPICS[c.config.path]
        pd = c.config.path == "pd"
        self.command_pub = None if c.config.dry_run else self.create_publisher(
            COMMAND_TYPES[c.config.path], self.command_topic, COMMAND_QOS)
        self.joint_command_pub = None if c.config.dry_run or not pd else self.create_publisher(
            JointCommand, JOINT_COMMAND_TOPIC, COMMAND_QOS)
        self._check_writers_at_start(p["writer_discovery_seconds"])
        if pd:  # the messages every cycle fills in place
            self._low = DriveCommandWriter(LowCommand, c.mapping.motor_names)
            self._joint = DriveCommandWriter(JointCommand, c.mapping.joint_names)
        else:  # the torques' order for whoever reads the bare array
            self._names_pub = self.create_publisher(JointState, self.command_topic + "/joint_names", LATCHED_QOS)
            self._names_pub.publish(JointState(name=list(c.mapping.motor_names)))
            self._message, self._buffer = self._command_message(self.robot.num_joints)
        c.interrupt = self._urgent  # a cycle waiting for a policy step stops waiting for these
        self._pacer = StatePacer(c.period)
        self._status_version, self._logged_transitions = None, 0  # (a controller of its own per configure)
        self.controller, self._configuring = c, None
        self.get_logger().info(
            f"{c.config.path} path on {self.command_topic}{' and ' + JOINT_COMMAND_TOPIC if pd else ''} at "
            f"{1 / c.period:g} Hz (policy every {c.decimation} cycles), trigger {p['trigger']}"
            f"{', DRY RUN: no command is published' if c.config.dry_run else ''}; {self.switch_interval}")

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start the control loop in PASSIVE (zero torque; in DAMP when a fault is latched: ~/rearm)."""
        with self._transition_lock:
            c = self.controller
            if c.mode == Mode.DAMP and not c.modes.faults:
                c.request_mode(Mode.PASSIVE)
            elif c.modes.faults:
                self.get_logger().warning("activate: in DAMP, a fault is latched (~/rearm clears it): "
                                          + "; ".join(str(f) for f in c.modes.faults))
            self._stop.clear()
            self._deactivating = False
            self._autostart = self.params["autostart"]
            self.exit_commands = 0  # (counts the exit window of this activation: deactivate's or the process's)
            self._thread = threading.Thread(target=self._control_loop, name="deployment-control", daemon=True)
            self._thread.start()
            self.state = "active"
            self.get_logger().info(f"active: the control loop runs, mode {c.mode.value}")
            return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """DAMP, damping commands for exit_damping_seconds, then the loop stops (no command while inactive)."""
        with self._transition_lock:
            self.state = "deactivating"
            if not self._end_loop():
                return TransitionCallbackReturn.ERROR
            self.state = "inactive"
            self.get_logger().info(f"deactivated: DAMP, {self.exit_commands} damping commands sent, "
                                   "the loop stopped (no command while inactive)")
            return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release the controller, the policy and the command publishers (as a restart would: faults too)."""
        with self._transition_lock:
            self._release()
            self.get_logger().info("cleaned up: unconfigured")
            return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._transition_lock:
            self.state = "deactivating"
            ended = self._end_loop()
            self._release()
            self.state = "finalized"
            return TransitionCallbackReturn.SUCCESS if ended else TransitionCallbackReturn.ERROR

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """A transition failed with an error: damping as on deactivate, then everything released
        (unconfigured)."""
        with self._transition_lock:
            self.get_logger().error(f"lifecycle error (from {state.label}): DAMP, then unconfigured")
            self.state = "deactivating"
            self._end_loop()
            self._release()
            return TransitionCallbackReturn.SUCCESS

    def _end_loop(self) -> bool:
        """DAMP and the exit window's damping commands from the loop, which then ends; True when it has
        ended (or never ran). A loop that does not end is left behind (it ends when it finds the
        controller released) after the damping has gone out from here: False."""
        if self._thread is None:
            return True
        self._deactivating = True
        self.stop_control()
        alive = self._thread.is_alive()
        if alive:
            self.get_logger().error("the control loop did not end: sending the damping from here")
            self.exit_commands += self.send_exit_damping()
        self._thread = None
        self._answer_pending(False, "the node is deactivating")
        return not alive

    def _release(self) -> None:
        """Undo configure (idempotent): nothing is commanded afterwards."""
        self.state = "unconfigured" if self.state != "finalized" else self.state
        c, self.controller, self._configuring = self.controller or self._configuring, None, None
        if c is not None and not c.close(timeout=0.5):
            self.get_logger().warning("a policy step was still running (it hangs outside ONNX Runtime)")
        for name in ("command_pub", "joint_command_pub", "_names_pub"):
            pub = getattr(self, name)
            setattr(self, name, None)
            if pub is not None:
                self.destroy_publisher(pub)

    # ------------------------------------------------------------------ the control thread
    def _control_loop(self) -> None:
        c = self.controller
        self.loop_scheduling = set_thread_scheduling(self.realtime.requested_priority if self.realtime.granted else 0,
                                                     self.cpus) if (self.cpus or self.realtime.granted) else "inherited"
        self._deadlines = DeadlineClock(c.period) if self.params["trigger"] == "clock" else None
        """Deadlines of trigger 'clock', or of a silent state stream's cycles (None: states pace the loop)."""
        self._last_state = None  # arrival of the last state that triggered a cycle
        self._exit_deadlines, self._exit_left = None, 0
        with self.owned.opened():
            while True:
                try:
                    if self._loop_once():
                        return
                except Exception as exc:  # noqa: BLE001 - the loop must outlive a bug, unless the context is gone
                    if not self.context.ok() or self.controller is not c:  # (or a transition left it behind)
                        return
                    self.get_logger().error(f"control loop: {type(exc).__name__}: {exc}", throttle_duration_sec=1.0)

    def _loop_once(self) -> bool:
        """One wake of the control loop: take what came, answer requests, cycle when due. True when the
        loop is over (its exit damping sent)."""
        c, period = self.controller, self.controller.period
        now = time.monotonic()
        if self._exit_deadlines is None and (self._stop.is_set() or self._stop_signalled()):
            self._exit_deadlines = DeadlineClock(period, start=now - period)
            self._exit_left = max(1, int(round(self.params["exit_damping_seconds"] / period)))
            if self._deactivating:  # deactivate: the mode says DAMP too (activate starts from it in PASSIVE)
                c.request_mode(Mode.DAMP)
                self._publish_status()
        clock = self._exit_deadlines or self._deadlines
        self._due = None
        self.owned.wait((clock.next if clock else now + period) - time.monotonic())
        now, due = time.monotonic(), self._due
        if self._exit_deadlines is not None:  # the exit window: damping on deadlines from the newest state
            self._answer_pending(False, "the node is shutting down")
            if now >= self._exit_deadlines.next:
                self._exit_deadlines.next += period * (1 + max(0, int((now - self._exit_deadlines.next) // period)))
                self._send(c.damping_command())
                self.exit_commands += 1
                self._exit_left -= 1
            return self._exit_left <= 0
        stalled = c.loop_awake(now)
        self._serve_requests()
        clock = self._deadlines
        if self.params["trigger"] == "clock":
            if now >= clock.next:
                lost = max(0, int((now - clock.next) // period))
                deadline = clock.next + lost * period
                clock.next = deadline + period
                c.stats.lost_cycles += lost
                self._cycle(deadline)
            elif stalled:
                self._cycle(now)
        elif due is not None:
            self._last_state, self._deadlines = due, None  # (a silent stream's clock ends: states pace the loop again)
            self._cycle(due)
        elif stalled:
            self._cycle(now)
        elif clock is not None:  # the state stream is silent: cycle on deadlines (the cycles damp)
            if now >= clock.next:
                deadline = clock.next
                clock.next = max(deadline + period, now)
                self._cycle(deadline)
        elif self._last_state is not None and now - self._last_state > c.config.state_timeout:
            self._deadlines = DeadlineClock(period, start=now)
            self._cycle(now)
        if c.version != self._status_version:
            self._publish_status()
        return False

    def _urgent(self) -> bool:
        """A request, an e-stop or a stop waits for the loop."""
        return bool(self._requests) or self._stop.is_set() or self._stop_signalled()

    def _stop_signalled(self) -> bool:
        """A SIGINT/SIGTERM (or request_stop) for this process since the node started."""
        at = runtime.stop_requested_at()
        return at is not None and at >= self._started_at

    # the loop's own subscriptions: called in the control thread as it takes each message
    def _on_imu(self, msg: Imu) -> None:
        o, g, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
        self.controller.imu((o.w, o.x, o.y, o.z), (g.x, g.y, g.z), stamp_seconds(msg.header), time.monotonic(),
                            accel=(a.x, a.y, a.z))

    def _on_joint_state(self, msg: JointState) -> None:
        now, c = time.monotonic(), self.controller
        c.joint_state(msg.name, msg.position, msg.velocity, stamp_seconds(msg.header), now)
        stream = c.inputs.joints
        if stream.advanced_at == now and self._pacer.due(stream.last_stamp) and self.params["trigger"] == "state":
            self._due = now

    def _on_cmd_vel(self, msg) -> None:
        t = msg.twist if self.cmd_vel_type is TwistStamped else msg
        if not self.controller.velocity_command(t.linear.x, t.linear.y, t.angular.z, time.monotonic()):
            self.get_logger().warning("cmd_vel with NaN/inf ignored", throttle_duration_sec=2.0)

    def _cycle(self, trigger: float) -> None:
        c = self.controller
        try:
            command = c.cycle(trigger)
        except Exception as exc:  # noqa: BLE001 - a bug must not end the loop with the last command holding
            command = c.internal_fault(f"command cycle raised {type(exc).__name__}: {exc}")
        if command is not None:
            if c.loop_awake() and command.mode != Mode.DAMP:
                # the process stalled between the cycle's start and here: never send what it built
                command = c.damping_command()
            self._send(command)
            latency = time.monotonic() - trigger
            c.stats.latency.add(latency)
            if c.stepped:
                c.stats.step_latency.add(latency)
            answered = c.inputs.joints.last_stamp
            if self.cycle_pub is not None and answered is not None:
                header = self._cycle_header
                header.frame_id = f"{command.mode.value} {c.cycle_index}"
                header.stamp.sec, header.stamp.nanosec = divmod(int(round(answered * 1e9)), 10**9)
                self.cycle_pub.publish(header)
        self._autostart_step()

    def _send(self, command) -> None:
        if self.command_pub is None:
            return
        if command.path == "torque":
            self._array[:] = command.tau
            self.command_pub.publish(self._message)
            return
        stamp_ns = self.get_clock().now().nanoseconds
        self.command_pub.publish(self._low.fill(command.q, command.dq, command.kp, command.kd, command.tau_ff,
                                                stamp_ns))
        joint = command.in_joint_space(self.controller.mapping)
        self.joint_command_pub.publish(self._joint.fill(joint["q"], joint["dq"], joint["kp"], joint["kd"],
                                                        joint["tau_ff"], stamp_ns))

    def _autostart_step(self) -> None:
        c = self.controller
        if not self._autostart or c.modes.faults:
            return
        if c.mode == Mode.PASSIVE and not c.conditions():
            ok, message = c.request_mode(Mode.STAND)
            self.get_logger().info(f"autostart: {message}")
            if ok and self._autostart == "stand":
                self._autostart = ""
        elif c.mode == Mode.STAND and c.stand_complete and self._autostart == "run":
            ok, message = c.request_mode(Mode.RUN)
            self.get_logger().info(f"autostart: {message}")
            self._autostart = "" if ok else self._autostart

    def _command_message(self, J: int) -> tuple[Float64MultiArray, array.array]:
        """The torque path's one command message every cycle fills in place, and its data buffer."""
        msg = Float64MultiArray()
        msg.layout.dim = [MultiArrayDimension(label="joints", size=J, stride=J)]
        msg.data = array.array("d", bytes(8 * J))
        buffer = msg.data  # the message's own array (the setter may copy what it is given)
        self._array = np.frombuffer(buffer, dtype=np.float64)  # a view: cycles write into the message in place
        return msg, buffer

    # ------------------------------------------------------------------ requests (answered by the loop)
    def _ask(self, action, what: str, response: Trigger.Response, inactive: str = "refuse") -> Trigger.Response:
        """Hand `action` to the control loop while active and answer what it returns; `inactive`: what
        happens while the loop is not running: 'run' it here (inactive only), or 'refuse'."""
        with self._transition_lock:  # (a transition in progress ends first)
            if self.state != "active":
                if inactive == "run" and self.state == "inactive":
                    try:
                        ok, message = action()
                    except Exception as exc:  # noqa: BLE001 - answered, as the loop answers
                        ok, message = False, f"{type(exc).__name__}: {exc}"
                    return self._answer(response, ok, message, what)
                return self._answer(response, False, self._not_active(), what)
            request = _Request(action)
            with self.lock:
                self._requests.append(request)
        self.owned.wake()
        if request.done.wait(REQUEST_TIMEOUT_S):
            ok, message = request.answer
        else:
            ok, message = False, f"the control loop did not answer within {REQUEST_TIMEOUT_S:g} s"
        return self._answer(response, ok, message, what)

    def _serve_requests(self) -> None:
        if not self._requests:
            return
        with self.lock:
            pending, self._requests = list(self._requests), collections.deque()
        for request in pending:
            try:
                request.answer = request.action()
            except Exception as exc:  # noqa: BLE001 - a request must not end the loop
                request.answer = (False, f"{type(exc).__name__}: {exc}")
            request.done.set()

    def _answer_pending(self, ok: bool, message: str) -> None:
        with self.lock:
            pending, self._requests = list(self._requests), collections.deque()
        for request in pending:
            request.answer = (ok, message)
            request.done.set()

    def _answer(self, response: Trigger.Response, ok: bool, message: str, what: str) -> Trigger.Response:
        response.success, response.message = bool(ok), message
        if ok:  # (rclpy wants one severity per logging call site)
            self.get_logger().info(f"{what}: {message}")
        else:
            self.get_logger().warning(f"{what}: {message}")
        return response

    def _not_active(self) -> str:
        name = self.get_fully_qualified_name()
        if self.state == "inactive":
            return f"the node is inactive (no command flows): activate it first (ros2 lifecycle set {name} activate)"
        return f"the node is {self.state}: configure and activate it first (ros2 lifecycle set {name} configure)"

    def _mode_service(self, mode: Mode):
        def serve(request, response):
            return self._ask(lambda: self.controller.request_mode(mode), f"set_mode {mode.value}", response)
        return serve

    def _on_estop(self, request, response):
        with self._transition_lock:
            if self.state in ("unconfigured", "finalized"):  # no controller, no command publisher
                return self._answer(response, True, f"the node is {self.state}: it sends no command", "estop")
        # inactive: latched here, so activate starts in DAMP
        return self._ask(lambda: self.controller.estop("e-stop service"), "estop", response, inactive="run")

    def _on_rearm(self, request, response):
        return self._ask(lambda: self.controller.rearm(), "rearm", response)

    def _on_load_policy(self, request: LoadPolicy.Request, response: LoadPolicy.Response) -> LoadPolicy.Response:
        path = request.path or self.get_parameter(POLICY_PARAMETER).value
        with self._transition_lock:
            if self.state in ("unconfigured", "finalized"):
                return self._answer(response, False, f"the node is {self.state}: set the 'policy' parameter and "
                                                     "configure (configure loads it)", "load_policy")
            robot, mode = self.robot, self.controller.mode
        if not path:
            return self._answer(response, False, "no file named: give the request's path or set the 'policy' "
                                                 "parameter", "load_policy")
        if mode not in (Mode.PASSIVE, Mode.DAMP):  # refuse before the load (the loop checks again)
            return self._ask(lambda: self.controller.load_policy(path), "load_policy", response)
        # load (ONNX Runtime set-up, warm-up) here, not in the loop, so cycles go on meanwhile
        from motionvl.deploy.policy import DeployedPolicy
        from motionvl.policy_io import ContractError

        try:
            policy = DeployedPolicy(path, robot)
        except (ContractError, OSError, ValueError) as exc:
            return self._answer(response, False, f"{type(exc).__name__}: {exc}", "load_policy")
        response = self._ask(lambda: self.controller.load_policy(policy), "load_policy", response, inactive="run")
        if response.success and request.path and request.path != self.get_parameter(POLICY_PARAMETER).value:
            self.set_parameters([Parameter(POLICY_PARAMETER, value=request.path)])
        return response

    def _on_set_parameters(self, params) -> SetParametersResult:
        for param in params:
            if param.name == POLICY_PARAMETER and not isinstance(param.value, str):
                return SetParametersResult(successful=False, reason="policy must be a path (string)")
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ other writers
    def _publishing_nodes(self, topic: str, ours: int = 0) -> list:
        """The nodes (namespace/name) publishing on `topic`, less this node's own `ours` publishers."""
        me = f"{self.get_namespace().rstrip('/')}/{self.get_name()}"
        names = [f"{i.node_namespace.rstrip('/')}/{i.node_name}" for i in self.get_publishers_info_by_topic(topic)]
        for _ in range(ours):
            if me in names:
                names.remove(me)
        return names

    def _other_writers(self) -> list:
        return self._publishing_nodes(self.command_topic, ours=0 if self.command_pub is None else 1)

    def _check_writers_at_start(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            others = self._other_writers()
            if others:
                raise ConfigError(f"another publisher writes {self.resolve_topic_name(self.command_topic)}: {others}; "
                                  "a robot takes commands from one controller only")
            if time.monotonic() >= end:
                return
            time.sleep(0.02)

    def _check_writers(self) -> None:
        """One writer on the command topic (ours) and one on each state topic (the robot's), or a fault;
        cmd_vel publishers of the other message type are reported (never heard). Configured only."""
        c = self.controller  # plain attribute writes: the loop reads them at its next cycle
        if c is None:
            return
        others = self._other_writers()
        state_writers = {topic: self._publishing_nodes(topic) for topic in self.state_topics}
        before = c.command_writers, c.state_writers
        c.command_writers = len(others)
        c.state_writers = state_writers
        if others and not before[0]:
            self.get_logger().error(f"another publisher on {self.command_topic}: {others}")
        for topic, names in state_writers.items():
            if len(names) > 1 and len(before[1].get(topic, ())) <= 1:
                self.get_logger().error(f"{len(names)} publishers on {topic}: {names}; the state must come from one "
                                        "source")
        want = f"geometry_msgs/msg/{self.cmd_vel_type.__name__}"
        wrong = sorted(f"{i.node_namespace.rstrip('/')}/{i.node_name} ({i.topic_type})"
                       for i in self.get_publishers_info_by_topic(self.cmd_vel_topic) if i.topic_type != want)
        if wrong and wrong != self.cmd_vel_wrong_type:
            self.get_logger().error(f"{self.cmd_vel_topic}: publisher(s) of another type than {want} (cmd_vel_type "
                                    f"{self.params['cmd_vel_type']!r}), never heard: {wrong}")
        self.cmd_vel_wrong_type = wrong

    # ------------------------------------------------------------------ reporting
    def _publish_status(self) -> None:
        """~/status when something in it changed (called by the loop, and once at start)."""
        c = self.controller
        self._status_version = c.version
        transitions = c.modes.transitions
        last = transitions[-1] if transitions else None
        new_transitions = transitions[self._logged_transitions:]
        self._logged_transitions = len(transitions)
        status = {"mode": c.mode.value, "stand_complete": c.stand_complete,
                  "faults": [str(f) for f in c.modes.faults],
                  "policy": None if c.policy is None else str(c.policy.path), "path": c.config.path,
                  "dry_run": c.config.dry_run, "cycle": c.cycle_index,
                  "transition": None if last is None else {"from": last.source.value, "to": last.target.value,
                                                           "why": last.why, "cycle": last.cycle}}
        for t in new_transitions:  # every mode change and fault, with its reason, in the log too
            text = f"{t.source.value} -> {t.target.value}: {t.why} (cycle {t.cycle})"
            if t.why in ("requested",) or t.why.startswith("re-armed"):
                self.get_logger().info(text)
            else:
                self.get_logger().error(text)
        self.status_pub.publish(deployment_status_msg(status, self.get_clock().now().to_msg()))

    def _publish_diagnostics(self) -> None:
        controller, lifecycle = self.controller, self.state
        if controller is None:
            self._publish_diagnostic(DiagnosticStatus.WARN, f"{lifecycle}: no command is sent",
                                     {"lifecycle": lifecycle}, hardware_id="")
            return
        s = controller.status()  # read beside the loop: copies of its figures, no lock on the cycle
        level = DiagnosticStatus.ERROR if s["faults"] else (
            DiagnosticStatus.WARN if s["mode"] == "PASSIVE" or s["overruns"] or self.cmd_vel_wrong_type
            or lifecycle != "active" else DiagnosticStatus.OK)
        runner = controller.runner
        values = {"lifecycle": lifecycle, "mode": s["mode"], "faults": "; ".join(s["faults"]) or "none", "fault_count": s["fault_count"],
                  "stand_progress": s["stand_progress"], "policy": s["policy"], "path": s["path"],
                  "command_topic": self.command_topic, "dry_run": s["dry_run"], "cycles": s["cycles"],
                  "policy_steps": s["policy_steps"], "overruns": s["overruns"], "lost_cycles": s["lost_cycles"],
                  "late_cycles": s["late_cycles"], "skipped_steps": s["skipped_steps"],
                  "command_velocity": s["command"], "realtime": self.realtime.describe(),
                  "loop_thread": self.loop_scheduling,
                  "policy_thread": getattr(runner, "scheduling", "no policy worker"),
                  "gil_switch_interval_ms": round(sys.getswitchinterval() * 1e3, 4),
                  "extra_joint_names": ", ".join(f"{k} ({v})" for k, v in s["extra_joint_names"].items()) or "none",
                  "cmd_vel_type": self.params["cmd_vel_type"],
                  "cmd_vel_wrong_type": "; ".join(self.cmd_vel_wrong_type) or "none",
                  "state_stamp": s["state_stamp"], "imu_stamp": s["imu_stamp"],
                  **{f"dropped_{k}": v for k, v in s["dropped"].items()},
                  **{f"clips_{k}": v for k, v in s["clips"].items()}}
        for name in ("period_ms", "period_error_ms", "latency_ms", "step_latency_ms", "inference_ms"):
            for stat in ("p50", "p99", "max"):
                values[f"{name[:-3]}_{stat}_ms"] = s[name][stat]
        last = s["last_transition"]
        values["last_transition"] = "none" if last is None else f"{last['from']} -> {last['to']}: {last['why']}"
        message = s["mode"] + (f", fault: {s['faults'][-1]}" if s["faults"] else "")
        self._publish_diagnostic(level, message if lifecycle == "active" else f"{lifecycle}: no command is sent, "
                                 + message, values, hardware_id=controller.robot.name)

    def _publish_diagnostic(self, level, message: str, values: dict, hardware_id: str) -> None:
        status = DiagnosticStatus(level=level, name=f"{self.get_name()}: controller", hardware_id=hardware_id,
                                  message=message, values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics_pub.publish(msg)

    # ------------------------------------------------------------------ exit
    def stop_control(self) -> None:
        """Ask the loop for its exit (damping for exit_damping_seconds, then it ends) and wait for it
        (idempotent)."""
        self._stop.set()
        if self._thread is None:
            return
        self.owned.wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.params["exit_damping_seconds"] + JOIN_MARGIN_S)

    def send_exit_damping(self) -> int:
        """Damping commands from the newest state for exit_damping_seconds at the command rate, sent from
        the calling thread: the exit when the loop could not send it (it never started, or did not end).
        Returns how many were sent."""
        if self.command_pub is None or self.controller is None:
            return 0
        period = self.controller.period
        count = max(1, int(round(self.params["exit_damping_seconds"] / period)))
        clock = DeadlineClock(period)
        sent = 0
        for _ in range(count):
            try:
                self._send(self.controller.damping_command())
            except Exception as exc:  # the context went away under us: nothing more can be sent
                self.get_logger().error(f"exit damping stopped after {sent} commands: {exc}")
                break
            sent += 1
            if clock.wait(threading.Event())[0] is None:
                break
        return sent

    def destroy_node(self) -> None:
        """The exit: while active, the loop's exit window (damping), then everything released."""
        if self._thread is not None:
            self.stop_control()
            if self._thread.is_alive():
                self.get_logger().error("the control loop did not end: sending the exit damping from here")
                self.exit_commands += self.send_exit_damping()
            if self.exit_commands:
                self.get_logger().info(f"exit: sent {self.exit_commands} damping commands")
        c = self.controller  # (kept: a loop that did not end may still read it)
        if c is not None and not c.close(timeout=0.5):
            self.get_logger().warning("a policy step was still running at exit (it hangs outside ONNX Runtime)")
        super().destroy_node()


def main(args=None) -> int:
    return run_node(DeploymentNode, NODE_NAME, args, threads=1)


if __name__ == "__main__":
    sys.exit(main())

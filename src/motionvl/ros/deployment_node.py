"""deployment: the ONNX policy on the robot through a PD joint-to-motor mapping, with hard safety.

A thin adapter over `motionvl.deploy.Controller` (modes, faults, policy, commands; no ROS there).
A control thread runs one command cycle per new joint state (`trigger: state`, the drive's stream
paces the loop, as ros2_control and vendor bridges do) or on absolute monotonic deadlines
(`trigger: clock`); when the state stream goes silent it keeps cycling on the clock, so damping
goes out even when nothing comes in. Services and subscriptions run on the executor thread; one
lock orders them with the cycles.

Subscribes (motor names and space; see the robot config's `hardware:` section):
  joint_states  sensor_msgs/JointState  position and velocity by motor name. Reliable, depth 1
                                        (only the newest state matters); with trigger 'state' a
                                        message whose stamp advances triggers a cycle, paced to the
                                        command rate by its stamp (a drive publishing faster than
                                        that does not speed up the policy or the STAND ramp).
                                        On joint_states and imu/data alike: one publisher only (a
                                        second one, e.g. a stale bag playing or a simulator left
                                        running, is a fault), and a message stamped older than the
                                        newest one taken is dropped and counted (out_of_order_limit
                                        of them within out_of_order_window is a fault).
  imu/data      sensor_msgs/Imu         orientation and gyro in the IMU's mounted frame. Sensor-data
                                        QoS (best effort, depth 5).
  cmd_vel       geometry_msgs/Twist     the velocity command: clipped to the policy's trained
                                        ranges, rate-limited, zeroed when silent. Reliable, depth 1.
Publishes:
  <command_topic>  std_msgs/Float64MultiArray  one per command cycle (none in dry_run). path 'pd':
                   per motor [q, dq, kp, kd, tau_ff], joint-major, layout dims labelled
                   ("joints", "q,dq,kp,kd,tau_ff"): the order of ros2_control's multi-interface
                   forward command controller. path 'torque': per motor tau. Reliable, depth 1.
  <command_topic>/joint_names  sensor_msgs/JointState  the motor names of the commands (names only),
                   transient local: published once.
  ~/status      std_msgs/String      JSON {mode, stand_complete, faults, policy, path, dry_run,
                                     transition}: on every change, transient local (depth 1).
  /diagnostics  diagnostic_msgs/DiagnosticArray  mode, faults, clips, overruns, loop period and
                                     latency p50/p99/max, policy inference time, real-time status.
  ~/cycle       std_msgs/Header      (publish_cycle_stamps only) after each command: the stamp of the
                                     joint state it answered (`motionvl bench deploy` pairs them).
Services (all std_srvs/Trigger: standard types only, so no interface package has to be built in
the pip route; each call is synchronous and answers success plus the reason for a refusal, from
`ros2 service call` and rclpy alike; the argument of a request lives in its name or a parameter):
  ~/set_mode/passive, ~/set_mode/stand, ~/set_mode/run, ~/set_mode/damp
                the mode requests (PASSIVE -> RUN and any request while a fault is latched are
                refused; DAMP is always accepted).
  ~/estop       DAMP now, latched; always succeeds.
  ~/rearm       clear latched faults (mode stays DAMP): refused unless allow_rearm is true and no
                fault condition is still present.
  ~/load_policy load the ONNX file the `policy` parameter names (set it first: `ros2 param set`):
                only in PASSIVE or DAMP, only after its contract matches the robot.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Twist
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float64MultiArray, Header, MultiArrayDimension, String
from std_srvs.srv import Trigger

from motionvl.deploy import PD_FIELDS, Controller, DeployConfig, Mode
from motionvl.deploy.scheduling import DeadlineClock, RealtimeStatus, StatePacer, request_realtime
from motionvl.robot import ConfigError, load_robot_config
from motionvl.ros.params import declare_parameters
from motionvl.ros.runtime import run_node

NODE_NAME = "deployment"
TRIGGERS = ("state", "clock")
AUTOSTART = ("", "stand", "run")
DEFAULT_COMMAND_TOPICS = {"pd": "joint_drive_commands", "torque": "joint_effort_commands"}

# name -> (default, description); read-only after start. The DeployConfig fields share its names.
PARAMETERS = {
    "robot_config": ("", "Robot YAML (joints, gains, limits, hardware mapping); empty = the package's config/robot.yaml."),
    "path": ("pd", "'pd': drive-side PD [q, dq, kp, kd, tau_ff] per motor; 'torque': host-side PD torques."),
    "command_topic": ("", "Topic of the motor commands; empty = joint_drive_commands (pd) or joint_effort_commands "
                          "(torque)."),
    "command_rate_hz": (0.0, "Command cycles per second; 0 = the path's own (pd: policy rate, torque: PD rate 1/sim_dt)."),
    "trigger": ("state", "'state': the joint states pace the loop (a cycle per state with a new stamp, at most "
                         "the command rate by their stamps); 'clock': absolute monotonic deadlines at command_rate_hz."),
    "autostart": ("", "'' stays in PASSIVE for the operator; 'stand' goes to STAND once the state stream is up; "
                      "'run' then to RUN when the ramp completes (simulation playback)."),
    "stand_seconds": (2.0, "STAND ramp time: targets and gains from where they are to the default pose, s."),
    "soft_limit_factor": (0.95, "Targets are clipped to the middle of each joint range +- this share of its half range."),
    "joint_limit_margin": (0.1, "rad beyond a hard joint limit at which a measured position is a fault."),
    "velocity_bound_scale": (1.5, "A joint speed above this x its velocity limit is a fault."),
    "gyro_bound": (10.0, "rad/s: a base angular speed above this is a fault."),
    "fall_tilt": (0.8, "rad: base tilt at which the robot has fallen (a fault)."),
    "fall_clear_tilt": (0.4, "rad: the fall condition clears only below this tilt (hysteresis)."),
    "state_timeout": (0.1, "s: joint states or IMU silent, or with stamps not advancing, this long is a fault."),
    "out_of_order_limit": (3, "This many joint states (or IMU readings) within out_of_order_window stamped older than "
                              "the newest one taken (each dropped, never acted on) is a fault."),
    "out_of_order_window": (1.0, "s: see out_of_order_limit; the fault's condition clears this long after the last drop."),
    "overrun_periods": (3, "A cycle finishing more than this many policy periods late (in total over a streak, which in RUN "
                        "only a policy step in time ends) is a fault."),
    "damping_scale": (1.0, "DAMP and exit: Kd = this x the configured Kd."),
    "gain_limit_scale": (1.0, "Drive-side kp and kd are bounded by this x the configured gains."),
    "feedforward_limit": (0.2, "|tau_ff| sent to the drive is bounded by this share of the effort limit."),
    "cmd_vel_timeout": (0.5, "s: the velocity command goes back to zero when cmd_vel is silent this long."),
    "cmd_vel_accel": (1.0, "m/s^2: rate limit of the commanded vx and vy."),
    "cmd_yaw_accel": (2.0, "rad/s^2: rate limit of the commanded yaw rate."),
    "allow_rearm": (False, "Let software clear latched faults (~/rearm): simulation playback only. On hardware "
                           "re-arming is an operator's act: restart the node at the robot."),
    "dry_run": (False, "Run everything on the live state stream but publish no command (bring-up in the gantry)."),
    "realtime_priority": (50, "SCHED_FIFO priority asked for every thread of the process (0: ask for nothing); "
                              "the node says when the system refuses."),
    "lock_memory": (True, "mlockall the process with the real-time request."),
    "diagnostics_rate_hz": (2.0, "Rate of /diagnostics."),
    "exit_damping_seconds": (0.3, "On exit (SIGINT/SIGTERM, destroy) damping commands go out for this long first."),
    "publish_cycle_stamps": (False, "After each command, publish ~/cycle (std_msgs/Header: the stamp of the joint "
                                    "state it answered, the mode as frame_id): for latency benchmarks."),
    "writer_discovery_seconds": (0.3, "At start, how long to look for another publisher on the command topic "
                                      "(one refuses the start)."),
}
POLICY_PARAMETER = "policy"

COMMAND_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
STATE_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
LATCHED_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
DIAGNOSTICS_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
WRITER_CHECK_PERIOD_S = 0.1


def deploy_config(p: dict) -> DeployConfig:
    """The controller's settings from the node's parameters."""
    fields = {f: p[f] for f in ("path", "command_rate_hz", "stand_seconds", "soft_limit_factor", "joint_limit_margin",
                                "velocity_bound_scale", "gyro_bound", "fall_tilt", "fall_clear_tilt", "state_timeout",
                                "out_of_order_limit", "out_of_order_window", "overrun_periods", "damping_scale",
                                "gain_limit_scale", "feedforward_limit", "cmd_vel_timeout", "allow_rearm", "dry_run")}
    return DeployConfig(**fields, cmd_vel_accel=(p["cmd_vel_accel"], p["cmd_vel_accel"], p["cmd_yaw_accel"]))


def stamp_seconds(header) -> float:
    return header.stamp.sec + header.stamp.nanosec * 1e-9


class DeploymentNode(Node):
    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        # what destroy_node needs, first: a constructor that raises still gets destroyed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.command_pub = None
        p = declare_parameters(self, PARAMETERS)
        self.declare_parameter(POLICY_PARAMETER, "", ParameterDescriptor(
            description="ONNX policy: loaded at start when set; ~/load_policy loads the file it names."))
        if p["trigger"] not in TRIGGERS:
            raise ConfigError(f"parameter trigger must be one of {TRIGGERS}, got {p['trigger']!r}")
        if p["autostart"] not in AUTOSTART:
            raise ConfigError(f"parameter autostart must be one of {AUTOSTART}, got {p['autostart']!r}")
        self.params = p
        self.robot = load_robot_config(p["robot_config"] or None)
        self.controller = Controller(self.robot, deploy_config(p))
        self.lock = threading.Lock()
        c = self.controller
        policy = self.get_parameter(POLICY_PARAMETER).value
        if policy:
            ok, message = c.load_policy(policy)
            if not ok:
                raise ConfigError(f"policy refused: {message}")
            self.get_logger().info(message)

        self.command_topic = p["command_topic"] or DEFAULT_COMMAND_TOPICS[c.config.path]
        self.command_pub = None if c.config.dry_run else self.create_publisher(
            Float64MultiArray, self.command_topic, COMMAND_QOS)
        self._check_writers_at_start(p["writer_discovery_seconds"])
        names_pub = self.create_publisher(JointState, self.command_topic + "/joint_names", LATCHED_QOS)
        names_pub.publish(JointState(name=list(c.mapping.motor_names)))
        self._message = self._command_message()
        self.status_pub = self.create_publisher(String, "~/status", LATCHED_QOS)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", DIAGNOSTICS_QOS)
        self.cycle_pub = self.create_publisher(Header, "~/cycle", COMMAND_QOS) if p["publish_cycle_stamps"] else None

        # the resolved names (remappings applied) are what the publisher check must look at
        self.state_topics = [
            self.create_subscription(JointState, "joint_states", self._on_joint_state, STATE_QOS).topic_name,
            self.create_subscription(Imu, "imu/data", self._on_imu, qos_profile_sensor_data).topic_name]
        self.create_subscription(Twist, "cmd_vel", self._on_cmd_vel, COMMAND_QOS)
        for mode in Mode:
            self.create_service(Trigger, f"~/set_mode/{mode.value.lower()}", self._mode_service(mode))
        self.create_service(Trigger, "~/estop", self._on_estop)
        self.create_service(Trigger, "~/rearm", self._on_rearm)
        self.create_service(Trigger, "~/load_policy", self._on_load_policy)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.create_timer(WRITER_CHECK_PERIOD_S, self._check_writers)
        self.create_timer(1.0 / p["diagnostics_rate_hz"], self._publish_diagnostics)

        self.realtime = RealtimeStatus(p["realtime_priority"])
        self._state_event = threading.Event()
        self._pacer = StatePacer(c.period)
        self._state_arrival = 0.0
        self._had_state = False
        self._autostart = p["autostart"]
        self._status_key = None
        self._logged_transitions = 0
        self._publish_status(force=True)
        self._thread = threading.Thread(target=self._control_loop, name="deployment-control", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"{c.config.path} path on {self.command_topic} at {1 / c.period:g} Hz (policy every {c.decimation} "
            f"cycles), trigger {p['trigger']}{', DRY RUN: no command is published' if c.config.dry_run else ''}; "
            f"mode {c.mode.value}")

    # ------------------------------------------------------------------ the control thread
    def _control_loop(self) -> None:
        p = self.params
        if p["realtime_priority"] > 0:
            self.realtime = request_realtime(p["realtime_priority"], p["lock_memory"])
            if self.realtime.granted:  # (rclpy wants one severity per logging call site)
                self.get_logger().info(f"real-time scheduling: {self.realtime.describe()}")
            else:
                self.get_logger().warning(f"real-time scheduling refused: {self.realtime.describe()}")
        period = self.controller.period
        if p["trigger"] == "clock":
            clock = DeadlineClock(period)
            while True:
                deadline, lost = clock.wait(self._stop)
                if deadline is None:
                    return
                self.controller.stats.lost_cycles += lost
                self._cycle(deadline)
            return
        timeout = self.controller.config.state_timeout
        stale_clock = None
        while not self._stop.is_set():
            if self._state_event.wait(timeout):
                self._state_event.clear()
                if self._stop.is_set():
                    return
                stale_clock, timeout = None, self.controller.config.state_timeout
                self._cycle(self._state_arrival)
            elif self._had_state and not self._stop.is_set():
                # the state stream went silent: cycle on deadlines (the cycles damp) until it is back
                stale_clock = stale_clock or DeadlineClock(period, start=time.monotonic() - period)
                self._cycle(stale_clock.next - period)
                stale_clock.next += period
                timeout = max(0.0, stale_clock.next - time.monotonic())

    def _cycle(self, trigger: float) -> None:
        with self.lock:
            try:
                command = self.controller.cycle(trigger)
            except Exception as exc:  # noqa: BLE001 - a bug must not end the loop with the last command holding
                command = self.controller.internal_fault(f"command cycle raised {type(exc).__name__}: {exc}")
            self._autostart_step()
            answered = self.controller.inputs.joints.last_stamp
        if command is not None and self.command_pub is not None:
            self._message.data = command.data().tolist()
            self.command_pub.publish(self._message)
            self.controller.stats.latency.add(time.monotonic() - trigger)
            if self.cycle_pub is not None and answered is not None:
                header = Header(frame_id=command.mode.value)
                header.stamp.sec, header.stamp.nanosec = divmod(int(round(answered * 1e9)), 10**9)
                self.cycle_pub.publish(header)
        self._publish_status()

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

    def _command_message(self) -> Float64MultiArray:
        J = self.robot.num_joints
        msg = Float64MultiArray()
        if self.controller.config.path == "pd":
            F = len(PD_FIELDS)
            msg.layout.dim = [MultiArrayDimension(label="joints", size=J, stride=J * F),
                              MultiArrayDimension(label=",".join(PD_FIELDS), size=F, stride=F)]
        else:
            msg.layout.dim = [MultiArrayDimension(label="joints", size=J, stride=J)]
        return msg

    # ------------------------------------------------------------------ inputs
    def _on_joint_state(self, msg: JointState) -> None:
        now = time.monotonic()
        with self.lock:
            self.controller.joint_state(msg.name, msg.position, msg.velocity, stamp_seconds(msg.header), now)
            joints = self.controller.inputs.joints
            due = joints.advanced_at == now and self._pacer.due(joints.last_stamp)
        if due:
            self._state_arrival, self._had_state = now, True
            self._state_event.set()

    def _on_imu(self, msg: Imu) -> None:
        o, g = msg.orientation, msg.angular_velocity
        with self.lock:
            self.controller.imu((o.w, o.x, o.y, o.z), (g.x, g.y, g.z), stamp_seconds(msg.header))

    def _on_cmd_vel(self, msg: Twist) -> None:
        with self.lock:
            ok = self.controller.velocity_command(msg.linear.x, msg.linear.y, msg.angular.z)
        if not ok:
            self.get_logger().warning("cmd_vel with NaN/inf ignored", throttle_duration_sec=2.0)

    # ------------------------------------------------------------------ requests
    def _answer(self, response: Trigger.Response, ok: bool, message: str, what: str) -> Trigger.Response:
        response.success, response.message = bool(ok), message
        if ok:  # (rclpy wants one severity per logging call site)
            self.get_logger().info(f"{what}: {message}")
        else:
            self.get_logger().warning(f"{what}: {message}")
        self._publish_status()
        return response

    def _mode_service(self, mode: Mode):
        def serve(request, response):
            with self.lock:
                ok, message = self.controller.request_mode(mode)
            return self._answer(response, ok, message, f"set_mode {mode.value}")
        return serve

    def _on_estop(self, request, response):
        with self.lock:
            ok, message = self.controller.estop("e-stop service")
        return self._answer(response, ok, message, "estop")

    def _on_rearm(self, request, response):
        with self.lock:
            ok, message = self.controller.rearm()
        return self._answer(response, ok, message, "rearm")

    def _on_load_policy(self, request, response):
        path = self.get_parameter(POLICY_PARAMETER).value
        if not path:
            return self._answer(response, False, "parameter 'policy' names no file: set it first", "load_policy")
        with self.lock:
            if self.controller.mode not in (Mode.PASSIVE, Mode.DAMP):
                ok, message = self.controller.load_policy(path)  # refuses, naming the mode
            else:
                ok, message = None, None
        if ok is None:  # load (ONNX Runtime set-up, warm-up) outside the lock, so cycles go on meanwhile
            from motionvl.deploy.policy import DeployedPolicy
            from motionvl.policy_io import ContractError

            try:
                policy = DeployedPolicy(path, self.robot)
            except ContractError as exc:
                return self._answer(response, False, str(exc), "load_policy")
            with self.lock:
                ok, message = self.controller.load_policy(policy)
        return self._answer(response, ok, message, "load_policy")

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
        """One writer on the command topic (ours) and one on each state topic (the robot's), or a fault."""
        others = self._other_writers()
        state_writers = {topic: self._publishing_nodes(topic) for topic in self.state_topics}
        with self.lock:
            before = self.controller.command_writers, self.controller.state_writers
            self.controller.command_writers = len(others)
            self.controller.state_writers = state_writers
        if others and not before[0]:
            self.get_logger().error(f"another publisher on {self.command_topic}: {others}")
        for topic, names in state_writers.items():
            if len(names) > 1 and len(before[1].get(topic, ())) <= 1:
                self.get_logger().error(f"{len(names)} publishers on {topic}: {names}; the state must come from one "
                                        "source")

    # ------------------------------------------------------------------ reporting
    def _publish_status(self, force: bool = False) -> None:
        with self.lock:
            c = self.controller
            last = c.modes.transitions[-1] if c.modes.transitions else None
            key = (c.mode, c.stand_complete, tuple(str(f) for f in c.modes.faults),
                   None if c.policy is None else str(c.policy.path), len(c.modes.transitions))
            if key == self._status_key and not force:
                return
            new_transitions = c.modes.transitions[self._logged_transitions:]
            self._logged_transitions = len(c.modes.transitions)
            self._status_key = key
            status = {"mode": c.mode.value, "stand_complete": c.stand_complete, "faults": list(key[2]),
                      "policy": key[3], "path": c.config.path, "dry_run": c.config.dry_run, "cycle": c.cycle_index,
                      "transition": None if last is None else {"from": last.source.value, "to": last.target.value,
                                                               "why": last.why, "cycle": last.cycle}}
        for t in new_transitions:  # every mode change and fault, with its reason, in the log too
            text = f"{t.source.value} -> {t.target.value}: {t.why} (cycle {t.cycle})"
            if t.why in ("requested",) or t.why.startswith("re-armed"):
                self.get_logger().info(text)
            else:
                self.get_logger().error(text)
        self.status_pub.publish(String(data=json.dumps(status)))

    def _publish_diagnostics(self) -> None:
        with self.lock:
            s = self.controller.status()
        level = DiagnosticStatus.ERROR if s["faults"] else (
            DiagnosticStatus.WARN if s["mode"] == "PASSIVE" or s["overruns"] else DiagnosticStatus.OK)
        values = {"mode": s["mode"], "faults": "; ".join(s["faults"]) or "none", "fault_count": s["fault_count"],
                  "stand_progress": s["stand_progress"], "policy": s["policy"], "path": s["path"],
                  "command_topic": self.command_topic, "dry_run": s["dry_run"], "cycles": s["cycles"],
                  "policy_steps": s["policy_steps"], "overruns": s["overruns"], "lost_cycles": s["lost_cycles"],
                  "command_velocity": s["command"], "realtime": self.realtime.describe(),
                  **{f"dropped_{k}": v for k, v in s["dropped"].items()},
                  **{f"clips_{k}": v for k, v in s["clips"].items()}}
        for name in ("period_ms", "period_error_ms", "latency_ms", "inference_ms"):
            for stat in ("p50", "p99", "max"):
                values[f"{name[:-3]}_{stat}_ms"] = s[name][stat]
        last = s["last_transition"]
        values["last_transition"] = "none" if last is None else f"{last['from']} -> {last['to']}: {last['why']}"
        status = DiagnosticStatus(level=level, name=f"{self.get_name()}: controller", hardware_id=self.robot.name,
                                  message=s["mode"] + (f", fault: {s['faults'][-1]}" if s["faults"] else ""),
                                  values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics_pub.publish(msg)

    # ------------------------------------------------------------------ exit
    def stop_control(self) -> None:
        """Stop the control thread (idempotent)."""
        self._stop.set()
        if self._thread is None:
            return
        self._state_event.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)

    def send_exit_damping(self) -> int:
        """The last action: damping commands from the newest state for exit_damping_seconds at the
        command rate (the drive's own watchdog takes over after). Returns how many were sent."""
        if self.command_pub is None or self._thread is None:  # never started: nothing was commanded
            return 0
        period = self.controller.period
        count = max(1, int(round(self.params["exit_damping_seconds"] / period)))
        clock = DeadlineClock(period)
        sent = 0
        for _ in range(count):
            with self.lock:
                command = self.controller.damping_command()
            self._message.data = command.data().tolist()
            try:
                self.command_pub.publish(self._message)
            except Exception as exc:  # the context went away under us: nothing more can be sent
                self.get_logger().error(f"exit damping stopped after {sent} commands: {exc}")
                break
            sent += 1
            if clock.wait(threading.Event())[0] is None:
                break
        return sent

    def destroy_node(self) -> None:
        self.stop_control()
        sent = self.send_exit_damping()
        if sent:
            self.get_logger().info(f"exit: sent {sent} damping commands")
        super().destroy_node()


def main(args=None) -> int:
    return run_node(DeploymentNode, NODE_NAME, args, threads=1)


if __name__ == "__main__":
    sys.exit(main())

"""simulator: one robot in MuJoCo behind the topics a real robot driver would offer.

A thin adapter over `motionvl.sim.single.SingleSim` (stepping, command validation, modes).

Publishes (relative names, so a namespace or remapping moves them; /clock and /tf are global):
  joint_states   sensor_msgs/JointState   joint space: 12 joints by joint name in robot-config order,
                                          the URDF's sign and zero: position, velocity, effort (applied
                                          torque). Reliable, depth 10.
  motor_states   sensor_msgs/JointState   (emulate_hardware only) motor space: what the drives report,
                                          by motor name in the motors' order, sign and zero offset (the
                                          robot config's `hardware:` section). Reliable, depth 10.
  imu/data       sensor_msgs/Imu          orientation, gyro, accelerometer (specific force).
                                          Sensor-data QoS (best effort, depth 5).
  odom           nav_msgs/Odometry        ground-truth base pose in `odom`, twist in the base
                                          frame. Reliable, depth 10.
  foot_forces    std_msgs/Float64MultiArray  [left, right] sole normal force, N (the feet's force
                                          sensors: contact timelines). Reliable, depth 10.
  ~/command      geometry_msgs/TwistStamped  the velocity command in effect (last cmd_vel,
                                          zeroed after command_timeout). Reliable, depth 10.
  /clock         rosgraph_msgs/Clock      simulated time (best effort, depth 1, as ROS time
                                          sources subscribe). Every stamp above is this clock.
  /tf            tf2_msgs/TFMessage       odom -> base link, only where tf2_msgs imports (it
                                          has no PyPI wheel; the node says once when /tf is off).
Subscribes (reliable, depth 1: only the newest command matters):
  joint_position_commands  std_msgs/Float64MultiArray  12 targets, config order ("position" mode)
  joint_effort_commands    std_msgs/Float64MultiArray  12 torques ("effort" mode), motor order and sign
                                                       with emulate_hardware, else joint order
  low_command              motionvl/LowCommand         (emulate_hardware only) drive-side PD ("effort"
                                                       mode) per motor name, in motor space
  joint_command            motionvl/JointCommand       (without emulate_hardware) drive-side PD
                                                       ("effort" mode) per joint name, in joint space
  joint_commands           sensor_msgs/JointState       named subset: `position` in position mode,
                                                       `effort` in effort mode
  cmd_vel                  geometry_msgs/Twist          velocity command (linear.x, linear.y, angular.z)
  <gantry_release_topic>   motionvl/DeploymentStatus    (with `gantry`) the deployment node's status:
                                                       the gantry lets go at stand_complete
Publishes also:
  ~/actuation  motionvl/Actuation  (transient local, on change) what the actuators do: PD (position
                                mode), TORQUE, DRIVE (drive-side PD) or DAMPING (the drives' watchdog:
                                no command for command_timeout, or none yet).
Services:
  ~/reset  std_srvs/Trigger  back to the standing pose, targets at the default pose (and back
                             into the gantry when there is one); starts a held simulation.
  ~/hold   std_srvs/Trigger  stop stepping and publishing until the next ~/reset (with
                             `hold_until_reset` the node starts held): a playback graph idles
                             between playbacks instead of running a robot nobody watches.
Bad commands (wrong length, NaN/inf, unknown joints, wrong mode) and statuses are logged (throttled),
counted per topic and ignored (motionvl.ros.inbox): the robot is held at the last good command; a
publisher of another type on a subscribed topic is reported.

Hardware emulation ("effort" mode) takes both command paths of the deployment node and, with
`emulate_hardware`, behaves like the robot the config's `hardware:` section describes: it speaks
motor space (motor_states and low_command in motor names, order, sign and zero offset, torques in
motor order), the IMU in its mounted frame, so a non-identity joint mapping is tested end to end.
joint_states stay in joint space for the camera, the critic and tools (a robot_state_publisher).

Timing: a stepping thread of the node's own (not an executor timer) advances physics on absolute
monotonic deadlines (publish_rate_hz x realtime_factor; 1 ms apart when realtime is false), publishes
imu/data and then the controller's state (motor_states with emulate_hardware, else joint_states) first, takes the commands itself as they arrive (its own wait set:
`motionvl.ros.owned`) and only then publishes joint_states (when emulating), odom, foot_forces, ~/command, /clock and /tf, so the
controller's cycle never competes with the rest of the publishing. The hardware emulation's drives
fall back to damping when commands stop for command_timeout (a drive's own watchdog: after kill -9
or a power loss of the host nothing else would stop the last command); ~/actuation says what they
do. realtime_priority asks for SCHED_FIFO (a 500 Hz host-torque rehearsal on a loaded machine).

Stamps are simulated time: consumers should run with use_sim_time:=true (the launch files do);
the simulator itself must not (it publishes the /clock).
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

from geometry_msgs.msg import TransformStamped, Twist, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.time import Time
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu, JointState
from rclpy.qos import DurabilityPolicy
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from motionvl.deploy.mapping import JointMapping
from motionvl.deploy.scheduling import request_realtime
from motionvl.envs.config import RandomizationConfig
from motionvl.msg import Actuation, DeploymentStatus, JointCommand, LowCommand
from motionvl.robot import ConfigError, load_robot_config
from motionvl.ros.inbox import Inbox
from motionvl.ros.messages import actuation_msg, deployment_status_from_msg, drive_command_from_msg
from motionvl.ros.owned import OwnedSubscriptions
from motionvl.ros.params import declare_parameters
from motionvl.ros.runtime import run_node
from motionvl.ros.terrain import TERRAIN_PARAMETERS, node_terrain
from motionvl.sim.model import SOLE_SITES
from motionvl.sim.single import MODES, CommandError, SingleSim

try:  # not on PyPI; present in a ROS 2 distribution install
    from tf2_msgs.msg import TFMessage
except ImportError:  # pragma: no cover - depends on the install
    TFMessage = None

NODE_NAME = "simulator"

# name -> (default, description); all read-only after start (declared by motionvl.ros.params)
PARAMETERS = {
    "robot_config": ("", "Robot YAML (joint order, gains, limits, sim_dt); empty = the package's config/robot.yaml."),
    "publish_rate_hz": (50.0, "Rate of joint_states, imu/data, odom, /clock and /tf, Hz (in simulated time)."),
    "realtime": (True, "true: advance physics with the wall clock (times realtime_factor); "
                       "false: as fast as possible, consumers follow /clock."),
    "realtime_factor": (1.0, "Simulated seconds per wall second when realtime is true."),
    "mode": ("position", "'position': commands are PD joint targets (the deployment law in the model's actuators); "
                         "'effort': hardware emulation, commands are joint torques."),
    **TERRAIN_PARAMETERS,
    "command_timeout": (0.5, "Seconds (simulated) after which cmd_vel is zeroed and, in effort mode, the emulated "
                             "drives fall back to damping (their own watchdog); 0 disables. Position targets are held."),
    "odom_frame": ("odom", "Frame id of odom and the /tf parent."),
    "emulate_hardware": (False, "Behave like the robot config's hardware section describes: motor_states and "
                                "low_command in motor names, order, sign and offset (joint_states stay in joint space); "
                                "the IMU in its mounted frame."),
    "randomize": (False, "Domain randomisation as in training (RandomizationConfig's ranges): ground friction, joint "
                         "friction, drive strength drawn at start and each reset, and a push every push interval."),
    "randomization_seed": (0, "Seed of the randomisation draws and pushes."),
    "lockstep": (False, "After each published state physics waits until a command answers it (at most lockstep_wait_s "
                        "wall seconds), never running faster than realtime allows: the controller's delay is no part "
                        "of the physics (sim-to-sim tests of a host torque loop on a loaded machine)."),
    "lockstep_wait_s": (1.0, "Wall seconds lockstep waits for a command before stepping anyway (start-up, a silent "
                             "controller)."),
    "hold_until_reset": (False, "Start without stepping or publishing; ~/reset starts the simulation and ~/hold stops "
                                "it again (the training graph's playback simulator idles between candidates)."),
    "gantry": (False, "Hold the pelvis on a virtual gantry until the deployment node reports its STAND ramp complete "
                      "(and again after ~/reset)."),
    "gantry_release_topic": ("deployment/status", "motionvl/DeploymentStatus whose stand_complete (or mode RUN) "
                                                  "lets the gantry go."),
    "realtime_priority": (0, "SCHED_FIFO priority asked for every thread of the process (0: ask for nothing); the "
                             "node says when the system refuses."),
}

COMMAND_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
STATE_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
CLOCK_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST)
TF_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
LATCHED_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
WARN_PERIOD_S = 2.0  # throttle for bad-input warnings
MAX_CATCH_UP_S = 0.25  # most simulated time one tick may add when the wall clock ran ahead
FAST_TICK_S = 0.001  # wall seconds between ticks when realtime is false
COMMAND_WAIT_SHARE = 0.5  # of a tick: how long the rest of the publishing waits for the command


class SimulatorNode(Node):
    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        p = declare_parameters(self, PARAMETERS)
        if p["mode"] not in MODES:
            raise ConfigError(f"parameter mode must be one of {MODES}, got {p['mode']!r}")
        if p["publish_rate_hz"] <= 0 or p["realtime_factor"] <= 0:
            raise ConfigError("parameters publish_rate_hz and realtime_factor must be > 0")
        if self.get_parameter("use_sim_time").value:
            self.get_logger().warning("use_sim_time is true on the simulator, which publishes /clock itself: "
                                      "its timer waits for /clock; leave use_sim_time false here")

        self.robot = load_robot_config(p["robot_config"] or None)
        self.sim = SingleSim(self.robot, node_terrain(p), mode=p["mode"],
                             command_timeout=p["command_timeout"], gantry=p["gantry"])
        self.randomization = RandomizationConfig.for_evaluation() if p["randomize"] else None
        self._rng = np.random.default_rng(p["randomization_seed"])
        self._next_push = None
        self._randomize()
        # the emulated hardware's side of the joint mapping: identity unless asked to emulate the config's
        self.hardware = JointMapping(self.robot) if p["emulate_hardware"] else None
        self.realtime = bool(p["realtime"])
        self.realtime_factor = float(p["realtime_factor"])
        self.period = 1.0 / float(p["publish_rate_hz"])
        self.lockstep, self.lockstep_wait = bool(p["lockstep"]), float(p["lockstep_wait_s"])
        self._unanswered_since: float | None = None  # lockstep: wall time of a state no command answered yet
        self.odom_frame = p["odom_frame"]

        self.joint_state_pub = self.create_publisher(JointState, "joint_states", STATE_QOS)
        self.motor_state_pub = self.create_publisher(JointState, "motor_states", STATE_QOS) if self.hardware else None
        self.imu_pub = self.create_publisher(Imu, "imu/data", qos_profile_sensor_data)
        self.odom_pub = self.create_publisher(Odometry, "odom", STATE_QOS)
        self.command_pub = self.create_publisher(TwistStamped, "~/command", STATE_QOS)
        self.feet_pub = self.create_publisher(Float64MultiArray, "foot_forces", STATE_QOS)
        self.actuation_pub = self.create_publisher(Actuation, "~/actuation", LATCHED_QOS)
        self._actuation = None
        self._touch = [self.sim.index.sensor[f"{site}_touch"] for site in SOLE_SITES]
        self.clock_pub = self.create_publisher(Clock, "/clock", CLOCK_QOS)
        if TFMessage is not None:
            self.tf_pub = self.create_publisher(TFMessage, "/tf", TF_QOS)
        else:
            self.tf_pub = None
            self.get_logger().info("tf2_msgs is not installed (no PyPI wheel): /tf is off; odom carries the base pose")
        self._messages()

        # taken by the stepping thread itself, as they arrive (motionvl.ros.owned); the reset on the executor
        self._lock = threading.Lock()
        """The simulator between the stepping thread and the reset service."""
        self.inbox = Inbox(self)
        owned = self.owned = OwnedSubscriptions(self, inbox=self.inbox)
        owned.add(Float64MultiArray, "joint_position_commands", self._on_position_array, COMMAND_QOS)
        owned.add(Float64MultiArray, "joint_effort_commands", self._on_effort_array, COMMAND_QOS)
        if self.hardware is not None:
            owned.add(LowCommand, "low_command", self._on_low_command, COMMAND_QOS)
        else:
            owned.add(JointCommand, "joint_command", self._on_joint_drive_command, COMMAND_QOS)
        if p["gantry"]:
            owned.add(DeploymentStatus, p["gantry_release_topic"], self._on_deployment_status, LATCHED_QOS)
        owned.add(JointState, "joint_commands", self._on_joint_command, COMMAND_QOS)
        owned.add(Twist, "cmd_vel", self._on_cmd_vel, COMMAND_QOS)
        self.create_service(Trigger, "~/reset", self._on_reset)
        self.create_service(Trigger, "~/hold", self._on_hold)

        if p["realtime_priority"] > 0:
            rt = request_realtime(p["realtime_priority"])
            if rt.granted:  # (rclpy wants one severity per logging call site)
                self.get_logger().info(f"real-time scheduling: {rt.describe()}")
            else:
                self.get_logger().warning(f"real-time scheduling refused: {rt.describe()}")
        self._tick_s = self.period / self.realtime_factor if self.realtime else FAST_TICK_S
        self._restart = True  # (re)start the deadlines (at start and after a reset)
        self._next = 0.0  # the next tick's deadline (monotonic)
        self._unanswered_since: float | None = None  # lockstep: wall time of a state no command answered yet
        self._commanded = False  # a command came since the last state was published
        self._held = bool(p["hold_until_reset"])  # ~/hold: no stepping, no publishing until ~/reset
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simulator-step", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"simulating {self.robot.name} ({self.robot.num_joints} joints, dt {self.sim.model.opt.timestep} s) in "
            f"{p['mode']} mode, {'real time x%g' % self.realtime_factor if self.realtime else 'as fast as possible'}, "
            f"publishing at {p['publish_rate_hz']:g} Hz{' once ~/reset starts it' if p['hold_until_reset'] else ''}")

    # ------------------------------------------------------------------ stepping
    def _run(self) -> None:
        with self.owned.opened():
            while not self._stop.is_set():
                try:
                    self._tick()
                except Exception as exc:  # noqa: BLE001 - the simulation must outlive a bug, unless the context is gone
                    if not self.context.ok():
                        return
                    self.get_logger().error(f"simulator step: {type(exc).__name__}: {exc}", throttle_duration_sec=1.0)

    def _tick(self) -> None:
        """One tick: wait for its deadline (taking commands as they come; in lockstep also until a command
        answered the last state), advance physics by the periods due, publish the state a controller waits
        for, take its command, publish the rest."""
        if self._held:  # (commands are still taken: the last one stands when it runs again)
            self.owned.wait(self._tick_s)
            return
        if self._restart:
            self._restart, self._next, self._unanswered_since = False, time.monotonic(), None
        while True:
            now = time.monotonic()
            awaiting = self._unanswered_since is not None and now - self._unanswered_since < self.lockstep_wait
            if now >= self._next and not awaiting:
                break
            until = self._unanswered_since + self.lockstep_wait if awaiting and now >= self._next else self._next
            self.owned.wait(until - now)
            if self._stop.is_set() or self._restart:
                return
        late = now - self._next
        if self._unanswered_since is not None:  # lockstep waited for the answer: no time is owed meanwhile
            self._next, late = now, 0.0
            self._unanswered_since = None
        ticks = 1 + max(0, int(late // self._tick_s))
        self._next += ticks * self._tick_s
        if not self.realtime:
            ticks = 1  # one publish period of simulated time per tick: consumers follow /clock
        elif ticks * self.period > MAX_CATCH_UP_S:
            self.get_logger().warning(f"physics cannot keep up with real time x{self.realtime_factor:g}; "
                                      "dropping simulated time", throttle_duration_sec=WARN_PERIOD_S)
            ticks = max(1, int(MAX_CATCH_UP_S / self.period))
        steps = max(1, int(round(self.period / self.sim.model.opt.timestep)))
        with self._lock:
            if self._held:
                return
            self.sim.step(ticks * steps)
            self._maybe_push()
            state = self.sim.state()
            self._commanded = False
            self._publish_primary(state)
        if self.lockstep:
            self._unanswered_since = time.monotonic()
        # this state's command is the controller's business now: take it before publishing the rest
        until = time.monotonic() + COMMAND_WAIT_SHARE * self._tick_s
        while not self._commanded and not self._stop.is_set():
            left = until - time.monotonic()
            if left <= 0:
                break
            self.owned.wait(left)
        with self._lock:
            if not self._held:
                self._publish_secondary(state)

    def _randomize(self) -> None:
        r = self.randomization
        if r is None:
            return
        draws = self.sim.randomize(self._rng, r.friction_range, r.joint_friction_range, r.gain_scale_range)
        self._next_push = self.sim.clock + r.push_interval_s if r.push else None
        self.get_logger().info(f"randomised: friction {draws['friction']:.2f}, joint friction x "
                               f"{np.round(draws['joint_friction_scale'], 2).tolist()}, drive strength x "
                               f"{np.round(draws['strength'], 2).tolist()}")

    def _maybe_push(self) -> None:
        if self._next_push is not None and self.sim.clock >= self._next_push:
            kick = self.sim.push(self._rng, self.randomization.push_velocity)
            self._next_push += self.randomization.push_interval_s
            self.get_logger().info(f"push: {np.round(kick, 3).tolist()} m/s at t={self.sim.clock:.2f} s")

    def _messages(self) -> None:
        """The messages every tick fills in place (their constant fields set once)."""
        hw = self.hardware
        self._js = JointState(name=list(self.robot.joint_names))
        self._ms = None if hw is None else JointState(name=list(hw.motor_names))
        self._imu = Imu()
        self._imu.header.frame_id = self.robot.imu_link
        self._odom = Odometry()
        self._odom.header.frame_id, self._odom.child_frame_id = self.odom_frame, self.robot.base_link
        self._cmd = TwistStamped()
        self._cmd.header.frame_id = self.robot.base_link
        self._clock_msg = Clock()

    def publish_state(self) -> None:
        """Publish every state topic for the simulator's state now."""
        state = self.sim.state()
        self._publish_primary(state)
        self._publish_secondary(state)

    def _publish_primary(self, s) -> None:
        """imu/data, then motor_states (emulating hardware) or joint_states: what a controller's cycle waits
        for (the IMU first, so that the cycle the state starts has the IMU of the same instant)."""
        stamp = Time(nanoseconds=int(round(s.clock * 1e9))).to_msg()
        hw = self.hardware
        imu_quat, gyro, accel = s.base_quat, s.imu_gyro, s.imu_accel
        if hw is not None:  # what an IMU mounted at imu_rpy in the pelvis reports
            imu_quat, gyro = hw.base_to_imu(s.base_quat, s.imu_gyro)
            accel = hw.base_to_imu(s.base_quat, s.imu_accel)[1]
        imu = self._imu
        imu.header.stamp = stamp
        imu.orientation.w, imu.orientation.x, imu.orientation.y, imu.orientation.z = (float(v) for v in imu_quat)
        imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = (float(v) for v in gyro)
        imu.linear_acceleration.x, imu.linear_acceleration.y, imu.linear_acceleration.z = (float(v) for v in accel)
        self.imu_pub.publish(imu)

        if hw is None:
            self._publish_joint_states(s, stamp)
            return
        ms = self._ms  # what the drives report: motor order, sign and zero offset
        ms.header.stamp = stamp
        ms.position = hw.to_motor_position(s.joint_pos).tolist()
        ms.velocity = hw.to_motor_signed(s.joint_vel).tolist()
        ms.effort = hw.to_motor_signed(s.joint_effort).tolist()
        self.motor_state_pub.publish(ms)

    def _publish_joint_states(self, s, stamp) -> None:
        js = self._js
        js.header.stamp = stamp
        js.position, js.velocity, js.effort = s.joint_pos.tolist(), s.joint_vel.tolist(), s.joint_effort.tolist()
        self.joint_state_pub.publish(js)

    def _publish_secondary(self, s) -> None:
        """joint_states (when emulating hardware), /clock, odom, foot_forces, ~/command, /tf, and ~/actuation
        when it changed."""
        stamp = self._imu.header.stamp
        if self.hardware is not None:
            self._publish_joint_states(s, stamp)
        self._clock_msg.clock = stamp
        self.clock_pub.publish(self._clock_msg)
        w, x, y, z = (float(v) for v in s.base_quat)
        odom = self._odom
        odom.header.stamp = stamp
        pose = odom.pose.pose
        pose.position.x, pose.position.y, pose.position.z = (float(v) for v in s.base_pos)
        pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = w, x, y, z
        tw = odom.twist.twist
        tw.linear.x, tw.linear.y, tw.linear.z = (float(v) for v in s.base_lin_vel)
        tw.angular.x, tw.angular.y, tw.angular.z = (float(v) for v in s.base_ang_vel)
        self.odom_pub.publish(odom)

        self.feet_pub.publish(Float64MultiArray(data=[float(self.sim.data.sensordata[t][0]) for t in self._touch]))

        cmd = self._cmd
        cmd.header.stamp = stamp
        cmd.twist.linear.x, cmd.twist.linear.y, cmd.twist.angular.z = (float(v) for v in s.command)
        self.command_pub.publish(cmd)

        if self.tf_pub is not None:
            tf = TransformStamped()
            tf.header.stamp, tf.header.frame_id, tf.child_frame_id = stamp, self.odom_frame, self.robot.base_link
            tf.transform.translation.x, tf.transform.translation.y, tf.transform.translation.z = (float(v) for v in s.base_pos)
            r = tf.transform.rotation
            r.w, r.x, r.y, r.z = w, x, y, z
            self.tf_pub.publish(TFMessage(transforms=[tf]))

        actuation = self.sim.actuation
        if actuation != self._actuation:
            if actuation == "damping" and self._actuation is not None:
                self.get_logger().warning(f"no command for {self.sim.command_timeout:g} s: the emulated drives damp")
            self._actuation = actuation
            self.actuation_pub.publish(actuation_msg(actuation, stamp))

    # ------------------------------------------------------------------ inputs
    def _apply(self, what: str, fn, *args) -> None:
        self._unanswered_since = None  # lockstep: answered, even by a command refused below
        self._commanded = True
        try:
            with self._lock:
                fn(*args)
        except CommandError as exc:  # counted and logged per topic (motionvl.ros.inbox)
            self.inbox.refuse(self.resolve_topic_name(what.split(" ")[0]),
                              f"{what} ignored, holding the last good command: {exc}")

    def _on_position_array(self, msg: Float64MultiArray) -> None:
        self._apply("joint_position_commands", self.sim.set_position_targets, msg.data)

    def _on_effort_array(self, msg: Float64MultiArray) -> None:
        self._apply("joint_effort_commands", self.sim.set_efforts, self._from_motors(msg.data, signed=True))

    def _from_motors(self, values, signed: bool):
        """Values in motor order (and sign, when `signed`) as joint-order values (identity without emulation)."""
        hw = self.hardware
        if hw is None or len(values) != hw.num_joints:
            return values
        return hw.from_motor_signed(values) if signed else hw.from_motor_unsigned(values)

    def _on_low_command(self, msg: LowCommand) -> None:
        hw = self.hardware
        try:
            c = drive_command_from_msg(msg, hw.motor_names)
        except ValueError as exc:
            self._apply("low_command", self._reject, str(exc))
            return
        self._apply("low_command", self.sim.set_drive_commands, hw.from_motor_position(c["q"]),
                    hw.from_motor_signed(c["dq"]), hw.from_motor_unsigned(c["kp"]), hw.from_motor_unsigned(c["kd"]),
                    hw.from_motor_signed(c["tau_ff"]))

    def _on_joint_drive_command(self, msg: JointCommand) -> None:
        try:
            c = drive_command_from_msg(msg, self.robot.joint_names)
        except ValueError as exc:
            self._apply("joint_command", self._reject, str(exc))
            return
        self._apply("joint_command", self.sim.set_drive_commands, c["q"], c["dq"], c["kp"], c["kd"], c["tau_ff"])

    @staticmethod
    def _reject(reason: str) -> None:
        raise CommandError(reason)

    def _on_deployment_status(self, msg: DeploymentStatus) -> None:
        if not self.sim.gantry:
            return
        status = deployment_status_from_msg(msg)
        if status["stand_complete"] or status["mode"] == "RUN":
            with self._lock:
                self.sim.release_gantry()
            self.get_logger().info(f"gantry released at t={self.sim.clock:.3f} s (STAND complete)")

    def _on_joint_command(self, msg: JointState) -> None:
        if self.sim.mode == "position":
            self._apply("joint_commands (position)", self.sim.set_position_targets, msg.position, msg.name)
        else:
            self._apply("joint_commands (effort)", self.sim.set_efforts, msg.effort, msg.name)

    def _on_cmd_vel(self, msg: Twist) -> None:
        self._apply("cmd_vel", self.sim.set_velocity_command, msg.linear.x, msg.linear.y, msg.angular.z)

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._lock:
            self.sim.reset()
            self._randomize()
            held, self._held, self._restart = self._held, False, True
            message = f"reset to the standing pose at t={self.sim.clock:.3f} s{' (running again)' if held else ''}"
        self.owned.wake()
        response.success, response.message = True, message
        self.get_logger().info(message)
        return response

    def _on_hold(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._lock:  # after this nothing is stepped or published: the stepping thread holds it to do either
            self._held = True
            message = f"held at t={self.sim.clock:.3f} s: nothing is stepped or published until ~/reset"
        response.success, response.message = True, message
        self.get_logger().info(message)
        return response

    def destroy_node(self) -> None:
        stop = getattr(self, "_stop", None)  # (a constructor that raised started no thread)
        if stop is not None:
            stop.set()
            self.owned.wake()
            if self._thread.is_alive() and threading.current_thread() is not self._thread:
                self._thread.join(timeout=5.0)
        super().destroy_node()


def main(args=None) -> int:
    return run_node(SimulatorNode, NODE_NAME, args, threads=1)


if __name__ == "__main__":
    sys.exit(main())

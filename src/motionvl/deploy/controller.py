"""The deployment controller: modes, faults, the policy and the command of every cycle (no ROS).

A transport (the deployment node, or `motionvl.deploy.playback` in-process) feeds it what the
robot measures (`joint_state` in motor names and space, `imu` in the IMU's frame,
`velocity_command`), forwards requests (`request_mode`, `estop`, `rearm`, `load_policy`) and calls
`cycle()` once per command period; each cycle returns the command to send, already within the
configured limits. Not thread-safe: a transport with several threads holds one lock around calls.

A fault found by a cycle changes that cycle's command: DAMP goes out at the next command after
the bad input arrived. Every message is checked as it arrives and what it showed is kept for the
next cycle, so a bad reading replaced by a clean one before that cycle still counts. A message
stamped older than the newest one taken is dropped (counted, and a fault when it repeats): with
two sources on a state topic the controller would otherwise act on whichever came last. In PASSIVE
(zero torque, nothing to protect) the same checks only block leaving PASSIVE; in every other
mode they latch (see `motionvl.deploy.modes`).

Policy steps go to a runner (`motionvl.deploy.inference`): inline by default (playback, where the
clock is the simulator's), or a `PolicyWorker` thread in the deployment node, where a step that is
not back by its deadline leaves its cycles to command damping on schedule and the overrun fault
follows, whatever the step does. The transport calls `loop_awake` at every wake of its loop (the
watchdog: a stalled loop faults instead of resuming RUN).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from motionvl.deploy.commands import Command, CommandBuilder, StandRamp
from motionvl.deploy.config import DeployConfig
from motionvl.deploy.faults import FaultMonitor, SensorInputs, first_non_finite
from motionvl.deploy.inference import InlineRunner, StepRequest, StepResult
from motionvl.deploy.mapping import JointMapping
from motionvl.deploy.modes import Fault, Mode, ModeMachine
from motionvl.deploy.scheduling import LoopStatistics
from motionvl.robot import RobotConfig

QUAT_NORM_TOLERANCE = 0.1
"""An IMU orientation whose norm is further than this from 1 is not a rotation: a bad message."""
STATISTICS_WINDOW_S = 10.0
"""The loop's percentiles are over its last this many seconds of cycles (a small window keeps the
diagnostics' percentiles cheap beside the loop)."""
DAMPING_VELOCITY_MAX_AGE = 2
"""Policy periods: host-side damping uses a joint velocity measured at most this long ago (and not
longer than the state timeout); an older one, or none usable, damps with zero torque rather than a
constant -Kd dq of a stale reading."""


class VelocityCommand:
    """cmd_vel as the policy sees it: clipped to the trained ranges, rate-limited, zeroed when silent."""

    def __init__(self, config: DeployConfig):
        self.timeout = config.cmd_vel_timeout
        self.accel = np.asarray(config.cmd_vel_accel, dtype=np.float64)
        self._accel = [float(a) for a in config.cmd_vel_accel]
        self._ranges_of, self._ranges = None, None
        self.requested = np.zeros(3)
        self.value = np.zeros(3)
        self.last_arrival: float | None = None

    def set(self, vx: float, vy: float, yaw_rate: float, now: float) -> bool:
        cmd = np.array([vx, vy, yaw_rate], dtype=np.float64)
        if not np.all(np.isfinite(cmd)):
            return False
        self.requested, self.last_arrival = cmd, now
        return True

    def update(self, now: float, dt: float, ranges) -> np.ndarray:
        if self.last_arrival is None or now - self.last_arrival > self.timeout:
            self.requested = np.zeros(3)
        if ranges is not self._ranges_of:  # three numbers: plain floats cost less than numpy calls
            self._ranges_of, self._ranges = ranges, [tuple(float(v) for v in r) for r in ranges]
        value = []
        for (lo, hi), goal, now_value, accel in zip(self._ranges, self.requested.tolist(), self.value.tolist(),
                                                    self._accel):
            goal = min(max(goal, lo), hi)
            step = accel * dt
            value.append(min(max(now_value + min(max(goal - now_value, -step), step), lo), hi))
        self.value = np.array(value)
        return self.value


class Controller:
    """See the module docstring. `clock` is the monotonic clock (seconds) arrivals and cycles are timed on;
    `runner`: what runs a policy's steps, called with the policy and names= the joint names (InlineRunner,
    or a PolicyWorker factory)."""

    def __init__(self, robot: RobotConfig, config: DeployConfig | None = None, clock=time.monotonic,
                 runner=InlineRunner):
        self.robot = robot
        self.config = config = (config or DeployConfig()).validate(robot)
        self.clock = clock
        self.mapping = JointMapping(robot)
        self.builder = CommandBuilder(robot, config, self.mapping)
        self.modes = ModeMachine(allow_rearm=config.allow_rearm)
        self.monitor = FaultMonitor(robot, config)
        self.inputs = SensorInputs(robot.num_joints, drops_kept=config.out_of_order_limit)
        self.velocity = VelocityCommand(config)
        self.period = config.command_period(robot)
        self.decimation = config.decimation(robot)
        self.stats = LoopStatistics(self.period, size=max(1000, int(round(STATISTICS_WINDOW_S / self.period))))
        self.policy = None  # DeployedPolicy
        self.make_runner = runner
        self.interrupt = None
        """A callable the transport may set: True when something more urgent than the policy step a cycle
        waits for has come (an e-stop, a signal); the cycle then stops waiting and damps."""
        self.runner = None
        """Runs the loaded policy's steps (one per policy)."""
        self.cycle_index = 0
        self.stepped = False
        """The last cycle started a policy step."""
        self.command_writers = 0
        """Other publishers on the command topic (the transport counts them)."""
        self.state_writers: dict[str, list[str]] = {}
        """Publishers on each state topic, by name (the transport lists them): more than one is a fault."""
        self.last_command: Command | None = None
        self._ramp: StandRamp | None = None
        self._target: np.ndarray | None = None
        self._run_cycles = 0
        self._policy_steps = 0
        self._step_targets: dict[int, np.ndarray] = {}
        """The targets of RUN's latest policy steps, by step (-1: the default pose RUN starts at)."""
        self._late_since: float | None = None
        """When the cycles began to lack a target of their own policy period (None: they have one)."""
        self._overrun_streak = 0
        self._last_awake: float | None = None
        self.watchdog_limit = config.watchdog_periods * robot.control_dt
        self._names: list | None = None
        self._order: np.ndarray | None = None
        self._extras: list = []
        self._last_joint_values = None
        self._last_imu_values = None
        self.version = 0
        """Grows whenever the mode, the faults, the ramp's completion or the policy change (a transport
        republishes its status only then)."""
        self._seen: dict[str, Fault] = {}
        """Faults the messages since the last cycle showed (first of each kind), for that cycle."""

    # ------------------------------------------------------------------ inputs
    def joint_state(self, names, position, velocity, stamp: float, now: float | None = None) -> None:
        """A joint state message in motor names and motor space (`stamp`: its header time, s)."""
        now = self.clock() if now is None else now
        inputs = self.inputs
        if not inputs.joints.arrived(float(stamp), now):
            return  # older than the state in force: counted, never acted on
        try:
            order = self._motor_order(names)
        except KeyError as exc:
            return self._bad_joint_message(f"motor_states unusable: {exc.args[0]}", "unusable_input")
        try:
            pos = np.asarray(position, dtype=np.float64)[order]
            vel = np.asarray(velocity, dtype=np.float64)[order]
        except IndexError:
            return self._bad_joint_message(f"motor_states unusable: {len(position)} positions and {len(velocity)} "
                                           f"velocities for {len(names)} names", "unusable_input")
        values = (position, velocity)
        inputs.joints.repeats = inputs.joints.repeats + 1 if _identical(values, self._last_joint_values) else 0
        self._last_joint_values = values
        with np.errstate(invalid="ignore", over="ignore"):  # one sum says all are finite (the usual case)
            finite = math.isfinite(pos.sum() + vel.sum())
        bad = None if finite else first_non_finite(self.mapping.motor_names, {"position": pos, "velocity": vel})
        if bad:
            return self._bad_joint_message(f"motor_states: {bad}")
        inputs.bad_joint_message = None
        inputs.joint_pos = self.mapping.from_motor_position(pos)
        inputs.joint_vel = self.mapping.from_motor_signed(vel)
        inputs.joint_found = self.monitor.joint_faults(inputs.joint_pos, inputs.joint_vel, self.cycle_index + 1)
        self._saw(inputs.joint_found)

    def _motor_order(self, names) -> np.ndarray:
        """Where each of our motors is in `names` (cached: a driver sends the same names every time);
        KeyError for missing or repeated names, and with strict_joint_names for names not ours."""
        if names != self._names:
            self._names, self._order = None, None
            order = self.mapping.motor_order(names)
            self._extras = self.mapping.extra_names(names)
            self._names, self._order = list(names), order
        if self._extras:
            if self.config.strict_joint_names:
                raise KeyError(f"names that are none of our motors: {self._extras} (strict_joint_names)")
            for name in self._extras:
                self.inputs.extra_names[name] = self.inputs.extra_names.get(name, 0) + 1
        return self._order

    def _bad_joint_message(self, reason: str, kind: str = "non_finite_input") -> None:
        self.inputs.bad_joint_message, self.inputs.bad_joint_kind = reason, kind
        self.inputs.joint_found = None
        self._saw([Fault(kind, reason, self.cycle_index + 1)])

    def imu(self, quat_wxyz, gyro, stamp: float, now: float | None = None, accel=None) -> None:
        """An IMU reading in the IMU's frame: orientation in the world (w, x, y, z), gyro (rad/s) and,
        when the transport has it, the accelerometer (only compared for the frozen check)."""
        now = self.clock() if now is None else now
        inputs = self.inputs
        if not inputs.imu.arrived(float(stamp), now):
            return  # older than the reading in force: counted, never acted on
        values = (quat_wxyz, gyro, accel)
        inputs.imu.repeats = inputs.imu.repeats + 1 if _identical(values, self._last_imu_values) else 0
        self._last_imu_values = values
        # plain float arithmetic on the 7 numbers (numpy calls on 4-vectors cost more than the work)
        w, x, y, z = (float(v) for v in quat_wxyz)
        gx, gy, gz = (float(v) for v in gyro)
        norm_sq = w * w + x * x + y * y + z * z
        bad = None
        if not (math.isfinite(norm_sq) and math.isfinite(gx + gy + gz)):
            bad = first_non_finite(("w", "x", "y", "z"), {"orientation": (w, x, y, z)}) or \
                first_non_finite(("x", "y", "z"), {"angular_velocity": (gx, gy, gz)})
        norm = math.sqrt(norm_sq) if not bad else 0.0
        if not bad and abs(norm - 1.0) > QUAT_NORM_TOLERANCE:
            bad = f"orientation norm {norm:.3f} is not a rotation"
        if bad:
            inputs.bad_imu_message = f"imu: {bad}"
            inputs.imu_found = None
            self._saw([Fault("non_finite_input", inputs.bad_imu_message, self.cycle_index + 1)])
            return
        inputs.bad_imu_message = None
        quat, vec = self.mapping.imu_to_base_scalar(w / norm, x / norm, y / norm, z / norm, gx, gy, gz)
        inputs.base_quat, inputs.base_gyro = np.array(quat), np.array(vec)
        inputs.spin = max(abs(vec[0]), abs(vec[1]), abs(vec[2]))
        inputs.tilt_rad = math.acos(min(1.0, max(-1.0, 1.0 - 2.0 * (quat[1] * quat[1] + quat[2] * quat[2]))))
        inputs.imu_found = self.monitor.imu_faults(inputs, self.cycle_index + 1)
        self._saw(inputs.imu_found)

    def _saw(self, faults: list[Fault]) -> None:
        for fault in faults:
            self._seen.setdefault(fault.kind, fault)

    def velocity_command(self, vx: float, vy: float, yaw_rate: float, now: float | None = None) -> bool:
        """cmd_vel; False (ignored) when not finite."""
        return self.velocity.set(vx, vy, yaw_rate, self.clock() if now is None else now)

    # ------------------------------------------------------------------ requests
    @property
    def mode(self) -> Mode:
        return self.modes.mode

    @property
    def stand_complete(self) -> bool:
        return self.mode == Mode.STAND and self._ramp is not None and self._ramp.complete

    def conditions(self, now: float | None = None) -> list[Fault]:
        """Faults present right now (whatever the mode), incl. a missing state stream and other writers."""
        now = self.clock() if now is None else now
        present = self.monitor.check(self.inputs, now, self.cycle_index, running=self.mode == Mode.RUN)
        if not self.inputs.complete:
            missing = [s.name for s, v in ((self.inputs.joints, self.inputs.joint_pos),
                                           (self.inputs.imu, self.inputs.base_quat)) if v is None]
            present.append(Fault("stale_state", f"no usable message yet on {', '.join(missing)}", self.cycle_index))
        return present + self._writer_faults()

    def request_mode(self, mode: Mode | str) -> tuple[bool, str]:
        """Ask for a mode; (accepted, message naming why not)."""
        try:
            target = Mode(str(mode.value if isinstance(mode, Mode) else mode).upper())
        except ValueError:
            return self.modes.request(mode)
        ready, why = True, ""
        if target in (Mode.STAND, Mode.RUN):
            present = self.conditions()
            if present:
                ready, why = False, "; ".join(str(f) for f in present)
        if ready and target == Mode.RUN:
            if self.policy is None:
                ready, why = False, "no policy loaded"
            elif not self.stand_complete:
                ready, why = False, "STAND has not completed its ramp"
            elif self.runner.busy:
                ready, why = False, ("a policy step of the last RUN is still running (hung?): reload the policy or "
                                     "restart the node")
        before = self.mode
        ok, message = self.modes.request(target, cycle=self.cycle_index, ready=ready, not_ready_reason=why)
        if ok and self.mode != before:
            self._entered(before)
        self.version += 1
        return ok, message

    def estop(self, reason: str = "e-stop requested") -> tuple[bool, str]:
        """DAMP now, latched; always succeeds."""
        self.modes.fault(Fault("estop", reason, self.cycle_index))
        self._entered(None)
        self.version += 1
        return True, f"e-stop: DAMP, latched ({reason}) after cycle {self.cycle_index}"

    def rearm(self) -> tuple[bool, str]:
        present = [str(f) for f in self.conditions()]
        self.version += 1
        return self.modes.rearm(conditions=present, cycle=self.cycle_index)

    def load_policy(self, policy_or_path) -> tuple[bool, str]:
        """Load an ONNX policy (a path) or take a `DeployedPolicy`, only in PASSIVE or DAMP and only
        after its contract matches the robot."""
        if self.mode not in (Mode.PASSIVE, Mode.DAMP):
            return False, f"load_policy refused in {self.mode.value}: only in PASSIVE or DAMP"
        if isinstance(policy_or_path, (str, Path)):
            from motionvl.deploy.policy import DeployedPolicy
            from motionvl.policy_io import ContractError

            try:
                policy = DeployedPolicy(policy_or_path, self.robot)
            except ContractError as exc:
                return False, str(exc)
        else:
            policy = policy_or_path
        if self.runner is not None:  # a hung step of the old policy keeps its thread, not this policy
            self.runner.close()
        self.policy = policy
        self.runner = self.make_runner(policy, names=self.robot.joint_names)
        self.version += 1
        from motionvl.task import policy_task

        task = policy_task(getattr(policy, "metadata", None))
        return True, f"loaded {policy.path}" + (f" for the task {task.sentence!r} ({task.describe()})" if task else
                                                 " (it records no task)") + self._clip_note(policy)

    def _clip_note(self, policy) -> str:
        """What the policy learned to command beyond the targets this deployment passes ('' when nothing)."""
        trained = getattr(getattr(policy, "contract", None), "target_limit_factor", None)
        passes = self.robot.target_limit_factor * self.config.target_limit_share
        if trained is None or trained <= passes + 1e-9:
            return ""
        return (f"; it was trained with targets up to {trained:.0%} of each joint range, this "
                f"deployment passes {passes:.0%}: targets beyond are clipped (counted in the status's clips)")

    def close(self, timeout: float = 0.0) -> bool:
        """End the policy runner (cancelling a step in progress); False when its thread is still running."""
        return True if self.runner is None else self.runner.close(timeout)

    # ------------------------------------------------------------------ the cycle
    def loop_awake(self, now: float | None = None) -> bool:
        """The transport's loop is awake (call it at every wake, with or without a cycle). True when
        the gap since its last wake is beyond the watchdog in STAND or RUN (the fault is noted for the
        next cycle: the caller should cycle now)."""
        now = self.clock() if now is None else now
        last, self._last_awake = self._last_awake, now
        if last is None or now - last <= self.watchdog_limit or self.mode not in (Mode.STAND, Mode.RUN):
            return False
        self._saw([Fault("watchdog", f"the control loop did not run for {(now - last) * 1e3:.0f} ms (limit "
                                     f"{self.config.watchdog_periods} policy periods, {self.watchdog_limit * 1e3:.0f} "
                                     "ms): a stalled process does not resume", self.cycle_index + 1)])
        return True

    def cycle(self, trigger_time: float | None = None) -> Command | None:
        """One command cycle; `trigger_time`: when it was due (a state's arrival, or its deadline), from
        which lateness is measured. None before any state has arrived in PASSIVE (nothing to command)."""
        start = self.clock()
        trigger = start if trigger_time is None else trigger_time
        if self.inputs.joint_pos is None and self.mode == Mode.PASSIVE:
            return None
        self.cycle_index += 1
        self.stepped = False
        self.stats.cycle_started(start)
        mode = self.mode
        found = self.monitor.check(self.inputs, start, self.cycle_index, running=mode == Mode.RUN)
        if self._seen:
            found += [f for kind, f in self._seen.items() if all(g.kind != kind for g in found)]
            self._seen.clear()
        if self.command_writers or self.state_writers:
            found += self._writer_faults()
        if mode != Mode.PASSIVE:
            for fault in found:
                self._fault(fault)
        command_now = self.velocity.update(start, self.period, self._command_ranges())
        q, dq = self._measured()
        was_complete = self.stand_complete
        # in RUN only a policy step in time ends a streak: the host PD cycles between two steps
        # finish in time however late every step is
        ends_streak = self.mode != Mode.RUN or self._run_cycles % self.decimation == 0
        target = self._policy_target(q, dq, command_now, trigger) if self.mode == Mode.RUN else None
        command = self._build(q, dq, target, start)
        finish = self.clock()
        late = finish - trigger
        if late > self.period:
            self.stats.overruns += 1
        # the fault counts policy periods: the policy's deadline is the next policy step
        policy_period = self.robot.control_dt
        if late > policy_period:
            self._overrun_streak += math.ceil(late / policy_period) - 1
        elif ends_streak:
            self._overrun_streak = 0
        if self._overrun_streak > self.config.overrun_periods and self.mode in (Mode.STAND, Mode.RUN):
            self._fault(Fault("overrun", f"cycle finished {late * 1e3:.1f} ms after its trigger; "
                                         f"{self._overrun_streak} policy periods of {policy_period * 1e3:.0f} ms "
                                         f"missed (limit {self.config.overrun_periods})", self.cycle_index))
            command = self._build(q, dq, None, start)
        if self.mode != mode or self.stand_complete != was_complete:
            self.version += 1
        self.last_command = command
        return command

    def internal_fault(self, reason: str) -> Command:
        """Latch an 'internal' fault (the transport caught an exception in a cycle) and return the
        damping command to send in that cycle's place."""
        self._fault(Fault("internal", reason, self.cycle_index))
        self.last_command = self.damping_command()
        return self.last_command

    def damping_command(self) -> Command:
        """Pure damping from the newest state, for the exit path (no mode change, no statistics)."""
        q, _ = self._measured()
        return self.builder.damp(q, self._damping_velocity(self.clock()))

    # ------------------------------------------------------------------ internals
    def _measured(self) -> tuple[np.ndarray, np.ndarray]:
        if self.inputs.joint_pos is None:
            return self.robot.default_pose.copy(), np.zeros(self.robot.num_joints)
        return self.inputs.joint_pos, self.inputs.joint_vel

    def _damping_velocity(self, now: float) -> np.ndarray:
        """The measured joint velocity while fresh (see DAMPING_VELOCITY_MAX_AGE), else zeros."""
        inputs = self.inputs
        age = inputs.joints.staleness(now)
        max_age = min(DAMPING_VELOCITY_MAX_AGE * self.robot.control_dt, self.config.state_timeout)
        if inputs.joint_vel is None or inputs.bad_joint_message or age is None or age > max_age:
            return np.zeros(self.robot.num_joints)
        return inputs.joint_vel

    def _command_ranges(self):
        if self.policy is not None and self.policy.contract.command_ranges is not None:
            return self.policy.contract.command_ranges
        return self.config.cmd_vel_ranges

    def _writer_faults(self) -> list[Fault]:
        """Another writer on the command topic (the robot would take two controllers' commands), or
        more than one on a state topic (the controller would act on whichever message came last)."""
        out = []
        if self.command_writers > 0:
            out.append(Fault("second_writer", f"{self.command_writers} other publisher(s) on the command topic",
                             self.cycle_index))
        crowded = [f"{len(names)} publishers on {topic} ({', '.join(names)})"
                   for topic, names in self.state_writers.items() if len(names) > 1]
        if crowded:
            out.append(Fault("second_state_writer", "; ".join(crowded) + ": the state must come from one source",
                             self.cycle_index))
        return out

    def _fault(self, fault: Fault) -> None:
        before = self.mode
        if self.modes.fault(fault):
            self.version += 1
        if self.mode != before:
            self._entered(before)

    def _entered(self, before: Mode | None) -> None:
        """Set up the mode just entered (the machine already switched)."""
        mode = self.mode
        if mode == Mode.STAND:
            q, _ = self._measured()
            if before == Mode.RUN and self._target is not None:
                start, gain = self._target, 1.0
            else:
                start, gain = q, 0.0
            start = self.builder.clip_target(start, count=False)
            self._ramp = StandRamp(start=start.copy(), gain_start=gain,
                                   cycles=max(1, int(round(self.config.stand_seconds / self.period))))
        elif mode == Mode.RUN:
            self.policy.io.reset()
            self._run_cycles = 0
            self._policy_steps = 0
            self._late_since = None
            self._target = self.robot.default_pose.copy()
            self._step_targets = {-1: self._target}
            # frozen joints count from RUN on (a robot may hang still before): the next state starts a run
            self.inputs.joints.repeats, self._last_joint_values = 0, None
        if mode != Mode.STAND:
            self._ramp = None
        if mode != Mode.RUN:
            self._target = None

    def _policy_target(self, q: np.ndarray, dq: np.ndarray, command: np.ndarray, trigger: float) -> np.ndarray | None:
        """The target of this RUN cycle, or None (the cycle damps) while the step it needs is late.

        A step starts at the first cycle of each policy period (unless the last one is still running).
        With one command cycle per policy period (pd path) that cycle waits for it until its deadline and
        commands its target. With several (torque path: the PD law at the command rate) the step runs
        beside the cycles, as a PD loop beside its policy thread does: its target takes effect at the
        next cycle, one command period after the state it was computed from (waited for until that
        cycle's deadline), and serves the rest of the period; no cycle waits for a step that is on time.
        """
        runner, D = self.runner, self.decimation
        k = self._run_cycles
        self._run_cycles += 1
        lag = 1 if D > 1 else 0
        needed = (k - lag) // D  # the step whose target this cycle commands (-1: RUN's entry target)
        result = runner.poll()  # a step that came back since the last cycle
        if result is not None:
            self._take_step(result)
        if k % D == 0 and self.mode == Mode.RUN:
            if runner.busy:
                self.stats.skipped_steps += 1
            else:
                self.stepped = True
                inputs = self.inputs
                runner.submit(StepRequest(k // D, q.copy(), dq.copy(), inputs.base_quat.copy(),
                                          inputs.base_gyro.copy(), np.array(command, dtype=np.float64),
                                          (k // D) * self.robot.control_dt))
                result = runner.poll()  # (an inline runner is done already: its faults show in this cycle)
                if result is not None:
                    self._take_step(result)
        if needed not in self._step_targets and runner.busy and runner.step == needed and self.mode == Mode.RUN:
            result = runner.wait(trigger + self.config.policy_deadline_share * self.period - self.clock(),
                                 self.interrupt)
            if result is not None:
                self._take_step(result)
        if self.mode != Mode.RUN:  # the step's output faulted
            return None
        target = self._step_targets.get(needed)
        if target is not None:
            self._target, self._late_since = target, None
            return target
        now = self.clock()
        self.stats.late_cycles += 1
        if self._late_since is None:
            self._late_since = now
        elif now - self._late_since > self.config.overrun_periods * self.robot.control_dt:
            running = " (the step is still running: cancelled)" if runner.busy else ""
            self._fault(Fault("overrun", f"no policy step back for {(now - self._late_since) * 1e3:.0f} ms of RUN "
                                         f"(limit {self.config.overrun_periods} policy periods of "
                                         f"{self.robot.control_dt * 1e3:.0f} ms){running}", self.cycle_index))
            runner.cancel()
        return None

    def _take_step(self, result: StepResult) -> None:
        if result.seconds:
            self.stats.inference.add(result.seconds)
        if result.target is None:
            self._fault(Fault(result.kind, result.problem, self.cycle_index))
            return
        self._policy_steps += 1
        targets = self._step_targets
        targets[result.step] = result.target
        for old in [s for s in targets if s < result.step - 1]:  # the newest two are all a cycle can need
            del targets[old]

    def _build(self, q: np.ndarray, dq: np.ndarray, target: np.ndarray | None, now: float) -> Command:
        mode, b = self.mode, self.builder
        if mode == Mode.RUN and target is not None:
            return b.run(q, dq, target)
        if mode == Mode.STAND:
            command = b.stand(q, dq, self._ramp)
            self._ramp.advance()
            return command
        if mode == Mode.PASSIVE:
            return b.passive(q)
        return b.damp(q, self._damping_velocity(now))

    # ------------------------------------------------------------------ reporting
    def status(self) -> dict:
        """Mode, latched faults, ramp, policy, clips, the stamps of the newest joint state and IMU reading taken (what
        the checks judge now) and loop statistics (JSON-able)."""
        last = self.modes.transitions[-1] if self.modes.transitions else None
        return {
            "mode": self.mode.value, "stand_complete": self.stand_complete,
            "stand_progress": None if self._ramp is None else round(self._ramp.progress, 4),
            "faults": [str(f) for f in self.modes.faults], "fault_count": self.modes.fault_count,
            "last_transition": None if last is None else {"cycle": last.cycle, "from": last.source.value,
                                                          "to": last.target.value, "why": last.why},
            "policy": None if self.policy is None else str(self.policy.path),
            "path": self.config.path, "dry_run": self.config.dry_run, "cycle": self.cycle_index,
            "policy_steps": self._policy_steps, "command": [round(float(v), 4) for v in self.velocity.value],
            "clips": dict(self.builder.clips),
            "dropped": {s.name: s.dropped for s in (self.inputs.joints, self.inputs.imu)},
            "extra_joint_names": dict(self.inputs.extra_names),
            "state_stamp": self.inputs.joints.last_stamp, "imu_stamp": self.inputs.imu.last_stamp,
            **self.stats.summary(),
        }


def _identical(values: tuple, before: tuple | None) -> bool:
    """Every value of a message bit-identical to the message before (sequences, arrays or None)."""
    if before is None:
        return False
    for a, b in zip(values, before):
        if a is None or b is None:
            if a is not b:
                return False
        elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            if not np.array_equal(a, b):
                return False
        elif a != b:
            return False
    return True

"""The deployment controller's settings: how it drives the robot and when it gives up.

One field per parameter of the deployment node (`motionvl params deployment` prints them); the
in-process playback takes the same dataclass.
"""

from __future__ import annotations

import dataclasses

from motionvl.robot import ConfigError, RobotConfig

PATHS = ("pd", "torque")


@dataclasses.dataclass(frozen=True)
class DeployConfig:
    """Settings of `motionvl.deploy.Controller` (each a deployment-node parameter of the same name)."""

    path: str = "pd"
    """'pd': drive-side PD, one [q, dq, kp, kd, tau_ff] per motor each command cycle (the drive closes
    the loop, the usual case on humanoids); 'torque': host-side PD, tau = Kp (q_d - q) - Kd dq clipped
    to the effort limits, computed every command cycle from the newest state."""
    command_rate_hz: float = 0.0
    """Command cycles per second; 0: the path's own (pd: the policy rate 1 / control_dt; torque: the PD
    rate 1 / sim_dt). Must be a whole multiple of the policy rate."""
    stand_seconds: float = 2.0
    """STAND: targets move from where they are to the default pose, and Kp from its value in force to
    the configured gain, over this time (smoothstep)."""
    target_limit_share: float = 1.0
    """Share of the robot's target limits (robot.yaml target_limit_factor, where training clipped its targets too)
    the deployment passes: targets beyond are clipped and counted. 1: what the policy learned; below 1: tighter."""
    joint_limit_margin: float = 0.1
    """rad: a measured joint position this far beyond its hard limit is a fault."""
    velocity_bound_scale: float = 1.5
    """A measured joint speed above this x the joint's velocity limit is a fault."""
    gyro_bound: float = 10.0
    """rad/s: a base angular speed (any axis) above this is a fault."""
    fall_tilt: float = 0.8
    """rad: tilt of the base from upright (from projected gravity) at which the robot has fallen."""
    fall_clear_tilt: float = 0.4
    """rad: the fall condition clears only below this tilt (hysteresis: re-arm waits for it)."""
    state_timeout: float = 0.1
    """s of monotonic time: joint states or IMU silent, or with stamps that do not advance, for longer
    is a fault."""
    out_of_order_limit: int = 3
    """This many messages of one state stream dropped within `out_of_order_window` for a stamp older
    than the newest one taken is a fault (one stray message is only dropped and counted: a second
    source, e.g. a stale bag playing, or a clock that went back, repeats)."""
    out_of_order_window: float = 1.0
    """s of monotonic time: see out_of_order_limit. The fault's condition (which blocks re-arming and
    leaving PASSIVE) clears this long after the last drop."""
    overrun_periods: int = 3
    """A cycle that finishes more than this many policy periods after its trigger (one long cycle, or
    a streak of late ones adding up; in RUN only a policy step in time ends a streak) is a fault.
    Cycles later than one command period are counted (statistics) but a host PD cycle a few ms
    late is no fault on its own."""
    policy_deadline_share: float = 0.5
    """A policy step runs beside the control loop (`motionvl.deploy.inference`): the cycle that needs its
    target (on the pd path the cycle that starts it; with several command cycles a policy period, the
    next one) waits for it until this share of a command period after the cycle's trigger. A step not
    back by then leaves that cycle, and every later one that needs it, to command damping on schedule
    (mode RUN kept; counted as late cycles); late for longer than `overrun_periods` policy periods is
    the overrun fault. Above 1 the cycle itself may end late (an
    overrun in the statistics): for tests on a loaded machine, where a step must not miss by chance."""
    watchdog_periods: int = 5
    """A gap between two wakes of the control loop longer than this many policy periods (a stalled
    process: SIGSTOP, a debugger, a machine swapping) is a fault in STAND and RUN, raised by the first
    cycle after it: a stalled loop never resumes RUN. The loop wakes at least once a command period."""
    frozen_samples: int = 50
    """This many consecutive IMU readings with every channel bit-identical (a stuck driver still
    stamping: real sensors always carry noise), or in RUN as many joint states with every position
    and velocity bit-identical, is a fault (0: off). 50 is 0.1 s of a 500 Hz stream."""
    strict_joint_names: bool = False
    """motor_states carrying names that are none of our motors (hands, head, passive joints): false
    takes our motors from it and ignores (and counts) the others; true refuses the message (a fault).
    A name given twice is always refused."""
    damping_scale: float = 1.0
    """DAMP and the exit: pure damping with Kd = this x the configured Kd."""
    gain_limit_scale: float = 1.0
    """Drive-side gains are bounded by this x the configured Kp and Kd (and never negative)."""
    feedforward_limit: float = 0.2
    """|tau_ff| sent to the drive is bounded by this share of the effort limit."""
    cmd_vel_timeout: float = 0.5
    """s: the velocity command returns to zero when cmd_vel is silent this long."""
    cmd_vel_accel: tuple = (1.0, 1.0, 2.0)
    """Rate limit of the velocity command (m/s^2, m/s^2, rad/s^2 for vx, vy, yaw rate)."""
    cmd_vel_ranges: tuple = ((-1.0, 1.0), (-0.5, 0.5), (-1.0, 1.0))
    """(lo, hi) of vx, vy, yaw rate when the policy's contract carries no trained ranges."""
    allow_rearm: bool = False
    """Software may clear a latched fault (~/rearm) only when this is true: simulation playback, where
    the loop resets the simulator between candidates. On hardware re-arming is an operator's act
    (restart the node at the robot)."""
    dry_run: bool = False
    """Run everything on the live state stream and publish no command (bring-up in the gantry)."""

    def validate(self, robot: RobotConfig) -> "DeployConfig":
        """self, or a ConfigError naming every bad setting."""
        problems = []
        if self.path not in PATHS:
            problems.append(f"path must be one of {PATHS}, got {self.path!r}")
        if self.command_rate_hz < 0:
            problems.append(f"command_rate_hz must be >= 0, got {self.command_rate_hz}")
        elif self.command_rate_hz > 0:
            ratio = self.command_rate_hz * robot.control_dt
            if ratio < 1 - 1e-9 or abs(ratio - round(ratio)) > 1e-6:
                problems.append(f"command_rate_hz {self.command_rate_hz:g} must be a whole multiple of the policy "
                                f"rate {1 / robot.control_dt:g} Hz")
        for name in ("stand_seconds", "state_timeout", "out_of_order_window", "cmd_vel_timeout", "gyro_bound",
                     "fall_tilt", "fall_clear_tilt", "velocity_bound_scale", "gain_limit_scale"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.target_limit_share <= 1:
            problems.append(f"target_limit_share must be in (0, 1], got {self.target_limit_share}")
        else:  # STAND ramps to the default pose: it must lie inside the soft limits
            lower, upper = robot.target_limits(self.target_limit_share)
            outside = [n for n, d, lo, hi in zip(robot.joint_names, robot.default_pose, lower, upper)
                       if not lo <= d <= hi]
            if outside:
                problems.append(f"target_limit_share {self.target_limit_share:g} puts the default pose of {outside} "
                                "outside the soft limits")
        if not self.fall_clear_tilt < self.fall_tilt:
            problems.append(f"fall_clear_tilt ({self.fall_clear_tilt}) must be below fall_tilt ({self.fall_tilt})")
        for name in ("joint_limit_margin", "damping_scale", "feedforward_limit"):
            if not getattr(self, name) >= 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.policy_deadline_share > 0:
            problems.append(f"policy_deadline_share must be > 0, got {self.policy_deadline_share}")
        if self.frozen_samples < 0 or self.frozen_samples == 1:
            problems.append(f"frozen_samples must be 0 (off) or >= 2, got {self.frozen_samples}")
        for name in ("overrun_periods", "out_of_order_limit", "watchdog_periods"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if len(self.cmd_vel_accel) != 3 or not all(a > 0 for a in self.cmd_vel_accel):
            problems.append(f"cmd_vel_accel must be three numbers > 0, got {list(self.cmd_vel_accel)}")
        if len(self.cmd_vel_ranges) != 3 or not all(len(r) == 2 and r[0] <= 0 <= r[1] for r in self.cmd_vel_ranges):
            problems.append(f"cmd_vel_ranges must be three (lo <= 0 <= hi) pairs, got {self.cmd_vel_ranges}")
        if not problems and self.policy_deadline_share * self.command_period(robot) >= \
                self.watchdog_periods * robot.control_dt:
            problems.append(f"policy_deadline_share {self.policy_deadline_share:g} lets a cycle wait for its policy "
                            f"step as long as the watchdog ({self.watchdog_periods} policy periods) allows the loop to "
                            "stall: a slow step would read as a stalled process")
        if problems:
            raise ConfigError("deployment settings: " + "; ".join(problems))
        return self

    def command_period(self, robot: RobotConfig) -> float:
        """Seconds between command cycles."""
        if self.command_rate_hz > 0:
            return 1.0 / self.command_rate_hz
        return robot.control_dt if self.path == "pd" else robot.sim_dt

    def decimation(self, robot: RobotConfig) -> int:
        """Command cycles per policy step."""
        return max(1, int(round(robot.control_dt / self.command_period(robot))))

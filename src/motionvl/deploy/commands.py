"""Motor commands of every mode on both paths, never outside the configured limits.

Drive-side PD ("pd"): per motor [q, dq, kp, kd, tau_ff]; the drive computes
tau = kp (q - q_m) + kd (dq - dq_m) + tau_ff. Host-side ("torque"): per motor tau, computed here
as Kp (q_d - q) - Kd dq from the newest measured state, clipped to the effort limit.

    mode     pd: q / dq / kp / kd / tau_ff                  torque: tau
    PASSIVE  measured q, 0, 0, 0, 0                           0
    STAND    ramp target, 0, Kp s', Kd, 0                     Kp s' (ramp target - q) - Kd dq
    RUN      policy target, 0, Kp, Kd, 0                      Kp (policy target - q) - Kd dq
    DAMP     measured q, 0, 0, Kd_damp, 0                     -Kd_damp dq

(s' = the gain share of the ramp.) Every value is computed in joint space, clipped there (targets to
the soft joint limits, torques to the effort limits; each clip counted), mapped to motor space and
then bounded once more by `CommandLimits`, the last line: a non-finite value anywhere turns the
whole command into damping. No command leaves this module outside `CommandLimits`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from motionvl.deploy.config import DeployConfig
from motionvl.deploy.mapping import JointMapping
from motionvl.deploy.modes import Mode
from motionvl.robot import RobotConfig

PD_FIELDS = ("q", "dq", "kp", "kd", "tau_ff")
"""One drive's low-level command (motionvl/msg/DriveCommand), in this order."""


@dataclasses.dataclass(frozen=True)
class CommandLimits:
    """Bounds of every value a command may carry, per motor in motor order."""

    q_lower: np.ndarray
    q_upper: np.ndarray
    """Soft joint limits in motor space."""
    dq_max: np.ndarray
    kp_max: np.ndarray
    kd_max: np.ndarray
    tau_ff_max: np.ndarray
    effort: np.ndarray
    """Torque limits (host path)."""

    def __post_init__(self) -> None:  # the negated bounds, once (the last line runs every cycle)
        for name in ("effort", "dq_max", "tau_ff_max"):
            object.__setattr__(self, f"neg_{name}", -getattr(self, name))

    @classmethod
    def from_robot(cls, robot: RobotConfig, config: DeployConfig, mapping: JointMapping) -> "CommandLimits":
        lower, upper = robot.target_limits(config.target_limit_share)
        q_lower, q_upper = mapping.to_motor_range(lower, upper)
        m = mapping.to_motor_unsigned
        return cls(q_lower=q_lower, q_upper=q_upper, dq_max=m(robot.velocity_limit),
                   kp_max=m(robot.kp) * config.gain_limit_scale,
                   kd_max=m(np.maximum(robot.kd * config.gain_limit_scale, robot.kd * config.damping_scale)),
                   tau_ff_max=m(robot.effort_limit) * config.feedforward_limit, effort=m(robot.effort_limit))

    def violations(self, command: "Command") -> list[str]:
        """What in `command` lies outside these limits or is not finite (empty: it may be sent)."""
        out = []
        if command.path == "torque":
            bounds = {"tau": (-self.effort, self.effort)}
        else:
            bounds = {"q": (self.q_lower, self.q_upper), "dq": (-self.dq_max, self.dq_max), "kp": (0.0, self.kp_max),
                      "kd": (0.0, self.kd_max), "tau_ff": (-self.tau_ff_max, self.tau_ff_max)}
        for name, (lo, hi) in bounds.items():
            v = getattr(command, name)
            if v is None or v.shape != self.effort.shape:
                out.append(f"{name}: missing or of the wrong length")
            elif not np.all(np.isfinite(v)):
                out.append(f"{name}: not finite")
            elif np.any(v < lo) or np.any(v > hi):
                out.append(f"{name}: outside [{np.round(np.broadcast_to(lo, v.shape), 4).tolist()}, "
                           f"{np.round(np.broadcast_to(hi, v.shape), 4).tolist()}]: {np.round(v, 4).tolist()}")
        return out


@dataclasses.dataclass(frozen=True)
class Command:
    """One command cycle's output, in motor order."""

    mode: Mode
    path: str
    q: np.ndarray | None = None
    dq: np.ndarray | None = None
    kp: np.ndarray | None = None
    kd: np.ndarray | None = None
    tau_ff: np.ndarray | None = None
    tau: np.ndarray | None = None


    def in_joint_space(self, mapping: JointMapping) -> dict:
        """Drive path: the same command per joint, in joint order and the joints' sign and zero
        (motionvl/msg/JointCommand): {field: array} for each of PD_FIELDS."""
        return {"q": mapping.from_motor_position(self.q), "dq": mapping.from_motor_signed(self.dq),
                "kp": mapping.from_motor_unsigned(self.kp), "kd": mapping.from_motor_unsigned(self.kd),
                "tau_ff": mapping.from_motor_signed(self.tau_ff)}


@dataclasses.dataclass
class StandRamp:
    """STAND's ramp: targets from `start` to the default pose and the gain share from `gain_start`
    to 1 over `cycles` command cycles, smoothstep in time (no jump in target, gain or their rate)."""

    start: np.ndarray
    gain_start: float
    cycles: int
    elapsed: int = 0

    @property
    def progress(self) -> float:
        x = min(1.0, self.elapsed / max(self.cycles, 1))
        return x * x * (3.0 - 2.0 * x)

    @property
    def complete(self) -> bool:
        return self.elapsed >= self.cycles

    def advance(self) -> None:
        self.elapsed = min(self.elapsed + 1, self.cycles)

    def target(self, default_pose: np.ndarray) -> np.ndarray:
        return self.start + self.progress * (default_pose - self.start)

    @property
    def gain(self) -> float:
        return self.gain_start + self.progress * (1.0 - self.gain_start)


class CommandBuilder:
    """Commands of each mode (table in the module docstring), clipped and counted."""

    def __init__(self, robot: RobotConfig, config: DeployConfig, mapping: JointMapping | None = None):
        self.robot = robot
        self.config = config
        self.path = config.path
        self.mapping = mapping or JointMapping(robot)
        self.limits = CommandLimits.from_robot(robot, config, self.mapping)
        self.kp, self.kd, self.effort = robot.kp, robot.kd, robot.effort_limit
        self.kd_damp = robot.kd * config.damping_scale
        self.default_pose = robot.default_pose
        self.soft_lower, self.soft_upper = robot.target_limits(config.target_limit_share)
        self.clips = {"target": 0, "torque": 0, "last_line": 0}
        """Values clipped since start: targets to the soft joint limits, torques to the effort limits,
        and anything the last line (CommandLimits) had to bound or replace (a bug if ever non-zero)."""

    # ------------------------------------------------------------------ per mode (joint-space inputs)
    def passive(self, joint_pos: np.ndarray) -> Command:
        J = len(self.kp)
        return self._build(Mode.PASSIVE, joint_pos, np.zeros(J), target=joint_pos, kp=np.zeros(J), kd=np.zeros(J))

    def damp(self, joint_pos: np.ndarray, joint_vel: np.ndarray) -> Command:
        return self._build(Mode.DAMP, joint_pos, joint_vel, target=joint_pos, kp=np.zeros(len(self.kp)),
                           kd=self.kd_damp)

    def stand(self, joint_pos: np.ndarray, joint_vel: np.ndarray, ramp: StandRamp) -> Command:
        return self._build(Mode.STAND, joint_pos, joint_vel, target=ramp.target(self.default_pose),
                           kp=self.kp * ramp.gain, kd=self.kd, count_target_clips=True)

    def run(self, joint_pos: np.ndarray, joint_vel: np.ndarray, target: np.ndarray) -> Command:
        return self._build(Mode.RUN, joint_pos, joint_vel, target=target, kp=self.kp, kd=self.kd,
                           count_target_clips=True)

    def clip_target(self, target: np.ndarray, count: bool = True) -> np.ndarray:
        """`target` clipped to the soft joint limits (the clips counted)."""
        target = np.asarray(target, dtype=np.float64)
        clipped = np.minimum(np.maximum(target, self.soft_lower), self.soft_upper)  # np.clip, without its overhead
        if count:
            self.clips["target"] += int(np.count_nonzero(clipped != target))
        return clipped

    # ------------------------------------------------------------------ common
    def _build(self, mode: Mode, joint_pos, joint_vel, *, target, kp, kd, count_target_clips: bool = False) -> Command:
        m = self.mapping
        target = self.clip_target(target, count=count_target_clips)
        if self.path == "torque":
            with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN inputs: the last line replaces them
                tau = kp * (target - joint_pos) - kd * joint_vel if mode != Mode.PASSIVE else np.zeros(len(self.kp))
            clipped = np.minimum(np.maximum(tau, -self.effort), self.effort)
            self.clips["torque"] += int(np.count_nonzero(clipped != tau))
            command = Command(mode, "torque", tau=m.to_motor_signed(clipped))
        else:
            J = len(self.kp)
            command = Command(mode, "pd", q=m.to_motor_position(target), dq=np.zeros(J), kp=m.to_motor_unsigned(kp),
                              kd=m.to_motor_unsigned(kd), tau_ff=np.zeros(J))
        return self.last_line(command)

    def last_line(self, command: Command) -> Command:
        """`command` bounded by `CommandLimits`. A motor with a non-finite value anywhere (a NaN measured
        velocity under damping, say) gets zero torque on the host path, and on the drive path kp 0 with
        the target at the middle of its soft range and damping only: nothing non-finite is ever sent."""
        lim = self.limits
        if command.path == "torque":
            bounds = {"tau": (lim.neg_effort, lim.effort)}
        else:
            bounds = {"q": (lim.q_lower, lim.q_upper), "dq": (lim.neg_dq_max, lim.dq_max), "kp": (0.0, lim.kp_max),
                      "kd": (0.0, lim.kd_max), "tau_ff": (lim.neg_tau_ff_max, lim.tau_ff_max)}
        # the usual case: every value finite and inside (a NaN fails both comparisons)
        if all(((v := getattr(command, f)) >= lo).all() and (v <= hi).all() for f, (lo, hi) in bounds.items()):
            return command
        fields = tuple(bounds)
        values = {f: np.array(getattr(command, f), dtype=np.float64) for f in fields}
        bad = np.zeros(len(self.kp), dtype=bool)
        for v in values.values():
            bad |= ~np.isfinite(v)
        if bad.any():
            if command.path == "torque":
                values["tau"][bad] = 0.0
            else:
                safe = {"q": (lim.q_lower + lim.q_upper) / 2, "dq": np.zeros(len(bad)), "kp": np.zeros(len(bad)),
                        "kd": self.mapping.to_motor_unsigned(self.kd_damp), "tau_ff": np.zeros(len(bad))}
                for f in fields:
                    values[f][bad] = safe[f][bad]
        bounded = {f: np.clip(values[f], *bounds[f]) for f in fields}
        changed = int(bad.sum()) + sum(int(np.count_nonzero(bounded[f] != values[f])) for f in fields)
        if changed:
            self.clips["last_line"] += changed
        return dataclasses.replace(command, **bounded)

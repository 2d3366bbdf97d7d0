"""What the controller measures and the checks that send it to DAMP.

`SensorInputs` keeps the newest joint state and IMU reading (in joint order and the base frame)
with their stamps and monotonic arrival times; `FaultMonitor.check` turns them into faults:

- stale: joint states or IMU silent longer than `state_timeout` of monotonic time, or arriving
  with stamps that do not advance for that long (a frozen driver still publishing);
- out of order: a message whose stamp is older than the newest one taken never replaces the
  state (`StreamClock.arrived` refuses it: the controller drops and counts it); `out_of_order_limit`
  such drops of one stream within `out_of_order_window` are a fault (a second source such as a
  stale bag playing, or a clock that went back);
- frozen: `frozen_samples` consecutive IMU readings with every channel bit-identical (always), or
  joint states with every position and velocity bit-identical (only in RUN, where a robot cannot
  hold that still): a stuck driver that still stamps its messages;
- non-finite: NaN or inf anywhere in a message (kept from its arrival until a clean one comes);
  unusable: a joint state that lacks one of our motors or names one twice (or, with
  `strict_joint_names`, names joints that are not ours);
- joint limit: a measured position beyond its hard limit by more than `joint_limit_margin`;
- joint velocity beyond `velocity_bound_scale` x its limit; gyro beyond `gyro_bound`;
- fall: tilt beyond `fall_tilt`, with hysteresis (it clears below `fall_clear_tilt` only).
The state checks run on every message as it arrives too (`joint_faults`, `imu_faults`): the
controller keeps what they find until its next cycle, so a bad reading that a clean one replaced
before that cycle (the IMU usually comes faster than the cycles) is still a fault there.
The policy's NaN output, overruns, the e-stop and a second writer on the command or a state topic
are raised by the controller where it sees them.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from motionvl.deploy.config import DeployConfig
from motionvl.deploy.modes import Fault
from motionvl.robot import RobotConfig
from motionvl.sim.math import tilt_of


@dataclasses.dataclass
class StreamClock:
    """Arrival bookkeeping of one input stream (monotonic seconds; stamps in the sender's clock)."""

    name: str
    last_arrival: float | None = None
    last_stamp: float | None = None
    advanced_at: float | None = None
    """Arrival time of the newest message whose stamp advanced past the one before."""
    drops_kept: int = 3
    """How many drop times `recent_drops` keeps (the controller sets out_of_order_limit)."""
    dropped: int = 0
    """Messages refused since start: a stamp older than `last_stamp`."""
    last_dropped_stamp: float | None = None
    repeats: int = 0
    """Consecutive messages whose values were bit-identical to the message before (the controller
    compares; a stamp-only change counts as a repeat)."""
    recent_drops: collections.deque = dataclasses.field(init=False, repr=False)
    """Arrival times of the latest `drops_kept` refusals."""

    def __post_init__(self) -> None:
        self.recent_drops = collections.deque(maxlen=self.drops_kept)

    def arrived(self, stamp: float, now: float) -> bool:
        """Book a message; False when its stamp is older than the newest taken: the caller must drop
        it (it would replace a newer state with an older one). An equal stamp is taken: a driver
        repeating its last state is the stale check's business, not a reordering."""
        self.last_arrival = now
        if self.last_stamp is not None and stamp < self.last_stamp:
            self.dropped += 1
            self.last_dropped_stamp = stamp
            self.recent_drops.append(now)
            return False
        if self.last_stamp is None or stamp > self.last_stamp:
            self.advanced_at = now
        self.last_stamp = stamp
        return True

    def drops_within(self, window: float, now: float) -> int:
        """Refusals in the last `window` seconds (at most `drops_kept` are remembered)."""
        return sum(1 for t in self.recent_drops if now - t <= window)

    def staleness(self, now: float) -> float | None:
        """Seconds since the stream last brought a new stamp; None before its first message."""
        return None if self.advanced_at is None else now - self.advanced_at


@dataclasses.dataclass
class SensorInputs:
    """The newest measured state, joint order and base frame."""

    num_joints: int
    joint_pos: np.ndarray | None = None
    joint_vel: np.ndarray | None = None
    base_quat: np.ndarray | None = None
    """wxyz, base frame in the world."""
    base_gyro: np.ndarray | None = None
    """rad/s, base frame."""
    drops_kept: int = 3
    """Out-of-order drops each stream remembers (the controller sets out_of_order_limit)."""
    joints: StreamClock = dataclasses.field(init=False)
    imu: StreamClock = dataclasses.field(init=False)
    bad_joint_message: str | None = None
    """Why the newest joint state was not usable (NaN/inf, missing joints); None when it was."""
    bad_imu_message: str | None = None
    spin: float | None = None
    """max |base gyro| (rad/s) of the newest IMU reading (None: computed from base_gyro)."""
    tilt_rad: float | None = None
    """Tilt (rad) of the newest IMU reading (None: computed from base_quat)."""
    joint_found: list | None = None
    """What the joint checks found in the newest joint state, at its arrival (None: check afresh)."""
    imu_found: list | None = None
    """What the IMU checks found in the newest reading, at its arrival (None: check afresh)."""
    bad_joint_kind: str = "non_finite_input"
    """The fault kind of bad_joint_message: non_finite_input or unusable_input."""
    extra_names: dict = dataclasses.field(default_factory=dict)
    """Names in motor_states that are none of our motors -> messages that carried them."""

    def __post_init__(self) -> None:
        self.joints = StreamClock("motor_states", drops_kept=self.drops_kept)
        self.imu = StreamClock("imu", drops_kept=self.drops_kept)

    @property
    def complete(self) -> bool:
        """Both streams have delivered."""
        return self.joint_pos is not None and self.base_quat is not None

    def tilt(self) -> float:
        """Angle (rad) between the base z axis and the world's up, from the base orientation."""
        return self.tilt_rad if self.tilt_rad is not None else float(tilt_of(self.base_quat))


def first_non_finite(names, values: dict) -> str | None:
    """'position of left_knee is nan' for the first non-finite entry of `values` (name -> array), else None."""
    for field, array in values.items():
        array = np.asarray(array, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(array))
        if bad.size:
            k = int(bad[0])
            label = names[k] if names is not None and k < len(names) else f"#{k}"
            return f"{field} of {label} is {array[k]}"
    return None


class FaultMonitor:
    """The state checks of the module docstring; `check` returns the faults present now."""

    def __init__(self, robot: RobotConfig, config: DeployConfig):
        self.names = robot.joint_names
        self.config = config
        self.lower = robot.lower - config.joint_limit_margin
        self.upper = robot.upper + config.joint_limit_margin
        self.velocity_bound = robot.velocity_limit * config.velocity_bound_scale
        self.fallen = False
        """Hysteresis state of the fall check."""

    def check(self, inputs: SensorInputs, now: float, cycle: int = 0, running: bool = False) -> list[Fault]:
        """The faults of the streams' freshness and of the newest state; `running`: in RUN (where
        frozen joint states are a fault too)."""
        cfg, out = self.config, []
        for stream in (inputs.joints, inputs.imu):
            age = stream.staleness(now)
            if age is not None and age > cfg.state_timeout:
                silent = stream.last_arrival is None or now - stream.last_arrival > cfg.state_timeout
                what = "silent" if silent else "arriving with stamps that do not advance"
                out.append(Fault("stale_state", f"{stream.name} {what} for {age:.3f} s (timeout "
                                                f"{cfg.state_timeout:g} s)", cycle))
            if stream.drops_within(cfg.out_of_order_window, now) >= cfg.out_of_order_limit:
                out.append(Fault("out_of_order_state", f"{stream.name}: {cfg.out_of_order_limit} messages within "
                                                       f"{cfg.out_of_order_window:g} s older than the newest taken "
                                                       f"(stamp {stream.last_stamp:.3f} s; latest dropped "
                                                       f"{stream.last_dropped_stamp:.3f} s), dropped: a second source "
                                                       "or a clock that went back", cycle))
        frozen = cfg.frozen_samples
        if frozen:
            for stream, when in ((inputs.imu, True), (inputs.joints, running)):
                if when and stream.repeats >= frozen - 1:
                    out.append(Fault("frozen_state", f"{stream.name}: {stream.repeats + 1} messages in a row with every "
                                                     f"value bit-identical (limit {frozen}): a stuck driver", cycle))
        if inputs.bad_joint_message:
            out.append(Fault(inputs.bad_joint_kind, inputs.bad_joint_message, cycle))
        if inputs.bad_imu_message:
            out.append(Fault("non_finite_input", inputs.bad_imu_message, cycle))
        # the state checks ran when the message arrived (and the state has not changed since)
        if inputs.joint_pos is not None and inputs.bad_joint_message is None:
            out += inputs.joint_found if inputs.joint_found is not None else \
                self.joint_faults(inputs.joint_pos, inputs.joint_vel, cycle)
        if inputs.base_quat is not None and inputs.bad_imu_message is None:
            out += inputs.imu_found if inputs.imu_found is not None else self.imu_faults(inputs, cycle)
        return out

    def joint_faults(self, q: np.ndarray, dq: np.ndarray, cycle: int = 0) -> list[Fault]:
        """A measured joint beyond its limit (+ margin) or its velocity bound."""
        cfg, out = self.config, []
        if (q >= self.lower).all() and (q <= self.upper).all() and (np.abs(dq) <= self.velocity_bound).all():
            return out  # the usual case, in three comparisons
        outside = np.flatnonzero((q < self.lower) | (q > self.upper))
        if outside.size:
            k = int(outside[0])
            out.append(Fault("joint_limit", f"{self.names[k]} at {q[k]:.3f} rad, limits "
                                            f"[{self.lower[k] + cfg.joint_limit_margin:.3f}, "
                                            f"{self.upper[k] - cfg.joint_limit_margin:.3f}] + margin "
                                            f"{cfg.joint_limit_margin:g}", cycle))
        fast = np.flatnonzero(np.abs(dq) > self.velocity_bound)
        if fast.size:
            k = int(fast[0])
            out.append(Fault("joint_velocity", f"{self.names[k]} at {dq[k]:.2f} rad/s, bound "
                                               f"{self.velocity_bound[k]:.2f}", cycle))
        return out

    def imu_faults(self, inputs: SensorInputs, cycle: int = 0) -> list[Fault]:
        """The base spinning beyond the gyro bound, or fallen (with hysteresis), from the newest IMU reading."""
        cfg, out = self.config, []
        spin = inputs.spin if inputs.spin is not None else float(np.max(np.abs(inputs.base_gyro)))
        if spin > cfg.gyro_bound:
            out.append(Fault("gyro", f"base angular velocity {spin:.2f} rad/s, bound {cfg.gyro_bound:g}", cycle))
        tilt = inputs.tilt()
        if tilt > cfg.fall_tilt:
            self.fallen = True
        elif tilt < cfg.fall_clear_tilt:
            self.fallen = False
        if self.fallen:
            out.append(Fault("fall", f"base tilted {tilt:.2f} rad (falls beyond {cfg.fall_tilt:g}, clears below "
                                     f"{cfg.fall_clear_tilt:g})", cycle))
        return out

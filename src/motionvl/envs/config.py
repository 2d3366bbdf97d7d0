"""Configuration of the locomotion environment: one nested dataclass, every field documented."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from motionvl.rewards.terms import STAND_BELOW
from motionvl.robot import ConfigError


@dataclasses.dataclass
class CommandConfig:
    vx: tuple = (-0.5, 1.0)
    """Forward velocity command range, m/s."""
    vy: tuple = (-0.3, 0.3)
    """Lateral velocity command range, m/s."""
    yaw_rate: tuple = (-1.0, 1.0)
    """Yaw rate command range, rad/s."""
    resample_s: float = 10.0
    """Seconds between command resamples within an episode."""
    standing_fraction: float = 0.1
    """Fraction of commands that are exactly zero (learn to stand still)."""
    fixed: tuple | None = None
    """If set, (vx, vy, yaw_rate) used for every env instead of sampling (evaluation)."""
    heading_gain: float = 0.0
    """0: the yaw-rate command goes to the policy as sampled (open loop: a small yaw-rate error
    turns the robot off its course over time). > 0: heading hold, as an operator steering with a
    joystick would: the env integrates the yaw-rate command into a heading target and gives the
    policy yaw_rate + heading_gain x (target - heading) (1/s), clipped to the yaw_rate range."""
    curriculum: bool = False
    """Forward-first command curriculum: sample from the start_* ranges at first and widen
    linearly towards vx / vy / yaw_rate (level 0 -> 1) while velocity tracking is good."""
    start_vx: tuple = (0.3, 0.8)
    """Forward velocity range at curriculum level 0, m/s (walking forward near the nominal speed)."""
    start_vy: tuple = (-0.1, 0.1)
    """Lateral velocity range at curriculum level 0, m/s."""
    start_yaw_rate: tuple = (-0.3, 0.3)
    """Yaw rate range at curriculum level 0, rad/s."""
    curriculum_error: float = 0.25
    """The level rises when the mean |command_xy - base velocity_xy| (body frame, m/s, over
    all envs and steps of a window) is below this."""
    curriculum_step: float = 0.1
    """Level added after each window that tracks well enough."""
    curriculum_window_s: float = 5.0
    """Simulated seconds per tracking window."""
    curriculum_push_settle_s: float = 0.0
    """Seconds after each push during which an env's tracking error stays out of the curriculum's
    windows and the adaptive command cells' errors (the push itself knocks the base off the command;
    pushing more often would otherwise hold the level back). 0: every step counts, pushes included.
    With the curriculum or adaptive sampling on it must be shorter than randomization.push_interval_s."""
    adaptive_fraction: float = 0.0
    """Share of the sampled (not standing) commands drawn from a cell of an `adaptive_bins` grid over
    the current ranges, chosen in proportion to the cell's recent tracking error (the rest stay
    uniform): more practice where the policy tracks worst, typically at the range edges. 0 = uniform."""
    adaptive_bins: tuple = (5, 3, 3)
    """Cells per axis (vx, vy, yaw_rate) of the adaptive_fraction grid."""
    adaptive_smoothing: float = 0.3
    """Weight of each tracking window's mean in a cell's error (exponential moving average)."""

    def validate(self, where: str = "env.commands") -> None:
        """Raise ConfigError for curriculum and adaptive-sampling settings the env cannot use."""
        if not self.curriculum_push_settle_s >= 0:
            raise ConfigError(f"{where}: curriculum_push_settle_s must be >= 0 seconds, got {self.curriculum_push_settle_s}")
        if not (0 <= self.adaptive_fraction <= 1 and 0 < self.adaptive_smoothing <= 1):
            raise ConfigError(f"{where}: adaptive_fraction must be in [0, 1] and adaptive_smoothing in (0, 1], got "
                              f"{self.adaptive_fraction} and {self.adaptive_smoothing}")
        bins = tuple(self.adaptive_bins)
        if len(bins) != 3 or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in bins):
            raise ConfigError(f"{where}: adaptive_bins must be three integers >= 1 (cells along vx, vy, yaw_rate), "
                              f"got {list(bins)}")

    def ranges(self, level: float) -> tuple[tuple, tuple, tuple]:
        """(vx, vy, yaw_rate) ranges at curriculum `level` in [0, 1] (the full ranges without curriculum)."""
        if not self.curriculum:
            return tuple(self.vx), tuple(self.vy), tuple(self.yaw_rate)
        lerp = lambda start, full: tuple(a + level * (b - a) for a, b in zip(start, full))  # noqa: E731
        return lerp(self.start_vx, self.vx), lerp(self.start_vy, self.vy), lerp(self.start_yaw_rate, self.yaw_rate)


def linear_schedule(start: float, final: float | None, span: tuple, iteration: int) -> float:
    """A training setting that moves linearly from `start` to `final` over the PPO iterations
    span = (first, last) and stays there; `final` None: `start` throughout. Keyed by the run's
    iteration count, so a resumed run continues where it stopped."""
    if final is None:
        return float(start)
    first, last = span
    progress = 1.0 if last <= first else min(max((iteration - first) / (last - first), 0.0), 1.0)
    return float(start + progress * (final - start))


@dataclasses.dataclass
class RandomizationConfig:
    """Domain randomisation, with the MotionVL paper's ranges as defaults; each switchable."""

    friction: bool = True
    friction_range: tuple = (0.2, 1.3)
    """Ground/foot friction coefficient range."""
    gain_scale: bool = True
    gain_scale_range: tuple = (0.8, 1.2)
    """Multiplier on every joint's Kp and Kd (one draw per env and joint)."""
    joint_friction: bool = True
    joint_friction_range: tuple = (0.1, 3.0)
    """Multiplier on the joint friction loss of the robot config."""
    added_mass: bool = False
    added_mass_range: tuple = (-1.0, 3.0)
    """kg added to the pelvis."""
    push: bool = True
    push_interval_s: float = 8.0
    """Seconds between pushes."""
    push_velocity: float = 0.5
    """Max horizontal velocity change of a push, m/s."""
    push_velocity_final: float | None = None
    """Training schedule of the push strength: with a value, the push velocity falls linearly from
    push_velocity to this over push_decay_iterations (PPO iterations of the run, so a resumed run
    continues the schedule). None: push_velocity throughout. Evaluation envs have no iterations and
    always push with push_velocity."""
    push_decay_iterations: tuple = (600, 1200)
    """(first, last) PPO iteration of the linear fall to push_velocity_final."""
    push_first_random: bool = False
    """Draw each episode's first push time uniformly within its first interval (later pushes keep
    the interval), so that episodes ending before push_interval_s meet pushes too. Off: pushes at
    multiples of push_interval_s after reset, as evaluation always has them."""
    latency: bool = True
    latency_range: tuple = (1, 10)
    """Delay before a new joint target reaches the PD loop, in physics steps of the robot config's
    own PD rate (500 Hz: 2-20 ms), inclusive; converted to the training physics step and capped
    at one policy period."""
    latency_max_start: int | None = None
    """Training schedule of the latency range's top: with a value, training draws latencies from
    [latency_range[0], top] with the top rising linearly from this to latency_range[1] over
    latency_widen_iterations (PPO iterations of the run, so a resumed run continues the schedule),
    rounded to whole steps: the policy first meets the short delays and then the paper's whole
    range. None: latency_range throughout. Evaluation builds its own RandomizationConfig, without
    the schedule, and draws from latency_range."""
    latency_widen_iterations: tuple = (60, 180)
    """(first, last) PPO iteration of the linear rise of the latency range's top."""

    def push_velocity_at(self, iteration: int) -> float:
        """Push velocity (m/s) of training iteration `iteration` under the push schedule."""
        return linear_schedule(self.push_velocity, self.push_velocity_final, self.push_decay_iterations, iteration)

    def latency_max_at(self, iteration: int) -> int:
        """Top of the training latency range (robot PD steps, inclusive) at iteration `iteration`."""
        top = self.latency_range[1]
        start = top if self.latency_max_start is None else self.latency_max_start
        return int(round(linear_schedule(start, top, self.latency_widen_iterations, iteration)))

    @classmethod
    def disabled(cls) -> "RandomizationConfig":
        """Nominal robot and world: what evaluation and videos use unless asked otherwise."""
        return cls(friction=False, gain_scale=False, joint_friction=False, added_mass=False, push=False, latency=False)


@dataclasses.dataclass
class EnvConfig:
    num_envs: int = 512
    """Environments stepped together."""
    num_threads: int | None = None
    """Physics threads (default: all cores this process may use)."""
    episode_length_s: float = 20.0
    """Time-out of an episode in seconds."""
    sim_dt: float | None = 0.005
    """Training physics step; None uses the robot config's. sim_dt x decimation must equal the
    robot's control period, so the policy's contract (50 Hz) does not change."""
    decimation: int | None = 4
    """Physics steps per policy step for training; None uses the robot config's."""
    terrain: str = "flat"
    """'flat', 'rough', or 'mixed': each reset puts an env on the rough height field with probability
    `rough_fraction`, else on the flat plane (one MuJoCo model holds both)."""
    rough_fraction: float = 0.25
    """With terrain 'mixed': the share of episodes on rough ground."""
    rough_from_iteration: int = 0
    """With terrain 'mixed': the PPO iteration of the run from which `rough_fraction` of the resets
    go to rough ground; before it every episode is on the plane (a resumed run continues the
    schedule). Evaluation envs have no iterations and use `rough_fraction` from the start."""
    gait_period_s: float = 0.7
    """Nominal gait period for the phase clock in the observation and the gait reward terms."""
    gait_period_final_s: float | None = None
    """Training schedule of the gait period: with a value, the period moves linearly from
    gait_period_s to this over gait_period_change_iterations (PPO iterations of the run, so a
    resumed run continues the schedule), e.g. a slower clock while the policy learns to walk and a
    quicker one for tracking. The exported contract holds the period of the exported iteration;
    evaluation runs the phase clock at the policy's contract period. None: gait_period_s throughout."""
    gait_period_change_iterations: tuple = (1300, 1500)
    """(first, last) PPO iteration of the linear change to gait_period_final_s."""
    gait_feedforward: float = 0.0
    """Amplitude (rad) of a clock-driven stepping feedforward added to the PD targets, the policy's
    action acting on top of it (a residual policy): the clock's swing leg folds hip pitch, knee and
    ankle pitch by (-a, +2a, -a) x sin(pi x swing progress), as `rewards.terms.reference_gait_offsets`
    (~9 cm of lift on mvl_biped at 0.35), nothing while the command is standing. 0: off. Part of
    the exported contract (`gait_feedforward` in the ONNX metadata): whatever drives the robot adds
    the same offsets to default pose + action scale x action before the joint-limit clip."""
    gait_stride_feedforward: float = 0.0
    """Hip-pitch sweep (rad per m/s of forward command) of the stepping feedforward, added to the PD
    targets as `gait_feedforward`'s fold is: the stance leg's hip moves from -a vx (foot ahead) to +a vx
    (behind) over its half cycle and the swing leg's back, the ankle pitch opposite to keep the sole
    level (`rewards.terms.reference_gait_offsets`, stride=a). A stride for the command from the first
    iteration, which the policy otherwise learns through the tracking reward alone. 0: off. Part of the
    exported contract (`gait_stride_feedforward` in the ONNX metadata), like the fold."""
    gait_stand_below: float = STAND_BELOW
    """The stepping feedforward rests (both legs at the default pose) while every command component
    is at or below this (m/s, rad/s); a negative value keeps it stepping in place at a standing command.
    With the feedforward on, the gait reward terms' `stand_below` follows it where the reward spec sets
    none, and training refuses a spec that sets a different one (`rl.trainer.agree_on_standing`). Part of the exported
    contract (`gait_stand_below` in the ONNX metadata); it matters only with the feedforward on."""
    obs_history: int = 0
    """Extra past proprioceptive frames appended to the actor observation."""
    heading_observation: bool = True
    """The actor also sees the heading error (`RewardState.heading_error`: the heading the command
    asks for minus the pelvis heading, rad, clipped to +-1): the integral of the yaw-rate error,
    which a policy seeing only rates cannot know, so it cannot undo a steady turn by itself. On a
    robot it comes from the IMU yaw since the command was given. Part of the exported contract.
    With the reference reward's `tracking_heading` term the drift of 10-30 deg in 10 s fell to 1-4
    (bench/RESULTS.md, heading error in the actor's input)."""
    critic_sees_randomization: bool = True
    """The critic (never the actor: the robot cannot measure these) also sees this episode's
    domain-randomisation draws: ground friction, PD gain and joint-friction scale per joint,
    command latency, added mass, and where the env is in the push cycle. Training only: the
    exported policy and its observation contract do not change."""
    random_heading: bool = True
    """Reset with a random yaw; False faces +x (evaluation, videos)."""
    reset_joint_noise: float = 0.05
    """Uniform noise (rad) added to the default pose at reset."""
    reset_base_velocity_noise: float = 0.1
    """Uniform noise (m/s, rad/s) on the base velocity at reset."""
    min_base_height: float = 0.45
    """Episode ends (fall) when the pelvis is lower than this above the ground, metres."""
    max_tilt_rad: float = 1.0
    """Episode ends (fall) when the pelvis tilts more than this from upright."""
    contact_force_threshold: float = 5.0
    """Sole normal force (N) above which a foot counts as in contact."""
    seed: int = 0
    """Seed of every random draw (resets, commands, randomisation)."""
    terrain_seed: int | None = None
    """Seed of the rough height field; None: `seed`. Training sets the run's seed, so every session of a
    resumed run walks the same ground while its random draws move on."""
    commands: CommandConfig = dataclasses.field(default_factory=CommandConfig)
    randomization: RandomizationConfig = dataclasses.field(default_factory=RandomizationConfig)

    def gait_period_at(self, iteration: int) -> float:
        """Gait period (s) of training iteration `iteration` under the gait-period schedule."""
        return linear_schedule(self.gait_period_s, self.gait_period_final_s, self.gait_period_change_iterations,
                               iteration)

    def rough_fraction_at(self, iteration: int) -> float:
        """Share of the resets of training iteration `iteration` that go to rough ground ('mixed')."""
        return float(self.rough_fraction) if iteration >= self.rough_from_iteration else 0.0

    @classmethod
    def from_dict(cls, raw: dict | None, where: str = "env config") -> "EnvConfig":
        return dataclass_from_dict(cls, raw or {}, where)

    @classmethod
    def from_yaml(cls, path: str | Path, key: str | None = "env") -> "EnvConfig":
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"config not found: {path}")
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if key is not None:
            raw = raw.get(key, {})
        return cls.from_dict(raw, str(path))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def dataclass_from_dict(cls, raw: dict, where: str, skip: tuple = ()):
    """Build config dataclass `cls` from a YAML mapping: unknown keys and wrong types are errors
    naming the file and key; nested dataclass fields recurse; keys in `skip` are the caller's."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    fields = {f.name for f in dataclasses.fields(cls) if f.name not in skip}
    unknown = set(raw) - fields
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(fields) + list(skip)})")
    obj = cls()
    for name, value in raw.items():
        default = getattr(obj, name)
        if dataclasses.is_dataclass(default):
            value = dataclass_from_dict(type(default), value or {}, f"{where}.{name}")
        else:
            value = _coerce(value, default, f"{where}: {name}")
        setattr(obj, name, value)
    return obj


def _coerce(value, default, where: str):
    if value is None or default is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if isinstance(default, int) and float(value) != int(value):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return type(default)(value)
    if isinstance(default, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(value)
    if isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value

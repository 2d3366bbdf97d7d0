"""Configuration of the locomotion environment: one nested dataclass, every field documented."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

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
    task: tuple | None = None
    """(vx, vy, yaw_rate) the run's task asks for (motionvl.task; set by the search): a share `task_share` of the
    sampled commands is drawn within `task_spread` of it, outside the curriculum; the rest over the ranges above.
    None: every command over the ranges."""
    task_share: float = 0.0
    """Share of the sampled commands drawn around `task` (the search's `task_share` setting, default 0.5)."""
    task_spread: tuple = (0.1, 0.05, 0.1)
    """Half-width (vx, vy, yaw_rate) of the commands drawn around `task`; zeros: `task` itself (standing)."""
    heading_gain: float = 0.0
    """0: the yaw-rate command goes to the policy as sampled (open loop: a small yaw-rate error
    turns the robot off its course over time). > 0: heading hold, as an operator steering with a
    joystick would: the env integrates the yaw-rate command into a heading target and gives the
    policy yaw_rate + heading_gain x (target - heading) (1/s), clipped to the yaw_rate range.
    For evaluation (`motionvl eval --heading-gain`); training keeps 0, as a policy trained with the
    hold leans on it and drifts more on its own."""
    curriculum: bool = True
    """Forward-first command curriculum: sample from the start_* ranges at first and widen
    linearly towards vx / vy / yaw_rate (level 0 -> 1) while velocity tracking is good, so that
    the policy learns to walk forward before it learns to turn and side-step."""
    start_vx: tuple = (0.3, 0.8)
    """Forward velocity range at curriculum level 0, m/s (walking forward near the nominal speed)."""
    start_vy: tuple = (-0.1, 0.1)
    """Lateral velocity range at curriculum level 0, m/s."""
    start_yaw_rate: tuple = (-0.3, 0.3)
    """Yaw rate range at curriculum level 0, rad/s."""
    curriculum_error: float = 0.25
    """The level rises when the mean |command_xy - base velocity_xy| (body frame, m/s, over
    all envs and steps of a window) is below this: the full ranges within ~4 minutes of training
    here (0.15 held forward walking twice as long and tracked the 60-minute sweep worse)."""
    curriculum_step: float = 0.1
    """Level added after each window that tracks well enough."""
    curriculum_window_s: float = 5.0
    """Simulated seconds per tracking window."""
    def ranges(self, level: float) -> tuple[tuple, tuple, tuple]:
        """(vx, vy, yaw_rate) ranges at curriculum `level` in [0, 1] (the full ranges without curriculum)."""
        if not self.curriculum:
            return tuple(self.vx), tuple(self.vy), tuple(self.yaw_rate)
        lerp = lambda start, full: tuple(a + level * (b - a) for a, b in zip(start, full))  # noqa: E731
        return lerp(self.start_vx, self.vx), lerp(self.start_vy, self.vy), lerp(self.start_yaw_rate, self.yaw_rate)


@dataclasses.dataclass
class TerrainCurriculumConfig:
    """legged_gym's terrain curriculum: at the end of each episode an env moves a level up after walking out
    of the terrain and a level down after failing; one past the top level goes to a random level, so the
    solved envs keep visiting every level. Applies when `EnvConfig.terrain_level` is None."""

    start_level: int = 0
    """Envs start at a level drawn uniformly from 0 to this (inclusive)."""
    up_distance_m: float = 4.0
    """An episode ending farther than this from its start (horizontally) moves the env up: 4 m crosses the
    tile's platform and its ten steps or its slope along an axis (sim.terrain.TILE_HALF_M)."""
    down_fraction: float = 0.5
    """An episode that fell, or ended nearer its start than this share of the distance its commands asked
    for, moves the env down (a standing command asks for none)."""


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How training reaches one of its settings over the run's PPO iterations: `start` until iteration
    `iterations[0]`, then linearly to the setting's own value at `iterations[1]` (equal: a step there),
    the value from then on. Keyed by the run's iteration, so a resumed or warm-started run continues it.
    Environments that do not train (evaluation, rendering) use the setting's own value."""

    start: float = 0.0
    """The setting's value at the start of training."""
    iterations: tuple = (0, 0)
    """(first, last) PPO iteration of the change from `start` to the setting's value."""

    def at(self, value: float, iteration: int) -> float:
        """The setting at training iteration `iteration` when its own value is `value`."""
        first, last = self.iterations
        if last > first:
            progress = min(max((iteration - first) / (last - first), 0.0), 1.0)
        else:
            progress = 1.0 if iteration >= first else 0.0
        return float(self.start + progress * (value - self.start))

    def errors(self, where: str, valid) -> list[str]:
        """What is wrong with this schedule of setting `where`, whose values must satisfy `valid`."""
        span = self.iterations
        out = []
        if not is_number(self.start) or not valid(self.start):
            out.append(f"{where}.start: {self.start!r} is not a valid value of the setting")
        if not (len(span) == 2 and all(is_count(v) for v in span) and span[0] <= span[1]):
            out.append(f"{where}.iterations must be [first, last] with 0 <= first <= last, got {list(span)}")
        return out


def is_number(value) -> bool:
    """A number (a YAML boolean or string is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_count(value) -> bool:
    """An integer >= 0 (a YAML boolean is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


EVALUATION_PUSH_VELOCITY = 0.5
"""Max velocity change (m/s per axis) of the pushes of randomised evaluations, playback and the walking goals;
training pushes harder (RandomizationConfig.push_velocity)."""


@dataclasses.dataclass
class RandomizationConfig:
    """Domain randomisation, with the MotionVL paper's ranges as defaults (the push velocity excepted);
    each switchable."""

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
    """kg added to the pelvis (off: not in the paper's list; turn it on for a robot that carries a payload)."""
    push: bool = True
    push_interval_s: float = 8.0
    """Seconds between pushes."""
    push_velocity: float = 0.75
    """Max horizontal velocity change of a push, m/s per axis. Training pushes harder than the 0.5 m/s
    the evaluations push with (EVALUATION_PUSH_VELOCITY): 10-minute policies then fall after
    far fewer evaluation pushes (0.2-0.4% against up to 4.3%), at ~0.03 m/s of 60-minute tracking."""
    latency: bool = True
    latency_range: tuple = (1, 10)
    """Delay before a new joint target reaches the PD loop, in physics steps of the robot config's
    own PD rate (500 Hz: 2-20 ms), inclusive; converted to the training physics step and capped
    at one policy period."""

    @classmethod
    def for_evaluation(cls, pushes: bool = True) -> "RandomizationConfig":
        """The randomisation evaluations use (the walking goals are measured with it): the paper's ranges and
        pushes of EVALUATION_PUSH_VELOCITY every push_interval_s (none with `pushes` False)."""
        return cls(push=bool(pushes), push_velocity=EVALUATION_PUSH_VELOCITY)

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
    terrain: str = "mixed"
    """The ground: flat | rough | slope_up | slope_down | stairs_up | stairs_down (motionvl.sim.terrain: a tile
    around the start, its difficulty by `terrain_level`), or 'mixed' (training only): each reset puts an env
    on a rough height field with probability `rough_fraction`, else on the flat plane (one MuJoCo model
    holds both). The policy is blind either way: no height scan in its observation."""
    terrain_level: int | None = None
    """fixed terrain difficulty level; None: the curriculum (`terrain_curriculum`). A level indexes
    sim.terrain.LEVELS (0-9: steps 2-20 cm, slopes 2-20 deg, bumps 0.8-8 cm); flat and mixed have none.
    Environments that do not train (evaluation, rendering) pass a level."""
    terrain_curriculum: TerrainCurriculumConfig = dataclasses.field(default_factory=TerrainCurriculumConfig)
    """How the levels move with terrain_level None."""
    rough_fraction: float = 0.5
    """With terrain 'mixed': the share of episodes on rough ground. Half: by 60 minutes the policy tracks
    commands on rough ground about as well as on flat."""
    rough_fraction_schedule: Schedule | None = Schedule(start=0.0, iterations=(1300, 1300))
    """How training reaches rough_fraction (None: from the first iteration): flat ground only until
    iteration 1300 (~20 minutes on 2 cores), as rough ground from the start cost the 10- and 20-minute
    walking goals."""
    gait_period_s: float = 0.6
    """Period (s) of the gait clock in the observation, the stepping feedforward and the gait reward terms;
    the exported contract carries the period its iteration trained at."""
    gait_period_schedule: Schedule | None = Schedule(start=0.7, iterations=(1300, 1500))
    """How training reaches gait_period_s (None: from the first iteration): a slower 0.7 s clock while the
    policy learns to walk (0.6 from the start missed the 10-minute goal on two seeds of four), the quicker
    one for tracking the command sweep later."""
    gait_feedforward: float = 0.2
    """Amplitude (rad) of a clock-driven stepping feedforward added to the PD targets, the policy's
    action acting on top of it (a residual policy): the clock's swing leg folds hip pitch, knee and
    ankle pitch by (-a, +2a, -a) x sin(pi x swing progress), as `rewards.terms.reference_gait_offsets`
    (~9 cm of lift on mvl_biped at 0.35), nothing while the command is standing. 0: off. Part of
    the exported contract (`gait_feedforward` in the ONNX metadata): whatever drives the robot adds
    the same offsets to default pose + action scale x action before the target-limit clip. 0.2: the
    policy need not discover stepping by itself: 10-minute policies of four seeds walked 91-98% of
    episodes against 56-82% without it."""
    gait_stride_feedforward: float = 0.1
    """Hip-pitch sweep (rad per m/s of forward command) of the stepping feedforward, added to the PD
    targets as `gait_feedforward`'s fold is: the stance leg's hip moves from -a vx (foot ahead) to +a vx
    (behind) over its half cycle and the swing leg's back, the ankle pitch opposite to keep the sole
    level (`rewards.terms.reference_gait_offsets`, stride=a). A stride for the command from the first
    iteration, which the policy otherwise learns through the tracking reward alone. 0: off. Part of the
    exported contract (`gait_stride_feedforward` in the ONNX metadata), like the fold. 0.1: 10-minute
    policies reach the command's pace on more seeds (0.2 overshoots it and falls more)."""
    gait_lateral_stride: float = 0.0
    """Hip-roll sweep (rad per m/s of lateral command vy) of the stepping feedforward, the sideways twin of
    `gait_stride_feedforward`: the stance hip rolls from +a vy to -a vy over its half cycle, the swing hip
    back, the ankle roll opposite (`policy_io.lateral_stride_offsets`). Part of the exported contract
    (`gait_lateral_stride`). 0 here: walks trained on the reference need none; a sideways task sets it
    (`motionvl.task.LATERAL_STRIDE`)."""
    gait_stand_below: float = -1.0
    """The stepping feedforward rests (both legs at the default pose) while every command component
    is at or below this (m/s, rad/s); a negative value keeps it stepping in place at a standing command.
    With the feedforward on, the gait reward terms' `stand_below` follows it where the reward spec sets
    none, and training refuses a spec that sets a different one (`rl.trainer.agree_on_standing`). Part of the exported
    contract (`gait_stand_below` in the ONNX metadata); it matters only with the feedforward on. -1: the
    robot steps in place at a standing command instead of standing still, which a push from a standstill
    then cannot topple (resting below 0.1, a few percent of such pushes did)."""
    obs_history: int = 5
    """Extra past proprioceptive frames appended to the actor observation (part of the exported contract).
    5 (0.1 s): the 10-minute policies of four seeds walked 96.5-99.6% of episodes, for a ~17% slower loop."""
    heading_observation: bool = True
    """The actor also sees the heading error (`RewardState.heading_error`: the heading the command
    asks for minus the pelvis heading, rad, clipped to +-1): the integral of the yaw-rate error,
    which a policy seeing only rates cannot know, so it cannot undo a steady turn by itself. On a
    robot it comes from the IMU yaw since the command was given. Part of the exported contract.
    With the reference reward's `tracking_heading` term the drift of 10-30 deg in 10 s fell to 1-4."""
    critic_sees_randomization: bool = True
    """The critic (never the actor: the robot cannot measure these) also sees this episode's
    domain-randomisation draws: ground friction, PD gain and joint-friction scale per joint,
    command latency, added mass, and where the env is in the push cycle. Training only: the
    exported policy and its observation contract do not change. A better value estimate for the
    same actor: 10-minute policies walked more often on three seeds of four."""
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
    """Seed of the random ground (rough blocks, mixed's height field); None: `seed`. Training sets the run's seed, so every session of a
    resumed run walks the same ground while its random draws move on."""
    commands: CommandConfig = dataclasses.field(default_factory=CommandConfig)
    randomization: RandomizationConfig = dataclasses.field(default_factory=RandomizationConfig)

    SCHEDULES = {"gait_period_s": "gait_period_schedule", "rough_fraction": "rough_fraction_schedule"}
    """Settings training moves by iteration -> the field holding their Schedule."""

    def scheduled(self, name: str, iteration: int | None) -> float:
        """Setting `name` (a key of SCHEDULES) at training iteration `iteration`; None (an env that does
        not train): the setting's own value."""
        value, schedule = getattr(self, name), getattr(self, self.SCHEDULES[name])
        return float(value) if schedule is None or iteration is None else schedule.at(value, iteration)

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


def dataclass_from_dict(cls, raw: dict, where: str, skip: tuple = (), base=None):
    """Build config dataclass `cls` from a YAML mapping, starting from `base` (default: `cls()`): unknown keys
    and wrong types are errors naming the file and key; nested dataclass fields recurse (null keeps the
    default, except for an optional one such as a Schedule | None, which it turns off); keys in `skip` are
    the caller's."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    unknown = set(raw) - set(fields)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(fields) + list(skip)})")
    obj = cls() if base is None else base
    changes = {}
    for name, value in raw.items():
        default = getattr(obj, name)
        if dataclasses.is_dataclass(default) and not (value is None and "None" in str(fields[name].type)):
            value = dataclass_from_dict(type(default), value or {}, f"{where}.{name}", base=default)
        else:
            value = _coerce(value, default, f"{where}: {name}")
        changes[name] = value
    return dataclasses.replace(obj, **changes)


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

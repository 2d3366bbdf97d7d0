"""Policy I/O: robot state -> the policy's observation, the policy's action -> joint targets.

One ROS-free, numpy-only module driven by the contract an exported policy carries in its ONNX
metadata (`PolicyContract`). The training environment (batched), evaluation, selection,
rendering and the deployment node all build observations and joint targets here, so a policy
meets on the robot exactly the inputs it was trained and evaluated on.

Observation (`PolicyContract.obs_layout`, each block scaled entry by entry, in order):
    base_ang_vel (3) x0.25 | projected_gravity (3) | command (3) x(2, 2, 0.25) |
    [heading_error (1), clipped to +-HEADING_ERROR_CLIP] |
    joint_pos - default (J) | joint_vel (J) x0.05 | last_action (J) | gait_phase sin, cos (2) |
    [history: `history_frames` past frames of the proprioceptive blocks, newest first]
Conventions: quaternions w, x, y, z; base_ang_vel is the gyro reading in the base (IMU) frame,
rad/s; projected_gravity is world (0, 0, -1) in the base frame; command is (vx, vy, yaw rate) in
m/s and rad/s, clipped to the ranges the policy was trained on when the contract carries them;
gait_phase is the clock in cycles [0, 1) (left foot in stance for phase < 0.5); heading_error
is the heading the command asks for minus the base heading, rad.

Action law (`ActionLaw`): a = clip(action, -action_clip, action_clip);
target = default_pose + action_scale * a ("absolute") or joint_pos + action_scale * a
("relative"), plus the gait feed-forward (a clock-driven stepping fold of hip pitch, knee and
ankle pitch, and a hip-pitch stride sweep with the forward command), clipped to the target limits
(the middle of each joint range +- target_limit_factor of its half range).
A NaN action gives NaN targets: what to do then (damp, fault) is the caller's decision.

`PolicyIO` is the whole chain for one robot (or N) from what a robot measures: joint positions
and velocities, the IMU quaternion and gyro, the command and the time since the policy started.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from motionvl.robot import SIDES, ConfigError, middle_share
from motionvl.sim.math import projected_gravity, wrap_angle, yaw_of

FORMAT = "motionvl-policy/2"
"""The metadata format this module writes and reads."""

HEADING_ERROR_CLIP = 1.0
"""rad: the heading-error input saturates here (far off course the policy only needs the sign)."""

FEEDFORWARD_KINDS = ("hip_pitch", "knee", "ankle_pitch")
"""The joints of each leg the gait feed-forward moves, in the order of its offsets."""

LATERAL_KINDS = ("hip_roll", "ankle_roll")
"""The joints of each leg the lateral stride of the feed-forward moves, in the order of its offsets."""

COMMAND_AXES = ("vx", "vy", "yaw_rate")

# The blocks an observation can hold: name -> (size, or None for one entry per joint).
BLOCK_SIZES = {"base_ang_vel": 3, "projected_gravity": 3, "command": 3, "heading_error": 1,
               "joint_pos_rel": None, "joint_vel": None, "last_action": None, "gait_phase_sin_cos": 2}
HISTORY = "history"
OBS_SCALES = {"base_ang_vel": 0.25, "projected_gravity": 1.0, "command": (2.0, 2.0, 0.25), "heading_error": 1.0,
              "joint_pos_rel": 1.0, "joint_vel": 0.05, "last_action": 1.0, "gait_phase_sin_cos": 1.0}
"""The scale of each block in the observations MotionVL trains with."""
PROPRIO_BLOCKS = ("base_ang_vel", "projected_gravity", "joint_pos_rel", "joint_vel", "last_action")
"""The blocks of a history frame (the proprioceptive part: no command, heading or clock)."""


class ContractError(ValueError):
    """A policy's contract cannot be built, or does not match the robot it is meant to drive."""


@dataclasses.dataclass(frozen=True)
class ObsBlock:
    """One block of the observation: `size` entries, each multiplied by its `scale` after an optional clip."""

    name: str
    size: int
    scale: tuple
    """Per entry."""
    clip: float | None = None
    """The raw value is clipped to [-clip, clip] before scaling; None: no clip."""

    def to_metadata(self, per_entry_scale: bool = True) -> dict:
        out = {"name": self.name, "size": self.size,
               "scale": list(self.scale) if per_entry_scale or len(set(self.scale)) > 1 else self.scale[0]}
        if self.clip is not None:
            out["clip"] = self.clip
        return out


def training_layout(num_joints: int, heading: bool) -> tuple:
    """The actor observation blocks MotionVL trains with (without history)."""
    names = ["base_ang_vel", "projected_gravity", "command", *(["heading_error"] if heading else []),
             "joint_pos_rel", "joint_vel", "last_action", "gait_phase_sin_cos"]
    return tuple(_block(name, num_joints) for name in names)


def _block(name: str, num_joints: int) -> ObsBlock:
    size = BLOCK_SIZES[name] or num_joints
    scale = tuple(float(s) for s in np.broadcast_to(np.asarray(OBS_SCALES[name], float), (size,)))
    return ObsBlock(name, size, scale, HEADING_ERROR_CLIP if name == "heading_error" else None)


@dataclasses.dataclass(frozen=True)
class PolicyContract:
    """What a policy assumes about the robot and its inputs: written into the ONNX metadata at export
    (`to_metadata`), read back by whatever runs the policy (`from_metadata`). Per-joint values are in
    `joint_names` order; angles in rad, torques in N m, times in s."""

    robot_name: str
    joint_names: tuple
    default_pose: tuple
    kp: tuple
    kd: tuple
    effort_limit: tuple
    velocity_limit: tuple
    """rad/s per joint: the speed the robot's joints are rated for (the deployment node enforces it)."""
    joint_pos_lower: tuple
    joint_pos_upper: tuple
    """Joint position limits (the robot's hard limits)."""
    action_scale: tuple
    """rad per unit action, per joint."""
    action_mode: str
    """'absolute' (target = default + scale x a) or 'relative' (target = q + scale x a)."""
    control_dt: float
    """Policy period."""
    obs_layout: tuple
    """ObsBlocks of the observation before the history frames."""
    history_frames: int = 0
    """Past frames appended after `obs_layout`, newest first."""
    history_frame: tuple = ()
    """ObsBlocks of one history frame: frame k (0 = newest) is these blocks as the observation of
    k + 1 policy steps ago had them."""
    history_reset_value: float = 0.0
    """What frames from before the last reset hold."""
    gait_period: float = 0.7
    """Period of the gait clock (s)."""
    gait_feedforward: float = 0.0
    """Amplitude (rad) of the stepping fold; 0: none."""
    gait_stride_feedforward: float = 0.0
    """Hip-pitch sweep (rad per m/s of forward command); 0: none."""
    gait_lateral_stride: float = 0.0
    """Hip-roll sweep (rad per m/s of lateral command); 0: none."""
    gait_stand_below: float = 0.1
    """The feed-forward rests while every command component is at or below this (m/s, rad/s)."""
    feedforward_joints: tuple = ()
    """(left, right) x FEEDFORWARD_KINDS joint names the feed-forward moves; () without feed-forward."""
    lateral_joints: tuple = ()
    """(left, right) x LATERAL_KINDS joint names the lateral stride moves; () without it."""
    command_ranges: tuple | None = None
    """((lo, hi) of vx, vy, yaw_rate) the policy was trained on; commands are clipped to them. None: no clip."""
    action_clip: float = 1.0
    """Actions are clipped to [-action_clip, action_clip] (the exported graph clips there too)."""
    train_sim_dt: float | None = None
    """The training physics step (information: evaluation can run at it)."""
    train_decimation: int | None = None
    """Physics steps per policy step in training (information)."""
    target_limit_factor: float = 1.0
    """Targets are clipped to the middle of each joint's range +- this share of its half range (the robot's
    target_limit_factor in training); 1.0 in policies exported before it was recorded, which trained so."""

    # ------------------------------------------------------------------ derived
    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    @property
    def num_actions(self) -> int:
        return len(self.joint_names)

    @property
    def frame_size(self) -> int:
        return sum(b.size for b in self.history_frame)

    @property
    def num_obs(self) -> int:
        return sum(b.size for b in self.obs_layout) + self.history_frames * self.frame_size

    @property
    def heading_observation(self) -> bool:
        return any(b.name == "heading_error" for b in self.obs_layout)

    @property
    def has_feedforward(self) -> bool:
        return bool(self.gait_feedforward or self.gait_stride_feedforward or self.gait_lateral_stride)

    def gait_phase(self, time_s) -> np.ndarray:
        """The gait clock (cycles in [0, 1)) `time_s` seconds after the policy started."""
        return gait_phase(time_s, self.gait_period)

    def target_limits(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) the targets are clipped to."""
        return middle_share(self.joint_pos_lower, self.joint_pos_upper, self.target_limit_factor)

    def clip_command(self, command) -> np.ndarray:
        """`command` (..., 3) clipped to the trained ranges (unchanged without them)."""
        command = np.asarray(command, dtype=np.float64)
        if self.command_ranges is None:
            return command
        lo, hi = np.array(self.command_ranges, dtype=np.float64).T
        return np.clip(command, lo, hi)

    # ------------------------------------------------------------------ building
    @classmethod
    def for_training(cls, robot, env_cfg, gait_period: float | None = None, action_clip: float = 1.0,
                     feedforward_joints: tuple | None = None) -> "PolicyContract":
        """The contract of a policy trained on `robot` (RobotConfig) with `env_cfg` (EnvConfig);
        `gait_period`: the clock period (s) the policy was last trained with, where env_cfg schedules it
        (EnvConfig.SCHEDULES); None: env_cfg.gait_period_s. `feedforward_joints`: the joints the
        gait feed-forward moves, (left, right) x FEEDFORWARD_KINDS names; None: from the robot's roles."""
        J = robot.num_joints
        lateral = bool(env_cfg.gait_lateral_stride)
        feedforward = bool(env_cfg.gait_feedforward or env_cfg.gait_stride_feedforward or lateral)
        for name in ("gait_feedforward", "gait_stride_feedforward", "gait_lateral_stride"):
            if not getattr(env_cfg, name) >= 0.0:
                raise ConfigError(f"env.{name} must be >= 0, got {getattr(env_cfg, name)}")
        if feedforward and robot.action_mode != "absolute":
            raise ConfigError("env.gait_feedforward, gait_stride_feedforward and gait_lateral_stride need a robot with "
                              "action_mode "
                              f"'absolute' (offsets from the default pose), not {robot.action_mode!r}")
        if feedforward and feedforward_joints is None:
            feedforward_joints = robot_feedforward_joints(robot)
        history = int(env_cfg.obs_history)
        if history < 0:
            raise ConfigError(f"env.obs_history must be >= 0, got {history}")
        commands = env_cfg.commands
        return cls(
            robot_name=robot.name, joint_names=tuple(robot.joint_names), default_pose=_floats(robot.default_pose),
            kp=_floats(robot.kp), kd=_floats(robot.kd), effort_limit=_floats(robot.effort_limit),
            velocity_limit=_floats(robot.velocity_limit), joint_pos_lower=_floats(robot.lower),
            joint_pos_upper=_floats(robot.upper), action_scale=_floats(robot.action_scales),
            action_mode=robot.action_mode, control_dt=float(robot.control_dt),
            obs_layout=training_layout(J, bool(env_cfg.heading_observation)), history_frames=history,
            history_frame=tuple(_block(n, J) for n in PROPRIO_BLOCKS) if history else (),
            gait_period=float(env_cfg.gait_period_s if gait_period is None else gait_period),
            gait_feedforward=float(env_cfg.gait_feedforward),
            gait_stride_feedforward=float(env_cfg.gait_stride_feedforward),
            gait_lateral_stride=float(env_cfg.gait_lateral_stride),
            gait_stand_below=float(env_cfg.gait_stand_below),
            feedforward_joints=tuple(tuple(side) for side in feedforward_joints) if feedforward else (),
            lateral_joints=robot_lateral_joints(robot) if lateral else (),
            command_ranges=tuple((float(lo), float(hi)) for lo, hi in (commands.vx, commands.vy, commands.yaw_rate)),
            action_clip=float(action_clip), train_sim_dt=float(env_cfg.sim_dt or robot.sim_dt),
            train_decimation=int(env_cfg.decimation or robot.decimation),
            target_limit_factor=float(robot.target_limit_factor))

    def to_metadata(self) -> dict:
        """Plain values (one JSON string each in the ONNX metadata props)."""
        layout = [b.to_metadata() for b in self.obs_layout]
        if self.history_frames:
            layout.append({"name": HISTORY, "size": self.history_frames * self.frame_size,
                           "frames": self.history_frames, "order": "newest first",
                           "frame": [b.to_metadata(per_entry_scale=False) for b in self.history_frame],
                           "reset_value": self.history_reset_value})
        return {
            "format": FORMAT, "robot_name": self.robot_name, "joint_names": list(self.joint_names),
            "default_pose": list(self.default_pose), "kp": list(self.kp), "kd": list(self.kd),
            "effort_limit": list(self.effort_limit), "velocity_limit": list(self.velocity_limit),
            "joint_pos_lower": list(self.joint_pos_lower), "joint_pos_upper": list(self.joint_pos_upper),
            "action_scale": list(self.action_scale), "action_mode": self.action_mode, "action_clip": self.action_clip,
            "control_dt": self.control_dt, "num_obs": self.num_obs, "num_actions": self.num_actions,
            "obs_layout": layout, "obs_history": self.history_frames, "heading_observation": self.heading_observation,
            "gait_period": self.gait_period, "gait_feedforward": self.gait_feedforward,
            "gait_stride_feedforward": self.gait_stride_feedforward, "gait_stand_below": self.gait_stand_below,
            "gait_feedforward_joints": [list(side) for side in self.feedforward_joints],
            "gait_lateral_stride": self.gait_lateral_stride,
            "gait_lateral_joints": [list(side) for side in self.lateral_joints],
            "command_ranges": None if self.command_ranges is None else dict(zip(COMMAND_AXES,
                                                                                  map(list, self.command_ranges))),
            "train_sim_dt": self.train_sim_dt, "train_decimation": self.train_decimation,
            "target_limit_factor": self.target_limit_factor,
        }

    @classmethod
    def from_metadata(cls, meta: dict) -> "PolicyContract":
        """The contract in an exported policy's metadata (values already JSON-decoded). ContractError
        naming everything it cannot build: missing keys, another format, unknown observation blocks,
        sizes that do not add up."""
        if meta.get("format") != FORMAT:
            raise ContractError(f"policy metadata format is {meta.get('format')!r}, this code reads {FORMAT!r} "
                                "(a policy exported by another version: export it again)")
        required = ("robot_name", "joint_names", "default_pose", "kp", "kd", "effort_limit", "velocity_limit",
                    "joint_pos_lower", "joint_pos_upper", "action_scale", "action_mode", "control_dt", "obs_layout",
                    "num_obs", "gait_period")
        missing = [k for k in required if k not in meta]
        if missing:
            raise ContractError(f"policy metadata lacks {missing}")
        problems: list[str] = []
        names = tuple(str(n) for n in meta["joint_names"])
        J = len(names)

        def per_joint(key: str) -> tuple:
            values = meta[key]
            if not isinstance(values, list) or len(values) != J:
                problems.append(f"{key}: expected {J} numbers (one per joint), got {values!r}")
                return (0.0,) * J
            return _floats(values)

        arrays = {k: per_joint(k) for k in ("default_pose", "kp", "kd", "effort_limit", "velocity_limit",
                                              "joint_pos_lower", "joint_pos_upper", "action_scale")}
        if meta["action_mode"] not in ("absolute", "relative"):
            problems.append(f"action_mode: {meta['action_mode']!r} is neither 'absolute' nor 'relative'")
        layout, frames, frame, reset_value = [], 0, [], 0.0
        raw_layout = meta["obs_layout"] if isinstance(meta["obs_layout"], list) else []
        if not raw_layout:
            problems.append("obs_layout: expected a non-empty list of blocks")
        for k, raw in enumerate(raw_layout):
            if isinstance(raw, dict) and raw.get("name") == HISTORY:
                if k != len(raw_layout) - 1:
                    problems.append("obs_layout: the history block must come last")
                frames = raw.get("frames")
                if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
                    problems.append(f"obs_layout history: frames must be a positive integer, got {frames!r}")
                    frames = 0
                if raw.get("order", "newest first") != "newest first":
                    problems.append(f"obs_layout history: order {raw.get('order')!r} (only 'newest first' is built)")
                frame = [_parse_block(b, J, problems, "history frame", PROPRIO_BLOCKS) for b in raw.get("frame") or []]
                if not frame:
                    problems.append("obs_layout history: no frame blocks")
                reset_value = float(raw.get("reset_value", 0.0))
                if frames and frame and None not in frame and raw.get("size") != frames * sum(b.size for b in frame):
                    problems.append(f"obs_layout history: size {raw.get('size')} is not frames {frames} x frame size "
                                    f"{sum(b.size for b in frame)}")
            else:
                layout.append(_parse_block(raw, J, problems, "obs_layout", tuple(BLOCK_SIZES)))
        lateral = bool(meta.get("gait_lateral_stride"))
        feedforward = bool(meta.get("gait_feedforward") or meta.get("gait_stride_feedforward") or lateral)
        lateral_joints = _leg_joints(meta, "gait_lateral_joints", LATERAL_KINDS, names, problems) if lateral else ()
        ff_joints = _leg_joints(meta, "gait_feedforward_joints", FEEDFORWARD_KINDS, names, problems) \
            if feedforward else ()
        if feedforward:
            if meta["action_mode"] != "absolute":
                problems.append("gait feed-forward needs action_mode 'absolute'")
        ranges = meta.get("command_ranges")
        command_ranges = None
        if ranges is not None:
            try:
                command_ranges = tuple((float(ranges[a][0]), float(ranges[a][1])) for a in COMMAND_AXES)
            except (KeyError, IndexError, TypeError, ValueError):
                problems.append(f"command_ranges: expected {{vx, vy, yaw_rate: [lo, hi]}}, got {ranges!r}")
        limit_factor = meta.get("target_limit_factor", 1.0)
        if isinstance(limit_factor, bool) or not isinstance(limit_factor, (int, float)) or not 0 < limit_factor <= 1:
            problems.append(f"target_limit_factor: expected a number in (0, 1], got {limit_factor!r}")
            limit_factor = 1.0
        if None in layout or None in frame:
            layout, frame = [b for b in layout if b is not None], [b for b in frame if b is not None]
        if problems:
            raise ContractError("cannot build the policy's inputs from its contract: " + "; ".join(problems))
        contract = cls(
            robot_name=str(meta["robot_name"]), joint_names=names, **arrays, action_mode=str(meta["action_mode"]),
            control_dt=float(meta["control_dt"]), obs_layout=tuple(layout), history_frames=int(frames),
            history_frame=tuple(frame), history_reset_value=reset_value, gait_period=float(meta["gait_period"]),
            gait_feedforward=float(meta.get("gait_feedforward", 0.0)),
            gait_stride_feedforward=float(meta.get("gait_stride_feedforward", 0.0)),
            gait_lateral_stride=float(meta.get("gait_lateral_stride", 0.0)),
            gait_stand_below=float(meta.get("gait_stand_below", 0.1)),
            feedforward_joints=ff_joints, lateral_joints=lateral_joints,
            command_ranges=command_ranges,
            action_clip=float(meta.get("action_clip", 1.0)),
            train_sim_dt=None if meta.get("train_sim_dt") is None else float(meta["train_sim_dt"]),
            train_decimation=None if meta.get("train_decimation") is None else int(meta["train_decimation"]),
            target_limit_factor=float(limit_factor))
        if int(meta["num_obs"]) != contract.num_obs:
            raise ContractError(f"num_obs {meta['num_obs']} differs from the layout's {contract.num_obs} entries")
        return contract

    # ------------------------------------------------------------------ checks
    def check_robot(self, robot, rtol: float = 1e-6, atol: float = 1e-9) -> None:
        """Raise ContractError listing every difference between this contract and `robot` (RobotConfig):
        name, joint order, default pose, gains, limits, action scale and mode, control period, and the
        joints the feed-forward moves."""
        problems = []
        if self.robot_name != robot.name:
            problems.append(f"robot_name: policy {self.robot_name!r} vs robot {robot.name!r}")
        have, want = list(self.joint_names), list(robot.joint_names)
        if len(have) != len(want):
            problems.append(f"joint count: policy has {len(have)} joints, robot has {len(want)}")
        elif have != want:
            diffs = [f"#{i} policy {a!r} vs robot {b!r}" for i, (a, b) in enumerate(zip(have, want)) if a != b]
            problems.append("joint order differs: " + ", ".join(diffs))
        if self.action_mode != robot.action_mode:
            problems.append(f"action_mode: policy {self.action_mode!r} vs robot {robot.action_mode!r}")
        for key, theirs in (("default_pose", robot.default_pose), ("kp", robot.kp), ("kd", robot.kd),
                            ("effort_limit", robot.effort_limit), ("velocity_limit", robot.velocity_limit),
                            ("joint_pos_lower", robot.lower), ("joint_pos_upper", robot.upper),
                            ("action_scale", robot.action_scales), ("control_dt", robot.control_dt)):
            a, b = np.asarray(getattr(self, key), dtype=float), np.asarray(theirs, dtype=float)
            if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol):
                problems.append(f"{key}: policy {np.round(a, 6).tolist()} vs robot {np.round(b, 6).tolist()}")
        if self.has_feedforward and len(have) == len(want):
            try:
                theirs = robot_feedforward_joints(robot)
            except (ConfigError, ValueError) as exc:
                problems.append(f"gait feed-forward joints: {exc}")
            else:
                if tuple(map(tuple, theirs)) != self.feedforward_joints:
                    problems.append(f"gait feed-forward joints: policy {[list(s) for s in self.feedforward_joints]} vs "
                                    f"robot {[list(s) for s in theirs]}")
        if self.gait_lateral_stride and len(have) == len(want):
            try:
                theirs = robot_lateral_joints(robot)
            except (ConfigError, ValueError) as exc:
                problems.append(f"lateral stride joints: {exc}")
            else:
                if theirs != self.lateral_joints:
                    problems.append(f"lateral stride joints: policy {[list(s) for s in self.lateral_joints]} vs "
                                    f"robot {[list(s) for s in theirs]}")
        if problems:
            raise ContractError("policy does not match the robot: " + "; ".join(problems))


def _floats(values) -> tuple:
    return tuple(float(v) for v in np.asarray(values, dtype=np.float64).ravel())


def _parse_block(raw, num_joints: int, problems: list, where: str, known: tuple) -> ObsBlock | None:
    if not isinstance(raw, dict) or "name" not in raw:
        problems.append(f"{where}: block {raw!r} has no name")
        return None
    name = raw["name"]
    if name not in known:
        problems.append(f"{where}: block {name!r} cannot be built (known blocks: {list(known)})")
        return None
    size = BLOCK_SIZES[name] or num_joints
    if raw.get("size") != size:
        problems.append(f"{where}: block {name!r} has size {raw.get('size')!r}, expected {size}")
        return None
    try:
        scale = np.broadcast_to(np.asarray(raw.get("scale", 1.0), dtype=float), (size,))
    except ValueError:
        problems.append(f"{where}: block {name!r} scale {raw.get('scale')!r} does not fit its {size} entries")
        return None
    clip = raw.get("clip")
    return ObsBlock(name, size, _floats(scale), None if clip is None else float(clip))


def _leg_joints(meta: dict, key: str, kinds: tuple, names: tuple, problems: list) -> tuple:
    """meta[key] as (left, right) x `kinds` joint names among `names` (a problem noted otherwise)."""
    joints = tuple(tuple(str(n) for n in side) for side in meta.get(key) or [])
    if len(joints) != 2 or any(len(side) != len(kinds) for side in joints):
        problems.append(f"{key}: expected (left, right) x {list(kinds)} joint names, got {meta.get(key)!r}")
    elif any(n not in names for side in joints for n in side):
        problems.append(f"{key}: {[n for s in joints for n in s if n not in names]} are not among joint_names")
    return joints


def robot_lateral_joints(robot) -> tuple:
    """(left, right) x LATERAL_KINDS joint names of `robot` (RobotConfig), from its declared joint roles."""
    return tuple(tuple(robot.joint_names[robot.joint_index(side, kind)] for kind in LATERAL_KINDS)
                 for side in SIDES)


def robot_feedforward_joints(robot) -> tuple:
    """(left, right) x FEEDFORWARD_KINDS joint names of `robot` (RobotConfig), from its declared joint roles."""
    return tuple(tuple(robot.joint_names[robot.joint_index(side, kind)] for kind in FEEDFORWARD_KINDS)
                 for side in SIDES)


# ---------------------------------------------------------------------- clock, heading, feed-forward
def gait_phase(time_s, period: float) -> np.ndarray:
    """The gait clock in cycles [0, 1) `time_s` seconds after it started."""
    return np.mod(time_s / period, 1.0)


def heading_error(target_yaw, base_quat) -> np.ndarray:
    """Commanded heading minus the heading of (..., 4) wxyz quaternions, wrapped to [-pi, pi)."""
    return wrap_angle(target_yaw - yaw_of(base_quat))


def moving(command: np.ndarray, stand_below: float) -> np.ndarray:
    """(N,) bool: the command asks for motion (any component above `stand_below`)."""
    return np.any(np.abs(command) > stand_below, axis=1)


def expected_stance(gait_phase: np.ndarray, command: np.ndarray, stand_below: float) -> np.ndarray:
    """(N, 2) bool: which foot the gait clock puts in stance (left for phase < 0.5; both when standing)."""
    left = gait_phase < 0.5
    stance = np.stack([left, ~left], axis=1)
    stance[~moving(command, stand_below)] = True
    return stance


def swing_progress(gait_phase: np.ndarray) -> np.ndarray:
    """(N, 2) progress through the current half cycle in [0, 1) for each foot."""
    p = np.mod(2.0 * gait_phase, 1.0)
    return np.stack([p, p], axis=1)


def gait_feedforward_offsets(command: np.ndarray, gait_phase: np.ndarray, amplitude: float, stand_below: float,
                             stride: float = 0.0) -> np.ndarray:
    """(N, 2, 3) offsets from the default pose of (hip pitch, knee, ankle pitch), left and right.

    The clock's swing leg folds by a half sine over its swing, s = sin(pi x swing progress):
    hip pitch -amplitude s, knee +2 amplitude s, ankle pitch -amplitude s. With parallel pitch
    axes the fold keeps the sole level and under the hip and lifts it by (thigh + shin) x
    (cos(q0) - cos(q0 + amplitude)), q0 the default thigh angle: ~9 cm for mvl_biped at 0.35 rad.
    The stance leg and both legs when standing: the default pose.

    stride (rad per m/s of forward command vx): the legs also sweep in hip pitch as walking at vx
    asks, linearly over each half cycle: the stance hip from -stride vx (foot ahead) to +stride vx
    (foot behind), the swing hip back again, the ankle pitch opposite to the hip to keep the sole
    level. Continuous where the legs change roles; none while the command is standing.
    """
    stance = expected_stance(gait_phase, command, stand_below)
    progress = swing_progress(gait_phase)
    offsets = (np.sin(np.pi * progress) * ~stance)[:, :, None] * (amplitude * np.array([-1.0, 2.0, -1.0]))
    if stride:
        ramp = 1.0 - 2.0 * progress  # +1 -> -1 over each half cycle
        reach = stride * command[:, :1] * moving(command, stand_below)[:, None]
        sweep = reach * np.where(stance, -ramp, ramp)
        offsets = offsets + sweep[:, :, None] * np.array([1.0, 0.0, -1.0])
    return offsets


def lateral_stride_offsets(command: np.ndarray, gait_phase: np.ndarray, stride: float,
                           stand_below: float) -> np.ndarray:
    """(N, 2, 2) offsets from the default pose of (hip roll, ankle roll), left and right.

    stride (rad per m/s of lateral command vy): the legs sweep in hip roll as side-stepping at vy asks, as
    `gait_feedforward_offsets` sweeps hip pitch for vx: the stance hip from +stride vy to -stride vy
    linearly over its half cycle (for roll joints about the pelvis' +x axis, a positive roll puts the foot
    towards +y: from beside the hip on the side the robot steps to, to the other side), the swing hip back
    again, the ankle roll opposite to keep the sole flat. None while the command is standing.
    """
    stance = expected_stance(gait_phase, command, stand_below)
    ramp = 1.0 - 2.0 * swing_progress(gait_phase)  # +1 -> -1 over each half cycle
    reach = stride * command[:, 1:2] * moving(command, stand_below)[:, None]
    sweep = reach * np.where(stance, ramp, -ramp)
    return sweep[:, :, None] * np.array([1.0, -1.0])


def _rows(x, num_envs: int, width: int | None, name: str) -> np.ndarray:
    """`x` as (num_envs, width) float64 (or (num_envs,) with width None); a 1-D row is one env's."""
    a = np.asarray(x, dtype=np.float64)
    shape = (num_envs,) if width is None else (num_envs, width)
    if a.shape == shape:
        return a
    if num_envs == 1 and a.size == int(np.prod(shape)):
        return a.reshape(shape)
    raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")


# ---------------------------------------------------------------------- observation
class ObservationBuilder:
    """Builds the policy's observation of N robots from their state, keeping the history frames."""

    def __init__(self, contract: PolicyContract, num_envs: int = 1):
        self.contract = contract
        self.num_envs = N = int(num_envs)
        self._blocks = [b.name for b in contract.obs_layout]
        self._clips = {b.name: b.clip for b in contract.obs_layout if b.clip is not None}
        self._scale = np.concatenate([np.asarray(b.scale, dtype=np.float64) for b in contract.obs_layout])
        self._frame_blocks = [b.name for b in contract.history_frame]
        self._frame_scales = [np.asarray(b.scale, dtype=np.float64) for b in contract.history_frame]
        if not set(self._frame_blocks) <= set(PROPRIO_BLOCKS):
            raise ContractError(f"history frames of {self._frame_blocks} cannot be built: frames hold the "
                                f"proprioceptive blocks {list(PROPRIO_BLOCKS)}")
        self._default = np.asarray(contract.default_pose, dtype=np.float64)
        self._clip_command = contract.command_ranges is not None
        self.history = np.full((N, contract.history_frames, contract.frame_size), contract.history_reset_value)
        """(N, frames, frame size): the past frames, newest first."""

    @property
    def num_obs(self) -> int:
        return self.contract.num_obs

    def reset(self, ids=None) -> None:
        """Forget the history of robots `ids` (all by default): their frames hold the reset value."""
        self.history[slice(None) if ids is None else ids] = self.contract.history_reset_value

    def build(self, *, base_ang_vel, projected_gravity, command, joint_pos, joint_vel, last_action, gait_phase,
              heading_error=None) -> np.ndarray:
        """(N, num_obs) observation of the current state (layout in the module docstring); advances the
        history by one frame. Per-robot inputs may be given as 1-D rows when N is 1; `heading_error` is
        needed when the layout holds it."""
        N, J = self.num_envs, self.contract.num_joints
        joint_pos = _rows(joint_pos, N, J, "joint_pos")
        last_action = _rows(last_action, N, J, "last_action")
        raw = {"base_ang_vel": _rows(base_ang_vel, N, 3, "base_ang_vel"),
               "projected_gravity": _rows(projected_gravity, N, 3, "projected_gravity"),
               "joint_pos_rel": joint_pos - self._default, "joint_vel": _rows(joint_vel, N, J, "joint_vel"),
               "last_action": last_action}
        for name in self._blocks:
            if name == "command":
                command = _rows(command, N, 3, "command")
                raw[name] = self.contract.clip_command(command) if self._clip_command else command
            elif name == "heading_error":
                if heading_error is None:
                    raise ValueError("this policy observes the heading error: pass heading_error")
                clip = self._clips.get(name)
                error = _rows(heading_error, N, None, "heading_error")
                raw[name] = (np.clip(error, -clip, clip) if clip is not None else error)[:, None]
            elif name == "gait_phase_sin_cos":
                phase = 2 * np.pi * _rows(gait_phase, N, None, "gait_phase")
                raw[name] = np.concatenate([np.sin(phase)[:, None], np.cos(phase)[:, None]], axis=1)
        obs = np.concatenate([raw[name] for name in self._blocks], axis=1)
        obs *= self._scale
        if self.contract.history_frames:
            frame = np.concatenate([raw[name] * scale for name, scale in zip(self._frame_blocks, self._frame_scales)],
                                   axis=1)
            obs = np.concatenate([obs, self.history.reshape(N, -1)], axis=1)
            self.history[:, 1:] = self.history[:, :-1]
            self.history[:, 0] = frame
        return obs


# ---------------------------------------------------------------------- action
class ActionLaw:
    """The policy's action -> joint position targets for the PD loop (law in the module docstring)."""

    def __init__(self, contract: PolicyContract):
        self.contract = c = contract
        self.default_pose = np.asarray(c.default_pose, dtype=np.float64)
        self.action_scale = np.asarray(c.action_scale, dtype=np.float64)
        self.lower, self.upper = c.target_limits()
        self.relative = c.action_mode == "relative"
        self.feedforward_index = np.array([[c.joint_names.index(n) for n in side] for side in c.feedforward_joints],
                                          dtype=np.int64).reshape(-1, len(FEEDFORWARD_KINDS))
        """(2, 3) joint indices [left, right] x FEEDFORWARD_KINDS; empty without feed-forward."""
        self.lateral_index = np.array([[c.joint_names.index(n) for n in side] for side in c.lateral_joints],
                                      dtype=np.int64).reshape(-1, len(LATERAL_KINDS))
        """(2, 2) joint indices [left, right] x LATERAL_KINDS; empty without the lateral stride."""
        self._clip_command = c.command_ranges is not None

    def clip(self, action) -> np.ndarray:
        """The action clipped to the contract's [-action_clip, action_clip]."""
        return np.clip(np.asarray(action, dtype=np.float64), -self.contract.action_clip, self.contract.action_clip)

    def offsets(self, command, gait_phase) -> np.ndarray:
        """(N, 2, 3) feed-forward offsets of the joints `feedforward_index` names (zeros without feed-forward)."""
        c = self.contract
        command, phase = self._clock_inputs(command, gait_phase)
        if not c.has_feedforward:
            return np.zeros((len(command), 2, len(FEEDFORWARD_KINDS)))
        return gait_feedforward_offsets(command, phase, c.gait_feedforward, c.gait_stand_below,
                                        c.gait_stride_feedforward)

    def _clock_inputs(self, command, gait_phase) -> tuple:
        """(N, 3) commands (clipped to the trained ranges) and (N,) gait phases."""
        command = np.asarray(command, dtype=np.float64)
        command = command.reshape(-1, 3) if command.ndim == 1 else command
        phase = np.asarray(gait_phase, dtype=np.float64).reshape(len(command))
        return (self.contract.clip_command(command) if self._clip_command else command), phase

    def lateral_offsets(self, command, gait_phase) -> np.ndarray:
        """(N, 2, 2) lateral stride offsets of the joints `lateral_index` names (zeros without it)."""
        c = self.contract
        command, phase = self._clock_inputs(command, gait_phase)
        if not c.gait_lateral_stride:
            return np.zeros((len(command), 2, len(LATERAL_KINDS)))
        return lateral_stride_offsets(command, phase, c.gait_lateral_stride, c.gait_stand_below)

    def feedforward(self, command, gait_phase) -> np.ndarray:
        """(N, J) joint position offsets the gait feed-forward adds to the targets."""
        offsets = self.offsets(command, gait_phase)
        out = np.zeros((len(offsets), self.contract.num_joints))
        if self.feedforward_index.size:
            out[:, self.feedforward_index] = offsets
        if self.lateral_index.size:
            out[:, self.lateral_index] += self.lateral_offsets(command, gait_phase)
        return out

    def targets(self, action, *, joint_pos=None, command=None, gait_phase=None) -> np.ndarray:
        """(N, J) joint targets for (N, J) actions (a 1-D action is one robot's). `joint_pos` is needed
        in 'relative' mode, `command` and `gait_phase` (the ones the policy observed) with feed-forward."""
        action = self.clip(action)
        action = action[None] if action.ndim == 1 else action
        if self.relative:
            if joint_pos is None:
                raise ValueError("a policy with action_mode 'relative' needs joint_pos")
            base = _rows(joint_pos, len(action), self.contract.num_joints, "joint_pos")
        else:
            base = self.default_pose
        target = base + self.action_scale * action
        if self.contract.has_feedforward:
            if command is None or gait_phase is None:
                raise ValueError("a policy with gait feed-forward needs the command and gait_phase it observed")
            target[:, self.feedforward_index] += self.offsets(command, gait_phase)
            if self.lateral_index.size:
                target[:, self.lateral_index] += self.lateral_offsets(command, gait_phase)
        return np.clip(target, self.lower, self.upper)


# ---------------------------------------------------------------------- one robot, from its sensors
class PolicyIO:
    """The whole policy I/O from what robots measure, as a deployment runs it (N robots, usually 1).

    `observe` takes joint positions and velocities, the IMU quaternion (w, x, y, z, base frame to
    world) and gyro (rad/s, base frame), the command (vx, vy, yaw rate) and the seconds since the
    policy started (`reset`), and returns the observation; `targets` turns the policy's action into
    joint targets with the command and clock that observation held. The heading target starts at
    the heading of each new command and then turns at the commanded yaw rate, as in training (the
    heading error is measured since the command was given)."""

    def __init__(self, contract: PolicyContract, num_envs: int = 1):
        self.contract = contract
        self.num_envs = int(num_envs)
        self.observer = ObservationBuilder(contract, self.num_envs)
        self.law = ActionLaw(contract)
        self.last_action = np.zeros((self.num_envs, contract.num_joints))
        self._heading_target = np.zeros(self.num_envs)
        self._heading_command = np.full((self.num_envs, 3), np.nan)  # NaN: no command seen since reset
        self._last_time = np.zeros(self.num_envs)
        self._observed: tuple | None = None

    def reset(self, ids=None) -> None:
        """Start robots `ids` (all by default) afresh: no history, no last action, a new heading target."""
        ids = slice(None) if ids is None else ids
        self.observer.reset(ids)
        self.last_action[ids] = 0.0
        self._heading_command[ids] = np.nan
        self._last_time[ids] = 0.0

    def observe(self, *, joint_pos, joint_vel, imu_quat, imu_gyro, command, time_s) -> np.ndarray:
        """(N, num_obs) observation; `time_s`: seconds since `reset` (the gait clock)."""
        N = self.num_envs
        quat = _rows(imu_quat, N, 4, "imu_quat")
        quat = quat / np.linalg.norm(quat, axis=1, keepdims=True)
        command = _rows(command, N, 3, "command")
        if self.contract.command_ranges is not None:
            command = self.contract.clip_command(command)
        time_s = _rows(time_s, N, None, "time_s")
        new = ~np.all(command == self._heading_command, axis=1)  # NaN never equals: the first command is new
        self._heading_target = np.where(new, yaw_of(quat), self._heading_target
                                        + self._heading_command[:, 2] * (time_s - self._last_time))
        self._heading_command[new] = command[new]
        self._last_time = time_s
        phase = self.contract.gait_phase(time_s)
        self._observed = (command, phase, _rows(joint_pos, N, self.contract.num_joints, "joint_pos"))
        return self.observer.build(
            base_ang_vel=imu_gyro, projected_gravity=projected_gravity(quat), command=command, joint_pos=joint_pos,
            joint_vel=joint_vel, last_action=self.last_action, gait_phase=phase,
            heading_error=heading_error(self._heading_target, quat) if self.contract.heading_observation else None)

    def targets(self, action) -> np.ndarray:
        """(N, J) joint targets for the action the policy chose on the last observation."""
        if self._observed is None:
            raise RuntimeError("observe() first: the targets use the command and clock the policy observed")
        command, phase, joint_pos = self._observed
        action = self.law.clip(action).reshape(self.num_envs, self.contract.num_joints)
        self.last_action[:] = action
        return self.law.targets(action, joint_pos=joint_pos, command=command, gait_phase=phase)

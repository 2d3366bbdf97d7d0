"""The robot config: one YAML file read by the simulator, trainer, exporter and deployment node."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import yaml


class ConfigError(ValueError):
    """A config file is missing, malformed or inconsistent; the message says where and why."""


def package_root() -> Path:
    """Directory holding config/, urdf/ and launch/: the source tree or an installed share dir."""
    env = os.environ.get("MOTIONVL_SHARE")
    if env:
        return Path(env)
    source_tree = Path(__file__).resolve().parents[2]
    if (source_tree / "config" / "robot.yaml").exists():
        return source_tree
    try:  # installed with colcon / pip data_files: <prefix>/share/motionvl
        from ament_index_python.packages import get_package_share_directory  # type: ignore

        return Path(get_package_share_directory("motionvl"))
    except Exception:
        import sys

        return Path(sys.prefix) / "share" / "motionvl"


DEFAULT_ROBOT_CONFIG = "config/robot.yaml"


SIDES = ("left", "right")
JOINT_KINDS = ("hip_yaw", "hip_roll", "hip_pitch", "knee", "ankle_pitch", "ankle_roll")
"""Joint kinds MotionVL's code reads (the gait feed-forward, reward terms, gait metrics); a robot may
declare other kinds for its other joints."""


@dataclasses.dataclass(frozen=True)
class JointConfig:
    name: str
    default: float
    kp: float
    kd: float
    effort: float
    velocity: float
    lower: float
    upper: float
    action_scale: float | None = None  # rad per unit action for this joint; None: the robot's action_scale
    side: str | None = None
    """'left' or 'right'; None for a joint on the body's midline (a waist)."""
    kind: str | None = None
    """What the joint is (JOINT_KINDS, or the robot's own name for other joints); None: nothing reads it."""


_JOINT_KEYS = {f.name for f in dataclasses.fields(JointConfig)}
_OPTIONAL_JOINT_KEYS = {"action_scale", "side", "kind"}
_TEXT_JOINT_KEYS = {"name", "side", "kind"}


@dataclasses.dataclass(frozen=True)
class MotorConfig:
    """One motor of the real robot: the joint it drives and how its reading relates to the joint angle.

    motor angle = sign x joint angle + offset; motor velocity and torque = sign x the joint's."""

    name: str
    """The motor's name in the drive's joint_states and in the command layout."""
    joint: str
    """The robot-config joint it drives."""
    sign: float = 1.0
    """+1 or -1: the motor's positive direction against the joint's."""
    offset: float = 0.0
    """rad: the motor's reading at joint angle 0 (its zero offset)."""


@dataclasses.dataclass(frozen=True)
class HardwareConfig:
    """How the real robot's drives and IMU differ from the model: the joint-to-motor mapping and the
    IMU's mounting. The default is the identity (motors named and ordered as the joints, IMU aligned
    with the base link), which is what the simulator offers unless told to emulate this section."""

    motors: tuple = ()
    """MotorConfigs in the drives' order, one per joint; () is the identity mapping."""
    imu_rpy: tuple = (0.0, 0.0, 0.0)
    """rad: roll, pitch, yaw (fixed axes x, y, z) of the IMU frame in the base link frame."""

    @property
    def identity(self) -> bool:
        return not self.motors and not any(self.imu_rpy)


def joint_role_index(roles, side: str, kind: str) -> int:
    """Index of the joint with role (`side`, `kind`) among `roles`, one (side, kind) per joint in
    joint order (RobotConfig.joint_roles; RewardState and Trajectory carry them too). ValueError
    naming the declared roles when no joint has it."""
    for i, role in enumerate(roles):
        if tuple(role) == (side, kind):
            return i
    declared = [f"{s or 'midline'} {k}" for s, k in roles if k]
    raise ValueError(f"no joint is declared as the {side} {kind} (side and kind in the robot config's joints; "
                     f"declared: {declared or 'none'})")


def leg_pair(roles, kind: str):
    """np.array([left, right]) indices of the joints of `kind` (see joint_role_index)."""
    return np.array([joint_role_index(roles, side, kind) for side in SIDES])


@dataclasses.dataclass(frozen=True)
class RobotConfig:
    """Everything about the robot that must agree between simulation, training and hardware."""

    name: str
    urdf: Path
    base_link: str
    imu_link: str
    feet: tuple
    """(left, right) links whose soles carry the contact sensors."""
    knee_bodies: tuple
    """Bodies whose origin less than 0.12 m above the ground ends an episode as a fall (a knee down);
    declared, () when the robot relies on the base height and tilt alone."""
    sim_dt: float
    decimation: int
    action_scale: float
    action_mode: str
    init_base_height: float
    armature: float
    joint_damping: float
    """Passive damping of every joint (N m s/rad), in the MuJoCo model (the URDF's <dynamics> is overridden)."""
    joint_friction: float
    """Friction loss of every joint (N m), in the MuJoCo model and the base of its randomisation."""
    joints: tuple
    target_limit_factor: float = 0.95
    """Joint targets are clipped to the middle of each joint's range +- this share of its half range: in
    training, evaluation and on the robot alike (`target_limits`), so a policy learns only targets the
    deployment passes."""
    source: Path | None = None
    hardware: HardwareConfig = HardwareConfig()
    """The joint-to-motor mapping and IMU mounting of the real robot (deployment side only)."""

    # --- arrays in joint order -------------------------------------------------------------
    @property
    def joint_names(self) -> tuple:
        return tuple(j.name for j in self.joints)

    @property
    def num_joints(self) -> int:
        return len(self.joints)

    def array(self, key: str) -> np.ndarray:
        return np.array([getattr(j, key) for j in self.joints], dtype=np.float64)

    @property
    def default_pose(self) -> np.ndarray:
        return self.array("default")

    @property
    def kp(self) -> np.ndarray:
        return self.array("kp")

    @property
    def kd(self) -> np.ndarray:
        return self.array("kd")

    @property
    def effort_limit(self) -> np.ndarray:
        return self.array("effort")

    @property
    def velocity_limit(self) -> np.ndarray:
        return self.array("velocity")

    @property
    def lower(self) -> np.ndarray:
        return self.array("lower")

    @property
    def upper(self) -> np.ndarray:
        return self.array("upper")

    def target_limits(self, share: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) joint targets may reach: `share` x target_limit_factor of each range (`share` < 1: a
        deployment clipping tighter than training did)."""
        return middle_share(self.lower, self.upper, share * self.target_limit_factor)

    @property
    def action_scales(self) -> np.ndarray:
        """Per joint: the joint's own action_scale where it sets one, else the robot's."""
        return np.array([self.action_scale if j.action_scale is None else j.action_scale for j in self.joints],
                        dtype=np.float64)

    @property
    def control_dt(self) -> float:
        """Policy period in seconds."""
        return self.sim_dt * self.decimation

    @property
    def joint_roles(self) -> tuple:
        """(side, kind) of every joint in joint order (None where the config declares none)."""
        return tuple((j.side, j.kind) for j in self.joints)

    def joint_index(self, side: str, kind: str) -> int:
        """Index of the joint declared as (`side`, `kind`); ConfigError when none is."""
        try:
            return joint_role_index(self.joint_roles, side, kind)
        except ValueError as exc:
            raise ConfigError(f"{self.source or self.name}: {exc}") from exc

    def leg_pair(self, kind: str) -> np.ndarray:
        """[left, right] indices of the joints of `kind`; ConfigError when a side has none."""
        return np.array([self.joint_index(side, kind) for side in SIDES])

    def mirror_partner(self, index: int) -> int | None:
        """The joint on the other side with the same kind (the joint itself on the midline); None if missing."""
        side, kind = self.joint_roles[index]
        if side is None:
            return index
        other = SIDES[1 - SIDES.index(side)]
        return next((i for i, role in enumerate(self.joint_roles) if role == (other, kind)), None)


def _require(mapping: dict, key: str, where: str):
    if key not in mapping:
        raise ConfigError(f"{where}: missing required key '{key}'")
    return mapping[key]


def _hardware(raw, joint_names: list, where: str) -> HardwareConfig:
    """The `hardware:` section: motors (name, joint, sign, offset) in drive order, and imu_rpy."""
    where = f"{where}: hardware"
    if raw is None:
        return HardwareConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    unknown = set(raw) - {"motors", "imu_rpy"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    rpy = raw.get("imu_rpy") or [0.0, 0.0, 0.0]
    try:
        rpy = tuple(float(v) for v in rpy)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}.imu_rpy: expected three numbers (rad), got {rpy!r}") from exc
    if len(rpy) != 3 or not all(np.isfinite(rpy)):
        raise ConfigError(f"{where}.imu_rpy: expected three finite numbers (rad), got {list(rpy)}")
    motors = []
    for i, m in enumerate(raw.get("motors") or []):
        mw = f"{where}.motors[{i}]"
        if not isinstance(m, dict) or not {"name", "joint"} <= set(m) or set(m) - {"name", "joint", "sign", "offset"}:
            raise ConfigError(f"{mw}: expected {{name, joint, sign (+1/-1, default 1), offset (rad, default 0)}}, "
                              f"got {m!r}")
        try:
            motor = MotorConfig(str(m["name"]), str(m["joint"]), float(m.get("sign", 1.0)), float(m.get("offset", 0.0)))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{mw}: sign and offset must be numbers ({exc})") from exc
        if motor.sign not in (1.0, -1.0) or not np.isfinite(motor.offset):
            raise ConfigError(f"{mw} ({motor.name}): sign must be +1 or -1 and offset finite")
        if motor.joint not in joint_names:
            raise ConfigError(f"{mw} ({motor.name}): unknown joint {motor.joint!r}")
        motors.append(motor)
    if motors:
        driven = [m.joint for m in motors]
        missing = [n for n in joint_names if n not in driven]
        twice = sorted({n for n in driven if driven.count(n) > 1})
        names = [m.name for m in motors]
        if missing or twice or len(set(names)) != len(names):
            raise ConfigError(f"{where}.motors: every joint needs exactly one motor and motor names must be unique "
                              f"(joints without a motor: {missing}, joints with several: {twice})")
    return HardwareConfig(motors=tuple(motors), imu_rpy=rpy)


def _knee_bodies(raw: dict, where: str) -> tuple:
    if "knee_bodies" not in raw:
        raise ConfigError(f"{where}: missing required key 'knee_bodies': the bodies whose origin near the ground "
                          "ends an episode as a fall (a knee down), e.g. [left_shank, right_shank]; [] to rely on "
                          "the base height and tilt alone")
    bodies = raw["knee_bodies"] or []
    if not isinstance(bodies, list) or not all(isinstance(b, str) for b in bodies):
        raise ConfigError(f"{where}: 'knee_bodies' must be a list of body (link) names, got {bodies!r}")
    return tuple(bodies)


def middle_share(lower, upper, share: float) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) of the middle `share` of each range [lower, upper]: mid +- share x half range."""
    lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    mid, reach = (lower + upper) / 2, share * (upper - lower) / 2
    return mid - reach, mid + reach


def _number(raw: dict, key: str, default: float, where: str) -> float:
    try:
        return float(raw.get(key, default))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {key} must be a number, got {raw.get(key)!r}") from exc


def load_robot_config(path: str | Path | None = None) -> RobotConfig:
    """Read and validate a robot YAML file (default: the package's config/robot.yaml)."""
    path = Path(path) if path is not None else package_root() / DEFAULT_ROBOT_CONFIG
    if not path.exists():
        raise ConfigError(f"robot config not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    where = str(path)
    joints_raw = _require(raw, "joints", where)
    if not isinstance(joints_raw, list) or not joints_raw:
        raise ConfigError(f"{where}: 'joints' must be a non-empty list")
    joints = []
    for i, j in enumerate(joints_raw):
        jw = f"{where}: joints[{i}]"
        if not isinstance(j, dict):
            raise ConfigError(f"{jw}: expected a mapping")
        unknown = set(j) - _JOINT_KEYS
        if unknown:
            raise ConfigError(f"{jw}: unknown keys {sorted(unknown)}")
        values = {k: _require(j, k, jw) for k in _JOINT_KEYS - _OPTIONAL_JOINT_KEYS}
        values.update({k: j[k] for k in _OPTIONAL_JOINT_KEYS & set(j) if j[k] is not None})
        text = {k: str(values.pop(k)) for k in _TEXT_JOINT_KEYS & set(values)}
        try:
            joint = JointConfig(**text, **{k: float(v) for k, v in values.items()})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{jw}: numeric fields must be numbers ({exc})") from exc
        if joint.side is not None and joint.side not in SIDES:
            raise ConfigError(f"{jw} ({joint.name}): side must be 'left' or 'right' (omit it on the midline), "
                              f"got {joint.side!r}")
        if not joint.lower < joint.upper:
            raise ConfigError(f"{jw} ({joint.name}): lower limit must be below upper")
        if not joint.lower <= joint.default <= joint.upper:
            raise ConfigError(f"{jw} ({joint.name}): default {joint.default} outside [{joint.lower}, {joint.upper}]")
        if min(joint.kp, joint.kd, joint.effort, joint.velocity) < 0:
            raise ConfigError(f"{jw} ({joint.name}): kp, kd, effort and velocity must be >= 0")
        if joint.action_scale is not None and not joint.action_scale > 0:
            raise ConfigError(f"{jw} ({joint.name}): action_scale must be > 0, got {joint.action_scale}")
        joints.append(joint)
    names = [j.name for j in joints]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: duplicate joint names")
    roles = [(j.side, j.kind) for j in joints if j.kind is not None]
    twice = sorted({f"{s or 'midline'} {k}" for s, k in roles if roles.count((s, k)) > 1})
    if twice:
        raise ConfigError(f"{where}: more than one joint declared as {twice} (side and kind name one joint)")
    urdf = Path(str(_require(raw, "urdf", where)))
    if not urdf.is_absolute():
        base = path.parent.parent if path.parent.name == "config" else path.parent
        urdf = base / urdf
    cfg = RobotConfig(
        name=str(_require(raw, "name", where)),
        urdf=urdf,
        base_link=str(_require(raw, "base_link", where)),
        imu_link=str(raw.get("imu_link", raw["base_link"])),
        feet=tuple(_require(raw, "feet", where)),
        knee_bodies=_knee_bodies(raw, where),
        sim_dt=float(_require(raw, "sim_dt", where)),
        decimation=int(_require(raw, "decimation", where)),
        action_scale=float(_require(raw, "action_scale", where)),
        action_mode=str(raw.get("action_mode", "absolute")),
        init_base_height=float(_require(raw, "init_base_height", where)),
        armature=_number(raw, "armature", 0.0, where),
        joint_damping=_number(raw, "joint_damping", 0.0, where),
        joint_friction=_number(raw, "joint_friction", 0.0, where),
        joints=tuple(joints),
        target_limit_factor=_number(raw, "target_limit_factor", RobotConfig.target_limit_factor, where),
        source=path,
        hardware=_hardware(raw.get("hardware"), names, where),
    )
    if not cfg.action_scale > 0:
        raise ConfigError(f"{where}: action_scale must be > 0, got {cfg.action_scale}")
    if not 0 < cfg.target_limit_factor <= 1:
        raise ConfigError(f"{where}: target_limit_factor must be in (0, 1], got {cfg.target_limit_factor}")
    lower, upper = cfg.target_limits()
    outside = [j.name for j, lo, hi in zip(joints, lower, upper) if not lo <= j.default <= hi]
    if outside:
        raise ConfigError(f"{where}: target_limit_factor {cfg.target_limit_factor:g} puts the default pose of "
                          f"{outside} outside the target limits")
    if cfg.action_mode not in ("absolute", "relative"):
        raise ConfigError(f"{where}: action_mode must be 'absolute' or 'relative', got {cfg.action_mode!r}")
    if len(cfg.feet) != 2:
        raise ConfigError(f"{where}: 'feet' must name exactly two links (left, right)")
    if cfg.sim_dt <= 0 or cfg.decimation < 1:
        raise ConfigError(f"{where}: sim_dt must be > 0 and decimation >= 1")
    if not cfg.urdf.exists():
        raise ConfigError(f"{where}: URDF not found: {cfg.urdf}")
    return cfg

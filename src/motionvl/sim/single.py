"""One robot in MuJoCo, stepped from Python: the core of the simulator node (no ROS here).

Two command modes, both acting through the model's actuators so that `actuator_force` is
always the torque applied at each joint (what /joint_states reports as effort):

- "position" (default): the model's position actuators are the deployment PD law,
  tau = clip(Kp (target - q) - Kd dq, +-effort limit), evaluated every physics step. Commands
  are joint targets, clipped to the joint limits.
- "effort" (hardware emulation): the robot behaves like motor drives that take either of the
  two commands real humanoid drives take, whichever came last:
  * torques (ros2_control effort commands, `set_efforts`): the actuators are switched to
    pass-through by editing the model: gain = 1, bias = 0, so tau = clip(command, +-effort
    limit) with MuJoCo's own force limit;
  * drive-side PD (`set_drive_commands`: q, dq, kp, kd, tau_ff per joint, as drives that close
    the loop themselves take them): gain = 1, bias = (0, -kp, -kd), ctrl = kp q + kd dq + tau_ff,
    so tau = clip(kp (q - q_m) + kd (dq - dq_m) + tau_ff, +-effort limit) every physics step.
  When no command has arrived for `command_timeout` seconds of simulated time the emulated
  drive's watchdog falls back to damping: gain = 0, bias = -Kd dq.

`randomize` draws the episode's physics as training's domain randomisation does (ground friction,
joint friction loss, a drive strength scale on every torque the emulated drives apply) and `push`
kicks the base; the caller passes the ranges (`motionvl.envs.config.RandomizationConfig`'s).

A virtual gantry (`gantry=True`) holds the pelvis where the standing keyframe puts it (a weld to
the world) until `release_gantry()`, as a robot hangs in its gantry during bring-up.

Rejected commands (wrong length, NaN/inf, unknown or duplicated joint names) raise
`CommandError` and change nothing: the robot keeps the last good target.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import mujoco
import numpy as np

from motionvl.robot import RobotConfig
from motionvl.sim.math import quat_rotate_inverse, tilt_of
from motionvl.sim.model import SOLE_SITES, ModelIndex, TerrainConfig, build_model, build_spec, ground_surface, single_floor
from motionvl.sim.trajectory import Trajectory

MODES = ("position", "effort")


class CommandError(ValueError):
    """A joint or velocity command was rejected; the message says why."""


def validate_joint_command(values: Sequence[float], joint_names: Sequence[str],
                           names: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Check a joint command and return (joint indices, values) in robot-config order.

    Without `names`, `values` must hold one finite number per joint in config order. With
    `names`, a subset of joints may be commanded by name (the others keep their command).
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if names:
        names = list(names)
        if len(names) != len(values):
            raise CommandError(f"{len(names)} joint names but {len(values)} values")
        unknown = [n for n in names if n not in joint_names]
        if unknown:
            raise CommandError(f"unknown joint names {unknown} (known: {list(joint_names)})")
        if len(set(names)) != len(names):
            raise CommandError(f"duplicate joint names in {names}")
        index = np.array([list(joint_names).index(n) for n in names], dtype=int)
    else:
        if len(values) != len(joint_names):
            raise CommandError(f"expected {len(joint_names)} values (one per joint in config order), got {len(values)}")
        index = np.arange(len(joint_names))
    if not np.all(np.isfinite(values)):
        raise CommandError(f"non-finite values in command: {values.tolist()}")
    return index, values


def validate_velocity_command(vx: float, vy: float, yaw_rate: float) -> np.ndarray:
    cmd = np.array([vx, vy, yaw_rate], dtype=np.float64)
    if not np.all(np.isfinite(cmd)):
        raise CommandError(f"non-finite velocity command {cmd.tolist()}")
    return cmd


@dataclasses.dataclass(frozen=True)
class SingleState:
    """A snapshot of the simulated robot; frames as in `motionvl.rewards.state`."""

    clock: float
    """Simulated seconds since the simulator started (never goes back, also not on reset)."""
    episode_time: float
    """Simulated seconds since the last reset."""
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    joint_effort: np.ndarray
    """Torque applied by each actuator, N m."""
    base_pos: np.ndarray
    """(3,) world frame."""
    base_quat: np.ndarray
    """(4,) w, x, y, z, world frame."""
    base_lin_vel: np.ndarray
    """(3,) body frame."""
    base_ang_vel: np.ndarray
    """(3,) body frame."""
    imu_gyro: np.ndarray
    imu_accel: np.ndarray
    """(3,) specific force in the IMU frame (+9.81 z when standing still)."""
    target: np.ndarray
    """Joint targets in force (position mode)."""
    command: np.ndarray
    """(3,) velocity command in force: vx, vy, yaw rate."""
    upright: bool


class SingleSim:
    """One MuJoCo robot with command validation, modes, a watchdog and a monotonic clock."""

    def __init__(self, robot: RobotConfig, terrain: TerrainConfig | None = None, mode: str = "position",
                 command_timeout: float = 0.5, min_base_height: float = 0.45, max_tilt_rad: float = 1.0,
                 gantry: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.robot = robot
        self.model = _build(robot, single_floor(terrain), gantry)
        self._ground = ground_surface(terrain)
        self.data = mujoco.MjData(self.model)
        self._gantry = self.model.equality(GANTRY).id if gantry else None
        self.index = ModelIndex.from_model(self.model, robot)
        self.joint_names = robot.joint_names
        self.command_timeout = float(command_timeout)
        self.min_base_height = float(min_base_height)
        self.max_tilt_rad = float(max_tilt_rad)
        self._gain0 = self.model.actuator_gainprm.copy()
        self._bias0 = self.model.actuator_biasprm.copy()
        self._friction0 = self.model.geom_friction.copy()
        self._frictionloss0 = self.model.dof_frictionloss.copy()
        self.strength = np.ones(robot.num_joints)
        """Drive strength scale per joint (randomised): every torque the emulated drives apply is scaled."""
        self._act = self.index.actuators
        self._imu_gyro = self.index.sensor["imu_gyro"]
        self._imu_accel = self.index.sensor["imu_accel"]
        self._key_home = self.model.key("home").id
        self.clock = 0.0
        self.mode = mode
        self._actuation = ""
        self._drive_fresh = False
        self.reset()

    # ------------------------------------------------------------------ state changes
    def reset(self) -> None:
        """Back to the standing keyframe, targets at the default pose, no torques, no command."""
        mujoco.mj_resetDataKeyframe(self.model, self.data, self._key_home)
        if self._gantry is not None:
            self.data.eq_active[self._gantry] = 1
        self.target = self.robot.default_pose.copy()
        self.effort = np.zeros(self.robot.num_joints)
        self.drive = None  # (q, dq, kp, kd, tau_ff) of the last drive-side PD command
        self.command = np.zeros(3)
        self._last_effort_time = -np.inf
        self._last_cmd_vel_time = -np.inf
        self._apply_actuation()
        mujoco.mj_forward(self.model, self.data)

    def set_position_targets(self, values: Sequence[float], names: Sequence[str] | None = None) -> np.ndarray:
        """Set joint targets (clipped to the joint limits); returns the targets in force."""
        if self.mode != "position":
            raise CommandError(f"position command ignored: the simulator is in {self.mode!r} mode")
        idx, vals = validate_joint_command(values, self.joint_names, names)
        target = self.target.copy()
        target[idx] = np.clip(vals, self.robot.lower[idx], self.robot.upper[idx])
        self.target = target
        self._apply_actuation()
        return self.target

    def set_efforts(self, values: Sequence[float], names: Sequence[str] | None = None) -> np.ndarray:
        """Set joint torques (clipped to the effort limits); returns the torques in force."""
        if self.mode != "effort":
            raise CommandError(f"effort command ignored: the simulator is in {self.mode!r} mode")
        idx, vals = validate_joint_command(values, self.joint_names, names)
        limit = self.robot.effort_limit[idx]
        effort = self.effort.copy()
        effort[idx] = np.clip(vals, -limit, limit)
        self.effort = effort
        self.drive = None
        self._last_effort_time = self.data.time
        self._apply_actuation()
        return self.effort

    def set_drive_commands(self, q: Sequence[float], dq: Sequence[float], kp: Sequence[float], kd: Sequence[float],
                           tau_ff: Sequence[float]) -> tuple:
        """A drive-side PD command for every joint in config order (effort mode): targets clipped to the
        joint limits, gains >= 0, feed-forward clipped to the effort limits; returns what is in force."""
        if self.mode != "effort":
            raise CommandError(f"drive command ignored: the simulator is in {self.mode!r} mode")
        names = self.joint_names
        fields = {}
        for name, values in (("q", q), ("dq", dq), ("kp", kp), ("kd", kd), ("tau_ff", tau_ff)):
            fields[name] = validate_joint_command(values, names)[1]
        if np.any(fields["kp"] < 0) or np.any(fields["kd"] < 0):
            raise CommandError(f"negative drive gains: kp {fields['kp'].tolist()}, kd {fields['kd'].tolist()}")
        limit = self.robot.effort_limit
        self.drive = (np.clip(fields["q"], self.robot.lower, self.robot.upper), fields["dq"], fields["kp"],
                      fields["kd"], np.clip(fields["tau_ff"], -limit, limit))
        self._last_effort_time = self.data.time
        self._drive_fresh = True
        self._apply_actuation()
        return self.drive

    def randomize(self, rng: np.random.Generator, friction_range=(0.2, 1.3), joint_friction_range=(0.1, 3.0),
                  strength_range=(0.8, 1.2)) -> dict:
        """Draw ground friction, joint friction loss (x the config's) and drive strength per joint; returns
        the draws."""
        friction = float(rng.uniform(*friction_range))
        self.model.geom_friction[:] = self._friction0
        self.model.geom_friction[:, 0] = friction
        scale = rng.uniform(*joint_friction_range, self.robot.num_joints)
        self.model.dof_frictionloss[:] = self._frictionloss0
        self.model.dof_frictionloss[self.index.qvel_joints] *= scale
        self.strength = rng.uniform(*strength_range, self.robot.num_joints)
        self._actuation = ""  # re-apply the gains with the new strength
        self._apply_actuation()
        return {"friction": friction, "joint_friction_scale": scale.tolist(), "strength": self.strength.tolist()}

    def push(self, rng: np.random.Generator, velocity: float) -> np.ndarray:
        """Add a random horizontal velocity (each axis in [-velocity, velocity], m/s) to the base."""
        kick = rng.uniform(-velocity, velocity, 2)
        self.data.qvel[0:2] += kick
        return kick

    @property
    def gantry(self) -> bool:
        """The virtual gantry holds the pelvis."""
        return self._gantry is not None and bool(self.data.eq_active[self._gantry])

    def release_gantry(self) -> None:
        if self._gantry is not None:
            self.data.eq_active[self._gantry] = 0

    def set_velocity_command(self, vx: float, vy: float, yaw_rate: float) -> np.ndarray:
        self.command = validate_velocity_command(vx, vy, yaw_rate)
        self._last_cmd_vel_time = self.data.time
        return self.command

    # ------------------------------------------------------------------ stepping
    def step(self, nstep: int = 1) -> None:
        # Whole chunks in one mj_step call: the watchdog can only change the actuation when a
        # timeout expires, so Python runs once per chunk instead of once per physics step (a
        # per-step Python loop also hands the GIL back and forth with executor threads).
        remaining = int(nstep)
        while remaining > 0:
            self._watchdog()
            chunk = min(remaining, self._steps_until_timeout())
            mujoco.mj_step(self.model, self.data, nstep=chunk)
            remaining -= chunk
        self.clock += nstep * self.model.opt.timestep

    def _steps_until_timeout(self) -> int:
        """Physics steps until the first step at which a command watchdog would fire (>= 1)."""
        if self.command_timeout <= 0:
            return np.iinfo(np.int32).max
        pending = []
        if self.mode == "effort" and self._actuation in ("torque", "drive"):
            pending.append(self._last_effort_time)
        if self.command.any():
            pending.append(self._last_cmd_vel_time)
        if not pending:
            return np.iinfo(np.int32).max
        # steps whose start time is surely <= last + timeout (d.time carries rounding); near the
        # deadline this is 1, so the watchdog decides there step by step as it always did
        until = min(pending) + self.command_timeout - self.data.time - 1e-9
        return max(1, int(np.floor(until / self.model.opt.timestep)) + 1)

    def advance(self, seconds: float) -> int:
        """Step as many physics steps as fit in `seconds`; returns the count."""
        n = int(seconds / self.model.opt.timestep + 1e-9)
        self.step(n)
        return n

    def _stale(self, last: float) -> bool:
        return self.command_timeout > 0 and self.data.time - last > self.command_timeout

    def _watchdog(self) -> None:
        if self.mode == "effort":
            self._apply_actuation()
        if self._stale(self._last_cmd_vel_time) and self.command.any():
            self.command = np.zeros(3)

    def _apply_actuation(self) -> None:
        """Write ctrl and, when the regime changes, the actuator gains (see module doc)."""
        if self.mode == "position":
            regime = "pd"
        elif self._stale(self._last_effort_time):
            regime = "damping"
        else:
            regime = "torque" if self.drive is None else "drive"
        m, a = self.model, self._act
        if regime != self._actuation or (regime == "drive" and self._drive_fresh):
            m.actuator_gainprm[:] = self._gain0
            m.actuator_biasprm[:] = self._bias0
            if regime != "pd":
                m.actuator_gainprm[a, 0] = self.strength if regime in ("torque", "drive") else 0.0
                m.actuator_biasprm[a, :3] = 0.0
                if regime == "damping":
                    m.actuator_biasprm[a, 2] = -self.robot.kd
                elif regime == "drive":  # the drive's own PD, evaluated by MuJoCo every physics step
                    m.actuator_biasprm[a, 1] = -self.drive[2] * self.strength
                    m.actuator_biasprm[a, 2] = -self.drive[3] * self.strength
            self._actuation = regime
            self._drive_fresh = False
        if regime == "drive":
            q, dq, kp, kd, tau_ff = self.drive
            self.data.ctrl[a] = kp * q + kd * dq + tau_ff
        else:
            self.data.ctrl[a] = self.target if regime == "pd" else (self.effort if regime == "torque" else 0.0)

    @property
    def actuation(self) -> str:
        """'pd', 'torque', 'drive' (drive-side PD) or 'damping' (watchdog) - what the actuators do right now."""
        return self._actuation

    # ------------------------------------------------------------------ reading
    def state(self) -> SingleState:
        d, ix = self.data, self.index
        quat = d.qpos[3:7].copy()
        lin_body = quat_rotate_inverse(quat[None], d.qvel[None, 0:3])[0]
        return SingleState(
            clock=self.clock, episode_time=float(d.time),
            joint_pos=d.qpos[ix.qpos_joints].copy(), joint_vel=d.qvel[ix.qvel_joints].copy(),
            joint_effort=d.actuator_force[self._act].copy(),
            base_pos=d.qpos[0:3].copy(), base_quat=quat, base_lin_vel=lin_body, base_ang_vel=d.qvel[3:6].copy(),
            imu_gyro=d.sensordata[self._imu_gyro].copy(), imu_accel=d.sensordata[self._imu_accel].copy(),
            target=self.target.copy(), command=self.command.copy(), upright=self.upright())

    def tilt(self) -> float:
        """Angle between the pelvis z axis and the world z axis, rad."""
        return float(tilt_of(self.data.qpos[3:7]))

    def ground_heights(self) -> np.ndarray | None:
        """(3,) terrain height under the base, the left sole and the right sole (None on flat ground)."""
        if self._ground is None:
            return None
        sd, sens = self.data.sensordata, self.index.sensor
        xy = np.stack([self.data.qpos[0:2]] + [sd[sens[f"{s}_pos"]][0:2] for s in SOLE_SITES])
        return self._ground(xy[:, 0], xy[:, 1])

    def base_height(self) -> float:
        """Pelvis height above the terrain under it."""
        q = self.data.qpos
        return float(q[2] - (0.0 if self._ground is None else self._ground(q[0], q[1])))

    def upright(self) -> bool:
        return bool(self.base_height() >= self.min_base_height and self.tilt() <= self.max_tilt_rad)


GANTRY = "gantry"
"""Name of the weld equality that holds the pelvis in a simulator built with a gantry."""


def _build(robot: RobotConfig, terrain: TerrainConfig | None, gantry: bool) -> mujoco.MjModel:
    """The robot's model, with the gantry's weld (pelvis to world, at the pose of the model's reference
    configuration: the standing keyframe's base pose) when asked."""
    if not gantry:
        return build_model(robot, terrain)
    spec = build_spec(robot, terrain)
    # stiff (time constant 2.5 physics steps, the least MuJoCo integrates stably): a limp robot sags ~1 mm
    spec.add_equality(name=GANTRY, type=mujoco.mjtEq.mjEQ_WELD, objtype=mujoco.mjtObj.mjOBJ_BODY,
                      name1=robot.base_link, solref=[2.5 * robot.sim_dt, 1.0])
    return spec.compile()


def stand(robot: RobotConfig, seconds: float, terrain: TerrainConfig | None = None,
          contact_threshold: float = 5.0) -> tuple[dict, Trajectory]:
    """Hold the default pose under PD for `seconds`.

    Returns a JSON-able summary (upright the whole time?, time, base height, ...) and the
    rollout as a `Trajectory` sampled at the robot's control period (for a video or critic).
    """
    sim = SingleSim(robot, terrain)
    dt = sim.model.opt.timestep
    every = max(1, int(round(robot.control_dt / dt)))
    rows = [_sample(sim, contact_threshold)]
    min_height, max_tilt, first_fall = np.inf, 0.0, None
    for k in range(1, int(round(seconds / dt)) + 1):
        sim.step(1)
        min_height = min(min_height, sim.base_height())
        max_tilt = max(max_tilt, sim.tilt())
        if first_fall is None and not sim.upright():
            first_fall = float(sim.data.time)
        if k % every == 0:
            rows.append(_sample(sim, contact_threshold))
    cols = list(zip(*rows))
    traj = Trajectory(dt=every * dt, joint_names=robot.joint_names, joint_roles=robot.joint_roles,
                      time=np.arange(len(rows)) * every * dt,
                      qpos=np.array(cols[0]), qvel=np.array(cols[1]), foot_pos=np.array(cols[2]),
                      foot_vel=np.array(cols[3]), foot_contact=np.array(cols[4]), command=np.array(cols[5]),
                      fell=np.array(cols[6]), joint_torque=np.array(cols[7]),
                      ground_height=None if cols[8][0] is None else np.array(cols[8]))
    summary = {
        "upright": first_fall is None,
        "time": round(float(sim.data.time), 6),
        "fell_at": first_fall,
        "base_height": round(sim.base_height(), 4),
        "min_base_height": round(float(min_height), 4),
        "max_tilt_rad": round(float(max_tilt), 4),
        "sim_dt": dt,
    }
    return summary, traj


def _sample(sim: SingleSim, contact_threshold: float) -> tuple:
    sd, sens = sim.data.sensordata, sim.index.sensor
    foot_pos = np.stack([sd[sens[f"{s}_pos"]] for s in SOLE_SITES])
    foot_vel = np.stack([sd[sens[f"{s}_vel"]] for s in SOLE_SITES])
    contact = np.array([sd[sens[f"{s}_touch"]][0] > contact_threshold for s in SOLE_SITES])
    return (sim.data.qpos.copy(), sim.data.qvel.copy(), foot_pos, foot_vel, contact, sim.command.copy(),
            not sim.upright(), sim.data.actuator_force[sim.index.actuators].copy(), sim.ground_heights())

"""Evaluation rollouts for the camera and the critics, and trajectories rebuilt from poses.

`rollout_policy` runs one environment of `LocomotionEnv` at the robot config's own physics
step and decimation (the deployment timing), with domain randomisation, reset noise and pushes
off and a fixed velocity command, and returns the recorded `Trajectory`. The robot starts at
its home pose facing +x, so the tracking camera always sees it from the same side.

`trajectory_from_poses` turns a stream of poses (base pose + joint positions, e.g. the
simulator's /odom and /joint_states as the critic node receives them) back into a
`Trajectory`, computing foot positions and contacts with the model's kinematics.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import mujoco
import numpy as np

from motionvl.envs.config import CommandConfig, EnvConfig, RandomizationConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.policy_io import PolicyContract
from motionvl.robot import ConfigError, RobotConfig
from motionvl.sim.math import quat_rotate_inverse
from motionvl.sim.model import SOLE_SITES, TerrainConfig, terrain_geom_ids
from motionvl.sim.terrain import fixed_level, ground_height
from motionvl.sim.trajectory import Trajectory

Policy = Callable[[np.ndarray], np.ndarray]


def evaluation_env_config(seconds: float, command=(0.0, 0.0, 0.0), terrain: str = "flat", seed: int = 0,
                          terrain_level: int | None = None, **overrides) -> EnvConfig:
    """EnvConfig for one deterministic evaluation rollout at the robot config's own dt, on `terrain` at
    `terrain_level` (None: sim.terrain.DEFAULT_LEVEL). A policy without a contract gets the plain policy
    interface unless `overrides` say otherwise: no observation history, no stepping feedforward (a PD
    stand stands still)."""
    cfg = EnvConfig(num_envs=1, num_threads=1, episode_length_s=float(seconds) + 10.0, sim_dt=None,
                    decimation=None, terrain=terrain, terrain_level=fixed_level(terrain, terrain_level),
                    random_heading=False, reset_joint_noise=0.0, reset_base_velocity_noise=0.0,
                    obs_history=0, gait_feedforward=0.0, gait_stride_feedforward=0.0, gait_lateral_stride=0.0,
                    seed=int(seed), commands=CommandConfig(fixed=tuple(float(c) for c in command),
                                                           resample_s=float(seconds) + 10.0, standing_fraction=0.0),
                    randomization=RandomizationConfig.disabled())
    return dataclasses.replace(cfg, **overrides) if overrides else cfg


def stand_policy(env: LocomotionEnv) -> Policy:
    """The PD standing controller: joint targets at the default pose whatever the action mode."""
    robot = env.robot

    def act(obs: np.ndarray) -> np.ndarray:
        if robot.action_mode == "absolute":
            return np.zeros((env.num_envs, env.num_joints))
        q = env.state.joint_pos
        return np.clip((env.default_pose - q) / env.action_scales, -1.0, 1.0)

    return act


def rollout_policy(policy: Policy | None, robot: RobotConfig, seconds: float = 10.0,
                   command=(0.0, 0.0, 0.0), terrain: str | TerrainConfig = "flat", seed: int = 0,
                   stop_on_fall: bool = True, env_overrides: dict | None = None) -> Trajectory:
    """Run `policy` (obs (1, num_obs) -> actions (1, J) in [-1, 1]) or, with None, stand under PD.

    A policy with a `contract` (an OnnxPolicy) gets its observations and joint targets from
    motionvl.policy_io driven by that contract (its history, heading input, gait clock and feed-forward);
    another callable gets the plain interface of `evaluation_env_config` with `env_overrides`. Returns the
    rollout sampled every policy step, including the initial state (so
    round(seconds / dt) + 1 samples). With `stop_on_fall` the rollout ends at the first sample
    where the fall condition holds (that sample has `fell` True) instead of being reset.
    """
    kind = terrain.kind if isinstance(terrain, TerrainConfig) else str(terrain)
    level = terrain.level if isinstance(terrain, TerrainConfig) else None
    cfg = evaluation_env_config(seconds, command, kind, seed, level, **(env_overrides or {}))
    contract = getattr(policy, "contract", None)
    env = LocomotionEnv(robot, cfg, contract=contract if isinstance(contract, PolicyContract) else None)
    expected = getattr(policy, "num_obs", None)
    if expected is not None and int(expected) != env.num_obs:
        raise ConfigError(f"the policy expects {expected} observations, the environment gives {env.num_obs}")
    obs = env.observations()
    act = stand_policy(env) if policy is None else policy
    rec = env.record(0)
    steps = int(round(float(seconds) / env.dt))
    for _ in range(steps):
        actions = np.asarray(act(np.asarray(obs, dtype=np.float32)), dtype=np.float64).reshape(1, env.num_joints)
        obs, _, terminated, _, _ = env.step(actions)
        if stop_on_fall and bool(terminated[0]):
            break
    return env.stop_recording(rec)


# ----------------------------------------------------------------------------- poses -> Trajectory

@dataclasses.dataclass(frozen=True)
class FallLimits:
    min_base_height: float = EnvConfig.min_base_height
    """A pelvis lower than this above the ground is a fall, metres."""
    max_tilt_rad: float = EnvConfig.max_tilt_rad
    """A pelvis tilted more than this from upright is a fall."""


class PoseKinematics:
    """Foot positions and sole contacts of a pose from the model's kinematics and collision check."""

    def __init__(self, model: mujoco.MjModel, robot: RobotConfig, contact_margin: float = 0.005):
        self.model, self.robot = model, robot
        self.data = mujoco.MjData(model)
        self.contact_margin = float(contact_margin)
        self.site_ids = [model.site(s).id for s in SOLE_SITES]
        foot_bodies = [model.body(n).id for n in robot.feet]
        self.foot_geoms = [set(np.flatnonzero(model.geom_bodyid == b).tolist()) for b in foot_bodies]
        self.floor = terrain_geom_ids(model)
        self.qpos_adr = np.array([model.jnt_qposadr[model.joint(n).id] for n in robot.joint_names])

    def qpos(self, base_pos, base_quat_wxyz, joint_pos) -> np.ndarray:
        q = self.model.qpos0.copy()
        q[0:3] = base_pos
        q[3:7] = np.asarray(base_quat_wxyz, dtype=np.float64) / max(np.linalg.norm(base_quat_wxyz), 1e-12)
        q[self.qpos_adr] = joint_pos
        return q

    def ground(self, points) -> np.ndarray:
        """Terrain height under each (x, y, ...) of `points` (after `feet`, which runs the kinematics)."""
        return np.array([ground_height(self.model, self.data, p[0], p[1]) for p in points])

    def feet(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(2, 3) sole-site world positions and (2,) bool contact with the floor for a pose."""
        d = self.data
        d.qpos[:] = qpos
        d.qvel[:] = 0.0
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_collision(self.model, d)
        pos = np.stack([d.site_xpos[s].copy() for s in self.site_ids])
        contact = np.zeros(2, dtype=bool)
        for c in d.contact[: d.ncon]:
            if c.dist > self.contact_margin:
                continue
            g1, g2 = int(c.geom1), int(c.geom2)
            other = g2 if g1 in self.floor else g1 if g2 in self.floor else None
            if other is None:
                continue
            for k in range(2):
                if other in self.foot_geoms[k]:
                    contact[k] = True
        return pos, contact


def trajectory_from_poses(model: mujoco.MjModel, robot: RobotConfig, time, base_pos, base_quat, joint_pos,
                          command=None, limits: FallLimits | None = None) -> Trajectory:
    """Build a `Trajectory` from sampled poses (T samples; quaternions w, x, y, z; joints in
    robot-config order). Velocities are finite differences; foot contact comes from the
    model's collision check (sole geoms touching or within 5 mm of the floor); `fell` from the
    environment's height and tilt limits. The time axis is made uniform at the median step."""
    limits = limits or FallLimits()
    time = np.asarray(time, dtype=np.float64)
    base_pos = np.asarray(base_pos, dtype=np.float64).reshape(-1, 3)
    base_quat = np.asarray(base_quat, dtype=np.float64).reshape(-1, 4)
    joint_pos = np.asarray(joint_pos, dtype=np.float64).reshape(len(time), -1)
    n = len(time)
    if not (len(base_pos) == len(base_quat) == n) or n == 0:
        raise ValueError("time, base_pos, base_quat and joint_pos need the same (non-zero) number of samples")
    dt = float(np.median(np.diff(time))) if n > 1 else robot.control_dt
    dt = dt if dt > 0 else robot.control_dt
    kin = PoseKinematics(model, robot)
    qpos = np.stack([kin.qpos(base_pos[i], base_quat[i], joint_pos[i]) for i in range(n)])
    feet = [kin.feet(q) for q in qpos]
    foot_pos = np.stack([f[0] for f in feet])
    foot_contact = np.stack([f[1] for f in feet])
    # the terrain under the base and the soles (the world's static geoms: one pose's kinematics serves all)
    ground = np.stack([kin.ground(np.concatenate([base_pos[i:i + 1], foot_pos[i]])) for i in range(n)])
    qvel = np.zeros((n, model.nv))
    for i in range(1, n):
        h = max(time[i] - time[i - 1], 1e-9)
        mujoco.mj_differentiatePos(model, qvel[i], h, qpos[i - 1], qpos[i])
    if n > 1:
        qvel[0] = qvel[1]
    # the free joint's linear velocity is in the world frame in MuJoCo's qvel (as recorded)
    t_rel = time - time[0]
    foot_vel = np.gradient(foot_pos, t_rel, axis=0) if n > 1 else np.zeros_like(foot_pos)
    gravity = quat_rotate_inverse(base_quat / np.linalg.norm(base_quat, axis=1, keepdims=True),
                                  np.tile([0.0, 0.0, -1.0], (n, 1)))
    fell = (base_pos[:, 2] - ground[:, 0] < limits.min_base_height) | (-gravity[:, 2] < np.cos(limits.max_tilt_rad))
    cmd = np.zeros((n, 3)) if command is None else np.broadcast_to(np.asarray(command, dtype=np.float64), (n, 3)).copy()
    return Trajectory(dt=dt, joint_names=robot.joint_names, joint_roles=robot.joint_roles, time=np.arange(n) * dt,
                      qpos=qpos, qvel=qvel, foot_pos=foot_pos, foot_vel=foot_vel, foot_contact=foot_contact,
                      command=cmd, fell=fell, ground_height=None if not ground.any() else ground)

"""Batched humanoid locomotion environment on a physics backend (numpy; no ROS, no torch).

Per policy step: actions -> PD targets (the deployment law) -> `decimation` physics steps in C
-> state -> reward terms -> terminations -> resets -> observations. Everything is (N, ...) numpy.

The actor's observation and the action law come from `motionvl.policy_io`, driven by the
policy contract (`PolicyContract.for_training` of the robot and EnvConfig, or the contract of an
exported policy that evaluation passes in): the env supplies the physics state.
The critic additionally sees base_lin_vel x2 (3), base height (1), foot contacts (2) (`PRIVILEGED_LAYOUT`)
and, with `critic_sees_randomization`, the episode's randomisation draws (`randomization_layout`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import mujoco
import numpy as np

from motionvl.envs.config import EnvConfig
from motionvl.policy_io import ActionLaw, ObservationBuilder, PolicyContract, gait_phase, heading_error
from motionvl.rewards.state import RewardState
from motionvl.robot import ConfigError, RobotConfig
from motionvl.sim.backend import MujocoBatchBackend
from motionvl.sim.math import projected_gravity, quat_from_yaw, quat_rotate_inverse, yaw_of
from motionvl.sim.model import FLOOR_CONTACT, ROUGH_FLOOR, SOLE_SITES, TerrainConfig, build_model
from motionvl.sim.terrain import KINDS, NUM_LEVELS, LevelSelector, Terrain, check_level
from motionvl.sim.trajectory import Trajectory

RewardFn = Callable[[RewardState], "tuple[np.ndarray, dict[str, np.ndarray]]"]


BURIED_M = 1.0
"""With terrain 'mixed', how far below its place the floor an env does not walk on is moved."""

PRIVILEGED_LAYOUT = [("base_lin_vel", 3, 2.0), ("base_height", 1, 1.0), ("foot_contact", 2, 1.0)]
"""(name, size, scale) of what the critic sees after the actor observation."""


def randomization_layout(num_joints: int) -> list:
    """(name, size, scale) of the randomisation draws the critic sees with `critic_sees_randomization`.

    Values are centred near 0: friction minus the middle of its range, log of the gain and
    joint-friction multipliers, latency in policy periods, added mass / 4 kg, push phase in [0, 1).
    """
    return [
        ("ground_friction", 1, 1.0),
        ("gain_scale_log", num_joints, 1.0),
        ("joint_friction_scale_log", num_joints, 1.0),
        ("latency_periods", 1, 1.0),
        ("added_mass", 1, 0.25),
        ("push_phase", 1, 1.0),
    ]


class LocomotionEnv:
    def __init__(self, robot: RobotConfig, cfg: EnvConfig | None = None, reward_fn: RewardFn | None = None,
                 iteration: int | None = None, contract: PolicyContract | None = None):
        """iteration: the training run's PPO iteration the env starts at (EnvConfig.SCHEDULES follow it;
        trainers move it on with `follow_schedules`); None for an env that does not train (evaluation,
        rendering): the settings' own values. contract: the policy contract whose observation and action
        law the env applies (an exported policy's, for evaluation: its gait clock period too); None: the
        one training with `cfg` writes (PolicyContract.for_training), cfg's observation and feed-forward
        settings then apply."""
        self.robot = robot
        self.cfg = cfg = cfg or EnvConfig()
        self.sim_dt = cfg.sim_dt or robot.sim_dt
        self.decimation = cfg.decimation or robot.decimation
        if abs(self.sim_dt * self.decimation - robot.control_dt) > 1e-9:
            raise ConfigError(
                f"sim_dt x decimation = {self.sim_dt * self.decimation:.4f} s must equal the robot's control period "
                f"{robot.control_dt:.4f} s (the policy contract)")
        self.dt = robot.control_dt
        self.num_envs = N = int(cfg.num_envs)
        self.num_joints = J = robot.num_joints
        self.reward_fn = reward_fn
        self.rng = np.random.default_rng(cfg.seed)

        self.train_robot = dataclasses.replace(robot, sim_dt=self.sim_dt, decimation=self.decimation)
        seed = cfg.seed if cfg.terrain_seed is None else cfg.terrain_seed
        # terrain levels: a fixed one, or per env by the curriculum (a world of every level, LevelSelector)
        leveled = cfg.terrain in KINDS and cfg.terrain != "flat"
        self.terrain_curriculum = leveled and cfg.terrain_level is None
        fixed = check_level(cfg.terrain_level) if leveled and cfg.terrain_level is not None else None
        self.terrain = TerrainConfig(kind=cfg.terrain, level=fixed, every_level=self.terrain_curriculum, seed=seed)
        # latency is emulated by MuJoCo's actuator delay, which reads a ctrl history of up to one policy period
        history = self.decimation if cfg.randomization.latency else 0
        self.model = build_model(self.train_robot, self.terrain, ctrl_history=history)
        self.sim = MujocoBatchBackend(self.model, N, cfg.num_threads)
        m = self.model
        self._qpos_j = np.array([m.jnt_qposadr[m.joint(n).id] for n in robot.joint_names])
        self._qvel_j = np.array([m.jnt_dofadr[m.joint(n).id] for n in robot.joint_names])
        if not (np.all(np.diff(self._qpos_j) == 1) and np.all(np.diff(self._qvel_j) == 1)):
            raise ConfigError("joint order of the model differs from the robot config")
        self._qp = slice(int(self._qpos_j[0]), int(self._qpos_j[-1]) + 1)
        self._qv = slice(int(self._qvel_j[0]), int(self._qvel_j[-1]) + 1)
        adr = {m.sensor(i).name: int(m.sensor_adr[i]) for i in range(m.nsensor)}
        # gather indices into sensordata, built once: (2,) touch, (2, 3) positions and velocities
        self._touch_idx = np.array([adr[f"{s}_touch"] for s in SOLE_SITES])
        self._foot_pos_idx = np.array([adr[f"{s}_pos"] + np.arange(3) for s in SOLE_SITES])
        self._foot_vel_idx = np.array([adr[f"{s}_vel"] + np.arange(3) for s in SOLE_SITES])
        # knees (the robot config's knee_bodies) near the ground count as a body collision (kneeling, falling)
        self._knee_bodies = np.array([m.body(n).id for n in robot.knee_bodies], dtype=int)
        self._hfield = _HeightField(m) if cfg.terrain == "mixed" else None
        self.ground = Terrain(cfg.terrain, seed) if leveled else None
        """The ground's heights (sim.terrain.Terrain) of a terrain with levels, else None (flat, mixed)."""
        self.terrain_level = np.full(N, -1 if fixed is None else fixed, dtype=np.int64)
        """(N,) each env's terrain level (-1: a terrain without levels)."""
        self.commanded_distance = np.zeros(N)  # metres the commands of each env's episode asked for so far
        self._levels = None
        if self.terrain_curriculum:
            tc = cfg.terrain_curriculum
            if not 0 <= tc.start_level < NUM_LEVELS or tc.up_distance_m <= 0 or not 0 <= tc.down_fraction <= 1:
                raise ConfigError(f"env.terrain_curriculum: start_level in [0, {NUM_LEVELS - 1}], up_distance_m > 0 "
                                  f"and down_fraction in [0, 1] expected, got {tc}")
            self._levels = LevelSelector(self.sim, self.ground.pieces(), **FLOOR_CONTACT)
            self.terrain_level[:] = self.rng.integers(0, tc.start_level + 1, N)
        if not 0.0 <= cfg.rough_fraction <= 1.0:
            raise ConfigError(f"env.rough_fraction must be in [0, 1], got {cfg.rough_fraction}")
        self.on_rough = np.full(N, False)
        # the share of the resets on rough ground ('mixed') and the period (s) of the phase clock and gait terms;
        # an exported policy's clock runs at the period it trained at
        self.rough_fraction = self.gait_period = 0.0
        self._policy_period = None if contract is None else contract.gait_period
        self.follow_schedules(iteration)
        if cfg.terrain == "mixed":
            # one model holds the plane and the height field; each env's geom_pos buries the one it does not walk on
            self._geom_pos = self.sim.per_env_model_field("geom_pos")
            self._plane_geom, self._rough_geom = m.geom("floor").id, m.geom(ROUGH_FLOOR).id

        self.default_pose = robot.default_pose
        self.action_scales = robot.action_scales
        self.lower, self.upper = robot.lower, robot.upper
        self.max_episode_length = int(round(cfg.episode_length_s / self.dt))
        if contract is None:
            contract = PolicyContract.for_training(robot, cfg, gait_period=self.gait_period)
        else:
            contract.check_robot(robot)
        self.contract = contract
        self.observer = ObservationBuilder(contract, N)
        self.action_law = ActionLaw(contract)
        self.num_obs = contract.num_obs
        self.privileged_layout = list(PRIVILEGED_LAYOUT)
        if cfg.critic_sees_randomization:
            self.privileged_layout += randomization_layout(J)
        self.num_privileged = sum(n for _, n, _ in self.privileged_layout)
        self._privileged_scale = np.concatenate([np.full(n, float(sc)) for _, n, sc in self.privileged_layout])

        # per-env buffers
        self.episode_length = np.zeros(N, dtype=np.int64)
        self.action = np.zeros((N, J))
        self.last_action = np.zeros((N, J))
        self.command = np.zeros((N, 3))  # what the policy sees (and the reward tracks)
        # the sampled yaw rate and the heading it asks for (RewardState.heading_error, heading hold)
        self._yaw_rate_input = np.zeros(N)
        self._heading_target = np.zeros(N)
        self.feet_air_time = np.zeros((N, 2))
        self.last_contact = np.zeros((N, 2), dtype=bool)
        self.last_joint_vel = np.zeros((N, J))
        self.vel_avg = np.zeros((N, 3))  # RewardState.base_vel_avg: (vx, vy, yaw rate), averaged over a gait period
        self.latency = np.zeros(N, dtype=np.int64)
        # this episode's randomisation draws, nominal (1 = unscaled) where a randomisation is off
        self.ground_friction = np.full(N, float(self.model.geom_friction[0, 0]))
        self.gain_scale = np.ones((N, J))
        self.joint_friction_scale = np.ones((N, J))
        self.added_mass = np.zeros(N)
        # per-episode sum of each reward term: rows of one (terms, N) array, episode_sums views them by name
        self._term_sums = np.zeros((0, N))
        self.episode_sums: dict[str, np.ndarray] = {}
        self._push_steps = max(1, int(round(cfg.randomization.push_interval_s / self.dt)))
        self.push_offset = np.zeros(N, dtype=np.int64)  # policy steps: the first push comes _push_steps - offset after reset
        self.last_push = np.zeros((N, 2))  # world-frame velocity change (m/s) of the episode's latest push
        self._resample_steps = max(1, int(round(cfg.commands.resample_s / self.dt)))
        # command curriculum level in [0, 1] (CommandConfig.curriculum); trainers checkpoint it
        self.command_level = 0.0 if cfg.commands.curriculum else 1.0
        self._curriculum_steps = max(1, int(round(cfg.commands.curriculum_window_s / self.dt)))
        self._tracking = [0.0, 0]  # summed |command_xy - v_xy| and samples in the current window
        # mean |command_xy - v_xy| of the last complete window (m/s, body frame, every env and step,
        # falls and pushes included): what the curriculum compares with curriculum_error
        self.window_tracking_error: float | None = None
        self._recorders: list["TrajectoryRecorder"] = []
        self._setup_randomization()
        self.state: RewardState | None = None
        self.reset()

    def follow_schedules(self, iteration: int | None) -> None:
        """The settings training moves by PPO iteration (EnvConfig.SCHEDULES) at `iteration`; None: their own values."""
        self.rough_fraction = self.cfg.scheduled("rough_fraction", iteration)
        self.gait_period = (self.cfg.scheduled("gait_period_s", iteration) if self._policy_period is None
                            else self._policy_period)

    # ------------------------------------------------------------------ randomisation
    def _setup_randomization(self) -> None:
        r, m = self.cfg.randomization, self.model
        self._friction = self.sim.per_env_model_field("geom_friction") if r.friction else None
        if r.gain_scale:
            self._gain = self.sim.per_env_model_field("actuator_gainprm")
            self._bias = self.sim.per_env_model_field("actuator_biasprm")
            self._kp0 = m.actuator_gainprm[:, 0].copy()
            self._kd0 = -m.actuator_biasprm[:, 2].copy()
        self._joint_friction = self.sim.per_env_model_field("dof_frictionloss") if r.joint_friction else None
        self._mass = self.sim.per_env_model_field("body_mass") if r.added_mass else None
        self._base_body = m.body(self.robot.base_link).id

    def _randomize(self, ids: np.ndarray) -> None:
        r, n, rng = self.cfg.randomization, len(ids), self.rng
        if self._friction is not None:
            self.ground_friction[ids] = rng.uniform(*r.friction_range, size=n)
            self._friction[ids, :, 0] = self.ground_friction[ids, None]
        if r.gain_scale:
            self.gain_scale[ids] = scale = rng.uniform(*r.gain_scale_range, size=(n, self.num_joints))
            kp, kd = self._kp0 * scale, self._kd0 * scale
            self._gain[ids, :, 0] = kp
            self._bias[ids, :, 1] = -kp
            self._bias[ids, :, 2] = -kd
        if self._joint_friction is not None:
            self.joint_friction_scale[ids] = scale = rng.uniform(*r.joint_friction_range, size=(n, self.num_joints))
            self._joint_friction[ids[:, None], self._qvel_j[None, :]] = self.robot.joint_friction * scale
        if self._mass is not None:
            self.added_mass[ids] = rng.uniform(*r.added_mass_range, n)
            self._mass[ids, self._base_body] = self.model.body_mass[self._base_body] + self.added_mass[ids]
            self.sim.set_const()
        if r.latency:
            robot_steps = rng.integers(r.latency_range[0], r.latency_range[1] + 1, size=n)
            self.latency[ids] = np.minimum(np.rint(robot_steps * self.robot.sim_dt / self.sim_dt), self.decimation)
            self.sim.set_ctrl_delay(ids, self.latency[ids])

    # ------------------------------------------------------------------ commands
    def _resample_commands(self, ids: np.ndarray) -> None:
        c, n = self.cfg.commands, len(ids)
        if c.fixed is not None:
            self.command[ids] = np.asarray(c.fixed, dtype=float)
        else:
            lo, hi = np.array(c.ranges(self.command_level), dtype=float).T
            cmd = np.stack([self.rng.uniform(lo[k], hi[k], n) for k in range(3)], 1)
            cmd[self.rng.random(n) < c.standing_fraction] = 0.0
            if c.task is not None and c.task_share > 0:  # the task's share, around its command (motionvl.task)
                near = self.rng.random(n) < c.task_share
                spread = np.asarray(c.task_spread, dtype=float)
                drawn = np.asarray(c.task, dtype=float) + self.rng.uniform(-spread, spread, (int(near.sum()), 3))
                full = np.array([c.vx, c.vy, c.yaw_rate], dtype=float)  # the contract clips to these ranges
                cmd[near] = np.clip(drawn, full[:, 0], full[:, 1])
            self.command[ids] = cmd
        self._yaw_rate_input[ids] = self.command[ids, 2]
        self._heading_target[ids] = yaw_of(self.sim.qpos[ids, 3:7])

    def _hold_heading(self) -> None:
        """Yaw-rate command = the sampled rate + heading_gain x heading error (CommandConfig.heading_gain)."""
        c = self.cfg.commands
        error = heading_error(self._heading_target, self.sim.qpos[:, 3:7])
        self.command[:, 2] = np.clip(self._yaw_rate_input + c.heading_gain * error, *c.yaw_rate)

    def _track_commands(self) -> None:
        """Windowed tracking error (window_tracking_error); the curriculum level rises after a window under curriculum_error."""
        err = np.linalg.norm(self.command[:, :2] - self.state.base_lin_vel[:, :2], axis=1)
        self._tracking[0] += float(err.sum())
        self._tracking[1] += self.num_envs
        c = self.cfg.commands
        if self._tracking[1] >= self._curriculum_steps * self.num_envs:
            self.window_tracking_error = self._tracking[0] / self._tracking[1]
            if c.curriculum and self.window_tracking_error < c.curriculum_error:
                self.command_level = min(1.0, self.command_level + c.curriculum_step)
            self._tracking = [0.0, 0]

    def _move_terrain_levels(self, ids: np.ndarray, fell: np.ndarray) -> None:
        """The terrain curriculum at the end of the episodes of `ids` (EnvConfig.terrain_curriculum)."""
        tc = self.cfg.terrain_curriculum
        walked = np.linalg.norm(self.sim.qpos[ids, 0:2], axis=1)  # every episode starts at the tile's centre
        up = walked > tc.up_distance_m
        down = ~up & (fell | (walked < tc.down_fraction * self.commanded_distance[ids]))
        level = self.terrain_level[ids] + up - down
        solved = level >= NUM_LEVELS
        level[solved] = self.rng.integers(0, NUM_LEVELS, int(solved.sum()))
        self.terrain_level[ids] = np.maximum(level, 0)

    def start_terrain_levels(self, levels) -> None:
        """Put the curriculum's envs at `levels` (another run's: a batch of another size draws from them), before
        the first step: the robots still stand on their start platforms, which every level has alike."""
        levels = np.asarray(levels, dtype=np.int64)
        if len(levels) != self.num_envs:
            levels = self.rng.choice(levels, self.num_envs)
        self.terrain_level[:] = np.clip(levels, 0, NUM_LEVELS - 1)
        self._levels.select(np.arange(self.num_envs), self.terrain_level)

    @property
    def mean_terrain_level(self) -> float | None:
        """The mean terrain level over the envs (what training logs as terrain_level); None without levels."""
        return float(self.terrain_level.mean()) if self.ground is not None else None

    def _push_clock(self) -> np.ndarray:
        """Each env's push clock in policy steps: a push comes whenever it reaches a multiple of _push_steps."""
        return self.episode_length + self.push_offset

    # ------------------------------------------------------------------ reset
    def reset(self, ids: np.ndarray | None = None) -> np.ndarray:
        """Reset the given envs (all by default) and return every env's observation."""
        self._reset_envs(np.arange(self.num_envs) if ids is None else np.asarray(ids))
        self._obs = self._build_observations()
        return self._obs

    def _reset_envs(self, ids: np.ndarray) -> None:
        if len(ids) == 0:
            return
        n, cfg = len(ids), self.cfg
        self.sim.reset(ids, keyframe=0, forward=False)  # forward(ids) below, after the state writes
        qpos = self.sim.qpos
        if cfg.random_heading:
            qpos[ids, 3:7] = quat_from_yaw(self.rng.uniform(-np.pi, np.pi, n))
        qpos[ids, self._qp] = np.clip(self.default_pose + self.rng.uniform(-cfg.reset_joint_noise, cfg.reset_joint_noise,
                                                                            (n, self.num_joints)), self.lower, self.upper)
        qvel = self.sim.qvel
        qvel[ids] = 0.0
        qvel[ids, 0:6] = self.rng.uniform(-cfg.reset_base_velocity_noise, cfg.reset_base_velocity_noise, (n, 6))
        if self._levels is not None:
            self._levels.select(ids, self.terrain_level[ids])
        if cfg.terrain == "mixed":
            rough = self.on_rough[ids] = self.rng.random(n) < self.rough_fraction
            self._geom_pos[ids, self._plane_geom, 2] = np.where(rough, -BURIED_M, 0.0)
            self._geom_pos[ids, self._rough_geom, 2] = self._hfield.z0 - np.where(rough, 0.0, BURIED_M)
        qpos[ids, 2] += self._ground_height(ids, qpos[ids, 0], qpos[ids, 1])
        self.sim.ctrl[ids] = self.default_pose
        if cfg.randomization.latency:  # the first substeps of a delayed env hold the default pose too
            self.sim.reset_ctrl_history(ids, np.broadcast_to(self.default_pose, (n, self.num_joints)))
        self._randomize(ids)
        self.sim.forward(ids)
        self.episode_length[ids] = 0
        self.last_push[ids] = 0.0
        self.commanded_distance[ids] = 0.0
        self.action[ids] = 0.0
        self.last_action[ids] = 0.0
        self.feet_air_time[ids] = 0.0
        self.last_contact[ids] = True
        self.last_joint_vel[ids] = self.sim.qvel[ids, self._qv]
        self.vel_avg[ids] = 0.0
        self._resample_commands(ids)
        self.observer.reset(ids)
        # the next observation of the reset envs must describe their new state, not the last one
        self.state = self._compute_state(np.zeros((self.num_envs, 2), bool))

    # ------------------------------------------------------------------ step
    def step(self, actions: np.ndarray):
        """Advance one policy step. Returns obs, reward, terminated, truncated, info."""
        actions = np.asarray(actions, dtype=np.float64)
        if actions.shape != (self.num_envs, self.num_joints):
            raise ValueError(f"actions must have shape {(self.num_envs, self.num_joints)}, got {actions.shape}")
        if not np.isfinite(actions).all():
            actions = np.nan_to_num(actions, nan=0.0)
        actions = self.action_law.clip(actions)
        self.last_action[:] = self.action
        self.action[:] = actions
        # self.state is what the policy just observed: the same clock phase (and command, but for a
        # resample or heading hold after the state, which the observation has and this does not)
        new_target = self.action_law.targets(actions, joint_pos=self.sim.qpos[:, self._qp],
                                             command=self.state.command, gait_phase=self.state.gait_phase)

        # with latency randomisation, MuJoCo holds back new_target by each env's latency (set_ctrl_delay)
        self.sim.ctrl[:] = new_target
        self.sim.step(self.decimation)
        self.episode_length += 1
        self._heading_target += self._yaw_rate_input * self.dt
        self.commanded_distance += np.linalg.norm(self.command[:, :2], axis=1) * self.dt

        if self.cfg.randomization.push:
            push = (self._push_clock() % self._push_steps) == 0
            if push.any():
                self.last_push[push] = self.rng.uniform(-1, 1, (int(push.sum()), 2)) * self.cfg.randomization.push_velocity
                self.sim.qvel[push, 0:2] += self.last_push[push]

        contact = self.sim.sensordata[:, self._touch_idx] > self.cfg.contact_force_threshold
        first_contact = (self.feet_air_time > 0) & contact & ~self.last_contact
        self.feet_air_time += self.dt
        self.state = self._compute_state(first_contact, advance_average=True)
        terminated = self.state.terminated
        truncated = self.episode_length >= self.max_episode_length

        if self.reward_fn is not None:
            reward, terms = self.reward_fn(self.state)
            reward = np.asarray(reward, dtype=np.float64)
            self._add_to_episode_sums(terms)
        else:
            reward, terms = np.zeros(self.num_envs), {}

        self._track_commands()

        # after the reward has seen the air time of this touchdown
        self.feet_air_time[contact] = 0.0
        self.last_contact[:] = contact
        self.last_joint_vel[:] = self.state.joint_vel
        for rec in self._recorders:
            rec.capture(self)

        done = terminated | truncated
        info = {"time_outs": truncated & ~terminated, "episode": {}}
        if done.any():
            ids = np.flatnonzero(done)
            means = self._term_sums[:, ids].mean(axis=1) / self.cfg.episode_length_s
            info["episode"] = dict(zip(self.episode_sums, means.tolist()))
            info["episode_length"] = float(np.mean(self.episode_length[ids]))
            self._term_sums[:, ids] = 0.0
            if self.terrain_curriculum:
                self._move_terrain_levels(ids, terminated[ids])
            self._reset_envs(ids)
        resample = (self.episode_length % self._resample_steps == 0) & (self.episode_length > 0)
        if resample.any():
            self._resample_commands(np.flatnonzero(resample))
        if self.cfg.commands.heading_gain > 0:
            self._hold_heading()
        self._obs = self._build_observations()
        return self._obs, reward, terminated, truncated, info

    def _add_to_episode_sums(self, terms: dict[str, np.ndarray]) -> None:
        """Add this step's reward terms to their episode sums.

        One (terms, N) array instead of an array per term, so that the episode means and the
        clearing of finished envs are one operation for all terms rather than three per term.
        """
        if list(terms) != list(self.episode_sums):
            for name in terms:
                if name not in self.episode_sums:
                    self._add_term_row(name)
            for name, value in terms.items():  # a reward function that left out some terms
                self.episode_sums[name] += value
            return
        if terms:
            self._term_sums += np.stack(list(terms.values()))

    def _add_term_row(self, name: str) -> None:
        names = [*self.episode_sums, name]
        self._term_sums = np.concatenate([self._term_sums, np.zeros((1, self.num_envs))])
        self.episode_sums = {n: row for n, row in zip(names, self._term_sums)}

    # ------------------------------------------------------------------ state and observations
    def _compute_state(self, first_contact: np.ndarray, advance_average: bool = False) -> RewardState:
        """The state after the last physics step; `advance_average` once per policy step (not after resets)."""
        qpos, qvel, sd, cfg = self.sim.qpos, self.sim.qvel, self.sim.sensordata, self.cfg
        quat = qpos[:, 3:7].copy()
        heading_error = self._heading_error(quat)
        gravity = projected_gravity(quat)
        lin_vel = quat_rotate_inverse(quat, qvel[:, 0:3])
        if advance_average:
            alpha = min(1.0, self.dt / self.gait_period)
            self.vel_avg[:, 0:2] += alpha * (lin_vel[:, 0:2] - self.vel_avg[:, 0:2])
            self.vel_avg[:, 2] += alpha * (qvel[:, 5] - self.vel_avg[:, 2])
        joint_vel = qvel[:, self._qv].copy()
        foot_pos = sd[:, self._foot_pos_idx]
        foot_vel = sd[:, self._foot_vel_idx]
        force = sd[:, self._touch_idx]
        ground = self._ground_height(slice(None), qpos[:, 0], qpos[:, 1])
        base_height = qpos[:, 2] - ground
        knees = self.sim.xpos[:, self._knee_bodies]
        knee_ground = ground[:, None] if self.ground is None else \
            self.ground.height(knees[..., 0], knees[..., 1], self.terrain_level[:, None])
        knee_low = (knees[..., 2] - knee_ground) < 0.12
        body_collision = np.any(knee_low, axis=1)
        # a fall: pelvis too low, tilted too far, or a knee on the ground
        terminated = (base_height < cfg.min_base_height) | (-gravity[:, 2] < np.cos(cfg.max_tilt_rad)) | body_collision
        return RewardState(
            dt=self.dt, base_pos=qpos[:, 0:3].copy(), base_quat=quat, base_lin_vel=lin_vel,
            base_ang_vel=qvel[:, 3:6].copy(), base_vel_avg=self.vel_avg.copy(), projected_gravity=gravity,
            base_height=base_height,
            joint_pos=qpos[:, self._qp].copy(), joint_vel=joint_vel,
            joint_acc=(joint_vel - self.last_joint_vel) / self.dt, joint_torque=self.sim.actuator_force.copy(),
            default_joint_pos=self.default_pose, joint_pos_lower=self.lower, joint_pos_upper=self.upper,
            effort_limit=self.robot.effort_limit, foot_pos=foot_pos, foot_vel=foot_vel,
            foot_contact=force > self.cfg.contact_force_threshold, foot_contact_force=force,
            foot_air_time=self.feet_air_time.copy(), first_contact=first_contact,
            body_collision=body_collision, command=self.command.copy(), heading_error=heading_error, gait_phase=self.gait_phase(),
            gait_period=self.gait_period, action=self.action.copy(), last_action=self.last_action.copy(),
            terminated=terminated, joint_names=self.robot.joint_names, joint_roles=self.robot.joint_roles)

    def _heading_error(self, quat: np.ndarray) -> np.ndarray:
        return heading_error(self._heading_target, quat)

    def gait_phase(self) -> np.ndarray:
        return gait_phase(self.episode_length * self.dt, self.gait_period)

    @property
    def history(self) -> np.ndarray:
        """(N, frames, frame size) the actor's past observation frames (policy_io.ObservationBuilder)."""
        return self.observer.history

    def observations(self) -> np.ndarray:
        """The actor observation after the last step or reset (reading it changes nothing)."""
        return self._obs

    def _build_observations(self) -> np.ndarray:
        """Actor observation of the current state; advances the history buffer by one frame."""
        s = self.state
        # the heading error of the command given now (a resample after the state moved the target)
        heading = self._heading_error(s.base_quat) if self.contract.heading_observation else None
        return self.observer.build(base_ang_vel=s.base_ang_vel, projected_gravity=s.projected_gravity,
                                   command=self.command, joint_pos=s.joint_pos, joint_vel=s.joint_vel,
                                   last_action=self.action, gait_phase=self.gait_phase(), heading_error=heading)

    def _ground_height(self, ids, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Height of the floor envs `ids` walk on under (x, y)."""
        if self.ground is not None:
            return self.ground.height(x, y, self.terrain_level[ids])
        if self._hfield is None:
            return np.zeros(len(x))
        return np.where(self.on_rough[ids], self._hfield.height(x, y), 0.0)

    def ground_heights(self, index: int) -> np.ndarray | None:
        """(3,) terrain height under env `index`'s base, left sole and right sole (None on flat ground)."""
        if self.cfg.terrain == "flat":
            return None
        xy = np.concatenate([self.sim.qpos[index:index + 1, 0:2], self.sim.sensordata[index, self._foot_pos_idx][:, 0:2]])
        return self._ground_height(np.full(3, index), xy[:, 0], xy[:, 1])

    def privileged_observations(self) -> np.ndarray:
        s = self.state
        blocks = [s.base_lin_vel, s.base_height[:, None], s.foot_contact]
        if self.cfg.critic_sees_randomization:
            push_phase = (self._push_clock() % self._push_steps) / self._push_steps \
                if self.cfg.randomization.push else np.zeros(self.num_envs)
            friction = self.ground_friction - np.mean(self.cfg.randomization.friction_range)
            blocks += [friction[:, None], np.log(self.gain_scale), np.log(self.joint_friction_scale),
                       self.latency[:, None] / self.decimation, self.added_mass[:, None], push_phase[:, None]]
        return np.concatenate(blocks, axis=1) * self._privileged_scale

    # ------------------------------------------------------------------ checkpoints
    EPISODE_BUFFERS = ("episode_length", "action", "last_action", "command", "_yaw_rate_input", "_heading_target",
                       "feet_air_time", "last_contact", "last_joint_vel", "vel_avg", "latency", "ground_friction",
                       "gain_scale", "joint_friction_scale", "added_mass", "history", "push_offset", "last_push",
                       "on_rough", "terrain_level", "commanded_distance", "_obs")
    """Per-env arrays of the episodes in flight, restored in place (the reward terms' sums go separately)."""

    def episode_state(self) -> dict:
        """The episodes in flight: physics, per-env buffers, reward sums, the tracking window and the random
        generator, so that `load_episode_state` continues them where they stood. Not in it: what trainers
        set every iteration (follow_schedules) or checkpoint themselves (command_level)."""
        return {"sim": self.sim.state_dict(), "buffers": {k: getattr(self, k).copy() for k in self.EPISODE_BUFFERS},
                "term_names": list(self.episode_sums), "term_sums": self._term_sums.copy(), "state": self.state,
                "tracking": list(self._tracking), "window_tracking_error": self.window_tracking_error,
                "rng": self.rng.bit_generator.state}

    def load_episode_state(self, saved: dict) -> None:
        """Continue the episodes `episode_state` saved. ValueError, before anything changes, when they were
        saved from an env of another size or model."""
        for name, values in saved["buffers"].items():
            if getattr(self, name).shape != values.shape:
                raise ValueError(f"saved episode buffer {name} has shape {values.shape}, this env's "
                                 f"{getattr(self, name).shape}")
        self.sim.load_state_dict(saved["sim"])
        for name, values in saved["buffers"].items():
            getattr(self, name)[...] = values
        self._term_sums = saved["term_sums"].copy()
        self.episode_sums = {n: row for n, row in zip(saved["term_names"], self._term_sums)}
        self.state = saved["state"]
        self._tracking = list(saved["tracking"])
        self.window_tracking_error = saved["window_tracking_error"]
        self.rng.bit_generator.state = saved["rng"]

    # ------------------------------------------------------------------ recording
    @property
    def push_interval_steps(self) -> int:
        """Policy steps between pushes; the first comes this many minus `push_offset` after reset."""
        return self._push_steps

    def push_times(self, seconds: float, env_index: int = 0) -> np.ndarray:
        """Episode times (s after reset) at which step() pushes env `env_index` in its current episode,
        before `seconds`; empty without pushes."""
        if not self.cfg.randomization.push:
            return np.zeros(0)
        steps = np.arange(self._push_steps - self.push_offset[env_index], seconds / self.dt, self._push_steps)
        return steps * self.dt

    def record(self, env_index: int = 0) -> "TrajectoryRecorder":
        rec = TrajectoryRecorder(self, env_index)
        self._recorders.append(rec)
        return rec

    def stop_recording(self, rec: "TrajectoryRecorder") -> Trajectory:
        self._recorders.remove(rec)
        return rec.trajectory()


class _HeightField:
    """Ground height under (x, y) for mixed's rough height field (nearest-cell lookup)."""

    def __init__(self, model: mujoco.MjModel):
        hid = 0
        self.nrow, self.ncol = int(model.hfield_nrow[hid]), int(model.hfield_ncol[hid])
        self.size = model.hfield_size[hid].copy()
        adr = int(model.hfield_adr[hid])
        self.data = model.hfield_data[adr:adr + self.nrow * self.ncol].reshape(self.nrow, self.ncol)
        self.z0 = float(model.geom_pos[np.flatnonzero(model.geom_type == mujoco.mjtGeom.mjGEOM_HFIELD)[0]][2])

    def height(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        sx, sy, sz = self.size[0], self.size[1], self.size[2]
        col = np.clip(np.rint((x + sx) / (2 * sx) * (self.ncol - 1)).astype(int), 0, self.ncol - 1)
        row = np.clip(np.rint((y + sy) / (2 * sy) * (self.nrow - 1)).astype(int), 0, self.nrow - 1)
        return self.z0 + self.data[row, col] * sz


class TrajectoryRecorder:
    """Collects one environment's state every policy step into a `Trajectory`."""

    def __init__(self, env: LocomotionEnv, index: int):
        self.index = index
        self.joint_names = env.robot.joint_names
        self.joint_roles = env.robot.joint_roles
        self.dt = env.dt
        self.rows: list[tuple] = []
        self.capture(env)

    def capture(self, env: LocomotionEnv) -> None:
        i, s = self.index, env.state
        self.rows.append((env.sim.qpos[i].copy(), env.sim.qvel[i].copy(), s.foot_pos[i].copy(), s.foot_vel[i].copy(),
                          s.foot_contact[i].copy(), s.command[i].copy(), bool(s.terminated[i]), s.joint_torque[i].copy(),
                          env.ground_heights(i)))

    def trajectory(self) -> Trajectory:
        cols = list(zip(*self.rows))
        n = len(self.rows)
        return Trajectory(dt=self.dt, joint_names=self.joint_names, joint_roles=self.joint_roles,
                          time=np.arange(n) * self.dt,
                          qpos=np.array(cols[0]), qvel=np.array(cols[1]), foot_pos=np.array(cols[2]),
                          foot_vel=np.array(cols[3]), foot_contact=np.array(cols[4]), command=np.array(cols[5]),
                          fell=np.array(cols[6]), joint_torque=np.array(cols[7]),
                          ground_height=None if cols[8][0] is None else np.array(cols[8]))

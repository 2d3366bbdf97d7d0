"""The states the check runs candidates on: like training's, and not recognisable as a test.

A candidate is run on batches of the training batch size, drawn with a fresh seed, of three
kinds, each called several times in a row as training does:
- rollout: rows of states recorded from short rollouts of the training environment under a
  random policy (robots that stumble, fall, hit the ground and are reset), re-sampled per batch;
- plausible: random mid-walk states (upright-ish, moving, mixed foot contacts);
- extreme: values at the edges of what the environment can produce (joints at their limits,
  fast spins, upside-down bodies, zero and very large contact forces, long air times, every flag
  set or clear), so that a guard that holds only for typical values is found.

The rollouts need the locomotion environment, a layer above rewards/: it is imported only inside
`rollout_pool`, the one place the check reaches up, because training-like states can only come
from the environment training runs.
"""

from __future__ import annotations

import dataclasses
import functools
import threading

import numpy as np

from motionvl.rewards.state import RewardState
from motionvl.robot import load_robot_config
from motionvl.sim.math import projected_gravity, quat_from_euler

ROLLOUT_ENVS = 32
"""Environments of one recording rollout."""
ROLLOUT_STEPS = 60
"""Policy steps recorded per rollout (1.2 s at 50 Hz: a random policy falls within it)."""
BATCHES = (("rollout", 3), ("plausible", 1), ("extreme-high", 1), ("extreme-low", 1), ("extreme-mixed", 2))
"""(kind, consecutive calls) of one check, in order, all at the training batch size."""


def _joints_of(robot) -> tuple:
    return robot.joint_names, robot.default_pose, robot.lower, robot.upper, robot.effort_limit, robot.velocity_limit


@functools.lru_cache(maxsize=1)
def _default_robot():
    return load_robot_config()


def _policy_dt(robot) -> float:
    return float(robot.sim_dt * robot.decimation)


def _quaternions(roll, pitch, yaw) -> tuple[np.ndarray, np.ndarray]:
    """(N, 4) quaternions (w, x, y, z) and (N, 3) body-frame gravity of these Euler angles."""
    quat = quat_from_euler(roll, pitch, yaw)
    return quat, projected_gravity(quat)


def random_reward_state(num_envs: int, rng: np.random.Generator, robot=None) -> RewardState:
    """A batch of plausible mid-walk states (upright-ish, moving, mixed foot contacts) of `robot`'s
    joints (None: the package's robot config)."""
    robot = robot or _default_robot()
    n = int(num_envs)
    names, default, lower, upper, effort, _ = _joints_of(robot)
    nj = len(names)
    roll, pitch = rng.normal(0.0, 0.08, (2, n))
    quat, gravity = _quaternions(roll, pitch, rng.uniform(-np.pi, np.pi, n))
    height = np.clip(rng.normal(0.85, 0.04, n), 0.3, 1.1)
    base_pos = np.column_stack([rng.uniform(-5, 5, n), rng.uniform(-5, 5, n), height])
    contact = rng.random((n, 2)) < 0.6
    swing_height = np.where(contact, 0.0, rng.uniform(0.0, 0.12, (n, 2)))
    foot_pos = np.stack([base_pos[:, :2] + [0.0, 0.1], base_pos[:, :2] + [0.0, -0.1]], axis=1)
    foot_pos = np.concatenate([foot_pos + rng.normal(0, 0.1, (n, 2, 2)), swing_height[..., None]], axis=2)
    action = rng.uniform(-1.0, 1.0, (n, nj))
    return RewardState(
        dt=_policy_dt(robot),
        base_pos=base_pos,
        base_quat=quat,
        base_lin_vel=rng.normal([0.4, 0.0, 0.0], [0.3, 0.15, 0.1], (n, 3)),
        base_ang_vel=rng.normal(0.0, 0.3, (n, 3)),
        base_vel_avg=rng.normal([0.4, 0.0, 0.0], [0.2, 0.1, 0.1], (n, 3)),
        projected_gravity=gravity,
        base_height=height.copy(),
        joint_pos=np.clip(default + rng.normal(0.0, 0.15, (n, nj)), lower, upper),
        joint_vel=rng.normal(0.0, 1.5, (n, nj)),
        joint_acc=rng.normal(0.0, 30.0, (n, nj)),
        joint_torque=np.clip(rng.normal(0.0, 0.3, (n, nj)) * effort, -effort, effort),
        default_joint_pos=default.copy(),
        joint_pos_lower=lower.copy(),
        joint_pos_upper=upper.copy(),
        effort_limit=effort.copy(),
        foot_pos=foot_pos,
        foot_vel=rng.normal(0.0, 0.3, (n, 2, 3)) * np.where(contact, 0.1, 1.0)[..., None],  # stance feet slip a little
        foot_contact=contact,
        foot_contact_force=np.where(contact, rng.uniform(50.0, 500.0, (n, 2)), 0.0),
        foot_air_time=np.where(contact, 0.0, rng.uniform(0.0, 0.5, (n, 2))),
        first_contact=contact & (rng.random((n, 2)) < 0.2),
        body_collision=rng.random(n) < 0.03,
        command=np.column_stack([rng.uniform(-0.5, 1.2, n), rng.uniform(-0.3, 0.3, n), rng.uniform(-0.5, 0.5, n)]),
        heading_error=rng.normal(0.0, 0.3, n),
        gait_phase=rng.random(n),
        gait_period=float(rng.uniform(0.5, 1.0)),
        action=action,
        last_action=np.clip(action + rng.normal(0.0, 0.2, (n, nj)), -1.0, 1.0),
        terminated=rng.random(n) < 0.02,
        joint_names=tuple(names),
        joint_roles=robot.joint_roles,
    )


def extreme_reward_state(num_envs: int, rng: np.random.Generator, kind: str = "mixed", robot=None) -> RewardState:
    """A batch at the edges of valid states. kind 'high': every magnitude at its largest (joints at their
    limits, fast motion, huge contact forces, long air times, all flags set, upside down); 'low': all at
    rest (zero velocities, forces, commands and air times, exactly the default pose, flags clear); 'mixed':
    each value drawn from the low end, the high end or zero."""
    robot = robot or _default_robot()
    n = int(num_envs)
    names, default, lower, upper, effort, velocity = _joints_of(robot)
    nj = len(names)

    def pick(low, high, shape):  # per element: low end, high end, or (where valid) zero
        low, high = np.broadcast_to(low, shape), np.broadcast_to(high, shape)
        if kind == "high":
            return np.where(rng.random(shape) < 0.5, low, high)
        if kind == "low":
            return np.clip(np.zeros(shape), low, high)
        choice = rng.integers(0, 3, shape)
        return np.where(choice == 0, low, np.where(choice == 1, high, np.clip(0.0, low, high)))

    def flag(shape):
        return np.ones(shape, bool) if kind == "high" else np.zeros(shape, bool) if kind == "low" \
            else rng.random(shape) < 0.5

    if kind == "low":
        angles = np.zeros((3, n))
    elif kind == "high":  # upside down, on the back or the face, on either side
        poses = np.array([[np.pi, 0.0], [0.0, np.pi / 2], [0.0, -np.pi / 2], [np.pi / 2, 0.0], [-np.pi / 2, 0.0]])
        roll, pitch = poses[rng.integers(0, len(poses), n)].T
        angles = np.stack([roll, pitch, rng.uniform(-np.pi, np.pi, n)])
    else:
        angles = rng.uniform(-np.pi, np.pi, (3, n)) * [[1.0], [0.5], [1.0]]
    quat, gravity = _quaternions(*angles)
    contact = flag((n, 2))
    joint_pos = default + np.zeros((n, nj)) if kind == "low" else pick(lower, upper, (n, nj))
    return RewardState(
        dt=_policy_dt(robot),
        base_pos=pick([-1e3, -1e3, 0.0], [1e3, 1e3, 2.0], (n, 3)),
        base_quat=quat,
        base_lin_vel=pick(-10.0, 10.0, (n, 3)),
        base_ang_vel=pick(-30.0, 30.0, (n, 3)),
        base_vel_avg=pick(-5.0, 5.0, (n, 3)),
        projected_gravity=gravity,
        base_height=pick(0.0, 2.0, (n,)),
        joint_pos=joint_pos,
        joint_vel=pick(-2.0 * velocity, 2.0 * velocity, (n, nj)),
        joint_acc=pick(-5e3, 5e3, (n, nj)),
        joint_torque=pick(-effort, effort, (n, nj)),
        default_joint_pos=default.copy(),
        joint_pos_lower=lower.copy(),
        joint_pos_upper=upper.copy(),
        effort_limit=effort.copy(),
        foot_pos=pick([-1e3, -1e3, 0.0], [1e3, 1e3, 1.0], (n, 2, 3)),
        foot_vel=pick(-10.0, 10.0, (n, 2, 3)),
        foot_contact=contact,
        foot_contact_force=np.where(contact, pick(0.0, 1e4, (n, 2)), 0.0),
        foot_air_time=np.where(contact, 0.0, pick(0.0, 20.0, (n, 2))),
        first_contact=contact & flag((n, 2)),
        body_collision=flag(n),
        command=pick([-1.5, -1.0, -1.5], [1.5, 1.0, 1.5], (n, 3)),
        heading_error=pick(-np.pi, np.pi - 1e-9, (n,)),
        gait_phase=pick(0.0, 1.0 - 1e-9, (n,)),
        gait_period=float(rng.choice([0.4, 1.2])) if kind != "low" else 0.7,
        action=pick(-1.0, 1.0, (n, nj)),
        last_action=pick(-1.0, 1.0, (n, nj)),
        terminated=flag(n),
        joint_names=tuple(names),
        joint_roles=robot.joint_roles,
    )


@dataclasses.dataclass(frozen=True)
class StatePool:
    """Rows of recorded states; `sample(n, rng)` draws a batch of n rows (with replacement when short)."""

    rows: dict  # per-environment field -> (rows, ...) array
    shared: dict  # fields that are one value for every environment (dt, limits, joint names, ...)

    def sample(self, n: int, rng: np.random.Generator) -> RewardState:
        count = len(self.rows["base_pos"])
        ids = rng.choice(count, size=n, replace=n > count)
        return RewardState(**{k: v[ids] for k, v in self.rows.items()}, **self.shared)


def training_batch_size(env_cfg=None) -> int:
    """The batch size training steps its terms on: env_cfg.num_envs (None: the environment's default)."""
    from motionvl.envs.config import EnvConfig  # see the module docstring

    return int((env_cfg or EnvConfig()).num_envs)


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def rollout_pool(robot=None, env_cfg=None, seed: int | None = None) -> StatePool:
    """States recorded from ROLLOUT_STEPS steps of ROLLOUT_ENVS training environments under a random
    policy (uniform actions in [-1, 1]: stumbles, falls, impacts and resets). Recorded once per process
    and robot/env config, with a random seed unless one is given."""
    from motionvl.envs.config import EnvConfig  # the one upward import, see the module docstring
    from motionvl.envs.locomotion import LocomotionEnv

    robot = robot or _default_robot()
    env_cfg = env_cfg or EnvConfig()
    key = (robot.joint_names, robot.source, repr(env_cfg), seed)
    with _POOLS_LOCK:
        if key in _POOLS:
            return _POOLS[key]
        recorded: list[RewardState] = []

        def record(state: RewardState):
            recorded.append(state)
            return np.zeros(state.num_envs), {}

        seed = int(np.random.SeedSequence().entropy % (2**31)) if seed is None else seed
        cfg = dataclasses.replace(env_cfg, num_envs=ROLLOUT_ENVS, num_threads=1, seed=seed, terrain_seed=seed)
        env = LocomotionEnv(robot, cfg, reward_fn=record)
        rng = np.random.default_rng(seed)
        for _ in range(ROLLOUT_STEPS):
            env.step(rng.uniform(-1.0, 1.0, (ROLLOUT_ENVS, env.num_joints)))
        first = recorded[0]
        rows, shared = {}, {}
        for field in dataclasses.fields(RewardState):
            value = getattr(first, field.name)
            if isinstance(value, np.ndarray) and value.shape[:1] == (ROLLOUT_ENVS,):
                rows[field.name] = np.concatenate([np.asarray(getattr(s, field.name)) for s in recorded])
            else:
                shared[field.name] = np.array(value) if isinstance(value, np.ndarray) else value
        pool = _POOLS[key] = StatePool(rows, shared)
        return pool


def check_batches(num_envs: int, rng: np.random.Generator, robot=None, env_cfg=None, pool: StatePool | None = None):
    """The check's batches in order: (label for messages, RewardState), all of num_envs environments."""
    kinds = {
        "rollout": lambda: (pool or rollout_pool(robot, env_cfg)).sample(num_envs, rng),
        "plausible": lambda: random_reward_state(num_envs, rng, robot),
        **{f"extreme-{k}": functools.partial(extreme_reward_state, num_envs, rng, k, robot)
           for k in ("high", "low", "mixed")},
    }
    for kind, calls in BATCHES:
        for call in range(calls):
            yield f"{kind} batch {call + 1} of {calls}", kinds[kind]()

"""The states the check runs candidates on: like training's, and not recognisable as a test.

A candidate is run on batches drawn with a fresh seed, of four kinds, each called several times
in a row as training does:
- rollout: rows of states recorded from short rollouts of the training environment under a
  random policy (robots that stumble, fall, hit the ground and are reset), re-sampled per batch,
  at each gait period training runs at (its schedule's start and its own value);
- late-episode: rollout rows moved to where a whole training episode can take a robot (up to
  the largest commanded speed, with margin, for episode_length_s) with feet in the air up to that
  long, as states late in training's episodes are, which a random policy never reaches;
- plausible: random mid-walk states (upright-ish, moving, mixed foot contacts);
- extreme: values at the edges of what the environment can produce (joints at their limits,
  fast spins, upside-down bodies, zero and very large contact forces, air times as long as an
  episode, every flag set or clear), so that a guard that holds only for typical values is found.
Most batches have the run's environment count; the last ones fewer (a count drawn below it) and
one, as the evaluations that share the reward run with.

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
BATCHES = (("rollout", 3, "run"), ("late-episode", 2, "run"), ("plausible", 1, "run"), ("extreme-high", 1, "run"),
           ("extreme-low", 1, "run"), ("extreme-mixed", 2, "run"), ("rollout", 1, "fewer"),
           ("late-episode", 1, "fewer"), ("extreme-mixed", 1, "one"))
"""(kind, consecutive calls, size) of one check, in order: size 'run' is the run's environment count,
'fewer' a count drawn log-uniformly below it, 'one' a single environment (the largest first: the worker
maps a batch of the first size and smaller ones within it)."""
REACH_MARGIN = 1.5
"""Late-episode positions reach this times the largest commanded speed x the episode's length (pushes,
overshoot)."""


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


def extreme_reward_state(num_envs: int, rng: np.random.Generator, kind: str = "mixed", robot=None,
                         episode_s: float = 20.0) -> RewardState:
    """A batch at the edges of valid states. kind 'high': every magnitude at its largest (joints at their
    limits, fast motion, huge contact forces, air times of a whole episode_s, all flags set, upside down);
    'low': all at rest (zero velocities, forces, commands and air times, exactly the default pose, flags
    clear); 'mixed': each value drawn from the low end, the high end or zero."""
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
        foot_air_time=np.where(contact, 0.0, pick(0.0, float(episode_s), (n, 2))),
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
    return int(_env_config(env_cfg).num_envs)


def _env_config(env_cfg=None):
    from motionvl.envs.config import EnvConfig  # see the module docstring

    return env_cfg or EnvConfig()


def training_gait_periods(env_cfg=None) -> tuple:
    """The gait periods (s) training runs at: its schedule's start, then the setting's own value (a schedule
    moves between the two)."""
    cfg = _env_config(env_cfg)
    own, schedule = float(cfg.gait_period_s), cfg.gait_period_schedule
    return (float(schedule.start), own) if schedule is not None and float(schedule.start) != own else (own,)


def episode_reach(env_cfg=None) -> float:
    """The farthest (m) a robot can get from where an episode starts: REACH_MARGIN x the largest commanded
    speed x episode_length_s."""
    cfg = _env_config(env_cfg)
    c = cfg.commands
    speeds = [abs(float(v)) for v in (*c.vx, *c.vy, *(c.fixed[:2] if c.fixed else ()))]
    return REACH_MARGIN * max(speeds, default=1.0) * float(cfg.episode_length_s)


def check_conditions(env_cfg=None) -> str:
    """What the check's batches depend on in env_cfg (its seeds and thread count aside): code that passed
    for one set of conditions is checked again for another."""
    cfg = _env_config(env_cfg)
    return repr(dataclasses.replace(cfg, seed=0, terrain_seed=None, num_threads=None))


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def rollout_pool(robot=None, env_cfg=None, seed: int | None = None, gait_period: float | None = None) -> StatePool:
    """States recorded from ROLLOUT_STEPS steps of ROLLOUT_ENVS training environments under a random
    policy (uniform actions in [-1, 1]: stumbles, falls, impacts and resets), their gait clock at
    gait_period (None: env_cfg's own gait_period_s). Recorded once per process and robot/env config and
    period, with a random seed unless one is given."""
    from motionvl.envs.locomotion import LocomotionEnv  # the one upward import, see the module docstring

    robot = robot or _default_robot()
    env_cfg = _env_config(env_cfg)
    if gait_period is not None:
        env_cfg = dataclasses.replace(env_cfg, gait_period_s=float(gait_period), gait_period_schedule=None)
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


def late_episode_state(pool: StatePool, num_envs: int, rng: np.random.Generator, env_cfg=None) -> RewardState:
    """Rows of `pool` as late in a training episode: moved up to episode_reach(env_cfg) in any direction
    (feet along), feet in the air up to the episode's length."""
    state = pool.sample(num_envs, rng)
    cfg = _env_config(env_cfg)
    radius = episode_reach(cfg) * np.sqrt(rng.random(num_envs))  # uniform over the disc
    angle = rng.uniform(-np.pi, np.pi, num_envs)
    shift = np.column_stack([radius * np.cos(angle), radius * np.sin(angle)])
    base_pos, foot_pos = state.base_pos.copy(), state.foot_pos.copy()
    base_pos[:, :2] += shift
    foot_pos[:, :, :2] += shift[:, None, :]
    air = np.maximum(state.foot_air_time, rng.uniform(0.0, float(cfg.episode_length_s), state.foot_air_time.shape))
    return dataclasses.replace(state, base_pos=base_pos, foot_pos=foot_pos,
                               foot_air_time=np.where(state.foot_contact, state.foot_air_time, air))


def batch_sizes(num_envs: int, rng: np.random.Generator) -> dict:
    """{BATCHES size name: environments} for a run of num_envs."""
    fewer = int(round(np.exp(rng.uniform(np.log(2), np.log(num_envs - 1))))) if num_envs > 2 else 1
    return {"run": num_envs, "fewer": fewer, "one": 1}


def check_batches(num_envs: int, rng: np.random.Generator, robot=None, env_cfg=None, pool: StatePool | None = None):
    """The check's batches in order: (label for messages, RewardState), as BATCHES lists them for a run of
    num_envs environments of env_cfg. pool: rollout rows to use at every period (None: recorded per period)."""
    periods = training_gait_periods(env_cfg)
    episode_s = float(_env_config(env_cfg).episode_length_s)
    sizes = batch_sizes(num_envs, rng)

    def rows(k: int) -> StatePool:
        return pool or rollout_pool(robot, env_cfg, gait_period=periods[k % len(periods)])

    kinds = {
        "rollout": lambda n, k: rows(k).sample(n, rng),
        "late-episode": lambda n, k: late_episode_state(rows(k), n, rng, env_cfg),
        "plausible": lambda n, k: random_reward_state(n, rng, robot),
        **{f"extreme-{e}": functools.partial(lambda e, n, k: extreme_reward_state(n, rng, e, robot, episode_s), e)
           for e in ("high", "low", "mixed")},
    }
    for kind, calls, size in BATCHES:
        for call in range(calls):
            state = kinds[kind](sizes[size], call)
            where = f" (gait period {state.gait_period:g} s)" if kind in ("rollout", "late-episode") else ""
            yield f"{kind} batch {call + 1} of {calls}{where}", state

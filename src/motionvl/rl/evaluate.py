"""Evaluate an exported ONNX policy (ONNX Runtime, not torch) in the simulator: a reward-free task score.

N parallel episodes with a fixed velocity command, no resets: each episode is recorded until it
falls or the time is up. By default the robot config's own sim_dt/decimation (500 Hz PD) is used,
not the coarser training physics step, to show that the policy transfers; domain randomisation
is off unless asked for.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from motionvl.envs.config import CommandConfig, EnvConfig, RandomizationConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.gait.metrics import EVAL_KEYS, gait_metrics, truncate_at_fall
from motionvl.rl.export import OnnxPolicy, load_policy
from motionvl.robot import ConfigError, RobotConfig, load_robot_config
from motionvl.sim.math import to_heading_frame, yaw_of
from motionvl.sim.terrain import fixed_level
from motionvl.sim.trajectory import Trajectory

# Transients left out of the steady-state tracking error, measured on the 60-minute policy at
# 0.6 m/s (randomised): the error is back to its in-stride level ~1 s after starting from standstill
# and ~1.5 s after a 0.5 m/s push.
START_SETTLE_S = 1.0
PUSH_RECOVERY_S = 1.5
SUCCESS_FRACTION = 0.9
"""Share of the commanded distance a successful episode covers without a fall. The trainer's checkpoint
selection scores with it; the reward search asks its own (EvaluationConfig.success_fraction)."""


def steady_mask(time: np.ndarray, push_times=(), settle_s: float = START_SETTLE_S,
                recovery_s: float = PUSH_RECOVERY_S) -> np.ndarray:
    """Samples after the start-up settle time and outside the recovery window after each push."""
    t = np.asarray(time, dtype=float) - float(time[0])
    mask = t >= settle_s
    for p in push_times:
        mask &= ~((t >= p) & (t < p + recovery_s))
    return mask


def episode_metrics(traj: Trajectory, command, seconds: float, push_times=(),
                    success_fraction: float = SUCCESS_FRACTION) -> dict:
    """Task numbers of one recorded episode (cut at its fall) for a fixed (vx, vy, yaw_rate) command.

    forward_distance_m: progress along the commanded direction (for a zero yaw-rate command the
    displacement along the initial commanded heading, else the path integral of the heading-frame
    velocity along the command); with a zero velocity command, along the body's forward axis.
    tracking_error_mps: mean |v_xy - cmd_xy| (heading frame) over every sample, including the
    start from standstill and push recoveries; tracking_error_steady_mps: the same without the
    first START_SETTLE_S seconds and PUSH_RECOVERY_S after each of `push_times` (episode seconds).
    heading_error_deg: |heading turned - commanded yaw rate x time| at the end (or the fall): how far
    the robot has turned off the course its command asked for.
    success: no fall and at least `success_fraction` of the commanded distance.
    ground_rise_m: the height of the terrain under the base at the end (or the fall) above the start's (0 on
    flat ground): how far up stairs or a slope the episode came (negative: down).
    """
    cmd = np.asarray(command, dtype=float)
    traj = truncate_at_fall(traj)
    fell = bool(np.any(traj.fell))
    duration = max(len(traj.time) - 1, 0) * traj.dt
    speed_cmd = float(np.linalg.norm(cmd[:2]))
    direction = cmd[:2] / speed_cmd if speed_cmd > 1e-9 else np.array([1.0, 0.0])
    heading = yaw_of(traj.base_quat)
    turned = np.unwrap(heading)[-1] - heading[0]
    v_heading = to_heading_frame(traj.qvel[:, 0:2], heading)
    if abs(cmd[2]) < 1e-9:
        distance = float(to_heading_frame(traj.base_pos[-1, :2] - traj.base_pos[0, :2], heading[0]) @ direction)
    else:
        distance = float(np.sum(v_heading[1:] @ direction) * traj.dt)
    target = speed_cmd * seconds
    error = np.linalg.norm(v_heading - cmd[:2], axis=1)
    steady = steady_mask(traj.time, push_times)
    return {
        "forward_distance_m": distance,
        "mean_speed_mps": distance / duration if duration > 0 else 0.0,
        "tracking_error_mps": float(np.mean(error)),
        "tracking_error_steady_mps": float(np.mean(error[steady])) if steady.any() else float("nan"),
        "yaw_rate_error_rps": float(np.mean(np.abs(traj.qvel[:, 5] - cmd[2]))),
        "heading_error_deg": float(np.degrees(abs(turned - cmd[2] * duration))),
        "fell": fell,
        "time_upright_s": duration if fell else seconds,
        "success": (not fell) and distance >= success_fraction * target,
        "task_score": float(np.clip(distance / target, 0.0, 1.0) if target > 0 else 1.0) * (duration if fell else seconds) / seconds,
        "ground_rise_m": 0.0 if traj.ground_height is None else float(traj.ground_height[-1, 0] - traj.ground_height[0, 0]),
        **gait_metrics(traj),
    }


def batch_evaluation_env(policy: OnnxPolicy, seconds: float = 10.0, terrain: str = "flat", episodes: int = 16,
                         randomize: bool = False, command=(0.5, 0.0, 0.0), robot_dt: bool = True, seed: int = 0,
                         robot: RobotConfig | None = None, heading_gain: float = 0.0,
                         randomization: RandomizationConfig | None = None,
                         terrain_level: int | None = None) -> LocomotionEnv:
    """The environment `evaluate` runs `policy` in (arguments as there): one episode per env, a fixed
    command, after its first reset. The env supplies the physics; the observations and joint targets
    come from motionvl.policy_io driven by the policy's own contract (checked against `robot`), as on
    a robot. `randomization`, if given, replaces what `randomize` selects."""
    robot = robot or load_robot_config()
    contract = policy.contract
    contract.check_robot(robot)
    dt_kw = {"sim_dt": None, "decimation": None} if robot_dt else {
        "sim_dt": contract.train_sim_dt, "decimation": contract.train_decimation}
    cfg = EnvConfig(num_envs=int(episodes), episode_length_s=float(seconds) + 1.0, terrain=terrain,
                    terrain_level=fixed_level(terrain, terrain_level), seed=seed,
                    commands=CommandConfig(fixed=tuple(float(c) for c in command), resample_s=1e9,
                                           heading_gain=float(heading_gain)),
                    randomization=randomization or (RandomizationConfig.for_evaluation() if randomize
                                                    else RandomizationConfig.disabled()),
                    **dt_kw)
    return LocomotionEnv(robot, cfg, contract=contract)


def evaluate(policy: OnnxPolicy | str | Path, seconds: float = 10.0, terrain: str = "flat", episodes: int = 16,
             randomize: bool = False, command=(0.5, 0.0, 0.0), robot_dt: bool = True, seed: int = 0,
             robot: RobotConfig | None = None, return_trajectories: bool = False, heading_gain: float = 0.0,
             pushes: bool = True, success_fraction: float = SUCCESS_FRACTION, terrain_level: int | None = None) -> dict:
    """Run `episodes` parallel episodes of `seconds` and return the summary dict (means over episodes).

    terrain, terrain_level: the ground (motionvl.sim.terrain) at a fixed level (None: DEFAULT_LEVEL), its
    random ground drawn with `seed`, so another seed than training's is held-out ground.
    heading_gain: 0 gives the policy the command as is; > 0 holds the heading the command asks for
    (CommandConfig.heading_gain), as an operator steering the robot would.
    pushes: with `randomize`, push every RandomizationConfig.push_interval_s; False keeps the rest of
    the randomisation, so that the whole-episode tracking error holds no push recovery.

    task_score: mean over episodes of min(1, distance / commanded distance) x (time upright / seconds).
    success_rate: share of episodes without a fall that covered >= `success_fraction` of the commanded distance.
    action_at_clip: per joint, the share of policy steps whose action sits at the policy's clip (the
    farthest PD target its action scale allows): a joint that lives there wants more range or torque.
    """
    if not 0.0 < success_fraction <= 1.0:
        raise ConfigError(f"success_fraction must be in (0, 1], got {success_fraction}")
    if not heading_gain >= 0:
        raise ConfigError(f"heading_gain must be >= 0, got {heading_gain}")
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ConfigError(f"episodes must be a positive integer, got {episodes!r}")
    if not (np.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"seconds must be a positive number, got {seconds!r}")
    policy = policy if isinstance(policy, OnnxPolicy) else load_policy(policy)
    randomization = RandomizationConfig.for_evaluation(pushes) if randomize else None
    env = batch_evaluation_env(policy, seconds=seconds, terrain=terrain, episodes=episodes, randomize=randomize,
                               command=command, robot_dt=robot_dt, seed=seed, robot=robot, heading_gain=heading_gain,
                               randomization=randomization, terrain_level=terrain_level)
    obs = env.observations()  # the state after the constructor's reset
    recorders = [env.record(i) for i in range(env.num_envs)]
    clip = policy.contract.action_clip
    steps = int(round(seconds / env.dt))
    if steps < 1:
        raise ConfigError(f"seconds {seconds:g} is shorter than one policy period ({env.dt:g} s)")
    at_clip = np.zeros(env.num_joints)
    for _ in range(steps):
        actions = policy(obs)
        at_clip += np.mean(np.abs(actions) >= clip * (1.0 - 1e-6), axis=0)
        obs, *_ = env.step(actions)
    trajs = [env.stop_recording(r) for r in recorders]
    per_episode = [episode_metrics(t, command, seconds, env.push_times(seconds), success_fraction) for t in trajs]

    def mean(key: str) -> float | None:
        values = np.array([float(e[key]) for e in per_episode])
        values = values[np.isfinite(values)]
        return round(float(values.mean()), 4) if values.size else None

    result = {
        "policy": str(policy.path), "terrain": terrain, "terrain_level": env.cfg.terrain_level,
        "episodes": int(episodes), "seconds": float(seconds),
        "command": [float(c) for c in command], "sim_dt": env.sim_dt, "decimation": env.decimation,
        "randomize": bool(randomize), "pushes": bool(randomize and pushes), "heading_gain": float(heading_gain),
        "success_fraction": float(success_fraction),
        "forward_distance_m": mean("forward_distance_m"),
        "forward_distance_min_m": round(min(e["forward_distance_m"] for e in per_episode), 4),
        "mean_speed_mps": mean("mean_speed_mps"), "tracking_error_mps": mean("tracking_error_mps"),
        "tracking_error_steady_mps": mean("tracking_error_steady_mps"),
        "yaw_rate_error_rps": mean("yaw_rate_error_rps"), "heading_error_deg": mean("heading_error_deg"),
        "fell_fraction": mean("fell"),
        "time_upright_s": mean("time_upright_s"), "success_rate": mean("success"), "task_score": mean("task_score"),
        "ground_rise_m": mean("ground_rise_m"),
        **{k: mean(k) for k in EVAL_KEYS},
        # share of policy steps each joint's action sits at the clip: the joint asks for more than its range
        "action_at_clip": {n: round(float(v / max(steps, 1)), 4) for n, v in zip(env.robot.joint_names, at_clip)},
    }
    if return_trajectories:
        return {**result, "trajectories": trajs, "per_episode": per_episode}
    return result


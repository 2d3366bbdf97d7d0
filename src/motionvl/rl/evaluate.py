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
from motionvl.task import DEFAULT_COMMAND, Criterion, criterion_for_command

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


def push_free_mask(time: np.ndarray, push_times=(), settle_s: float = START_SETTLE_S,
                   recovery_s: float = PUSH_RECOVERY_S) -> np.ndarray:
    """The push-free seconds before each push: from the start-up settle (or the end of the previous push's
    recovery) up to the push; without a push in the episode, everything after the settle."""
    t = np.asarray(time, dtype=float) - float(time[0])
    pushes = sorted(float(p) for p in push_times if float(p) <= t[-1])
    if not pushes:
        return t >= settle_s
    mask = np.zeros(len(t), dtype=bool)
    start = settle_s
    for p in pushes:
        mask |= (t >= start) & (t < p)
        start = p + recovery_s
    return mask


def episode_metrics(traj: Trajectory, command, seconds: float, push_times=(),
                    success_fraction: float = SUCCESS_FRACTION, criterion: Criterion | dict | None = None) -> dict:
    """Task numbers of one recorded episode (cut at its fall) for a fixed (vx, vy, yaw_rate) command.

    forward_distance_m: progress along the commanded direction (for a zero yaw-rate command the
    displacement along the initial commanded heading, else the path integral of the heading-frame
    velocity along the command); with a zero velocity command, along the body's forward axis.
    tracking_error_mps: mean |v_xy - cmd_xy| (heading frame) over every sample, including the
    start from standstill and push recoveries; tracking_error_steady_mps: the same without the
    first START_SETTLE_S seconds and PUSH_RECOVERY_S after each of `push_times` (episode seconds).
    heading_error_deg: |heading turned - commanded yaw rate x time| at the end (or the fall): how far
    the robot has turned off the course its command asked for; heading_turned_deg: the heading turned.
    drift_mps, yaw_rate_steady_rps, yaw_rate_error_steady_rps: in the push-free seconds before each push
    (`push_free_mask`): the norm of the mean horizontal base velocity minus the commanded one (world frame),
    the mean yaw rate and its distance from the commanded one.
    both_feet_contact: share of the gait window with both feet in contact (double_support_fraction).
    success and task_score follow `criterion` (motionvl.task.Criterion; None: the command's own,
    `criterion_for_command`, with `success_fraction`):
      distance / progress: no fall and >= success_fraction of the commanded distance (and <= max_fraction of it
        when set); score min(1, distance / commanded distance) x upright share, or with max_fraction
        (1 - |distance / commanded distance - 1|) x upright share;
      turn: no fall, >= success_fraction of the commanded heading turned, yaw rate within yaw_tolerance of the
        command, drift <= max_drift_mps; score min(1, turned / commanded) x upright share x drift factor;
      stand: no fall and both feet in contact >= min_contact; score min(1, contact / min_contact) x upright share;
      in_place: no fall and drift <= max_drift_mps; score upright share x drift factor
    (drift factor: 1 up to max_drift_mps, max_drift_mps / drift beyond).
    ground_rise_m: the height of the terrain under the base at the end (or the fall) above the start's (0 on
    flat ground): how far up stairs or a slope the episode came (negative: down).
    """
    cmd = np.asarray(command, dtype=float)
    crit = Criterion.from_dict(criterion) if criterion is not None else criterion_for_command(cmd, success_fraction)
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
    free = push_free_mask(traj.time, push_times)
    c, s = np.cos(heading), np.sin(heading)
    commanded_world = np.stack([c * cmd[0] - s * cmd[1], s * cmd[0] + c * cmd[1]], axis=1)
    drift = float(np.linalg.norm(np.mean(traj.qvel[free, 0:2] - commanded_world[free], axis=0))) if free.any() else float("nan")
    yaw_rate = float(np.mean(traj.qvel[free, 5])) if free.any() else float("nan")
    gait = gait_metrics(traj)
    upright = (duration if fell else seconds) / seconds
    drift_factor = 1.0 if not np.isfinite(drift) or drift <= crit.max_drift_mps else crit.max_drift_mps / drift
    if crit.kind in ("distance", "progress"):
        bounded = crit.max_fraction is not None and target > 0
        success = (not fell) and distance >= crit.success_fraction * target \
            and (not bounded or distance <= crit.max_fraction * target)
        if target <= 0:
            score = upright
        elif bounded:
            score = float(np.clip(1.0 - abs(distance / target - 1.0), 0.0, 1.0)) * upright
        else:
            score = float(np.clip(distance / target, 0.0, 1.0)) * upright
    elif crit.kind == "turn":
        asked = abs(cmd[2]) * seconds
        along = turned * np.sign(cmd[2]) if abs(cmd[2]) > 1e-9 else abs(turned)
        rate_ok = np.isfinite(yaw_rate) and abs(yaw_rate - cmd[2]) <= crit.yaw_tolerance * max(abs(cmd[2]), 1e-9)
        success = (not fell) and along >= crit.success_fraction * asked and bool(rate_ok) and drift_factor == 1.0
        score = float(np.clip(along / asked, 0.0, 1.0) if asked > 0 else 1.0) * upright * drift_factor
    elif crit.kind == "stand":
        contact = gait.get("double_support_fraction")
        contact = float(contact) if contact is not None and np.isfinite(contact) else 0.0
        success = (not fell) and contact >= crit.min_contact
        score = min(1.0, contact / crit.min_contact) * upright
    else:  # in_place
        success = (not fell) and drift_factor == 1.0
        score = upright * drift_factor
    return {
        "forward_distance_m": distance,
        "mean_speed_mps": distance / duration if duration > 0 else 0.0,
        "tracking_error_mps": float(np.mean(error)),
        "tracking_error_steady_mps": float(np.mean(error[steady])) if steady.any() else float("nan"),
        "yaw_rate_error_rps": float(np.mean(np.abs(traj.qvel[:, 5] - cmd[2]))),
        "heading_error_deg": float(np.degrees(abs(turned - cmd[2] * duration))),
        "heading_turned_deg": float(np.degrees(turned)),
        "drift_mps": drift,
        "yaw_rate_steady_rps": yaw_rate,
        "yaw_rate_error_steady_rps": abs(yaw_rate - float(cmd[2])) if np.isfinite(yaw_rate) else float("nan"),
        "fell": fell,
        "time_upright_s": duration if fell else seconds,
        "success": bool(success),
        "task_score": float(score),
        "ground_rise_m": 0.0 if traj.ground_height is None else float(traj.ground_height[-1, 0] - traj.ground_height[0, 0]),
        **gait,
    }


def batch_evaluation_env(policy: OnnxPolicy, seconds: float = 10.0, terrain: str = "flat", episodes: int = 16,
                         randomize: bool = False, command=DEFAULT_COMMAND, robot_dt: bool = True, seed: int = 0,
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
             randomize: bool = False, command=DEFAULT_COMMAND, robot_dt: bool = True, seed: int = 0,
             robot: RobotConfig | None = None, return_trajectories: bool = False, heading_gain: float = 0.0,
             pushes: bool = True, success_fraction: float = SUCCESS_FRACTION, criterion: Criterion | dict | None = None,
             terrain_level: int | None = None) -> dict:
    """Run `episodes` parallel episodes of `seconds` and return the summary dict (means over episodes).

    terrain, terrain_level: the ground (motionvl.sim.terrain) at a fixed level (None: DEFAULT_LEVEL), its
    random ground drawn with `seed`, so another seed than training's is held-out ground.
    heading_gain: 0 gives the policy the command as is; > 0 holds the heading the command asks for
    (CommandConfig.heading_gain), as an operator steering the robot would.
    pushes: with `randomize`, push every RandomizationConfig.push_interval_s; False keeps the rest of
    the randomisation, so that the whole-episode tracking error holds no push recovery.

    task_score, success_rate: the mean over episodes of each episode's score and success under `criterion`
    (motionvl.task.Criterion; None: the command's own with `success_fraction`, see `episode_metrics`): walking,
    min(1, distance / commanded distance) x (time upright / seconds) and the share of episodes without a fall that
    covered >= `success_fraction` of the commanded distance.
    terrain_level: a fixed difficulty level of `terrain` (EnvConfig.terrain_level; None: its default).
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
    crit = Criterion.from_dict(criterion) if criterion is not None else criterion_for_command(command, success_fraction)
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
    per_episode = [episode_metrics(t, command, seconds, env.push_times(seconds), criterion=crit) for t in trajs]

    def mean(key: str) -> float | None:
        values = np.array([float(e[key]) for e in per_episode])
        values = values[np.isfinite(values)]
        return round(float(values.mean()), 4) if values.size else None

    result = {
        "policy": str(policy.path), "terrain": terrain, "terrain_level": env.cfg.terrain_level,
        "episodes": int(episodes), "seconds": float(seconds),
        "command": [float(c) for c in command], "sim_dt": env.sim_dt, "decimation": env.decimation,
        "randomize": bool(randomize), "pushes": bool(randomize and pushes), "heading_gain": float(heading_gain),
        "success_fraction": float(crit.success_fraction), "criterion": crit.to_dict(),
        "forward_distance_m": mean("forward_distance_m"),
        "forward_distance_min_m": round(min(e["forward_distance_m"] for e in per_episode), 4),
        "mean_speed_mps": mean("mean_speed_mps"), "tracking_error_mps": mean("tracking_error_mps"),
        "tracking_error_steady_mps": mean("tracking_error_steady_mps"),
        "yaw_rate_error_rps": mean("yaw_rate_error_rps"), "heading_error_deg": mean("heading_error_deg"),
        "heading_turned_deg": mean("heading_turned_deg"), "drift_mps": mean("drift_mps"),
        "yaw_rate_steady_rps": mean("yaw_rate_steady_rps"), "yaw_rate_error_steady_rps": mean("yaw_rate_error_steady_rps"),
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


"""How policy_io_golden.npz was recorded: run once on commit 138c398, before motionvl.policy_io existed,
so that tests/test_policy_io.py compares the policy I/O module with the environment's own code of
that time (not with itself). It hooks that environment's internals, so it is kept as a record of how
the goldens were made, not to be run again:

    .venv/bin/python tests/data/policy_io_golden.py

Recorded: the shipped env settings of config/training.yaml at that commit (observation history 5,
heading error, gait feedforward 0.2 / stride 0.1 / stand_below -1, latency and the other
randomisations), 4 envs for 40 steps with random actions (some beyond the clip), the envs started at
different gait phases, env 2 resampling its command at step 1 and env 3 timing out, plus an explicit
reset of env 1. For every observation build: the envs reset since the previous build, the physics
inputs and the observation; for every policy step: the action, the joint positions, the command and
gait phase the environment's action law read, and the joint targets it sent to the PD loop. Then
reference_gait_offsets (the feedforward) on synthetic states with standing commands.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from motionvl.envs.config import EnvConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.rewards.terms import reference_gait_offsets
from motionvl.rl.export import policy_metadata
from motionvl.robot import load_robot_config, package_root
from motionvl.sim.math import wrap_angle, yaw_of

OUT = Path(__file__).with_name("policy_io_golden.npz")
NUM_ENVS, STEPS, RESET_AT = 4, 40, 20


def record_env() -> dict:
    robot = load_robot_config()
    cfg = EnvConfig.from_yaml(package_root() / "config" / "training.yaml")
    cfg = dataclasses.replace(cfg, num_envs=NUM_ENVS, num_threads=1, seed=11)
    env = LocomotionEnv(robot, cfg)
    rows = {k: [] for k in ("reset", "base_ang_vel", "projected_gravity", "command", "joint_pos", "joint_vel",
                            "last_action", "gait_phase", "heading_error", "obs")}
    steps = {k: [] for k in ("action", "joint_pos", "command", "gait_phase", "target")}
    reset_since = np.zeros(NUM_ENVS, dtype=bool)
    original_reset, original_build, original_step = env._reset_envs, env._build_observations, env.sim.step

    def reset_envs(ids):
        reset_since[np.asarray(ids, dtype=int)] = True
        original_reset(ids)

    def build():
        s = env.state
        for name, value in (("reset", reset_since.copy()), ("base_ang_vel", s.base_ang_vel),
                            ("projected_gravity", s.projected_gravity), ("command", env.command),
                            ("joint_pos", s.joint_pos), ("joint_vel", s.joint_vel), ("last_action", env.action),
                            ("gait_phase", env.gait_phase()),
                            ("heading_error", wrap_angle(env._heading_target - yaw_of(s.base_quat)))):
            rows[name].append(np.array(value, copy=True))
        reset_since[:] = False
        obs = original_build()
        rows["obs"].append(obs.copy())
        return obs

    def sim_step(nstep):
        steps["target"].append(env.sim.ctrl.copy())  # what step() wrote: the PD targets of this policy step
        original_step(nstep)

    env._build_observations, env._reset_envs, env.sim.step = build, reset_envs, sim_step
    env.reset()
    env.episode_length[:] = [0, 137, env._resample_steps - 1, env.max_episode_length - 10]
    env._obs = build()  # the observation at the new gait phases, as the first one the policy sees
    rng = np.random.default_rng(5)
    for k in range(STEPS):
        if k == RESET_AT:
            env.reset(ids=[1])
        action = rng.normal(0.0, 0.5, (NUM_ENVS, robot.num_joints))
        action[rng.random(action.shape) < 0.05] = 1.7 * rng.choice([-1.0, 1.0])
        steps["action"].append(action.copy())
        steps["joint_pos"].append(env.sim.qpos[:, env._qp].copy())
        steps["command"].append(env.state.command.copy())
        steps["gait_phase"].append(env.state.gait_phase.copy())
        env.step(action)
    meta = policy_metadata(robot, cfg, env.num_obs)
    out = {f"obs_{k}": np.stack(v) for k, v in rows.items()}
    out.update({f"step_{k}": np.stack(v) for k, v in steps.items()})
    out["metadata_json"] = np.array(json.dumps(meta))
    return out


def record_feedforward() -> dict:
    """reference_gait_offsets with the resting rule active (stand_below 0.1) and a stride."""
    rng = np.random.default_rng(9)
    n = 64
    command = rng.uniform(-1.0, 1.0, (n, 3)) * rng.choice([0.0, 0.05, 1.0], (n, 1))
    phase = rng.uniform(0.0, 1.0, n)
    phase[:4] = [0.0, 0.25, 0.5, 0.75]
    state = SimpleNamespace(command=command, gait_phase=phase)  # all the offsets read
    return {"ff_command": command, "ff_gait_phase": phase,
            "ff_offsets": reference_gait_offsets(state, 0.35, 0.1, 0.4), "ff_params": np.array([0.35, 0.1, 0.4])}


if __name__ == "__main__":
    np.savez_compressed(OUT, **record_env(), **record_feedforward())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")

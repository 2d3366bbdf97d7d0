"""`motionvl bench sim`: how much of raw batched MuJoCo speed the locomotion environment keeps.

One run, one model, one thread count, two measurements interleaved in short blocks (so that
load from other processes hits both alike):
- raw: `MujocoBatchBackend.step(decimation)` with the controls held at the default pose,
  every simulation starting from the standing keyframe (the nominal model, so it stays up;
  without the ctrl history buffers that the env's latency emulation adds);
- env: `LocomotionEnv.step` with the same held targets (zero actions), i.e. physics plus
  action handling, latency emulation, observations, reward terms, terminations and resets,
  with the environment's default domain randomisation (`--randomization off`: the nominal
  robot and world, as raw has them). Either way the env's robots start from a noisy pose,
  so under zero actions they topple within a few seconds and are reset; raw's stand.
`ratio` = env physics steps/s / raw physics steps/s (wall clock); `cpu_ratio` is the same with
process CPU time, which other jobs on the machine disturb less. The last printed line is JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time


def add_sim_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", type=int, default=64, help="simulations stepped together (default 64)")
    parser.add_argument("--seconds", type=float, default=5.0, help="wall seconds measured for each of raw and env (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="physics threads (default: all usable cores)")
    parser.add_argument("--actions", choices=("zero", "random"), default="zero",
                        help="policy actions for the env: zero (hold the default pose, as raw does) or uniform random in [-0.3, 0.3]")
    parser.add_argument("--no-reward", action="store_true", help="run the env without a reward function")
    parser.add_argument("--randomization", choices=("on", "off"), default="on",
                        help="env domain randomisation: on (training default: friction, gains, joint friction, "
                             "pushes, latency) or off (nominal model and world, like raw)")
    parser.add_argument("--robot-config", default=None, help="robot YAML (default: the package's config/robot.yaml)")
    parser.add_argument("--warmup", type=float, default=1.0,
                        help="simulated seconds the env runs before measuring (default 1.0)")
    parser.add_argument("--terrain", default=None,
                        help="the env's terrain (default: EnvConfig's); raw steps the same world at one level")
    parser.add_argument("--terrain-level", type=int, default=None,
                        help="a fixed terrain level (default: the curriculum's world of every level)")
    parser.add_argument("--seed", type=int, default=0)


def _reward_fn(disabled: bool):
    """The default reward spec's function, or None with the reason."""
    if disabled:
        return None, "disabled (--no-reward)"
    try:
        from motionvl.rewards.spec import load_reward_spec
    except ImportError as exc:
        return None, f"none: motionvl.rewards.spec not importable ({exc})"
    try:
        spec = load_reward_spec(None)
    except Exception as exc:  # the default spec file is missing or invalid: measure without rewards
        return None, f"none: load_reward_spec(None) failed: {exc}"
    if not callable(spec):
        return None, f"none: {type(spec).__name__} from load_reward_spec(None) is not callable"
    return spec, f"default spec {getattr(spec, 'name', '') or type(spec).__name__}"


def run_sim_benchmark(args: argparse.Namespace) -> dict:
    import numpy as np

    from motionvl.envs.config import EnvConfig, RandomizationConfig
    from motionvl.envs.locomotion import LocomotionEnv
    from motionvl.robot import load_robot_config
    from motionvl.sim.backend import MujocoBatchBackend
    from motionvl.sim.model import build_model

    robot = load_robot_config(args.robot_config)
    reward_fn, reward_note = _reward_fn(args.no_reward)
    cfg = EnvConfig(num_envs=args.envs, num_threads=args.threads, seed=args.seed,
                    **({"terrain": args.terrain} if args.terrain else {}), terrain_level=args.terrain_level)
    if args.randomization == "off":
        cfg.randomization = RandomizationConfig.disabled()
    env = LocomotionEnv(robot, cfg, reward_fn=reward_fn, iteration=0)  # the training env as a run starts it
    n, dec, threads = env.num_envs, env.decimation, env.sim.num_threads
    # the env's model without its ctrl history (latency emulation is the env's cost, not raw's)
    raw = MujocoBatchBackend(build_model(env.train_robot, dataclasses.replace(env.terrain, every_level=False)), n, threads)
    raw.reset(keyframe=0)
    raw.ctrl[:] = robot.default_pose
    raw.forward()

    rng = np.random.default_rng(args.seed)
    if args.actions == "zero":
        actions = [np.zeros((n, env.num_joints))]
    else:
        actions = [rng.uniform(-0.3, 0.3, (n, env.num_joints)) for _ in range(16)]

    # warm-up: first-touch allocations and thread start, and for the env, past the common start
    # of every episode (all envs begin together; falls and resets come later)
    raw.step(dec)
    for k in range(max(1, int(round(args.warmup / env.dt)))):
        env.step(actions[k % len(actions)])

    counts = {"raw": 0, "env": 0}
    elapsed = {"raw": 0.0, "env": 0.0}
    cpu = {"raw": 0.0, "env": 0.0}  # process CPU time: less sensitive than wall time to other jobs
    resets = 0
    block = min(0.5, max(args.seconds / 4, 0.05))
    while min(elapsed.values()) < args.seconds:
        t0, c0 = time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < block:
            raw.step(dec)
            counts["raw"] += 1
        elapsed["raw"] += time.perf_counter() - t0
        cpu["raw"] += time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < block:
            _, _, terminated, truncated, _ = env.step(actions[counts["env"] % len(actions)])
            resets += int(np.count_nonzero(terminated | truncated))
            counts["env"] += 1
        elapsed["env"] += time.perf_counter() - t0
        cpu["env"] += time.process_time() - c0

    env_steps = counts["env"] * n / elapsed["env"]
    physics = env_steps * dec
    raw_physics = counts["raw"] * n * dec / elapsed["raw"]
    raw_upright = float(np.mean(raw.qpos[:, 2] > env.cfg.min_base_height))
    return {
        "bench": "sim",
        "envs": n,
        "threads": threads,
        "sim_dt": env.sim_dt,
        "decimation": dec,
        "env_steps_per_s": round(env_steps, 1),
        "physics_steps_per_s": round(physics, 1),
        "raw_physics_steps_per_s": round(raw_physics, 1),
        "ratio": round(physics / raw_physics, 3),
        "cpu_ratio": round((counts["env"] / cpu["env"]) / (counts["raw"] / cpu["raw"]), 3),
        "actions": args.actions,
        "randomization": args.randomization,
        "terrain": env.cfg.terrain, "terrain_level": args.terrain_level,
        "reward": reward_note,
        "resets_per_s": round(resets / elapsed["env"], 1),
        "raw_upright_fraction": round(raw_upright, 3),
        "warmup_sim_s": args.warmup,
        "seconds": {k: round(v, 2) for k, v in elapsed.items()},
    }


def main_sim(args: argparse.Namespace) -> int:
    result = run_sim_benchmark(args)
    print(json.dumps(result), flush=True)
    return 0

"""`motionvl bench train`: training throughput on this machine, three ways, one process, same model.

1. raw batched physics: `backend.step(decimation)` alone with the controls held;
2. env only: `LocomotionEnv.step` with random actions (PD targets, physics, state, reward, resets);
3. whole training loop: rsl_rl rollout (policy inference + env + storage) and the PPO update.

Returns the figures as a dict (the bench CLI prints it as the JSON last line), with the ratio
against the measured SB3 PPO baseline on this machine kind (731 policy steps/s).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np

from motionvl.rl.config import TrainConfig, add_dataclass_arguments, args_to_dataclass

SB3_BASELINE_STEPS_PER_S = 731.0
GOAL_STEPS_PER_S = 12_000.0


@dataclasses.dataclass
class TrainBenchArgs:
    envs: int | None = dataclasses.field(default=None, metadata={"type": int})
    """Parallel environments (default: the training config's env.num_envs)."""
    seconds: float = 10.0
    """Seconds of each of the three measurements (after a short warm-up)."""
    config: str | None = None
    """Training YAML (default: config/training.yaml)."""
    reward: str | None = None
    """Reward spec (default: the reference spec)."""
    reward_isolation: str = dataclasses.field(default="process", metadata={"choices": ("process", "in-process")})
    """Where the spec's generated terms run: 'process', the sandbox's worker process as training runs them, or
    'in-process' (the same numbers without the worker's deadline and limits) to measure what the worker
    costs, e.g. with --reward config/rewards/reference_generated.yaml (the reference terms as generated code)."""
    physics_threads: int | None = dataclasses.field(default=None, metadata={"type": int})
    """MuJoCo threads (default: all cores this process may use)."""
    torch_threads: int | None = dataclasses.field(default=None, metadata={"type": int})
    """torch intra-op threads in the rollout (default: the training config's, else torch's)."""
    update_torch_threads: int | None = dataclasses.field(default=None, metadata={"type": int})
    """torch intra-op threads in the PPO update (default: the training config's)."""
    set: list | None = dataclasses.field(default=None, metadata={"action": "append", "metavar": "KEY=VALUE"})
    """Override a training-config key as `motionvl train-policy --set` does (repeatable), e.g.
    --set ppo.symmetry_augmentation=true to measure what a switch costs the loop."""


def add_train_bench_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser, TrainBenchArgs)


def _timed(fn, seconds: float, warmup: int = 2) -> tuple[int, float]:
    for _ in range(warmup):
        fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    return n, time.perf_counter() - t0


def benchmark_training(train_cfg: TrainConfig, reward_fn, seconds: float = 10.0, log=print) -> dict:
    """Measure the three throughputs for `train_cfg` (see the module docstring)."""
    import torch

    from motionvl.rl.estimator import estimator_training
    from motionvl.rl.trainer import build_runner, run_iteration, update_thread_count

    vec, runner = build_runner(train_cfg, reward_fn)
    estimator = estimator_training(runner, vec, train_cfg.ppo)
    env, N = vec.env, vec.num_envs
    update_threads = update_thread_count(train_cfg) or torch.get_num_threads()
    log(f"bench train: {N} envs, sim_dt {env.sim_dt} x {env.decimation}, {env.sim.num_threads} physics threads, "
        f"{torch.get_num_threads()} torch threads ({update_threads} in the update), "
        f"device {runner.device}")

    calls, t = _timed(lambda: env.sim.step(env.decimation), seconds)
    raw_policy = calls * N / t
    log(f"  raw physics: {raw_policy * env.decimation:,.0f} physics steps/s ({raw_policy:,.0f} policy steps/s)")

    rng = np.random.default_rng(0)
    actions = rng.uniform(-1.0, 1.0, (64, N, env.num_joints))
    k = iter(range(10**12))
    calls, t = _timed(lambda: env.step(actions[next(k) % 64]), seconds)
    env_sps = calls * N / t
    log(f"  env only (random actions, reward included): {env_sps:,.0f} policy steps/s")

    env.reset()
    vec.sync_observations()
    infos: list[dict] = []
    iters, t = _timed(lambda: infos.append(run_iteration(runner, vec, update_threads, estimator)), seconds, warmup=1)
    infos = infos[1:]
    collect, learn = sum(i["collect_s"] for i in infos), sum(i["learn_s"] for i in infos)
    train_sps = sum(i["steps"] for i in infos) / t
    log(f"  whole training loop: {train_sps:,.0f} policy steps/s over {iters} iterations "
        f"(rollout {collect / t:.0%}, PPO update {learn / t:.0%})")
    p = train_cfg.ppo
    return {
        "envs": N, "sim_dt": env.sim_dt, "decimation": env.decimation, "physics_threads": env.sim.num_threads,
        "torch_threads": torch.get_num_threads(), "update_torch_threads": update_threads,
        "device": str(runner.device),
        "raw_physics_steps_per_s": round(raw_policy * env.decimation), "raw_policy_steps_per_s": round(raw_policy),
        "env_steps_per_s": round(env_sps), "train_steps_per_s": round(train_sps),
        "train_rollout_fraction": round(collect / t, 3), "train_update_fraction": round(learn / t, 3),
        "iterations": iters,
        "ppo": {"num_steps_per_env": p.num_steps_per_env, "num_learning_epochs": p.num_learning_epochs,
                "num_mini_batches": p.num_mini_batches, "actor_hidden_dims": list(p.actor_hidden_dims),
                "critic_hidden_dims": list(p.critic_hidden_dims), "velocity_estimator": p.velocity_estimator,
                "symmetry_augmentation": p.symmetry_augmentation},
        "sb3_baseline_steps_per_s": SB3_BASELINE_STEPS_PER_S,
        "vs_sb3_baseline": round(train_sps / SB3_BASELINE_STEPS_PER_S, 2),
        "goal_steps_per_s": GOAL_STEPS_PER_S, "meets_goal": bool(train_sps >= GOAL_STEPS_PER_S),
    }


def run_train_benchmark(args: argparse.Namespace) -> dict | int:
    """Entry point of `motionvl bench train`: returns the figures (the bench CLI prints them as JSON),
    or exit status 2 after a message on a bad config, override or reward spec."""
    from motionvl.rewards import validate_spec
    from motionvl.rewards.spec import load_reward_spec
    from motionvl.rl.trainer import bound_reward_cost
    from motionvl.robot import ConfigError

    a = args_to_dataclass(args, TrainBenchArgs)
    try:
        cfg = TrainConfig.from_yaml(a.config, overrides=a.set or ())
        if a.envs is not None:
            cfg.env.num_envs = a.envs
        if a.physics_threads is not None:
            cfg.env.num_threads = a.physics_threads
        if a.torch_threads is not None:
            cfg.torch_threads = a.torch_threads
        if a.update_torch_threads is not None:
            cfg.update_torch_threads = a.update_torch_threads
        cfg.validate()
        reward = load_reward_spec(a.reward)
        validate_spec(reward, env_cfg=cfg.env)  # a spec file may carry generated code: validated as training does
        # as training runs it: isolated or not, and its generated terms' cost per step bounded
        reward = bound_reward_cost(reward.with_isolation(a.reward_isolation == "process"), cfg)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"motionvl bench train: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        result = benchmark_training(cfg, reward, seconds=a.seconds,
                                    log=lambda msg: print(msg, file=sys.stderr, flush=True))
    finally:
        reward.close()
    generated = sum(t.source == "generated" for t in reward.terms)
    return {**result, "overrides": list(a.set or ()), "generated_terms": generated,
            "reward_isolation": a.reward_isolation if generated else None}

"""`motionvl bench train`: training throughput on this machine, three ways, one process, same model.

1. raw batched physics: `backend.step(decimation)` alone with the controls held;
2. env only: `LocomotionEnv.step` with random actions (PD targets, physics, state, reward, resets);
3. whole training loop: rsl_rl rollout (policy inference + env + storage) and the PPO update.

Returns the figures as a dict (the bench CLI prints it as the JSON last line), with the ratio
against the measured SB3 PPO baseline on this machine kind (731 policy steps/s).

With `--load N` it measures instead how the training loop keeps its pace beside N single-thread CPU hogs
(started 5 s before), alone and loaded in one run: the median of `--iterations` iterations for each fixed
update thread count (the baseline) and for the adaptive choice (motionvl.rl.threads).
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
    loop_only: bool = False
    """Measure only the whole training loop (not raw physics and the env alone)."""
    trainers: int = 1
    """Measure this many training loops side by side, each in its own process (as `motionvl train --trainers N`
    runs them), against one alone measured first in the same run."""
    pin: bool = True
    """With --trainers: give each process its share of the cores (motionvl.rl.threads.cpu_shares), as the
    search does for local trainers; false lets the scheduler place them."""
    load: int = 0
    """Measure beside this many single-thread CPU hogs (and alone, in the same run) instead: the training loop's
    median iteration time per update-thread policy."""
    iterations: int = 20
    """With --load: iterations measured per thread policy and load (after one unmeasured)."""
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


def benchmark_training(train_cfg: TrainConfig, reward_fn, seconds: float = 10.0, log=print,
                       loop_only: bool = False) -> dict:
    """Measure the three throughputs for `train_cfg` (see the module docstring); the training loop alone with
    `loop_only`. The update's threads are chosen as training chooses them (motionvl.rl.threads)."""
    import torch

    from motionvl.rl.estimator import estimator_training
    from motionvl.rl.trainer import build_runner, run_iteration, update_threads_for

    vec, runner = build_runner(train_cfg, reward_fn)
    estimator = estimator_training(runner, vec, train_cfg.ppo)
    env, N = vec.env, vec.num_envs
    chooser = update_threads_for(train_cfg)
    update_threads = chooser.max_threads if chooser else torch.get_num_threads()
    log(f"bench train: {N} envs, sim_dt {env.sim_dt} x {env.decimation}, {env.sim.num_threads} physics threads, "
        f"{torch.get_num_threads()} torch threads (up to {update_threads} in the update"
        f"{', chosen by its time' if chooser and chooser.adapt else ''}), device {runner.device}")

    raw_policy = env_sps = None
    if not loop_only:
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

    def iteration() -> None:
        threads = chooser.choose() if chooser else None
        info = run_iteration(runner, vec, threads, estimator)
        if chooser:
            chooser.record(threads, info["learn_s"])
        infos.append({**info, "update_threads": threads})

    iters, t = _timed(iteration, seconds, warmup=1)
    infos = infos[1:]
    collect, learn = sum(i["collect_s"] for i in infos), sum(i["learn_s"] for i in infos)
    train_sps = sum(i["steps"] for i in infos) / t
    log(f"  whole training loop: {train_sps:,.0f} policy steps/s over {iters} iterations "
        f"(rollout {collect / t:.0%}, PPO update {learn / t:.0%})")
    p = train_cfg.ppo
    return {
        "envs": N, "sim_dt": env.sim_dt, "decimation": env.decimation, "physics_threads": env.sim.num_threads,
        "torch_threads": torch.get_num_threads(), "update_torch_threads": update_threads,
        "update_threads_used": {n: sum(i["update_threads"] == n for i in infos)
                                for n in sorted({i["update_threads"] for i in infos if i["update_threads"]})},
        "device": str(runner.device),
        "raw_physics_steps_per_s": None if loop_only else round(raw_policy * env.decimation),
        "raw_policy_steps_per_s": None if loop_only else round(raw_policy),
        "env_steps_per_s": None if loop_only else round(env_sps), "train_steps_per_s": round(train_sps),
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


HOG_LEAD_S = 5.0
"""Seconds the hogs run before the first loaded measurement (the scheduler has settled by then)."""


def start_hogs(count: int) -> list:
    """`count` processes that each keep one core busy (a Python loop), in their own session."""
    import subprocess

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(count)]


def stop_hogs(hogs: list) -> None:
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.wait()


def benchmark_under_load(train_cfg: TrainConfig, reward_fn, load: int, iterations: int = 20, log=print) -> dict:
    """The training loop alone and beside `load` CPU hogs: per update-thread policy (each fixed count up to the
    config's, and the adaptive chooser), the median iteration, update and rollout seconds of `iterations`."""
    import statistics

    from motionvl.rl.estimator import estimator_training
    from motionvl.rl.threads import UpdateThreads
    from motionvl.rl.trainer import build_runner, run_iteration, update_thread_count

    vec, runner = build_runner(train_cfg, reward_fn)
    estimator = estimator_training(runner, vec, train_cfg.ppo)
    most = update_thread_count(train_cfg) or 1
    policies = [f"fixed-{n}" for n in range(1, most + 1)] + (["adaptive"] if most > 1 else [])
    log(f"bench train --load {load}: {vec.num_envs} envs, {vec.env.sim.num_threads} physics threads, update threads "
        f"{policies}, {iterations} iterations each, alone then beside {load} hogs")
    rows = []
    for hogs_count in sorted({0, load}):
        hogs = start_hogs(hogs_count)
        try:
            if hogs:
                time.sleep(HOG_LEAD_S)
            for policy in policies:
                chooser = UpdateThreads(most) if policy == "adaptive" else None
                fixed = None if chooser else int(policy.split("-")[1])
                infos, used = [], []
                for i in range(iterations + 1):
                    threads = chooser.choose() if chooser else fixed
                    info = run_iteration(runner, vec, threads, estimator)
                    if chooser:
                        chooser.record(threads, info["learn_s"])
                    if i:  # the first one after a change of policy is not measured
                        infos.append(info)
                        used.append(threads)
                iteration = [i["collect_s"] + i["learn_s"] for i in infos]
                row = {"hogs": hogs_count, "update_threads": policy,
                       "iteration_s": round(statistics.median(iteration), 3),
                       "mean_iteration_s": round(statistics.fmean(iteration), 3),
                       "update_s": round(statistics.median(i["learn_s"] for i in infos), 3),
                       "rollout_s": round(statistics.median(i["collect_s"] for i in infos), 3),
                       "steps_per_s": round(infos[0]["steps"] / statistics.median(iteration)),
                       "threads_used": {n: used.count(n) for n in sorted(set(used))}}
                rows.append(row)
                log(f"  {hogs_count} hogs, {policy:>9}: iteration {row['iteration_s']:.2f} s (mean "
                    f"{row['mean_iteration_s']:.2f}), update {row['update_s']:.2f} s, rollout {row['rollout_s']:.2f} s, "
                    f"{row['steps_per_s']:,} steps/s, threads {row['threads_used']}")
        finally:
            stop_hogs(hogs)

    def pick(hogs_count, policy):
        return next(r for r in rows if r["hogs"] == hogs_count and r["update_threads"] == policy)

    summary = {"rows": rows, "load": load, "envs": vec.num_envs, "physics_threads": vec.env.sim.num_threads}
    if "adaptive" in policies and load:
        best_loaded = min((pick(load, p) for p in policies if p != "adaptive"), key=lambda r: r["iteration_s"])
        best_idle = min((pick(0, p) for p in policies if p != "adaptive"), key=lambda r: r["iteration_s"])
        adaptive_idle, adaptive_loaded = pick(0, "adaptive"), pick(load, "adaptive")
        summary.update(
            loaded_over_idle=round(adaptive_loaded["iteration_s"] / adaptive_idle["iteration_s"], 2),
            vs_best_fixed_loaded=round(adaptive_loaded["iteration_s"] / best_loaded["iteration_s"], 3),
            best_fixed_loaded=best_loaded["update_threads"],
            vs_best_fixed_idle=round(adaptive_idle["iteration_s"] / best_idle["iteration_s"], 3),
            baseline_loaded_over_idle=round(pick(load, f"fixed-{most}")["iteration_s"]
                                            / pick(0, f"fixed-{most}")["iteration_s"], 2))
        log(f"  adaptive: loaded/idle {summary['loaded_over_idle']}x (fixed-{most}, the old default: "
            f"{summary['baseline_loaded_over_idle']}x); vs the best fixed count loaded {summary['vs_best_fixed_loaded']}, "
            f"idle {summary['vs_best_fixed_idle']}")
    return summary


SIDE_BY_SIDE_GOAL = 0.4
"""Each of two trainers side by side keeps at least this share of a lone trainer's steps/s."""


def benchmark_side_by_side(args: argparse.Namespace, a: TrainBenchArgs, log=print) -> dict:
    """`a.trainers` training loops side by side, each a `motionvl bench train --loop-only` process (on its share of
    the cores with `a.pin`), against one alone measured first; each one's steps/s as a share of the lone one's."""
    import json
    import subprocess

    from motionvl.rl.threads import cpu_shares, pinned

    passed = [f"--seconds={a.seconds}", "--loop-only"]
    for name in ("envs", "config", "reward", "physics_threads", "torch_threads", "update_torch_threads"):
        value = getattr(a, name)
        if value is not None:
            passed.append(f"--{name.replace('_', '-')}={value}")
    passed += [f"--set={item}" for item in a.set or ()]
    command = [sys.executable, "-m", "motionvl.cli", "bench", "train", *passed]

    def run(shares: list) -> list[dict]:
        procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  preexec_fn=pinned(cpus)) for cpus in shares]
        outs = [p.communicate()[0] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError(f"a side-by-side measurement failed: {command}")
        return [json.loads(out.strip().splitlines()[-1]) for out in outs]

    lone = run([None])[0]["train_steps_per_s"]
    log(f"bench train --trainers {a.trainers}: one alone {lone:,} steps/s")
    shares = cpu_shares(a.trainers) if a.pin else [None] * a.trainers
    results = run(shares)
    rows = [{"cpus": cpus, "steps_per_s": r["train_steps_per_s"], "share_of_lone": round(r["train_steps_per_s"] / lone, 3),
             "update_threads_used": r.get("update_threads_used")} for cpus, r in zip(shares, results)]
    for i, row in enumerate(rows):
        log(f"  trainer {i} on cpus {row['cpus'] or 'any'}: {row['steps_per_s']:,} steps/s, "
            f"{row['share_of_lone']:.0%} of one alone (update threads {row['update_threads_used']})")
    return {"trainers": a.trainers, "pin": a.pin, "lone_steps_per_s": lone, "side_by_side": rows,
            "total_share_of_lone": round(sum(r["share_of_lone"] for r in rows), 3),
            "goal_share_each": SIDE_BY_SIDE_GOAL,
            "meets_goal": all(r["share_of_lone"] >= SIDE_BY_SIDE_GOAL for r in rows)}


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
        if a.load < 0 or a.iterations < 1 or a.trainers < 1:
            raise ConfigError("--load must be >= 0, --iterations and --trainers >= 1")
        if a.trainers > 1 and a.load:
            raise ConfigError("--trainers and --load measure different things: give one")
        reward = load_reward_spec(a.reward)
        validate_spec(reward, env_cfg=cfg.env)  # a spec file may carry generated code: validated as training does
        # as training runs it: isolated or not, and its generated terms' cost per step bounded
        reward = bound_reward_cost(reward.with_isolation(a.reward_isolation == "process"), cfg)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"motionvl bench train: {exc}", file=sys.stderr, flush=True)
        return 2
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if a.trainers > 1:
        reward.close()
        return benchmark_side_by_side(args, a, log=log)
    try:
        if a.load:
            result = benchmark_under_load(cfg, reward, a.load, iterations=a.iterations, log=log)
        else:
            result = benchmark_training(cfg, reward, seconds=a.seconds, log=log, loop_only=a.loop_only)
    finally:
        reward.close()
    generated = sum(t.source == "generated" for t in reward.terms)
    return {**result, "overrides": list(a.set or ()), "generated_terms": generated,
            "reward_isolation": a.reward_isolation if generated else None}

"""How well a run's velocity estimator knows the speed it walks at, on flat and rough ground.

With `ppo.velocity_estimator` the actor feeds its policy MLP an estimate of the base velocity
(motionvl.rl.estimator). This script loads one checkpoint of RUN_DIR, exports its actor to ONNX,
drives the evaluation environment with that ONNX policy (randomised like the sweep's episodes, at
one fixed command) and, on the same observations, runs the checkpoint's estimator in torch. It
prints, per terrain, the mean true and estimated base velocity (body frame, m/s), the mean bias
(estimate - truth) and the root mean square error, over every policy step after the first second.
A policy that undershoots its command while its estimator overestimates the speed is being misled
by the estimate; an unbiased estimate puts the shortfall in the policy.

Each row also breaks the pace down by the episode's randomisation draws: the mean true and estimated
forward speed of the episodes that stay upright, per action-latency value (ms) and per third of the
ground-friction range, and the correlation of their speed with each draw. A policy whose pace moves
with a draw it cannot observe misses a distance goal at one end of that draw's range.

    .venv/bin/python bench/estimator_bias.py runs/est_s0 --iteration 3600 --command 0.6 0 0
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from motionvl.envs.config import RandomizationConfig
from motionvl.policy_io import PolicyContract
from motionvl.rewards.spec import load_reward_spec
from motionvl.rl.averaging import checkpoint_average
from motionvl.rl.config import TrainConfig
from motionvl.rl.evaluate import batch_evaluation_env
from motionvl.rl.export import PolicyExportWrapper, export_policy, load_policy
from motionvl.rl.trainer import build_runner
from motionvl.robot import load_robot_config
from policy_average_scan import saved_iterations  # bench/ is this script's directory

SETTLE_S = 1.0
"""Steps of the first second are left out: every episode starts standing."""


def measure(onnx_path: Path, wrapper: PolicyExportWrapper, terrain: str, command, episodes: int,
            seconds: float, seed: int, pushes: bool) -> dict:
    policy = load_policy(onnx_path)
    scale = policy.velocity_estimator["scale"]  # the estimate's units, as the export recorded them
    env = batch_evaluation_env(policy, seconds=seconds, terrain=terrain, episodes=episodes, command=command,
                               seed=seed, randomization=RandomizationConfig.for_evaluation(pushes))
    obs = env.observations()
    truth, estimate = [], []
    settle = int(round(SETTLE_S / env.dt))
    upright = np.ones(env.num_envs, dtype=bool)  # no fall yet: the episode's own steps, not a reset's
    pace = np.zeros((2, env.num_envs))  # per episode: summed true and estimated forward speed
    counted = np.zeros(env.num_envs)
    for step in range(int(round(seconds / env.dt))):
        with torch.no_grad():
            est = wrapper.estimator(wrapper.normalize(torch.as_tensor(obs, dtype=torch.float32))).numpy() / scale
        if step >= settle:
            truth.append(env.state.base_lin_vel.copy())
            estimate.append(est)
            pace += upright * np.stack([truth[-1][:, 0], est[:, 0]])
            counted += upright
        obs, _, terminated, truncated, _ = env.step(policy(obs))
        upright &= ~(np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool))
    truth, estimate = np.concatenate(truth).astype(float), np.concatenate(estimate).astype(float)
    error = estimate - truth
    draws = {"latency_ms": env.latency * env.sim_dt * 1000.0, "ground_friction": env.ground_friction,
             "gain_scale": env.gain_scale.mean(1), "joint_friction_scale": np.exp(np.log(env.joint_friction_scale).mean(1))}
    return {"terrain": terrain, "command": list(command), "episodes": episodes, "pushes": pushes,
            "true_velocity_mps": np.round(truth.mean(0), 4).tolist(),
            "estimated_velocity_mps": np.round(estimate.mean(0), 4).tolist(),
            "bias_mps": np.round(error.mean(0), 4).tolist(),
            "rmse_mps": np.round(np.sqrt((error ** 2).mean(0)), 4).tolist(),
            **pace_by_draw(pace[0][upright] / counted[upright], pace[1][upright] / counted[upright],
                           {k: v[upright] for k, v in draws.items()}, friction_range=env.cfg.randomization.friction_range)}


def pace_by_draw(speed: np.ndarray, estimated: np.ndarray, draws: dict, *, friction_range) -> dict:
    """Per-episode forward speed (true, estimated; m/s) grouped by the latency value and by thirds of
    `friction_range` (the env's RandomizationConfig range), and the correlation of the true speed with each
    draw (None where it is constant)."""
    def group(mask) -> dict:
        n = int(mask.sum())
        return {"episodes": n, "true_vx_mps": round(float(speed[mask].mean()), 4) if n else None,
                "estimated_vx_mps": round(float(estimated[mask].mean()), 4) if n else None}

    edges = np.linspace(*friction_range, 4)
    friction = draws["ground_friction"]
    by_friction = [{"ground_friction": [round(float(lo), 3), round(float(hi), 3)],
                    **group((friction >= lo) & ((friction < hi) | (i == 2)))}
                   for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:]))]
    by_latency = [{"latency_ms": round(float(v), 2), **group(np.isclose(draws["latency_ms"], v))}
                  for v in np.unique(np.round(draws["latency_ms"], 6))]

    def correlation(x: np.ndarray) -> float | None:
        if len(x) < 3 or np.ptp(x) == 0 or np.ptp(speed) == 0:
            return None
        return round(float(np.corrcoef(x, speed)[0, 1]), 3)

    return {"upright_episodes": int(len(speed)), "pace_by_latency": by_latency, "pace_by_ground_friction": by_friction,
            "speed_correlation": {k: correlation(np.asarray(v, dtype=float)) for k, v in draws.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="run directory trained with ppo.velocity_estimator")
    parser.add_argument("--iteration", type=int, default=None, help="checkpoint (default: the last saved)")
    parser.add_argument("--command", type=float, nargs=3, default=(0.6, 0.0, 0.0), metavar=("VX", "VY", "YAW"))
    parser.add_argument("--terrain", nargs="+", default=["flat", "rough"], choices=["flat", "rough"])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-push", action="store_true", help="randomise without the push at 8 s")
    parser.add_argument("--run-average", action="store_true",
                        help="the moving average the run kept in that checkpoint (what its policy.onnx exports) "
                             "instead of the iterate itself")
    args = parser.parse_args(argv)

    cfg = TrainConfig.from_yaml(args.run / "config.yaml")
    if not cfg.ppo.velocity_estimator:
        print(f"estimator_bias: {args.run} was trained without ppo.velocity_estimator", file=sys.stderr)
        return 2
    saved = saved_iterations(args.run)
    if not saved:
        print(f"estimator_bias: no checkpoints/model_<it>.pt in {args.run}", file=sys.stderr)
        return 2
    iteration = args.iteration if args.iteration is not None else saved[-1]
    checkpoint = args.run / "checkpoints" / f"model_{iteration}.pt"
    if not checkpoint.exists():
        print(f"estimator_bias: no {checkpoint}", file=sys.stderr)
        return 2
    cfg.env.num_envs = 1  # the runner only carries the actor here
    robot = load_robot_config()
    vec, runner = build_runner(cfg, load_reward_spec(args.run / "reward_spec.yaml"), robot)
    infos = runner.load(str(checkpoint), map_location="cpu")
    actor = runner.alg.get_policy()
    if args.run_average:
        kept = checkpoint_average(infos, actor)
        if kept is None:
            print(f"estimator_bias: {checkpoint.name} holds no moving average (policy_average_iterations 0)", file=sys.stderr)
            return 2
        actor = kept
    wrapper = PolicyExportWrapper(actor).eval()
    meta = PolicyContract.for_training(robot, cfg.env, gait_period=cfg.env.scheduled("gait_period_s", max(iteration - 1, 0)))
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = export_policy(actor, Path(tmp) / "policy.onnx", meta)
        for terrain in args.terrain:
            row = measure(onnx_path, wrapper, terrain, args.command, args.episodes, args.seconds,
                          args.seed, pushes=not args.no_push)
            print(json.dumps({"run": str(args.run), "iteration": iteration, "run_average": args.run_average, **row}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

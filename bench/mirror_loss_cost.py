"""What the mirror loss costs the PPO update: none, rsl_rl's, motionvl's lean one, one process.

Builds the trainer's runner from the training config with `ppo.mirror_loss_coeff` set, runs one
training iteration (its rollout stays in the storage), then times `alg.update()` on that same rollout (the storage is rewound before each call)
with the symmetry extension removed, with rsl_rl's `Symmetry` and with `LeanMirrorLoss`, in
interleaved rounds so that a machine's drift reaches all of them alike. Each update changes the
actor, so the variants see slightly different weights; the work per update does not depend on them.
Before timing, it checks on one mini-batch that both mirror losses give the same value and the
same actor gradient. The JSON last line holds the median seconds per update and the ratios.

    .venv/bin/python bench/mirror_loss_cost.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from motionvl.rewards.spec import load_reward_spec
from motionvl.rl.config import TrainConfig
from motionvl.rl.mirror_loss import LeanMirrorLoss, compare_with_rsl_rl, rsl_rl_mirror_loss
from motionvl.rl.trainer import build_runner, run_iteration, update_thread_count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed updates per variant (interleaved)")
    parser.add_argument("--coeff", type=float, default=1.0, help="ppo.mirror_loss_coeff")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="training-config override")
    args = parser.parse_args(argv)

    cfg = TrainConfig.from_yaml(None, overrides=[f"ppo.mirror_loss_coeff={args.coeff}", *args.set])
    cfg.validate()
    torch.manual_seed(0)
    vec, runner = build_runner(cfg, load_reward_spec(None))
    alg = runner.alg
    lean = alg.symmetry
    assert isinstance(lean, LeanMirrorLoss), "build_runner should install the lean mirror loss"
    reference = rsl_rl_mirror_loss(lean)
    run_iteration(runner, vec)  # one rollout and update; the rollout stays in the storage
    torch.set_num_threads(update_thread_count(cfg) or torch.get_num_threads())
    full = alg.storage.num_transitions_per_env
    agreement = compare_with_rsl_rl(lean, alg.actor, next(alg.storage.mini_batch_generator(alg.num_mini_batches, 1)))
    print(f"mirror loss {agreement['loss_rsl_rl']:.6g} (rsl_rl) vs {agreement['loss_lean']:.6g} (lean), "
          f"largest actor-gradient difference {agreement['max_abs_gradient_difference']:.2e}", file=sys.stderr)

    variants = {"no_mirror_loss": None, "rsl_rl_mirror_loss": reference, "lean_mirror_loss": lean}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.rounds + 1):  # the first round warms up and is dropped
        for name, symmetry in variants.items():
            alg.symmetry = symmetry
            alg.storage.step = full
            t0 = time.perf_counter()
            alg.update()
            times[name].append(time.perf_counter() - t0)
    median = {k: statistics.median(v[1:]) for k, v in times.items()}
    for k, v in median.items():
        print(f"  {k}: {v:.3f} s per update", file=sys.stderr)
    base = median["no_mirror_loss"]
    print(json.dumps({
        "envs": vec.num_envs, "num_steps_per_env": runner.cfg["num_steps_per_env"],
        "num_learning_epochs": alg.num_learning_epochs, "num_mini_batches": alg.num_mini_batches,
        "torch_threads": torch.get_num_threads(), "rounds": args.rounds,
        "seconds_per_update": {k: round(v, 4) for k, v in median.items()},
        "ratio_to_no_mirror_loss": {k: round(v / base, 3) for k, v in median.items()},
        "lean_vs_rsl_rl_extra_cost": round((median["lean_mirror_loss"] - base) / (median["rsl_rl_mirror_loss"] - base), 3),
        **agreement}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

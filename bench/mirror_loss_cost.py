"""What the mirror loss costs the PPO update: none, rsl_rl's, and motionvl's lean one, one process.

Builds the trainer's runner from the training config with `ppo.mirror_loss_coeff` set, collects one
rollout, then times `alg.update()` on that same rollout (the storage is rewound before each call)
with the symmetry extension removed, with rsl_rl's `Symmetry` and with `LeanMirrorLoss`, in
interleaved rounds so that a machine's drift reaches all three alike. Each update changes the
actor, so the three see slightly different weights; the work per update does not depend on them.
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
from rsl_rl.extensions import Symmetry

from motionvl.rewards.spec import load_reward_spec
from motionvl.rl.config import TrainConfig
from motionvl.rl.mirror_loss import LeanMirrorLoss
from motionvl.rl.trainer import build_runner, update_thread_count


def collect_rollout(runner, vec) -> None:
    alg = runner.alg
    alg.train_mode()
    obs = vec.get_observations()
    with torch.inference_mode():
        for _ in range(runner.cfg["num_steps_per_env"]):
            obs, rewards, dones, extras = vec.step(alg.act(obs))
            alg.process_env_step(obs, rewards, dones, extras)
        alg.compute_returns(obs)


def gradient_agreement(alg, reference: Symmetry, lean: LeanMirrorLoss) -> dict:
    """Both losses and their actor gradients on the first mini-batch of the stored rollout."""
    batch = next(alg.storage.mini_batch_generator(alg.num_mini_batches, 1))
    size = batch.observations.batch_size[0]
    results = {}
    for name, symmetry in (("lean", lean), ("reference", reference)):  # rsl_rl's replaces batch.observations
        alg.actor.zero_grad()
        loss = symmetry.compute_loss(alg.actor, batch, size)
        loss.backward()
        results[name] = (loss.item(), [p.grad.detach().clone() for p in alg.actor.parameters() if p.grad is not None])
    alg.actor.zero_grad()
    (lean_loss, lean_grad), (ref_loss, ref_grad) = results["lean"], results["reference"]
    assert len(lean_grad) == len(ref_grad) > 0
    return {"loss_reference": ref_loss, "loss_lean": lean_loss,
            "max_abs_gradient_difference": max(float((a - b).abs().max()) for a, b in zip(ref_grad, lean_grad))}


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
    reference = Symmetry(env=lean.env, data_augmentation_func=lean.data_augmentation_func,
                         use_mirror_loss=True, mirror_loss_coeff=lean.mirror_loss_coeff)
    collect_rollout(runner, vec)
    torch.set_num_threads(update_thread_count(cfg) or torch.get_num_threads())
    full = alg.storage.num_transitions_per_env
    agreement = gradient_agreement(alg, reference, lean)
    print(f"mirror loss {agreement['loss_reference']:.6g} (rsl_rl) vs {agreement['loss_lean']:.6g} (lean), "
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

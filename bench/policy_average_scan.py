"""Policy averaging after the fact: evaluate averages of a run's saved iterates against the last one.

For each target iteration IT of RUN_DIR, the actor weights saved in RUN_DIR/checkpoints are
averaged in two ways, exported to ONNX and evaluated like time_to_walk's confirmation episodes
(walk >= 5 m in 10 s at 0.6 m/s, randomised, 95 % interval), beside the iterate IT itself:

- `--horizons H,...`: the exponential moving average with time constant H iterations, exactly as
  training with `policy_average_iterations: H` exports it (motionvl.rl.averaging). It needs every
  iterate 1..IT on disk: train with `--set save_interval=1` (~0.5 MB kept per iteration).
- `--window K`: the plain mean of the last K saved checkpoints up to IT, for runs saved every 25
  iterations (the default save_interval).
- `--run-average`: the moving average the run itself kept, as saved in checkpoint IT: the policy.onnx
  the run would have exported had it stopped at IT (before held-out selection). It compares runs
  whose iterations cost different time at the same wall-clock minute.

The observation normaliser is the iterate IT's in every variant. Every variant is evaluated on
the same episodes, so the comparison is paired.

    .venv/bin/python bench/time_to_walk.py --minutes 10 --eval-every 10 --no-final --set save_interval=1 --out /tmp/r
    .venv/bin/python bench/policy_average_scan.py /tmp/r --horizons 5,10,30 --episodes 512
    .venv/bin/python bench/policy_average_scan.py runs/time_to_walk --iterations 768,1957 --window 4
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

import torch

from motionvl.policy_io import PolicyContract
from motionvl.rewards.spec import load_reward_spec
from motionvl.rl.averaging import PolicyAverage, checkpoint_average
from motionvl.rl.config import TrainConfig
from motionvl.rl.export import export_policy
from motionvl.rl.trainer import build_runner
from motionvl.robot import load_robot_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from time_to_walk import confirm_eval  # noqa: E402


def saved_iterations(run: Path) -> list[int]:
    found = (re.fullmatch(r"model_(\d+)\.pt", p.name) for p in (run / "checkpoints").glob("model_*.pt"))
    return sorted(int(m.group(1)) for m in found if m)


def checkpoint(run: Path, iteration: int) -> dict:
    return torch.load(run / "checkpoints" / f"model_{iteration}.pt", weights_only=False, map_location="cpu")


def actor_weights(run: Path, iteration: int) -> dict:
    return checkpoint(run, iteration)["actor_state_dict"]


class MovingAverages:
    """The EMAs of a run's iterates for several horizons, folded forward one saved iterate at a time,
    so that several target iterations (ascending) read each checkpoint once."""

    def __init__(self, run: Path, actor, horizons: list[float], saved: list[int]):
        self.run, self.actor, self.saved = run, actor, set(saved)
        self.averages = {f"{h:g}": PolicyAverage(actor, h) for h in horizons}
        self.done = 0

    def advance_to(self, target: int) -> None:
        missing = [i for i in range(self.done + 1, target + 1) if i not in self.saved]
        if missing:
            raise SystemExit(f"policy_average_scan: --horizons needs every iterate 1..{target} in {self.run}/checkpoints; "
                             f"{len(missing)} missing (first {missing[0]}). Train with --set save_interval=1, "
                             f"or use --window K")
        for i in range(self.done + 1, target + 1):
            self.actor.load_state_dict(actor_weights(self.run, i))
            for average in self.averages.values():
                average.update(self.actor)
        self.done = max(self.done, target)


def parse_horizons(text: str) -> list[float]:
    """"5,10,30" -> [5.0, 10.0, 30.0]: EMA time constants in iterations."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            out.append(float(item))
        except ValueError:
            raise SystemExit(f"policy_average_scan: --horizons item {item!r}: expected a number") from None
    return out


def variants(run: Path, actor, target: int, moving: MovingAverages, window: int, saved: list[int],
             run_average: bool = False):
    """(name, actor-like module) for the iterate `target` and each requested average."""
    if moving.averages:
        moving.advance_to(target)
    state = checkpoint(run, target)
    actor.load_state_dict(state["actor_state_dict"])
    yield "last iterate", actor
    if run_average:
        kept = checkpoint_average(state["infos"], actor)
        if kept is None:
            raise SystemExit(f"policy_average_scan: --run-average: model_{target}.pt holds no moving average "
                             f"(the run trained with policy_average_iterations 0)")
        yield "the run's own moving average", kept
    for name, average in moving.averages.items():
        yield f"moving average, {name} iterations", average.averaged_actor(actor)
    if window:
        its = [i for i in saved if i <= target][-window:]
        module = copy.deepcopy(actor)  # this actor never ran a training step: nothing in it refuses a copy
        weights = [actor_weights(run, i) for i in its]
        with torch.no_grad():
            for name, param in module.named_parameters():
                param.copy_(sum(w[name] for w in weights) / len(weights))
        yield f"mean of checkpoints {its[0]}..{its[-1]} ({len(its)})", module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a training run directory (checkpoints/model_<it>.pt)")
    parser.add_argument("--iterations", default=None, help="comma-separated target iterations, evaluated in ascending order (default: the last saved)")
    parser.add_argument("--horizons", default="", help="EMA time constants in iterations, comma-separated")
    parser.add_argument("--window", type=int, default=0, help="also the plain mean of the last K saved checkpoints")
    parser.add_argument("--run-average", action="store_true", help="also the moving average the run kept in checkpoint IT (its policy.onnx had it stopped there)")
    parser.add_argument("--episodes", type=int, default=512, help="randomised 10 s episodes per variant")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1, help="evaluation seed (episodes use seed+1000, ...)")
    parser.add_argument("--out", type=Path, default=None, help="where the ONNX files go (default RUN/average_scan)")
    args = parser.parse_args(argv)

    saved = saved_iterations(args.run)
    if not saved:
        print(f"policy_average_scan: no checkpoints/model_<it>.pt in {args.run}", file=sys.stderr)
        return 2
    targets = sorted(int(t) for t in args.iterations.split(",")) if args.iterations else [saved[-1]]
    horizons = parse_horizons(args.horizons)
    out = args.out or args.run / "average_scan"
    cfg = TrainConfig.from_yaml(args.run / "config.yaml")
    cfg.env.num_envs = 1  # the runner only carries the actor here
    robot = load_robot_config()
    vec, runner = build_runner(cfg, load_reward_spec(args.run / "reward_spec.yaml"), robot)
    actor = runner.alg.get_policy()
    moving = MovingAverages(args.run, actor, horizons, saved)
    rows = []
    for target in targets:
        if target not in saved:
            print(f"policy_average_scan: no checkpoint model_{target}.pt in {args.run}", file=sys.stderr)
            return 2
        # the period the checkpoint's last iteration trained at, as the trainer's own export writes it
        meta = PolicyContract.for_training(robot, cfg.env, gait_period=cfg.env.scheduled("gait_period_s", max(target - 1, 0)))
        for k, (name, module) in enumerate(variants(args.run, actor, target, moving, args.window, saved, args.run_average)):
            path = export_policy(module, out / f"it{target}_{k}.onnx", meta)
            row = {"iteration": target, "policy": name, "onnx": str(path),
                   **confirm_eval(path, args.episodes, args.seconds, args.seed)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| iteration | policy | walk >= 5 m (95% interval) | fell |\n|---|---|---|---|")
    for r in rows:
        lo, hi = r["walk_5m_ci95"]
        print(f"| {r['iteration']} | {r['policy']} | {r['walk_5m_fraction']:.1%} ({lo:.1%}-{hi:.1%}) | {r['fell_fraction']:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

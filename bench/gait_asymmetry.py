"""Left/right gait asymmetry of exported policies over many episodes (not a test).

The kinematic critic reports `gait_asymmetry` (0 = left and right identical in step length, stance
time, clearance and stance knee; see motionvl.gait.metrics) for the one rollout it watches.
One rollout cannot say whether a policy is lopsided or the episode was: this runs each policy on
one unrandomised episode and on `--episodes` randomised ones at the task command and prints, per
policy, one JSON line with the mean, median and 90th percentile of the per-episode asymmetry.

    .venv/bin/python bench/gait_asymmetry.py demo=out/demo/run/policy.onnx other=runs/x/policy.onnx
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from motionvl.gait.metrics import analyse_gait
from motionvl.rl.evaluate import evaluate


def asymmetry_summary(policy: str, *, episodes: int, randomize: bool, command, seconds: float, seed: int) -> dict:
    result = evaluate(policy, seconds=seconds, episodes=episodes, randomize=randomize, command=command, seed=seed,
                      return_trajectories=True)
    values = [analyse_gait(t).get("gait_asymmetry") for t in result["trajectories"]]
    measured = np.array([v for v in values if v is not None], dtype=float)
    summary = {"episodes": episodes, "measured_episodes": int(measured.size),
               "forward_distance_m": result["forward_distance_m"], "heading_error_deg": result["heading_error_deg"]}
    if measured.size:  # fewer than two touchdowns per side leaves an episode unmeasured
        summary.update(asymmetry_mean=round(float(measured.mean()), 3),
                       asymmetry_median=round(float(np.median(measured)), 3),
                       asymmetry_p90=round(float(np.percentile(measured, 90)), 3))
    return summary


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="+", metavar="LABEL=FILE.onnx", help="policies to measure")
    parser.add_argument("--episodes", type=int, default=64, help="randomised episodes per policy")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each episode")
    parser.add_argument("--command", type=float, nargs=3, default=(0.6, 0.0, 0.0), metavar=("VX", "VY", "YAW"))
    parser.add_argument("--seed", type=int, default=5, help="evaluation seed")
    args = parser.parse_args(argv)
    for item in args.policies:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            parser.error(f"expected LABEL=FILE.onnx, got {item!r}")
        common = {"command": tuple(args.command), "seconds": args.seconds, "seed": args.seed}
        print(json.dumps({"label": label, "policy": path,
                          "unrandomized": asymmetry_summary(path, episodes=1, randomize=False, **common),
                          "randomized": asymmetry_summary(path, episodes=args.episodes, randomize=True, **common)}),
              flush=True)


if __name__ == "__main__":
    main()

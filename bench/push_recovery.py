"""Push recovery map of exported policies: falls by push direction and gait phase (not a test).

Randomised evaluation pushes each episode once, 8 s after reset, which is always the same phase of
the gait clock. This moves that push over `--phases` points of one gait period on the same
randomised episodes and counts, per body-frame push direction (forward, left, backward, right) and
phase, the episodes that fall after it (motionvl.rl.push_recovery). Per policy it prints one JSON
line and, with --out, writes LABEL_push_recovery.png (the heatmap) and LABEL_push_recovery.json.

    .venv/bin/python bench/push_recovery.py demo=out/demo/run/policy.onnx --out out/push_recovery
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from motionvl.rl.push_recovery import plot_push_recovery, push_recovery_map


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="+", metavar="LABEL=FILE.onnx", help="policies to measure")
    parser.add_argument("--phases", type=int, default=8, help="push phases over one gait period")
    parser.add_argument("--episodes", type=int, default=128, help="randomised episodes per phase")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each episode")
    parser.add_argument("--command", type=float, nargs=3, default=(0.6, 0.0, 0.0), metavar=("VX", "VY", "YAW"))
    parser.add_argument("--seed", type=int, default=5, help="evaluation seed (5: the episodes of RESULTS' tables)")
    parser.add_argument("--out", type=Path, default=None, help="directory for the heatmaps and JSON files")
    args = parser.parse_args(argv)
    for item in args.policies:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            parser.error(f"expected LABEL=FILE.onnx, got {item!r}")
        result = push_recovery_map(path, phases=args.phases, episodes=args.episodes, seconds=args.seconds,
                                   command=tuple(args.command), seed=args.seed)
        result["label"] = label
        if args.out is not None:
            result["heatmap"] = str(plot_push_recovery(result, args.out / f"{label}_push_recovery.png",
                                                       title=f"{label}: falls after a push"))
            (args.out / f"{label}_push_recovery.json").write_text(json.dumps(result, indent=1))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

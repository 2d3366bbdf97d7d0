"""`motionvl bench loop`: the language loop's overhead, the share of its wall time not spent training.

Runs `motionvl train` at a preset with the offline backends (or reads a run) and splits the run's wall
time, from its ledger (motionvl.search.report.run_timing): PPO training inside the trainers, and the rest
(held-out evaluations, synthesis, validation, playback with rendering, critique, pairwise comparison, the
Table I episodes, trainer start-up, ROS traffic and waiting). Goal: overhead < 10 % of the wall time. A
quiet machine is needed for the figure. The run is resumable (rerun the same command), but a resumed run's
wall time includes the pause, so measure a run that went through in one go.

    motionvl bench loop --preset quick --out runs/bench_loop_quick
    motionvl bench loop --preset cpu --out runs/bench_loop_cpu
    motionvl bench loop --run runs/some_search          # a finished run's figures
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

GOAL = 0.10
"""Largest share of the loop's wall time not spent training."""
TASK = "walk forward with straight knees"


def loop_overhead(run_dir: Path) -> dict:
    """{wall_s, train_s, overhead_s, overhead_share, parts: {...}, finished, resumed_sessions} of a run."""
    from motionvl.search.ledger import Ledger
    from motionvl.search.report import run_timing

    ledger = Ledger(run_dir)
    timing = run_timing(ledger)
    wall, train = timing["wall_s"], timing["train_s"]
    parts = {k: v for k, v in timing.items() if k not in ("wall_s", "train_s")}
    parts["start-up, ROS and waiting"] = wall - train - sum(parts.values())
    resumed = sum(1 for r in ledger.records if r["kind"] == "run" and r["key"].startswith("resumed"))
    return {"run": str(run_dir), "wall_s": wall, "train_s": train, "overhead_s": wall - train,
            "overhead_share": (wall - train) / wall if wall else None, "goal_share": GOAL, "parts": parts,
            "finished": ledger.get("run", "finished") is not None, "resumed_sessions": resumed}


def add_loop_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="quick", help="search preset: quick, cpu, gpu (default quick)")
    parser.add_argument("--task", default=TASK)
    parser.add_argument("--settings", type=Path, default=None, help="search settings YAML laid over the preset")
    parser.add_argument("--out", type=Path, default=None, help="run directory (default runs/bench_loop_<preset>)")
    parser.add_argument("--run", type=Path, default=None, help="only read this run")
    parser.add_argument("--no-ros", action="store_true", help="measure the search without the ROS graph")


def run_loop_benchmark(args: argparse.Namespace) -> dict | int:
    run_dir = args.run or args.out or Path(f"runs/bench_loop_{args.preset}")
    if args.run is None:
        cmd = [sys.executable, "-m", "motionvl.cli", "train", "--out", str(run_dir), "--no-progress"]
        if (run_dir / "ledger.jsonl").exists():
            cmd.append("--resume")
        else:
            cmd += ["--task", args.task, "--preset", args.preset] + (["--settings", str(args.settings)] if args.settings else [])
        cmd += ["--no-ros"] if args.no_ros else []
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    figures = loop_overhead(run_dir)
    share = figures["overhead_share"]
    if not figures["finished"] or not share:
        print(f"{run_dir}: the run has not finished (rerun without --run to continue it): no figure", file=sys.stderr)
        return 1
    (run_dir / "overhead.json").write_text(json.dumps(figures, indent=1))
    if figures["resumed_sessions"]:
        print(f"note: the run was resumed {figures['resumed_sessions']} time(s): its wall time includes the pauses")
    print(f"wall {figures['wall_s']:.0f} s, training {figures['train_s']:.0f} s, overhead {figures['overhead_s']:.0f} s = "
          f"{100 * share:.1f}% (goal < {100 * GOAL:.0f}%: {'met' if share < GOAL else 'missed'})")
    for part, seconds in figures["parts"].items():
        print(f"  {part:<28} {seconds:8.1f} s  {100 * seconds / figures['wall_s']:5.1f}%")
    return figures

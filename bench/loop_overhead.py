"""Loop overhead of the language loop: the share of its wall time not spent training.

Runs `motionvl train` at a preset with the offline backends (or reads a finished run) and splits the
run's wall time, from its ledger: PPO training inside the trainers, and the rest (the held-out
evaluations, synthesis, validation, playback with rendering, critique, pairwise comparison, trainer
start-up, ROS traffic, waiting). Goal: overhead < 10 % of the wall time. A quiet machine is needed for
the figure; the run itself is resumable (rerun the same command), but a resumed run's wall time
includes the pause, so measure a run that went through in one go.

    .venv/bin/python bench/loop_overhead.py --preset quick --out runs/bench_overhead_quick
    .venv/bin/python bench/loop_overhead.py --preset cpu --out runs/bench_overhead_cpu
    .venv/bin/python bench/loop_overhead.py --run runs/some_search          # an existing run's figures
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

GOAL = 0.10


def overhead(run_dir: Path) -> dict:
    """{wall_s, train_s, overhead_s, overhead_share, parts: {...}} of a run, from its ledger."""
    from motionvl.search.ledger import Ledger
    from motionvl.search.report import run_timing

    ledger = Ledger(run_dir)
    timing = run_timing(ledger)
    wall, train = timing["wall_s"], timing["train_s"]
    parts = {k: v for k, v in timing.items() if k not in ("wall_s", "train_s")}
    parts["start-up, ROS and waiting"] = wall - train - sum(parts.values())
    resumed = sum(1 for r in ledger.records if r["kind"] == "run" and r["key"].startswith("resumed"))
    return {"wall_s": wall, "train_s": train, "overhead_s": wall - train,
            "overhead_share": (wall - train) / wall if wall else None, "parts": parts,
            "finished": ledger.get("run", "finished") is not None, "resumed_sessions": resumed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--task", default="walk forward with straight knees")
    parser.add_argument("--settings", type=Path, default=None, help="search settings YAML laid over the preset")
    parser.add_argument("--out", type=Path, default=None, help="run directory (default runs/bench_overhead_<preset>)")
    parser.add_argument("--run", type=Path, default=None, help="only read this finished run")
    parser.add_argument("--no-ros", action="store_true", help="measure the search without the ROS graph")
    args = parser.parse_args(argv)
    run_dir = args.run or args.out or Path(f"runs/bench_overhead_{args.preset}")
    if args.run is None:
        cmd = [sys.executable, "-m", "motionvl.cli", "train", "--out", str(run_dir), "--no-progress"]
        if (run_dir / "ledger.jsonl").exists():
            cmd.append("--resume")
        else:
            cmd += ["--task", args.task, "--preset", args.preset] + (["--settings", str(args.settings)] if args.settings else [])
        cmd += ["--no-ros"] if args.no_ros else []
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    figures = overhead(run_dir)
    (run_dir / "overhead.json").write_text(json.dumps(figures, indent=1))
    share = figures["overhead_share"]
    print(f"wall {figures['wall_s']:.0f} s, training {figures['train_s']:.0f} s, overhead {figures['overhead_s']:.0f} s = "
          f"{100 * share:.1f}% (goal < {100 * GOAL:.0f}%: {'met' if share < GOAL else 'missed'})")
    for part, seconds in figures["parts"].items():
        print(f"  {part:<28} {seconds:8.1f} s  {100 * seconds / figures['wall_s']:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

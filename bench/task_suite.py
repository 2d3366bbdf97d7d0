"""Task suite: the language loop against its start reward on eleven task sentences, at equal PPO iterations.

For each task (its command, terrain and success criterion read from the sentence by motionvl.task) and seed:
the full loop (`motionvl train`, offline backends by default) on the task, then its start reward (the shipped
reference where it fits, else the task's category-(ii) start the loop recorded) trained for as many PPO
iterations as the loop trained in all, with the same command distribution, env settings and terrain (the
loop's recorded training overrides), continuing the loop's own start run. Both exported policies are
evaluated on the same held-out randomised episodes (pushes, friction, gains, latency; ONNX Runtime at the
robot's 500 Hz PD rate) at the task's command on its terrain, judged by its criterion, and each task's
named measure is compared with its goal (issue 90):

    style (straight knees, high steps, upright torso): success >= 90 %, the measure >= 30 % better than the
        base's and by >= 3 deg (knees, torso pitch) or >= 2 cm (swing clearance)
    speed ("slowly", "at 0.9 m/s"): mean speed along the command within 15 % of the asked
    backward, sideways: success >= 80 %;      uneven ground: success >= 90 %
    turning in place: mean yaw rate within 20 % of the asked, drift < 0.1 m/s (push-free seconds)
    standing: no fall in any pushed episode and both feet in contact >= 90 % of the time
    stairs: success >= 70 % on held-out steps at a fixed level (--stairs-level: the level of 10 cm steps),
        and the terrain level training reached

Resumable: every step's result lands in OUT/results.json as it finishes, a loop resumes from its ledger and a
base run from its checkpoint, so the benchmark can run in pieces (rerun the same command; `--tasks` picks some).
With --second-seed a task whose first seed lands within 10 points of its goal gets seed 1 as well. Prints one
table (markdown, for bench/RESULTS.md) with iterations and wall time per task.

    .venv/bin/python bench/task_suite.py --preset quick --out runs/bench_task_suite
    .venv/bin/python bench/task_suite.py --preset quick --out runs/bench_task_suite --second-seed
    .venv/bin/python bench/task_suite.py --preset cpu --tasks stairs --stairs-level 4 --out runs/bench_stairs
    .venv/bin/python bench/task_suite.py --tasks turn,stand --settings tests/data/search_tiny.yaml \\
        --episodes 2 --seconds 1 --out /tmp/suite      # a tiny proof that the pieces fit (not a measurement)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

# name -> (sentence, kind of goal, measure key)
SUITE = {
    "straight_knees": ("walk forward with straight knees", "style", "knee_angle_stance_deg"),
    "high_steps": ("walk forward with high steps", "style", "swing_clearance_cm"),
    "upright_torso": ("walk forward with an upright torso", "style", "abs_torso_pitch_deg"),
    "slow": ("walk forward slowly", "speed", "mean_speed_mps"),
    "fast": ("walk forward at 0.9 m/s", "speed", "mean_speed_mps"),
    "backward": ("walk backward", "success80", "success_rate"),
    "sideways": ("walk sideways to the left", "success80", "success_rate"),
    "turn": ("turn left in place", "turn", "yaw_rate_error_rel"),
    "stand": ("stand still", "stand", "double_support_fraction"),
    "uneven": ("walk forward on uneven ground", "success90", "success_rate"),
    "stairs": ("climb the stairs", "stairs", "success_rate"),
}
STYLE = {"knee_angle_stance_deg": ("lower", 3.0, "deg"), "swing_clearance_cm": ("higher", 2.0, "cm"),
         "abs_torso_pitch_deg": ("lower", 3.0, "deg")}
SECONDS = 10.0


def _save(path: Path, results: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=float))
    os.replace(tmp, path)


def loop_iterations(run_dir: Path) -> int:
    """PPO iterations the loop trained, summed over its runs (each run's history: one line per iteration)."""
    total = 0
    for history in sorted((run_dir / "candidates").glob("*/history.jsonl")):
        total += sum(1 for line in history.read_text().splitlines() if line.strip())
    return total


def terrain_level_reached(run_dir: Path) -> float | None:
    """The last terrain curriculum level a run's history logged (None where training logged none)."""
    history = run_dir / "history.jsonl"
    if not history.exists():
        return None
    levels = [json.loads(line).get("terrain_level") for line in history.read_text().splitlines() if line.strip()]
    levels = [v for v in levels if isinstance(v, (int, float))]
    return float(levels[-1]) if levels else None


def run_loop(args, sentence: str, seed: int, run_dir: Path) -> None:
    cmd = [sys.executable, "-m", "motionvl.cli", "train", "--out", str(run_dir), "--no-progress", "--no-render",
           "--namespace", f"suite_{run_dir.parent.name}"]  # pieces of the suite may run side by side on one domain
    if (run_dir / "ledger.jsonl").exists():
        cmd.append("--resume")
    else:
        cmd += ["--task", sentence, "--preset", args.preset, "--mode", args.mode, "--set", f"seed={seed}"]
        if args.settings:
            cmd += ["--settings", str(args.settings)]
    if args.no_ros:  # a resumed piece runs the way it was asked to, like the rest of the suite
        cmd.append("--no-ros")
    print(f"[{run_dir.parent.name}] loop: {' '.join(cmd)}", flush=True)
    code = subprocess.run(cmd).returncode
    if code != 0:
        raise RuntimeError(f"the loop ended with exit status {code}; run the same command to resume")


def run_base(args, loop_dir: Path, run_dir: Path, iterations: int) -> tuple[Path, float]:
    """The loop's start reward trained for `iterations` PPO iterations as the loop's runs were (its recorded
    training overrides: seed, task command share, env settings, terrain), continuing the loop's start run."""
    from motionvl.rewards.spec import RewardSpec
    from motionvl.rl.config import TrainConfig
    from motionvl.rl.trainer import train_policy
    from motionvl.search.ledger import Ledger
    from motionvl.search.loop import recorded_training_overrides

    ledger = Ledger(loop_dir)
    settings, start = ledger.get("run", "settings"), ledger.get("start", "start")
    cfg = TrainConfig.from_yaml(settings.get("train_config") or None,
                                overrides=tuple(recorded_training_overrides(loop_dir)))
    spec = RewardSpec.from_dict(start["spec"], where="the loop's start")
    resume = (run_dir / "checkpoints" / "latest.pt").exists()
    first = loop_dir / "candidates" / (start.get("candidate") or "start")
    if not resume and (first / "checkpoints" / "latest.pt").exists():
        shutil.copytree(first, run_dir, ignore=shutil.ignore_patterns("playback", "outcome.json"), dirs_exist_ok=True)
        resume = True
    print(f"[{run_dir.parent.name}] base: {spec.name} for {iterations} iterations -> {run_dir}", flush=True)
    t0 = time.monotonic()
    result = train_policy(run_dir, spec, cfg, minutes=1e6, max_iterations=iterations, resume=resume,
                          progress=not args.no_progress)
    return result.policy_path, time.monotonic() - t0


def measure(policy: Path, task, args, *, terrain_level: int | None = None) -> dict:
    """Reward-free evaluation at the task's command, terrain and criterion (randomised, pushes), with the named
    measures."""
    from motionvl.rl.evaluate import evaluate

    ev = evaluate(policy, seconds=args.seconds, episodes=args.episodes, randomize=True, command=task.command,
                  criterion=task.criterion, terrain=task.terrain, terrain_level=terrain_level, seed=args.eval_seed,
                  return_trajectories=True)
    episodes = ev.pop("per_episode")
    ev.pop("trajectories")
    keys = ("success_rate", "fell_fraction", "task_score", "forward_distance_m", "mean_speed_mps",
            "knee_angle_stance_deg", "torso_pitch_deg", "swing_clearance_m", "drift_mps", "yaw_rate_steady_rps",
            "double_support_fraction", "stance_slip_mps")
    out = {k: ev.get(k) for k in keys}
    pitches = [abs(e["torso_pitch_deg"]) for e in episodes if math.isfinite(e.get("torso_pitch_deg", math.nan))]
    out["abs_torso_pitch_deg"] = sum(pitches) / len(pitches) if pitches else None
    out["swing_clearance_cm"] = None if out["swing_clearance_m"] is None else 100 * out["swing_clearance_m"]
    yaw = task.command[2]
    rate = out["yaw_rate_steady_rps"]
    out["yaw_rate_error_rel"] = abs(rate - yaw) / abs(yaw) if rate is not None and abs(yaw) > 1e-9 else None
    out["episodes"] = len(episodes)
    out["falls"] = sum(bool(e["fell"]) for e in episodes)
    return out


def verdict(kind: str, key: str, task, loop: dict, base: dict) -> dict:
    """{met, figure, goal, near (within 10 points of the goal), text} for the loop's figures."""
    pct = lambda v: None if v is None else 100.0 * v  # noqa: E731
    success = pct(loop["success_rate"]) or 0.0
    if kind == "style":
        way, least, unit = STYLE[key]
        lo, bo = loop.get(key), base.get(key)
        if lo is None or bo is None or not bo:
            return {"met": False, "near": False, "figure": None, "goal": 30.0, "text": f"{key} not measured"}
        better = (bo - lo) if way == "lower" else (lo - bo)
        rel = 100.0 * better / abs(bo)
        met = rel >= 30.0 and better >= least and success >= 90.0
        near = abs(rel - 30.0) <= 10.0 or abs(success - 90.0) <= 10.0
        return {"met": met, "near": near, "figure": rel, "goal": 30.0,
                "text": f"{key} {bo:.1f} -> {lo:.1f} {unit} ({rel:+.0f}% better; goal >= 30% and {least:g} {unit}), "
                        f"success {success:.0f}% (goal >= 90%)"}
    if kind == "speed":
        asked = math.hypot(*task.command[:2])
        off = 100.0 * abs((loop["mean_speed_mps"] or 0.0) - asked) / asked
        return {"met": off <= 15.0, "near": abs(off - 15.0) <= 10.0, "figure": off, "goal": 15.0,
                "text": f"speed {loop['mean_speed_mps'] or 0.0:.3f} m/s for {asked:.2f} asked ({off:.0f}% off; goal within 15%)"}
    if kind == "turn":
        err = pct(loop["yaw_rate_error_rel"])
        drift = loop["drift_mps"]
        met = err is not None and err <= 20.0 and drift is not None and drift < 0.1
        return {"met": met, "near": err is not None and abs(err - 20.0) <= 10.0, "figure": err, "goal": 20.0,
                "text": f"yaw rate {loop['yaw_rate_steady_rps'] or 0.0:.3f} rad/s for {task.command[2]:+.2f} ("
                        f"{'-' if err is None else format(err, '.1f')}% off; goal within 20%), drift "
                        f"{'-' if drift is None else format(drift, '.3f')} m/s (goal < 0.1)"}
    if kind == "stand":
        contact = pct(loop["double_support_fraction"]) or 0.0
        met = loop["falls"] == 0 and contact >= 90.0
        return {"met": met, "near": abs(contact - 90.0) <= 10.0, "figure": contact, "goal": 90.0,
                "text": f"{loop['falls']} of {loop['episodes']} pushed episodes fell (goal none), both feet down "
                        f"{contact:.0f}% of the time (goal >= 90%)"}
    goal = {"success80": 80.0, "success90": 90.0, "stairs": 70.0}[kind]
    return {"met": success >= goal, "near": abs(success - goal) <= 10.0, "figure": success, "goal": goal,
            "text": f"success {success:.0f}% (goal >= {goal:.0f}%)"}


def run_task(args, name: str, seed: int, results: dict, path: Path) -> dict:
    from motionvl.search.ledger import Ledger
    from motionvl.search.report import run_timing
    from motionvl.task import make_task

    sentence, kind, key = SUITE[name]
    entry = results["tasks"].setdefault(name, {"sentence": sentence, "seeds": {}})["seeds"].setdefault(str(seed), {})
    entry.pop("skipped", None)  # a task refused before (a terrain not yet built) is tried again
    task = make_task(sentence)
    folder = args.out / f"{name}_seed{seed}"
    loop_dir, base_dir = folder / "loop", folder / "base"
    ledger = Ledger(loop_dir) if (loop_dir / "ledger.jsonl").exists() else None
    if ledger is None or ledger.get("run", "finished") is None:
        try:
            run_loop(args, sentence, seed, loop_dir)
        except RuntimeError:
            if ledger is None and not (loop_dir / "ledger.jsonl").exists():  # refused before anything ran
                entry["skipped"] = "motionvl train refused the task (its message above); not run"
                _save(path, results)
                return entry
            raise
        ledger = Ledger(loop_dir)
    finished = ledger.get("run", "finished")
    entry.update(label=finished["label"], iterations=loop_iterations(loop_dir),
                 start=(ledger.get("start", "start") or {}).get("origin"),
                 loop_wall_s=round(run_timing(ledger)["wall_s"], 1))
    level = args.stairs_level if task.terrain.startswith("stairs") else task.terrain_level
    if "loop" not in entry:
        entry["loop"] = measure(loop_dir / "policy.onnx", task, args, terrain_level=level)
        entry["loop"]["terrain_level_reached"] = terrain_level_reached(loop_dir / "candidates" / "final")
        _save(path, results)
    if "base" not in entry:
        policy, wall = run_base(args, loop_dir, base_dir, entry["iterations"])
        entry["base"] = measure(policy, task, args, terrain_level=level)
        entry["base"]["terrain_level_reached"] = terrain_level_reached(base_dir)
        entry["base_wall_s"] = round(wall, 1)
        _save(path, results)
    entry["verdict"] = verdict(kind, key, task, entry["loop"], entry["base"])
    _save(path, results)
    print(f"[{name} seed {seed}] {'met' if entry['verdict']['met'] else 'missed'}: {entry['verdict']['text']}",
          flush=True)
    return entry


def table(results: dict) -> str:
    head = ["task", "seed", "start", "PPO iterations", "wall (loop / base, min)", "success loop / base",
            "measure loop / base", "goal", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = lambda v, f=".3g": "-" if v is None else format(v, f)  # noqa: E731
    for name, task in results["tasks"].items():
        key = SUITE.get(name, ("", "", ""))[2]
        for seed, e in sorted(task["seeds"].items()):
            if e.get("skipped"):
                lines.append(f"| {task['sentence']} | {seed} | - | - | - | - | - | {e['skipped']} | - |")
                continue
            if "verdict" not in e:
                continue
            lo, bo = e["loop"], e["base"]
            lines.append("| " + " | ".join([
                task["sentence"], seed, str(e.get("start")), str(e.get("iterations")),
                f"{fmt(e.get('loop_wall_s', 0) / 60, '.1f')} / {fmt(e.get('base_wall_s', 0) / 60, '.1f')}",
                f"{fmt(100 * lo['success_rate'], '.1f')}% / {fmt(100 * bo['success_rate'], '.1f')}%",
                f"{key} {fmt(lo.get(key))} / {fmt(bo.get(key))}", e["verdict"]["text"],
                "yes" if e["verdict"]["met"] else "no"]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(SUITE), help=f"comma-separated names of {list(SUITE)}")
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--mode", default="synth+critic")
    parser.add_argument("--seeds", default="0", help="seeds every task runs (default 0)")
    parser.add_argument("--second-seed", action="store_true",
                        help="also seed 1 for each task whose first seed landed within 10 points of its goal")
    parser.add_argument("--settings", type=Path, default=None, help="search settings YAML laid over the preset")
    parser.add_argument("--episodes", type=int, default=64, help="held-out evaluation episodes per policy")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="length of each evaluation episode")
    parser.add_argument("--eval-seed", type=int, default=20000, help="seed of the held-out episodes")
    parser.add_argument("--stairs-level", type=int, default=None,
                        help="the fixed terrain level stairs are evaluated at (the level of 10 cm steps)")
    parser.add_argument("--no-ros", action="store_true", help="run each loop without ROS (motionvl train --no-ros)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_task_suite"))
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.tasks.split(",") if n.strip()]
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        parser.error(f"unknown tasks {unknown}; tasks: {list(SUITE)}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {"preset": args.preset, "tasks": {}}
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    failed = []
    for name in names:
        for seed in seeds:
            try:
                entry = run_task(args, name, seed, results, path)
            except (RuntimeError, OSError, ValueError) as exc:  # one task's failure does not stop the suite
                failed.append(f"{name} seed {seed}: {exc}")
                print(f"[{name} seed {seed}] failed: {exc}", file=sys.stderr, flush=True)
                continue
            if args.second_seed and seed == seeds[0] and (entry.get("verdict") or {}).get("near") and 1 not in seeds:
                try:
                    run_task(args, name, 1, results, path)
                except (RuntimeError, OSError, ValueError) as exc:
                    failed.append(f"{name} seed 1: {exc}")
    print(table(results))
    if failed:
        print("failed (rerun the same command to resume): " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

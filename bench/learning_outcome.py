"""Learning outcome of the language loop: the search against the reference reward alone at equal PPO iterations.

For each seed: the full loop (`motionvl train`, offline backends by default) on the task, then the
reference reward (RL-Base) trained for as many PPO iterations as the loop trained, summed over every
run it made (start, every candidate, the final training). The loop's start is the reference reward's
first iterations, so the base resumes a copy of it rather than training them again. Both exported policies are
evaluated on the same held-out randomised episodes (ONNX Runtime, the robot's 500 Hz PD rate, pushes)
at 0.6 m/s for 10 s. Goals: mean stance knee flexion at least 30 % lower than the base's, forward speed
within 10 % of the base's, success rate (walk >= 5 m in 10 s without a fall) at least 90 %.
Prints the goals per seed and a table in the layout of the paper's Table I (per-term episode rewards,
each term at weight 1, and task scores), and writes OUT/results.json.

Resumable: every step's result lands in OUT/results.json as it finishes, a loop run resumes from its
ledger and a base run from its checkpoint, so the benchmark can run in pieces (rerun the same command).

    .venv/bin/python bench/learning_outcome.py --preset quick --seeds 0,1,2 --out runs/bench_outcome
    .venv/bin/python bench/learning_outcome.py --preset quick --seeds 0 --out /tmp/o --settings tiny.yaml \\
        --episodes 8      # a tiny proof that the pieces fit (not a measurement)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

TASK = "walk forward with straight knees"
COMMAND = (0.6, 0.0, 0.0)
SECONDS = 10.0
SUCCESS_M = 5.0
GOALS = {"knee_reduction": 0.30, "speed_tolerance": 0.10, "min_success": 0.90}


def loop_iterations(run_dir: Path) -> int:
    """PPO iterations the loop trained, summed over its runs (each run's history: one line per iteration)."""
    total = 0
    for history in sorted((run_dir / "candidates").glob("*/history.jsonl")):
        total += sum(1 for line in history.read_text().splitlines() if line.strip())
    return total


def _save(path: Path, results: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=float))
    os.replace(tmp, path)


def run_loop(args, seed: int, run_dir: Path) -> None:
    # no rendering: the kinematic critic judges the playback's trajectory, frames only feed the report
    cmd = [sys.executable, "-m", "motionvl.cli", "train", "--out", str(run_dir), "--no-progress", "--no-render"]
    if (run_dir / "ledger.jsonl").exists():
        cmd.append("--resume")
    else:
        cmd += ["--task", args.task, "--preset", args.preset, "--mode", args.mode, "--set", f"seed={seed}"]
        if args.settings:
            cmd += ["--settings", str(args.settings)]
    print(f"[seed {seed}] loop: {' '.join(cmd)}", flush=True)
    code = subprocess.run(cmd).returncode
    if code != 0:  # 130: stopped by Ctrl-C, resumable; the loop printed its own reason either way
        raise SystemExit(f"[seed {seed}] the loop ended with exit status {code}; run the same command to resume")


def run_base(args, seed: int, run_dir: Path, iterations: int, loop_dir: Path) -> Path:
    """The reference reward from scratch for `iterations` PPO iterations, trained as the loop's runs were
    (its training YAML, seed, environments and the preset's overrides)."""
    from motionvl.rewards.spec import load_reward_spec
    from motionvl.rl.config import TrainConfig
    from motionvl.rl.trainer import train_policy
    from motionvl.search.ledger import Ledger
    from motionvl.search.loop import recorded_training_overrides

    settings = Ledger(loop_dir).get("run", "settings")
    cfg = TrainConfig.from_yaml(settings.get("train_config") or None,
                                overrides=tuple(recorded_training_overrides(loop_dir)))
    spec = load_reward_spec(settings["reference_spec"]) if settings.get("reference_spec") else None
    resume = (run_dir / "checkpoints" / "latest.pt").exists()
    start = loop_dir / "candidates" / "start"
    if not resume and (start / "checkpoints" / "latest.pt").exists():
        # the loop's start is the reference reward's first base_iterations: the base goes on from there
        shutil.copytree(start, run_dir, ignore=shutil.ignore_patterns("playback", "outcome.json"), dirs_exist_ok=True)
        resume = True
    print(f"[seed {seed}] base: the reference reward for {iterations} iterations -> {run_dir}", flush=True)
    result = train_policy(run_dir, spec, cfg, minutes=1e6, max_iterations=iterations, resume=resume,
                          progress=not args.no_progress)
    return result.policy_path


def measure(policy: Path, spec, args) -> dict:
    """Reward-free evaluation (as `motionvl eval`, randomised, with pushes) and per-term episode rewards."""
    from motionvl.rl.evaluate import evaluate
    from motionvl.search.config import EvaluationConfig
    from motionvl.search.table import episode_term_rewards

    ev = evaluate(policy, seconds=SECONDS, episodes=args.episodes, randomize=True, command=COMMAND, seed=args.eval_seed,
                  return_trajectories=True)
    episodes = ev.pop("per_episode")
    ev.pop("trajectories")
    keys = ("success_rate", "fell_fraction", "task_score", "forward_distance_m", "mean_speed_mps",
            "knee_angle_stance_deg", "torso_pitch_deg", "step_frequency_hz", "swing_clearance_m", "stance_slip_mps")
    figures = {k: ev.get(k) for k in keys}
    # the success: >= 5 m of the 10 s at 0.6 m/s without a fall (success_rate asks 90 % of 6 m)
    figures["success_5m_rate"] = sum((not e["fell"]) and e["forward_distance_m"] >= SUCCESS_M for e in episodes) / len(episodes)
    terms = episode_term_rewards(policy, spec, EvaluationConfig(episodes=args.episodes, seconds=SECONDS,
                                                                 seed=args.eval_seed, training_physics=False),
                                 command=COMMAND)
    return {"evaluation": figures, "terms": terms}


def verdict(loop: dict, base: dict) -> dict:
    lk, bk = loop["knee_angle_stance_deg"], base["knee_angle_stance_deg"]
    ls, bs = loop["mean_speed_mps"], base["mean_speed_mps"]
    reduction = (bk - lk) / bk if bk else None
    speed_change = (ls - bs) / bs if bs else None
    return {"knee_reduction": reduction, "speed_change": speed_change, "success": loop["success_5m_rate"],
            "knee_met": reduction is not None and reduction >= GOALS["knee_reduction"],
            "speed_met": speed_change is not None and abs(speed_change) <= GOALS["speed_tolerance"],
            "success_met": loop["success_5m_rate"] >= GOALS["min_success"]}


def table(results: dict) -> str:
    terms: list[str] = []
    for seed in results["seeds"].values():
        for side in ("base", "loop"):
            terms += [t for t in (seed.get(side) or {}).get("terms", {}) if t not in terms]
    head = ["seed", "method", "PPO iterations", *terms, "task score", "success (>= 5 m)", "speed (m/s)",
            "stance knee (deg)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = lambda v, f=".3f": "-" if v is None else format(v, f)  # noqa: E731
    for s, seed in sorted(results["seeds"].items()):
        for side, label in (("base", "RL-Base"), ("loop", seed.get("label", "loop"))):
            row = seed.get(side)
            if not row:
                continue
            ev = row["evaluation"]
            lines.append("| " + " | ".join([s, label, str(seed.get("iterations", "-")),
                                             *[fmt(row["terms"].get(t)) for t in terms], fmt(ev["task_score"]),
                                             fmt(100 * ev["success_5m_rate"], ".1f") + "%", fmt(ev["mean_speed_mps"]),
                                             fmt(ev["knee_angle_stance_deg"], ".1f")]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=TASK)
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--mode", default="synth+critic")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--settings", type=Path, default=None, help="search settings YAML laid over the preset")
    parser.add_argument("--episodes", type=int, default=256, help="held-out evaluation episodes per policy")
    parser.add_argument("--eval-seed", type=int, default=20000, help="seed of the held-out episodes")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_outcome"))
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    from motionvl.rewards.spec import load_reward_spec
    from motionvl.search.ledger import Ledger
    from motionvl.search.table import table_spec

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {"task": args.task, "preset": args.preset, "seeds": {}}
    for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
        entry = results["seeds"].setdefault(str(seed), {})
        loop_dir, base_dir = args.out / f"loop_seed{seed}", args.out / f"base_seed{seed}"
        ledger = Ledger(loop_dir) if (loop_dir / "ledger.jsonl").exists() else None
        if ledger is None or ledger.get("run", "finished") is None:
            run_loop(args, seed, loop_dir)
            ledger = Ledger(loop_dir)
        finished = ledger.get("run", "finished")
        entry["label"] = finished["label"]
        entry["iterations"] = loop_iterations(loop_dir)
        spec = table_spec([load_reward_spec().to_dict(), load_reward_spec(loop_dir / "reward_spec.yaml").to_dict()])
        if "loop" not in entry:
            entry["loop"] = measure(loop_dir / "policy.onnx", spec, args)
            _save(path, results)
        if "base" not in entry:
            policy = run_base(args, seed, base_dir, entry["iterations"], loop_dir)
            entry["base"] = measure(policy, spec, args)
            _save(path, results)
        entry["verdict"] = verdict(entry["loop"]["evaluation"], entry["base"]["evaluation"])
        _save(path, results)
        v = entry["verdict"]
        print(f"[seed {seed}] knee {100 * (v['knee_reduction'] or 0):+.1f}% lower (goal >= 30%: "
              f"{'met' if v['knee_met'] else 'missed'}), speed {100 * (v['speed_change'] or 0):+.1f}% (goal within 10%: "
              f"{'met' if v['speed_met'] else 'missed'}), success {100 * v['success']:.1f}% (goal >= 90%: "
              f"{'met' if v['success_met'] else 'missed'})", flush=True)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

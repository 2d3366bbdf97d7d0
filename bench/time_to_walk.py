"""Time to walk: train on the reference reward with the paper's randomisation, evaluate as it learns.

Every `--eval-every` minutes of training time the current policy (ONNX, ONNX Runtime) runs
`--episodes` randomised 10 s episodes at a 0.6 m/s forward command, at the robot config's own
500 Hz PD rate. Evaluation time is not training time: training resumes from its checkpoint
after each evaluation, with the episodes in flight, so with an iteration budget a mark's policy is the
one a run trained that long in one go ends on. By the clock each mark's run validates held-out
candidates in its last `selection.minutes`, and those minutes count in the later marks' budgets: a
later mark trains fewer iterations than one run of its length, and a goal at M minutes reads
`--minutes M --eval-every M` (bench/RESULTS.md, seventy-sixth and seventy-seventh runs). At
the end, a velocity-command sweep, pushes and rough terrain are evaluated too (tracking with and
without a push in the episodes). Prints a Markdown table and writes curve.json in the run directory,
drawn with each goal's bar in curve.png (and the final evaluation in final_eval.json / final_eval.png).

    .venv/bin/python bench/time_to_walk.py --minutes 60 --eval-every 5 --out runs/time_to_walk

Probes that compare configs use an iteration budget, which neither CPU contention nor the machine's
speed distorts (620 iterations are ~10 minutes on an idle machine of the kind the goals were set on,
~20 on a machine half as fast): training repeats iteration by iteration, and held-out selection runs
over the last `selection.iterations` of each mark, so the same budget gives the same policy again,
however fast the machine runs (another CPU model may round differently). A time budget stops where
the machine's speed puts it; training-config keys
are changed with --set, and --train-seeds runs the same probe once per training seed (one seed
is not evidence here: 10-minute policies of the same config differ by up to 40 points):

    .venv/bin/python bench/time_to_walk.py --iterations 620 --no-final --config probe.yaml [--reward spec.yaml] --out /tmp/probe
    .venv/bin/python bench/time_to_walk.py --minutes 10 --eval-every 10 --no-final --train-seeds 0,1,2 \
        --set ppo.symmetry_augmentation=true --out /tmp/probe_sym      # /tmp/probe_sym/seed_0, seed_1, seed_2

Each evaluation is run twice: with the command as is (the goal's numbers) and with the heading
held like an operator steering the robot (`heading_gain` 0.5), since a small yaw-rate error left
alone turns the robot off its course over 10 s.

Thirty-two episodes are a small sample: a policy that walks in 97 % of all episodes meets the
10-minute bar (at most one miss in 32) in only ~75 % of evaluations. Each checkpoint is therefore
also evaluated on `--confirm-episodes` further episodes (other randomisation draws), reported with
a 95 % interval; that figure is the one to compare configs with. `--policy FILE.onnx` evaluates an
existing policy that way without training:

    .venv/bin/python bench/time_to_walk.py --policy runs/x/policy.onnx --confirm-episodes 512
    .venv/bin/python bench/time_to_walk.py --policy runs/x/policy.onnx --final-only --episodes 128   # the 60-minute numbers
    .venv/bin/python bench/time_to_walk.py --policy runs/x/policy.onnx --final-only --plot sweep.png  # ... and their bars

With `policy_average_iterations` set (the exported policy is then an average of recent iterates),
the last iterate is evaluated on the same confirmation episodes too: a paired comparison that
the spread between runs does not blur.

Goals (issue #3): by 10 min >= 95 % of episodes walk >= 5 m without falling; by 20 min swing
clearance >= 8 cm, stance slip < 0.05 m/s, step frequency within 15 % of the gait frequency,
double support < 25 %; by 60 min commands tracked with mean error < 0.1 m/s, 0.5 m/s pushes
survived, on rough terrain as well as flat ground.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from motionvl.rl.config import TrainConfig
from motionvl.rl.evaluate import evaluate
from motionvl.rl.export import OnnxPolicy, load_policy
from motionvl.rl.trainer import train_policy
from motionvl.robot import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from goal_plots import command_sweep_figure, save_figure, time_to_walk_figure  # noqa: E402 - bench/ is this script's directory

# heading hold as an operator would steer (motionvl eval --heading-gain): the gain legged_gym's
# heading command uses
HOLD_GAIN = 0.5
# the goal's task: 0.6 m/s straight ahead (10 s episodes, >= 5 m counts as walking)
GOAL_COMMAND = (0.6, 0.0, 0.0)
# minutes by which a resumed run's last row may fall short of its evaluation mark
MARK_SLACK_MIN = 0.05
COMMAND_SWEEP = [(-0.5, 0.0, 0.0), (0.3, 0.0, 0.0), (1.0, 0.0, 0.0), (0.5, 0.3, 0.0), (0.5, -0.3, 0.0),
                 (0.4, 0.0, 1.0), (0.4, 0.0, -1.0), (0.0, 0.0, 0.0)]


def walked(per_episode: list, min_distance: float = 5.0) -> list:
    return [e for e in per_episode if not e["fell"] and e["forward_distance_m"] >= min_distance]


def gait_summary(episodes: list) -> dict:
    keys = ("swing_clearance_m", "stance_slip_mps", "touchdown_speed_mps", "step_frequency_hz", "double_support_fraction",
            "knee_angle_stance_deg", "torso_pitch_deg")
    out = {}
    for k in keys:
        values = np.array([float(e[k]) for e in episodes if e.get(k) is not None], dtype=float)
        values = values[np.isfinite(values)]
        out[k] = round(float(values.mean()), 4) if values.size else None
    return out


def checkpoint_eval(policy: Path, episodes: int, seconds: float, seed: int, confirm_episodes: int = 0) -> dict:
    """The goal's numbers with the command as is; walk/fell again with the heading held (HOLD_GAIN);
    with confirm_episodes > 0 also walk/fell over that many more episodes ("confirm")."""
    policy = load_policy(policy)  # once for every evaluation below
    result = evaluate(policy, seconds=seconds, episodes=episodes, randomize=True, command=GOAL_COMMAND,
                      seed=seed, return_trajectories=True)
    per = result.pop("per_episode")
    result.pop("trajectories")
    ok = walked(per)
    upright = [e for e in per if not e["fell"]]
    held = evaluate(policy, seconds=seconds, episodes=episodes, randomize=True, command=GOAL_COMMAND,
                    seed=seed, return_trajectories=True, heading_gain=HOLD_GAIN)
    return {"gait_period_s": policy.contract.gait_period,  # the step-frequency goal's reference
            "walk_5m_fraction": round(len(ok) / len(per), 4), "fell_fraction": result["fell_fraction"],
            "forward_distance_m": result["forward_distance_m"], "tracking_error_mps": result["tracking_error_mps"],
            "tracking_error_steady_mps": result["tracking_error_steady_mps"],
            "heading_error_deg": result["heading_error_deg"],
            "heading_hold": {"walk_5m_fraction": round(len(walked(held["per_episode"])) / len(per), 4),
                             "fell_fraction": held["fell_fraction"], "heading_error_deg": held["heading_error_deg"]},
            "gait_in_walking_episodes": gait_summary(ok), "gait_in_upright_episodes": gait_summary(upright),
            **({"confirm": confirm_eval(policy, confirm_episodes, seconds, seed)} if confirm_episodes else {})}


def wilson_interval(successes: int, n: int, z: float = 1.96) -> list[float]:
    """95 % score interval of a success fraction (stays inside [0, 1] near 0 and 1, unlike p +- 2 SE)."""
    if n == 0:
        return [0.0, 1.0]
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(float(centre - half), 4), round(float(centre + half), 4)]


def confirm_eval(policy: OnnxPolicy | Path, episodes: int, seconds: float, seed: int, chunk: int = 128) -> dict:
    """walk >= 5 m and falls over `episodes` more randomised episodes, drawn with evaluation seeds
    seed + 1000, seed + 1001, ... (`chunk` episodes each, which bounds the trajectory memory)."""
    walked_n = fell_n = done = 0
    k = 0
    while done < episodes:
        n = min(chunk, episodes - done)
        r = evaluate(policy, seconds=seconds, episodes=n, randomize=True, command=GOAL_COMMAND,
                     seed=seed + 1000 + k, return_trajectories=True)
        walked_n += len(walked(r["per_episode"]))
        fell_n += sum(bool(e["fell"]) for e in r["per_episode"])
        done, k = done + n, k + 1
    return {"episodes": episodes, "walk_5m_fraction": round(walked_n / episodes, 4),
            "walk_5m_ci95": wilson_interval(walked_n, episodes), "fell_fraction": round(fell_n / episodes, 4)}


def final_eval(policy: OnnxPolicy | Path, episodes: int, seconds: float, seed: int) -> dict:
    """The 60-minute goal's numbers: each sweep command and rough ground, randomised with a 0.5 m/s
    push at 8 s. The same episodes again without the push give tracking_error_no_push_mps: the
    whole-episode error (start from standstill included) with no push recovery in it."""
    sweep = []
    for command in COMMAND_SWEEP:
        r = evaluate(policy, seconds=seconds, episodes=episodes, randomize=True, command=command, seed=seed)
        calm = evaluate(policy, seconds=seconds, episodes=episodes, randomize=True, command=command, seed=seed,
                        pushes=False)
        sweep.append({"command": list(command), "tracking_error_mps": r["tracking_error_mps"],
                      "tracking_error_steady_mps": r["tracking_error_steady_mps"],
                      "tracking_error_no_push_mps": calm["tracking_error_mps"],
                      "yaw_rate_error_rps": r["yaw_rate_error_rps"], "heading_error_deg": r["heading_error_deg"],
                      "fell_fraction": r["fell_fraction"], "fell_fraction_no_push": calm["fell_fraction"]})
    rough = evaluate(policy, seconds=seconds, episodes=episodes, randomize=True, terrain="rough",
                     command=GOAL_COMMAND, seed=seed)
    rough_calm = evaluate(policy, seconds=seconds, episodes=episodes, randomize=True, terrain="rough",
                          command=GOAL_COMMAND, seed=seed, pushes=False)

    def mean(key: str) -> float | None:
        # a command whose every episode fell within the first second has no steady-state figure; a
        # mean over the other commands would not compare with an 8-command mean, so there is none
        values = [s[key] for s in sweep]
        return None if any(v is None for v in values) else round(float(np.mean(values)), 4)

    return {"command_sweep": sweep, "episodes": episodes,
            "mean_tracking_error_mps": mean("tracking_error_mps"),
            "mean_tracking_error_steady_mps": mean("tracking_error_steady_mps"),
            "mean_tracking_error_no_push_mps": mean("tracking_error_no_push_mps"),
            "rough_terrain": {**{k: rough[k] for k in ("forward_distance_m", "fell_fraction", "tracking_error_mps",
                                                       "tracking_error_steady_mps", "success_rate")},
                              "tracking_error_no_push_mps": rough_calm["tracking_error_mps"],
                              "fell_fraction_no_push": rough_calm["fell_fraction"]}}


def run_curve(args, out: Path, train_cfg) -> tuple[list, dict | None]:
    """Train in `out` (resumed if it holds a run) up to the budget, evaluating at every mark."""
    curve_path = out / "curve.json"
    curve = json.loads(curve_path.read_text()) if curve_path.exists() else []
    if args.iterations:
        done = curve[-1]["iterations"] if curve else 0
        every = args.eval_every_iterations or args.iterations
        marks = [(None, int(m)) for m in range(every, args.iterations + 1, every) if m > done]
    else:
        done = curve[-1]["train_minutes"] if curve else 0.0
        # a row's train_minutes ends a few seconds short of its mark (19.99 for 20): not a new mark
        marks = [(float(m), None) for m in np.arange(args.eval_every, args.minutes + 1e-9, args.eval_every)
                 if m > done + MARK_SLACK_MIN]
    for minutes, iterations in marks:
        resume = (out / "checkpoints" / "latest.pt").exists()
        result = train_policy(out, None if resume else args.reward, None if resume else train_cfg, minutes=minutes or 1e9,
                              max_iterations=iterations, resume=resume, progress=True)
        t0 = time.perf_counter()
        row = {"train_minutes": round(result.elapsed_s / 60.0, 2), "iterations": result.iterations,
               "policy_steps": result.total_steps, "steps_per_s": round(result.steps_per_s),
               **checkpoint_eval(result.policy_path, args.episodes, args.seconds, args.seed, args.confirm_episodes)}
        if result.last_iterate_path is not None and args.confirm_episodes:
            # same episodes as "confirm": the averaged policy and the iterate it ends on, paired
            row["confirm_last_iterate"] = confirm_eval(result.last_iterate_path, args.confirm_episodes, args.seconds,
                                                       args.seed)
        if result.selected is not None:
            # policy.onnx is a validated candidate: the policy the run ended on, on the same episodes
            row["selected_iteration"] = result.selected_iteration
            row["selected_actor"] = result.selected_actor
            if args.confirm_episodes:
                row["confirm_final"] = confirm_eval(out / "policy_final.onnx", args.confirm_episodes, args.seconds,
                                                    args.seed)
        row["eval_s"] = round(time.perf_counter() - t0, 1)
        curve.append(row)
        curve_path.write_text(json.dumps(curve, indent=1))
        save_figure(time_to_walk_figure(curve, x="iterations" if args.iterations else "minutes"), out / "curve.png")
        print(json.dumps(row), flush=True)
    final = None if args.no_final else final_eval(out / "policy.onnx", args.episodes, args.seconds, args.seed)
    if final is not None:
        (out / "final_eval.json").write_text(json.dumps(final, indent=1))
        save_figure(command_sweep_figure(final), out / "final_eval.png")
    return curve, final


def print_curve(curve: list) -> None:
    print("\n| train min | iterations | policy steps | walk >= 5 m | fell | distance m | heading error deg "
          "| walk >= 5 m, heading held | walk >= 5 m, confirmation episodes (95% interval) "
          "| same, last iterate (averaging on) "
          "| clearance m | stance slip m/s | touchdown m/s | step Hz | double support |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in curve:
        g, hold = r["gait_in_walking_episodes"], r.get("heading_hold", {})
        held = f"{hold['walk_5m_fraction']:.0%}" if hold else "-"
        print(f"| {r['train_minutes']} | {r['iterations']} | {r['policy_steps']} | {r['walk_5m_fraction']:.0%} "
              f"| {r['fell_fraction']} | {r['forward_distance_m']} | {r.get('heading_error_deg', '-')} | {held} "
              f"| {confirm_cell(r.get('confirm'))} | {confirm_cell(r.get('confirm_last_iterate'))} "
              f"| {g['swing_clearance_m']} | {g['stance_slip_mps']} "
              f"| {g.get('touchdown_speed_mps')} "
              f"| {g['step_frequency_hz']} | {g['double_support_fraction']} |")


def confirm_cell(c: dict | None) -> str:
    if not c:
        return "-"
    lo, hi = c["walk_5m_ci95"]
    return f"{c['walk_5m_fraction']:.1%} of {c['episodes']} ({lo:.1%}-{hi:.1%})"


def seed_summary(last_rows: dict) -> dict:
    """The last row of each training seed's curve side by side: the figure that decides a probe is
    the worst seed (on the confirmation episodes when they ran), not the mean."""
    keys = ("iterations", "walk_5m_fraction", "fell_fraction", "forward_distance_m", "heading_error_deg", "confirm")
    walk = [r["walk_5m_fraction"] for r in last_rows.values()]
    summary = {"per_seed": {str(s): {k: r[k] for k in keys if k in r} for s, r in last_rows.items()},
               "walk_5m_fraction_min": min(walk), "walk_5m_fraction_mean": round(float(np.mean(walk)), 4),
               "fell_fraction_mean": round(float(np.mean([r["fell_fraction"] for r in last_rows.values()])), 4)}
    if all("confirm" in r for r in last_rows.values()):
        summary["confirm_walk_5m_fraction_min"] = min(r["confirm"]["walk_5m_fraction"] for r in last_rows.values())
    return summary


def parse_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise SystemExit(f"--train-seeds: expected comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise SystemExit(f"--train-seeds: expected distinct integers, got {text!r}")
    return seeds


def evaluate_policy(args) -> int:
    """--policy: one checkpoint row for an existing ONNX policy, printed as JSON; with --final-only
    the 60-minute evaluation (sweep, pushes, rough ground) instead."""
    policy = Path(args.policy)
    if not policy.is_file():
        print(f"time_to_walk: no policy file {policy}", file=sys.stderr)
        return 2
    if args.final_only:
        row = {"policy": str(policy), **final_eval(policy, args.episodes, args.seconds, args.seed)}
        if args.plot:
            save_figure(command_sweep_figure(row), args.plot)
    else:
        row = {"policy": str(policy),
               **checkpoint_eval(policy, args.episodes, args.seconds, args.seed, args.confirm_episodes)}
    print(json.dumps(row), flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="total training minutes")
    parser.add_argument("--eval-every", type=float, default=5.0, help="minutes of training between evaluations")
    parser.add_argument("--episodes", type=int, default=32, help="randomised evaluation episodes")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each evaluation episode")
    parser.add_argument("--config", default=None, help="training YAML (default: config/training.yaml)")
    parser.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                        help="override a training-config key, e.g. ppo.desired_kl=0.03 (repeatable)")
    parser.add_argument("--train-seeds", default=None, metavar="S,S,...",
                        help="run once per training seed, in OUT/seed_S, and print a summary over the seeds")
    parser.add_argument("--reward", default=None, help="reward spec YAML (default: config/rewards/reference.yaml)")
    parser.add_argument("--out", default="runs/time_to_walk", help="run directory (resumed if it exists)")
    parser.add_argument("--seed", type=int, default=1, help="evaluation seed (training seed: the config's, --set seed=N or --train-seeds)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="budget in PPO iterations instead of minutes (probes comparable on a busy machine)")
    parser.add_argument("--eval-every-iterations", type=int, default=None, help="with --iterations: iterations between evaluations")
    parser.add_argument("--no-final", action="store_true", help="skip the command sweep / rough terrain evaluation")
    parser.add_argument("--confirm-episodes", type=int, default=256,
                        help="further randomised episodes per checkpoint for walk >= 5 m with a 95%% interval (0: none)")
    parser.add_argument("--policy", default=None, metavar="FILE.onnx",
                        help="evaluate this policy at a checkpoint's protocol (and --confirm-episodes) without training")
    parser.add_argument("--final-only", action="store_true",
                        help="with --policy: the command sweep / pushes / rough terrain evaluation instead")
    parser.add_argument("--plot", default=None, metavar="FILE.png",
                        help="with --final-only: also draw the sweep's tracking errors to this PNG")
    args = parser.parse_args(argv)
    if args.confirm_episodes < 0:
        parser.error("--confirm-episodes must be >= 0")
    if args.final_only and (args.policy is None or args.no_final):
        parser.error("--final-only needs --policy and contradicts --no-final")
    if args.plot and not args.final_only:
        parser.error("--plot goes with --policy and --final-only (training runs draw curve.png themselves)")
    if args.policy is not None:
        return evaluate_policy(args)
    overrides = list(args.set or [])
    seeds = parse_seeds(args.train_seeds)
    out = Path(args.out)

    try:  # a bad --set or config is reported before any training starts
        configs = {s: TrainConfig.from_yaml(args.config, overrides + [f"seed={s}"]) for s in seeds or []}
        if seeds is None and overrides:
            configs[None] = TrainConfig.from_yaml(args.config, overrides)
    except ConfigError as exc:
        print(f"time_to_walk: {exc}", file=sys.stderr)
        return 2

    if seeds is None:
        curve, final = run_curve(args, out, configs.get(None, args.config))
        print_curve(curve)
        if final is not None:
            print(json.dumps(final))
        return 0

    last_rows = {}
    for s in seeds:
        print(f"=== training seed {s}", flush=True)
        curve, final = run_curve(args, out / f"seed_{s}", configs[s])
        print_curve(curve)
        if final is not None:
            print(json.dumps(final))
        last_rows[s] = curve[-1]
    summary = seed_summary(last_rows)
    (out / "seeds.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

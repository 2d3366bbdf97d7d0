"""`motionvl demo`: one policy on the reference reward, trained, evaluated, rendered and critiqued.

The language loop (`motionvl train`, what `make demo` runs) does this for every reward candidate; this
command is the single-policy path without the search:
  1. train a PPO policy on the reference reward spec (rsl_rl, batched MuJoCo, randomisation on),
  2. export it to ONNX and evaluate it with ONNX Runtime at the robot's own 500 Hz PD rate
     (reward-free task score and gait numbers),
  3. render a 10 s rollout to an mp4 and a contact sheet,
  4. run the offline kinematic critic (model-free; not a VLM) on the rollout against the sentence.
Everything lands in --out; running again resumes the training run instead of starting over.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from motionvl.task import DEFAULT_COMMAND

DEFAULT_TASK = "walk forward at 0.6 m/s with an upright torso"
DEFAULT_MINUTES = 10.0
DEFAULT_OUT = Path("out/demo")
# PPO iterations per training minute on a full-speed machine of the development kind with today's defaults
# (531-562 in 10 minutes by the clock, the held-out selection included).
# A machine far below it trains a weaker 10-minute policy.
REFERENCE_ITERATIONS_PER_MINUTE = 55


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", default=DEFAULT_TASK, help=f"task sentence for the critic (default: {DEFAULT_TASK!r})")
    parser.add_argument("--minutes", type=float, default=DEFAULT_MINUTES,
                        help=f"training budget in minutes (default {DEFAULT_MINUTES:g})")
    parser.add_argument("--iterations", type=int, default=None,
                        help="training budget in PPO iterations instead of minutes: the same policy on a slower "
                             f"machine, later (~{int(REFERENCE_ITERATIONS_PER_MINUTE * DEFAULT_MINUTES)} are a "
                             "full-speed machine's 10 minutes)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the evaluation and video rollouts")
    parser.add_argument("--command", type=float, nargs=3, default=DEFAULT_COMMAND, metavar=("VX", "VY", "YAW"),
                        help="velocity command of the evaluation and video (default: motionvl.task.DEFAULT_COMMAND, "
                             "0.6 0 0)")


def run(args: argparse.Namespace) -> int:
    from motionvl.critic.kinematic import KinematicCritic
    from motionvl.render.camera import render_trajectory
    from motionvl.render.rollout import rollout_policy
    from motionvl.render.video import contact_sheet, save_png, write_mp4
    from motionvl.rl.evaluate import evaluate
    from motionvl.rl.export import load_policy
    from motionvl.rl.trainer import train_policy
    from motionvl.robot import load_robot_config
    from motionvl.sim.model import TerrainConfig, build_model

    if args.iterations is not None and args.iterations < 1:
        raise SystemExit("motionvl demo: --iterations must be >= 1")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "run"
    resume = (run_dir / "checkpoints" / "latest.pt").exists()
    budget = f"{args.iterations} iterations" if args.iterations else f"{args.minutes:g} min"
    print(f"[1/4] training on the reference reward for {budget} -> {run_dir}"
          f"{' (resuming)' if resume else ''}", flush=True)
    result = train_policy(run_dir, None, None, minutes=1e9 if args.iterations else args.minutes,
                          max_iterations=args.iterations, resume=resume)
    print(f"      {result.iterations} iterations, {result.total_steps} policy steps, "
          f"{result.steps_per_s:.0f} steps/s; policy: {result.policy_path}", flush=True)
    expected = REFERENCE_ITERATIONS_PER_MINUTE * result.elapsed_s / 60.0
    if not args.iterations and result.iterations < 0.8 * expected:
        print(f"      note: this machine trained {result.iterations} iterations where a full-speed machine trains "
              f"~{expected:.0f}, so expect a weaker policy; --iterations {expected:.0f} trains the same amount here, "
              "taking longer", flush=True)

    print("[2/4] evaluating with ONNX Runtime at the robot's own PD rate", flush=True)
    evaluation = evaluate(result.policy_path, seconds=args.seconds, episodes=16, command=tuple(args.command))
    print("      " + json.dumps({k: evaluation[k] for k in ("forward_distance_m", "tracking_error_mps",
                                                             "fell_fraction", "success_rate")}), flush=True)

    print("[3/4] rendering a rollout", flush=True)
    robot = load_robot_config()
    policy = load_policy(result.policy_path)
    traj = rollout_policy(policy, robot, seconds=args.seconds, command=tuple(args.command))
    traj.save(out / "trajectory.npz")
    t0 = time.perf_counter()
    frames, times = render_trajectory(build_model(robot, TerrainConfig()), traj, every_s=0.05)
    write_mp4(frames, out / "rollout.mp4", fps=20.0)
    save_png(contact_sheet(frames[::2], times[::2], cols=7, max_tiles=21), out / "contact_sheet.png")
    print(f"      {len(frames)} frames in {time.perf_counter() - t0:.1f} s -> {out / 'rollout.mp4'}", flush=True)

    print(f"[4/4] kinematic critic (offline, model-free) on: {args.task!r}", flush=True)
    feedback = KinematicCritic().critique(traj, args.task)
    (out / "feedback.json").write_text(feedback.to_json())
    summary = {"task": args.task, "run_dir": str(run_dir), "policy": str(result.policy_path),
               "train_minutes": round(result.elapsed_s / 60, 2), "iterations": result.iterations,
               "selected_iteration": result.selected_iteration, "selected_actor": result.selected_actor,
               "steps_per_s": round(result.steps_per_s), "evaluation": evaluation,
               "alignment_score": feedback.alignment_score, "features": feedback.features,
               "suggestions": [s.to_dict() for s in feedback.suggestions], "unjudged": feedback.unjudged,
               "video": str(out / "rollout.mp4"), "contact_sheet": str(out / "contact_sheet.png")}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps({k: summary[k] for k in ("alignment_score", "train_minutes", "video")} |
                     {"forward_distance_m": evaluation["forward_distance_m"], "fell_fraction": evaluation["fell_fraction"]},
                     default=str))
    return 0

"""`motionvl critique`: roll out a policy, film it and run a motion critic; the feedback JSON is the last line.

    motionvl critique --policy stand --task "stand still with an upright torso"
    motionvl critique --policy runs/s1/policy.onnx     # judged against the task the policy was trained for
    motionvl critique --policy p.onnx --task "walk forward at 0.6 m/s" --critic transformers --model /models/vlm
    motionvl critique --policy p.onnx --task "..." --critic openai --base-url http://127.0.0.1:8000 --model NAME

The kinematic critic (default; no model, not a VLM) reads the recorded trajectory and needs no
frames, so it renders only with --out. A VLM critic gets the frames sampled every --every
seconds; its claims are then cross-checked against the kinematic measurements
(`motionvl.critic.crosscheck`: claims that disagree are flagged as contradictions and the alignment is
scaled by the share of measurable claims the kinematics confirms).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

from motionvl.backend_names import (CRITICS, add_model_arguments, backends_help, kind_settings,  # noqa: E402
                                     model_settings)
from motionvl.render.cli import add_common_rollout_arguments  # noqa: E402



def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_rollout_arguments(parser)
    parser.add_argument("--critic", choices=CRITICS, default="kinematic",
                        help=f"{backends_help('critic')} (default kinematic)")
    add_model_arguments(parser, kind_settings("critic"))
    parser.add_argument("--contact-sheet", action="store_true", help="VLM: send one timestamped grid image")
    parser.add_argument("--previous-best", default=None, help="a previous feedback JSON file to judge against")
    parser.add_argument("--out", default=None, help="also write rollout.mp4, contact_sheet.png, trajectory.npz, feedback.json here")
    parser.add_argument("--camera", default="side", help="model camera the frames are rendered from (default side: the "
                                                         "critic's view, square to the walk)")
    parser.set_defaults(width=448, height=336)  # the playback's frames: what a VLM critic sees in the search


def make_vlm_critic(args):
    """The VLM backend named by the arguments (imported lazily: torch / HTTP client only when used)."""
    from motionvl.critic.service import backend_factory

    try:
        factory = backend_factory(args.critic, model_settings(vars(args)), use_contact_sheet=args.contact_sheet)
    except ValueError as exc:
        raise SystemExit(f"motionvl critique: --critic {args.critic}: {exc}") from None
    return factory()


def run(args: argparse.Namespace) -> int:
    from motionvl.critic.crosscheck import cross_check
    from motionvl.critic.kinematic import KinematicCritic
    from motionvl.render.cli import render_from_args, rollout_from_args
    from motionvl.render.video import write_rollout_files

    from motionvl.robot import ConfigError

    t0 = time.perf_counter()
    args.task_strict = False  # a sentence the rules cannot read still goes to the critic (a VLM may read it)
    try:
        robot, traj, name, command = rollout_from_args(args)
    except ConfigError as exc:
        print(f"motionvl critique: {exc}", file=sys.stderr)
        return 2
    task = args.task or (args.task_object.sentence if args.task_object else None)
    if not task:
        print(f"motionvl critique: --task is needed: {name} records no task to judge it against", file=sys.stderr)
        return 2
    timings = {"rollout_s": round(time.perf_counter() - t0, 3)}
    previous = None
    if args.previous_best:
        previous = Path(args.previous_best).read_text()
    kinematic = KinematicCritic()
    frames = times = None
    if args.critic != "kinematic" or args.out:
        frames, times, t_render = render_from_args(args, robot, traj)
        timings["render_s"] = round(t_render, 3)
    t1 = time.perf_counter()
    if args.critic == "kinematic":
        fb = kinematic.critique(traj, task, previous_best=previous)
    else:
        fb = make_vlm_critic(args).critique(frames, times, task, previous_best=previous)
        fb = cross_check(fb, kinematic.measure(traj))
    timings["critique_s"] = round(time.perf_counter() - t1, 3)
    fb.meta.update(policy=name, command=list(command), terrain=args.terrain, seconds=args.seconds, **timings)
    if args.out:
        files = write_rollout_files(Path(args.out), frames, times, traj, args.every)
        (Path(args.out) / "feedback.json").write_text(fb.to_json(indent=2))
        fb.meta["files"] = files
    print(fb.to_json())
    return 0 if fb.valid else 1

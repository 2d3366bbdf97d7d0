"""`motionvl render`: run a policy (or the PD standing controller) and film it.

    motionvl render --policy policy.onnx --seconds 10 --out runs/render
    motionvl render --policy stand --out runs/stand --width 640 --height 480 --every 0.05

writes DIR/rollout.mp4 (real time: 1 / every frames per second), DIR/contact_sheet.png (a
timestamped grid of the frames, thinned to --max-tiles) and DIR/trajectory.npz (the recorded
`Trajectory`), and prints a JSON summary as its last line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"  # headless rendering (see motionvl.render.camera)

from motionvl.sim.terrain import KINDS  # noqa: E402 - no mujoco import


def add_common_rollout_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by `render` and `critique`: what to roll out and how."""
    parser.add_argument("--policy", default="stand",
                        help="exported ONNX policy file, or 'stand' for the PD standing controller (default)")
    parser.add_argument("--seconds", type=float, default=10.0, help="rollout length in seconds (default 10)")
    parser.add_argument("--task", default=None,
                        help="the task sentence the policy is run for: its command and terrain (motionvl.task); "
                             "default: the task the policy's metadata records")
    parser.add_argument("--command", type=float, nargs=3, metavar=("VX", "VY", "YAW_RATE"), default=None,
                        help="fixed velocity command (default: the task's, else 0.6 0 0 for a policy; 0 0 0 for 'stand')")
    parser.add_argument("--terrain", choices=KINDS, default=None,
                        help="the ground, a tile of it around the start (default: the task's, else flat)")
    parser.add_argument("--terrain-level", type=int, default=None, metavar="0-9",
                        help="the terrain's difficulty (steps 2-20 cm, slopes 2-20 deg, bumps 0.8-8 cm; default: the "
                             "task's, else 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--robot-config", default=None, help="robot YAML (default: the package's config/robot.yaml)")
    parser.add_argument("--width", type=int, default=320, help="frame width in pixels (default %(default)s)")
    parser.add_argument("--height", type=int, default=240, help="frame height in pixels (default %(default)s)")
    parser.add_argument("--every", type=float, default=0.1, help="seconds between frames (default 0.1, as in the paper)")
    parser.add_argument("--hq", action="store_true",
                        help="4096 px shadows and 4x anti-aliasing (about 3x slower on a CPU renderer)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_rollout_arguments(parser)
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--cols", type=int, default=7, help="contact sheet columns (default 7)")
    parser.add_argument("--max-tiles", type=int, default=21,
                        help="contact sheet tiles at most, kept at a constant stride (default 21: every 0.5 s of 10 s)")


def load_policy_arg(spec: str | None, robot):
    """(policy or None for standing, display name). An ONNX policy's contract is checked against the robot."""
    if spec is None or str(spec).lower() in ("stand", "none", ""):
        return None, "stand"
    from motionvl.rl.export import load_policy

    policy = load_policy(spec)
    policy.contract.check_robot(robot)
    return policy, str(spec)


def rollout_from_args(args):
    """(robot, trajectory, policy name, command) for the rollout the arguments describe. The task (--task, else the
    policy's own) decides the command and terrain the arguments leave open; it is left in `args.task_object`
    (None without one) and the terrain in `args.terrain`."""
    from motionvl.render.rollout import rollout_policy
    from motionvl.robot import load_robot_config
    from motionvl.task import DEFAULT_COMMAND, tool_task

    robot = load_robot_config(args.robot_config)
    policy, name = load_policy_arg(args.policy, robot)
    task = args.task_object = tool_task(getattr(args, "task", None), getattr(policy, "metadata", None), args.command,
                                        strict=getattr(args, "task_strict", True))
    if task is not None:
        command = task.command
    else:
        command = tuple(args.command) if args.command is not None else (DEFAULT_COMMAND if policy is not None
                                                                          else (0.0, 0.0, 0.0))
    args.terrain = args.terrain or (task.terrain if task else "flat")
    if getattr(args, "terrain_level", None) is None:
        args.terrain_level = task.terrain_level if task else None
    traj = rollout_policy(policy, robot, seconds=args.seconds, command=command, terrain=terrain_from_args(args),
                          seed=args.seed)
    return robot, traj, name, command


def terrain_from_args(args):
    """The TerrainConfig of --terrain, --terrain-level and --seed (the rollout's and the film's ground)."""
    from motionvl.sim.model import TerrainConfig

    return TerrainConfig(kind=args.terrain, level=args.terrain_level, seed=args.seed)


def render_settings_from_args(args):
    from motionvl.render.camera import RenderSettings

    if getattr(args, "hq", False):
        return RenderSettings(width=args.width, height=args.height, shadow_size=4096, multisamples=4)
    return RenderSettings(width=args.width, height=args.height)


def render_from_args(args, robot, traj):
    """(frames, times, seconds spent rendering) of the trajectory with args.camera (default the tracking camera)."""
    from motionvl.render.camera import render_trajectory
    from motionvl.sim.model import TRACKING_CAMERA, build_model

    model = build_model(robot, terrain_from_args(args))
    t0 = time.perf_counter()
    frames, times = render_trajectory(model, traj, every_s=args.every, width=args.width, height=args.height,
                                      camera=getattr(args, "camera", None) or TRACKING_CAMERA,
                                      settings=render_settings_from_args(args))
    return frames, times, time.perf_counter() - t0


def run(args: argparse.Namespace) -> int:
    from motionvl.render.camera import gl_backend
    from motionvl.render.video import write_rollout_files

    if args.every <= 0 or args.seconds <= 0:
        print("motionvl render: --every and --seconds must be > 0", file=sys.stderr)
        return 2
    from motionvl.robot import ConfigError

    t0 = time.perf_counter()
    try:
        robot, traj, name, command = rollout_from_args(args)
    except ConfigError as exc:
        print(f"motionvl render: {exc}", file=sys.stderr)
        return 2
    t_roll = time.perf_counter() - t0
    frames, times, t_render = render_from_args(args, robot, traj)
    files = write_rollout_files(Path(args.out), frames, times, traj, args.every, args.cols, args.max_tiles)
    fell = bool(traj.fell.any())
    summary = {
        "policy": name, "task": args.task_object.sentence if args.task_object else None, "terrain": args.terrain,
        "seconds": args.seconds, "command": list(command), "samples": int(len(traj.time)),
        "fell": fell, "fall_time_s": float(traj.time[int(traj.fell.argmax())]) if fell else None,
        "frames": len(frames), "width": args.width, "height": args.height, "every_s": args.every,
        "gl": gl_backend(), "rollout_s": round(t_roll, 3), "render_s": round(t_render, 3),
        "render_fps": round(len(frames) / t_render, 2) if t_render > 0 else math.inf, **files,
    }
    print(json.dumps(summary))
    return 0

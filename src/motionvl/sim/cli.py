"""`motionvl sim`: stand the robot under PD at its default pose and report whether it stayed up.

Prints a JSON summary as the last line; with --out also writes summary.json, the rollout
(trajectory.npz) and, when the renderer is available, a video.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from motionvl.robot import ConfigError, load_robot_config
from motionvl.sim.terrain import KINDS

# mujoco (via motionvl.sim.*) is imported inside run(), after the renderer had its chance to
# choose a headless OpenGL backend.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=5.0, help="simulated seconds to stand (default 5)")
    parser.add_argument("--out", type=Path, default=None, help="directory for summary.json, trajectory.npz and a video")
    parser.add_argument("--robot-config", type=Path, default=None, help="robot YAML (default: the package's config/robot.yaml)")
    parser.add_argument("--terrain", choices=KINDS, default="flat", help="the ground (a tile of it around the start)")
    parser.add_argument("--terrain-level", type=int, default=None, metavar="0-9",
                        help="the terrain's difficulty (steps 2-20 cm, slopes 2-20 deg, bumps 0.8-8 cm; default 4)")
    parser.add_argument("--no-video", action="store_true", help="do not render a video even when the renderer exists")


def run(args: argparse.Namespace) -> int:
    if args.out is not None and not args.no_video:
        try:  # before mujoco is imported: the renderer picks a headless GL backend when there is no display
            import motionvl.render.camera  # noqa: F401
        except ImportError:
            pass  # said again, with the reason, when the video is due
    from motionvl.sim.model import TerrainConfig
    from motionvl.sim.single import stand

    terrain = TerrainConfig(kind=args.terrain, level=args.terrain_level)
    try:
        robot = load_robot_config(args.robot_config)
        summary, traj = stand(robot, args.seconds, terrain)
    except ConfigError as exc:
        print(f"motionvl sim: {exc}", flush=True)
        return 2
    summary = {"robot": robot.name, **summary}
    if args.out is not None:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        traj.save(out / "trajectory.npz")
        summary["trajectory"] = str(out / "trajectory.npz")
        if not args.no_video:
            summary["video"] = write_video(robot, traj, out / "stand.mp4", terrain)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary), flush=True)
    return 0 if summary["upright"] else 1


def write_video(robot, traj, path: Path, terrain=None, fps: float = 25.0) -> str | None:
    """Render the rollout to an mp4 with motionvl.render (imported only here: it is optional).

    Returns the video path, or None (after saying why) when there is no usable renderer.
    """
    try:
        from motionvl.render.camera import render_trajectory
        from motionvl.render.video import write_mp4
    except ImportError as exc:
        print(f"motionvl: no video: the renderer (motionvl.render) is not available ({exc})", flush=True)
        return None
    from motionvl.sim.model import build_model

    try:
        frames, _ = render_trajectory(build_model(robot, terrain), traj, every_s=1.0 / fps)
        return str(write_mp4(frames, path, fps=fps))
    except Exception as exc:  # no EGL/OSMesa, codec missing...: the simulation's report still stands
        print(f"motionvl: no video: rendering failed: {type(exc).__name__}: {exc}", flush=True)
        return None

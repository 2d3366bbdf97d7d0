"""Rendering benchmark: frames/s of our rendering path vs a raw mujoco.Renderer loop, same run.

    motionvl bench render [--seconds 10 --width 320 --height 240 --every 0.1 --repeats 3]
    python -m motionvl.render.bench ...

A 10 s PD-standing rollout (or --policy FILE.onnx) is recorded once; then, on the same poses:
* ours: `render_trajectory` (qpos -> mj_forward -> update_scene -> render) with a FrameRenderer
  at our default settings (1024 px shadow map, no multisampling);
* raw_same_settings: a bare `mujoco.Renderer` loop doing the same per frame with the same
  settings (our wrapper's overhead is the difference);
* raw_model_defaults: a bare `mujoco.Renderer` with the model's own quality settings
  (4096 px shadow map, 4x multisampling), i.e. what plain MuJoCo code gets;
and the kinematic critic's latency on the 10 s rollout. The three paths are timed in turn,
repeat after repeat (so a change in machine load hits all of them), and each reports its best
repeat; GL context creation is timed separately. The JSON summary is the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"


def add_render_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", default="stand", help="ONNX policy or 'stand' (default)")
    parser.add_argument("--seconds", type=float, default=10.0, help="rollout length (default 10)")
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--every", type=float, default=0.1, help="seconds between frames (default 0.1)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions per path (best is reported)")
    parser.add_argument("--critic-repeats", type=int, default=20, help="kinematic critiques timed (mean reported)")
    parser.add_argument("--task", default="walk forward with straight knees at 0.6 m/s",
                        help="task sentence for the critic latency")


def _best_fps(fn, frames: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return frames / best if best > 0 else float("inf")


def run_render_benchmark(args: argparse.Namespace) -> dict:
    import mujoco
    import numpy as np

    from motionvl.critic.kinematic import KinematicCritic
    from motionvl.render.camera import FrameRenderer, RenderSettings, frame_indices, gl_backend, render_trajectory
    from motionvl.render.cli import load_policy_arg
    from motionvl.render.rollout import rollout_policy
    from motionvl.robot import load_robot_config
    from motionvl.sim.model import TRACKING_CAMERA, build_model

    robot = load_robot_config()
    policy, name = load_policy_arg(args.policy, robot)
    from motionvl.task import DEFAULT_COMMAND

    command = DEFAULT_COMMAND if policy is not None else (0.0, 0.0, 0.0)
    t0 = time.perf_counter()
    traj = rollout_policy(policy, robot, seconds=args.seconds, command=command)
    rollout_s = time.perf_counter() - t0
    model = build_model(robot)
    idx = frame_indices(traj.time, args.every)
    poses = traj.qpos[idx]
    n = len(poses)
    W, H = args.width, args.height
    result: dict = {"benchmark": "render", "policy": name, "gl": gl_backend(), "width": W, "height": H,
                    "every_s": args.every, "frames": n, "rollout_s": round(rollout_s, 3),
                    "cpu_count": os.cpu_count(), "machine": platform.machine()}

    # Three renderers alive at once and timed in turn, repeat after repeat, so that a change in
    # machine load hits every path alike; the best repeat of each path is reported.
    t0 = time.perf_counter()
    ours = FrameRenderer(model, W, H, settings=RenderSettings())
    result["ours_context_s"] = round(time.perf_counter() - t0, 3)
    raws = {}
    for key, (shadow, samples) in {"raw_same_settings": (1024, 0),
                                   "raw_model_defaults": (int(model.vis.quality.shadowsize),
                                                          int(model.vis.quality.offsamples))}.items():
        saved = (model.vis.quality.shadowsize, model.vis.quality.offsamples)
        model.vis.quality.shadowsize, model.vis.quality.offsamples = shadow, samples
        t0 = time.perf_counter()
        raws[key] = (mujoco.Renderer(model, height=H, width=W), mujoco.MjData(model))
        result[f"{key}_context_s"] = round(time.perf_counter() - t0, 3)
        model.vis.quality.shadowsize, model.vis.quality.offsamples = saved
        result[f"{key}_settings"] = {"shadow_size": shadow, "multisamples": samples}

    def raw_loop(renderer: mujoco.Renderer, data: mujoco.MjData) -> None:
        for q in poses:
            data.qpos[:] = q
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera=TRACKING_CAMERA)
            renderer.render()

    paths = {"ours": lambda: render_trajectory(model, traj, every_s=args.every, renderer=ours)}
    for key, (renderer, data) in raws.items():
        paths[key] = lambda renderer=renderer, data=data: raw_loop(renderer, data)
    for fn in paths.values():  # warm-up
        fn()
    best = dict.fromkeys(paths, 0.0)
    for _ in range(max(1, args.repeats)):
        for key, fn in paths.items():
            best[key] = max(best[key], _best_fps(fn, n, 1))
    for key, fps in best.items():
        result[f"{key}_fps"] = round(fps, 2)
    result["frame_std"] = round(float(ours.render_qpos(poses[-1]).std()), 2)
    ours.close()
    for renderer, _ in raws.values():
        renderer.close()
    result["ours_vs_raw_same_settings"] = round(result["ours_fps"] / result["raw_same_settings_fps"], 3)
    result["ours_vs_raw_model_defaults"] = round(result["ours_fps"] / result["raw_model_defaults_fps"], 3)

    critic = KinematicCritic()
    critic.critique(traj, args.task)
    times = []
    for _ in range(max(1, args.critic_repeats)):
        t0 = time.perf_counter()
        fb = critic.critique(traj, args.task)
        times.append(time.perf_counter() - t0)
    result["kinematic_critic_ms_per_rollout"] = round(1000.0 * float(np.mean(times)), 3)
    result["kinematic_critic_rollout_s"] = round(float(len(traj.time) * traj.dt), 3)
    result["kinematic_critic_valid"] = bool(fb.valid)
    return result


# `motionvl bench render` may dispatch here; `add_arguments`/`run` also make this a subcommand module.
add_arguments = add_render_bench_arguments


def run(args: argparse.Namespace) -> int:
    print(json.dumps(run_render_benchmark(args)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="motionvl bench render", description=__doc__.splitlines()[0])
    add_render_bench_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

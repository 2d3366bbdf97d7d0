"""Push recovery map of an exported policy: falls by push direction and by gait phase.

Randomised evaluation pushes every episode at the same time after reset (`push_interval_s`, 8 s),
and the gait clock starts at reset too, so every push lands at one phase of the gait (0.43 of the
0.7 s period). Whether a push topples the robot depends on that phase as much as on the push: a
policy can catch a push to its right in one half of the stride and fall from the same push in the
other. This module moves the first push over `phases` points of one gait period (the episodes,
their randomisation and their push vectors stay the same, so the phases are compared on paired
episodes), records each push in the body frame, and counts the falls that follow it per
direction sector and phase, prints one JSON line per policy and, with --out, writes
LABEL_push_recovery.png (the heatmap) and LABEL_push_recovery.json (not a test):

    .venv/bin/python bench/push_recovery.py demo=out/demo/run/policy.onnx --out out/push_recovery
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from motionvl.envs.config import RandomizationConfig
from motionvl.rl.evaluate import batch_evaluation_env
from motionvl.rl.export import OnnxPolicy, load_policy
from motionvl.robot import ConfigError, RobotConfig
from motionvl.sim.math import to_heading_frame, yaw_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from goal_plots import pyplot_for_files, save_figure  # noqa: E402 - bench/ is this script's directory

# body-frame push directions, counter-clockwise from straight ahead (x forward, y left)
SECTORS = ("forward", "left", "backward", "right")
# time an episode must go on after its push: 10-minute policies that did not recover fell 0.9-1.9 s
# after the push (bench/RESULTS.md, "Foot slip weight 1.0")
RECOVERY_S = 2.0


def push_sector(push_body: np.ndarray) -> np.ndarray:
    """Index into SECTORS of each body-frame push (N, 2): the 90 deg sector around its direction."""
    angle = np.arctan2(push_body[:, 1], push_body[:, 0])
    return np.mod(np.rint(angle / (np.pi / 2)), 4).astype(int)


def push_recovery_map(policy: OnnxPolicy | str | Path, *, phases: int = 8, episodes: int = 128,
                      seconds: float = 10.0, command=(0.6, 0.0, 0.0), seed: int = 5,
                      push_interval_s: float | None = None, robot: RobotConfig | None = None) -> dict:
    """Falls after the first push, per SECTORS direction and per gait phase of the push.

    For each of `phases` evenly spaced shifts of the first push (earlier by up to one gait period)
    the same `episodes` randomised episodes (evaluation seed `seed`, command `command`) are run for
    `seconds`. An episode counts if it was still up at the push; it fell if it fell before the end.
    `push_interval_s` replaces the evaluation's 8 s (the randomisation is the evaluation's otherwise).
    Returns per phase the gait phase of the push, and the falls and pushes per sector, plus the
    totals per sector and per phase and the phase plain evaluation pushes at.
    """
    policy = policy if isinstance(policy, OnnxPolicy) else load_policy(policy)
    if phases < 1 or episodes < 1:
        raise ConfigError(f"phases and episodes must be >= 1, got {phases} and {episodes}")
    randomization = RandomizationConfig.for_evaluation()
    if push_interval_s is not None:
        randomization = dataclasses.replace(randomization, push_interval_s=float(push_interval_s))
    rows = []
    for i in range(phases):
        env = batch_evaluation_env(policy, seconds=seconds, episodes=episodes, command=command, seed=seed, robot=robot,
                                   randomization=randomization)
        period_steps = env.gait_period / env.dt
        push_step = env.push_interval_steps - int(round(i * period_steps / phases))
        if push_step < 1 or push_step * env.dt + RECOVERY_S > seconds:
            raise ConfigError(f"episodes of {seconds:g} s end too soon after the push at "
                              f"{push_step * env.dt:.2f} s to see whether the robot recovers (>= {RECOVERY_S:g} s)")
        env.push_offset[:] = env.push_interval_steps - push_step
        obs = env.observations()
        up = np.ones(episodes, bool)
        up_at_push = push_body = None
        for k in range(1, int(round(seconds / env.dt)) + 1):
            obs, _, terminated, _, _ = env.step(policy(obs))
            if k == push_step:
                # the push changed the velocity only: the pose is the one the push met
                up_at_push = up & ~terminated
                push_body = to_heading_frame(env.last_push, yaw_of(env.sim.qpos[:, 3:7]))
            up &= ~terminated
        fell = up_at_push & ~up
        sector = push_sector(push_body)
        speed = np.linalg.norm(push_body, axis=1)

        def mean_speed(mask: np.ndarray, speed=speed) -> float | None:
            return round(float(speed[mask].mean()), 3) if mask.any() else None

        rows.append({
            "push_time_s": round(push_step * env.dt, 3),
            "gait_phase": round(float(np.mod(push_step * env.dt / env.gait_period, 1.0)), 3),
            "pushes": [int(np.sum(up_at_push & (sector == j))) for j in range(len(SECTORS))],
            "falls": [int(np.sum(fell & (sector == j))) for j in range(len(SECTORS))],
            "fell_before_push": int(np.sum(~up_at_push)),
            "push_speed_mean": mean_speed(up_at_push),
            "push_speed_fell_mean": mean_speed(fell),
        })
    pushes = np.array([r["pushes"] for r in rows])
    falls = np.array([r["falls"] for r in rows])
    return {
        "policy": str(policy.path), "episodes": episodes, "seconds": float(seconds), "seed": seed,
        "command": [float(c) for c in command], "sectors": list(SECTORS), "phases": rows,
        "evaluation_push_phase": rows[0]["gait_phase"],
        "fall_rate": round(float(falls.sum() / max(pushes.sum(), 1)), 4),
        "fall_rate_by_sector": {name: round(float(falls[:, j].sum() / max(pushes[:, j].sum(), 1)), 4)
                                for j, name in enumerate(SECTORS)},
        "fall_rate_by_phase": [round(float(f.sum() / max(p.sum(), 1)), 4) for f, p in zip(falls, pushes)],
    }


def plot_push_recovery(result: dict, path: str | Path, title: str | None = None) -> Path:
    """Heatmap PNG of a push_recovery_map result: fall rate per direction (rows) and gait phase
    of the push (columns, in time order of the phase), each cell labelled falls / pushes."""
    plt = pyplot_for_files()
    rows = sorted(result["phases"], key=lambda r: r["gait_phase"])
    pushes = np.array([r["pushes"] for r in rows]).T
    falls = np.array([r["falls"] for r in rows]).T
    rate = falls / np.maximum(pushes, 1)
    fig, ax = plt.subplots(figsize=(1.1 * len(rows) + 2.0, 3.2))
    vmax = max(0.5, float(rate.max()))  # one scale for every map up to 50 % falls, so maps compare by eye
    image = ax.imshow(rate, cmap="Reds", vmin=0.0, vmax=vmax, aspect="auto")
    for (j, i), value in np.ndenumerate(falls):
        ax.text(i, j, f"{value}/{pushes[j, i]}", ha="center", va="center", fontsize=8,
                color="white" if rate[j, i] > 0.6 * vmax else "black")
    ax.set_xticks(range(len(rows)), [f"{r['gait_phase']:.2f}" for r in rows])
    ax.set_yticks(range(len(result["sectors"])), [f"push {s}" for s in result["sectors"]])
    ax.set_xlabel("gait phase at the push (evaluation pushes at %.2f)" % result["evaluation_push_phase"])
    ax.set_title(title or f"falls after a push, {result['episodes']} randomised episodes per phase")
    fig.colorbar(image, ax=ax, label="fall rate")
    fig.tight_layout()
    return save_figure(fig, path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="+", metavar="LABEL=FILE.onnx", help="policies to measure")
    parser.add_argument("--phases", type=int, default=8, help="push phases over one gait period")
    parser.add_argument("--episodes", type=int, default=128, help="randomised episodes per phase")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each episode")
    parser.add_argument("--command", type=float, nargs=3, default=(0.6, 0.0, 0.0), metavar=("VX", "VY", "YAW"))
    parser.add_argument("--seed", type=int, default=5, help="evaluation seed (5: the episodes of RESULTS' tables)")
    parser.add_argument("--out", type=Path, default=None, help="directory for the heatmaps and JSON files")
    args = parser.parse_args(argv)
    for item in args.policies:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            parser.error(f"expected LABEL=FILE.onnx, got {item!r}")
        result = push_recovery_map(path, phases=args.phases, episodes=args.episodes, seconds=args.seconds,
                                   command=tuple(args.command), seed=args.seed)
        result["label"] = label
        if args.out is not None:
            result["heatmap"] = str(plot_push_recovery(result, args.out / f"{label}_push_recovery.png",
                                                       title=f"{label}: falls after a push"))
            (args.out / f"{label}_push_recovery.json").write_text(json.dumps(result, indent=1))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

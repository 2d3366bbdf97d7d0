"""`motionvl eval`: run an ONNX policy in the simulator and print a reward-free task score.

The last line of stdout is the JSON summary (see `motionvl.rl.evaluate.evaluate`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from motionvl.rl.config import add_dataclass_arguments, args_to_dataclass
from motionvl.sim.terrain import KINDS


@dataclasses.dataclass
class EvalArgs:
    policy: str | None = dataclasses.field(default=None, metadata={"required": True, "metavar": "FILE.onnx"})
    """Exported policy to evaluate."""
    seconds: float = 10.0
    """Length of each episode in seconds."""
    task: str | None = None
    """The task sentence the policy is evaluated for: its command, terrain and success criterion (motionvl.task).
    Default: the task the policy's metadata records, else walking forward at 0.6 m/s on flat ground."""
    terrain: str | None = dataclasses.field(default=None, metadata={"choices": KINDS})
    """Ground to walk on, a tile of it around the start; the policy is blind to it (default: the task's, else flat)."""
    terrain_level: int | None = dataclasses.field(default=None, metadata={"type": int, "metavar": "0-9"})
    """Its difficulty level, 0-9 (steps 2-20 cm, slopes 2-20 deg, bumps 0.8-8 cm; default: the task's, else 4)."""
    episodes: int = 16
    """Parallel episodes (noisy starts, random headings)."""
    randomize: bool = False
    """Turn on the training domain randomisation (friction, gains, pushes, latency)."""
    pushes: bool = True
    """With --randomize: push the robot every push_interval_s (8 s); --no-pushes keeps the rest of
    the randomisation, so that the tracking error holds no push recovery."""
    command: tuple | None = dataclasses.field(default=None, metadata={"nargs": 3, "type": float,
                                                                       "metavar": ("VX", "VY", "YAW")})
    """Velocity command: forward m/s, lateral m/s, yaw rate rad/s (default: the task's, else 0.6 0 0)."""
    heading_gain: float = 0.0
    """0: the command goes to the policy as is. > 0: hold the commanded heading like an operator
    would, yaw-rate command + gain x heading error (1/s; 0.5 as legged_gym's heading command)."""
    robot_dt: bool = True
    """Simulate at the robot config's sim_dt/decimation (500 Hz PD); --no-robot-dt uses the training dt."""
    seed: int = 0
    """Seed of the initial states."""
    robot_config: str | None = None
    """Robot YAML (default: the package's config/robot.yaml)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser, EvalArgs)


def run(args: argparse.Namespace) -> int:
    from motionvl.rl.evaluate import evaluate
    from motionvl.rl.export import ContractError, load_policy
    from motionvl.robot import ConfigError, load_robot_config
    from motionvl.task import DEFAULT_COMMAND, tool_task

    a = args_to_dataclass(args, EvalArgs)
    try:
        policy = load_policy(a.policy)
        task = tool_task(a.task, policy.metadata, a.command)
        command = task.command if task else tuple(a.command or DEFAULT_COMMAND)
        result = evaluate(policy, seconds=a.seconds, terrain=a.terrain or (task.terrain if task else "flat"),
                          terrain_level=a.terrain_level if a.terrain_level is not None else
                          (task.terrain_level if task else None),
                          episodes=a.episodes, randomize=a.randomize, command=command, robot_dt=a.robot_dt,
                          seed=a.seed, heading_gain=a.heading_gain, pushes=a.pushes,
                          criterion=task.criterion if task else None,
                          robot=load_robot_config(a.robot_config) if a.robot_config else None)
    except (FileNotFoundError, ContractError, ConfigError) as exc:
        print(f"motionvl eval: {exc}", file=sys.stderr)
        return 2
    if task is not None:
        result["task"] = task.sentence
        print(f"task: {task.sentence!r}: {task.describe(a.seconds)}", file=sys.stderr)
    print(f"{result['episodes']} episodes x {result['seconds']:g} s, command {result['command']}: "
          f"distance {result['forward_distance_m']} m, fell {result['fell_fraction']}, success {result['success_rate']}",
          file=sys.stderr)
    print(json.dumps(result))
    return 0

"""`motionvl train-policy`: train a PPO policy on a reward spec, export it, evaluate it (no ROS).

Prints the run directory, then as the last stdout line the evaluation JSON (see `motionvl eval`)
with the run's training figures added (run_dir, iterations, total_steps, train_steps_per_s).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from motionvl.rl.config import TrainConfig, add_dataclass_arguments, args_to_dataclass


@dataclasses.dataclass
class TrainPolicyArgs:
    out: str | None = dataclasses.field(default=None, metadata={"required": True, "metavar": "RUN_DIR"})
    """Run directory (checkpoints, logs, policy.onnx)."""
    minutes: float | None = dataclasses.field(default=None, metadata={"type": float})
    """Training wall-time budget of the whole run (default: the training config's)."""
    reward: str | None = dataclasses.field(default=None, metadata={"metavar": "SPEC"})
    """Reward spec file (default: the reference spec; with --resume: the run's own)."""
    config: str | None = None
    """Training YAML (default: config/training.yaml; with --resume: the run's config.yaml)."""
    resume: bool = False
    """Continue the run in --out from its latest checkpoint."""
    warm_start: str | None = dataclasses.field(default=None, metadata={"metavar": "RUN_DIR_OR_CHECKPOINT"})
    """Start a new run from another run's networks (its latest checkpoint, or the checkpoint file given),
    typically with another --reward; its schedules continue from the parent's iteration."""
    num_envs: int | None = dataclasses.field(default=None, metadata={"type": int})
    """Override env.num_envs of the training config."""
    seed: int | None = dataclasses.field(default=None, metadata={"type": int})
    """Override the seed of the training config."""
    set: list | None = dataclasses.field(default=None, metadata={"action": "append", "metavar": "KEY=VALUE"})
    """Override a training-config key (dotted, value read as YAML; repeatable), e.g.
    --set ppo.desired_kl=0.03 --set env.commands.curriculum=false."""
    max_iterations: int | None = dataclasses.field(default=None, metadata={"type": int})
    """Stop after this many PPO iterations in total."""
    robot_config: str | None = None
    """Robot YAML to train and evaluate on (default: the package's config/robot.yaml)."""
    eval_episodes: int = 16
    """Episodes of the final evaluation (0 skips it)."""
    eval_seconds: float = 10.0
    """Seconds per episode of the final evaluation."""
    progress: bool = True
    """Show a progress bar on stderr."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser, TrainPolicyArgs)


def run(args: argparse.Namespace) -> int:
    from motionvl.rl.evaluate import evaluate
    from motionvl.rl.trainer import train_policy
    from motionvl.robot import ConfigError, load_robot_config

    a = args_to_dataclass(args, TrainPolicyArgs)
    out = Path(a.out)
    try:
        if a.config is not None:
            config_path = a.config
        elif a.resume and (out / "config.yaml").exists():
            config_path = out / "config.yaml"
        else:
            config_path = None
        # --num-envs / --seed are shorthands for --set, checked the same way
        shorthands = [f"env.num_envs={a.num_envs}"] * (a.num_envs is not None) + [f"seed={a.seed}"] * (a.seed is not None)
        cfg = TrainConfig.from_yaml(config_path, overrides=[*(a.set or ()), *shorthands])
        robot = load_robot_config(a.robot_config) if a.robot_config else None
        result = train_policy(out, reward_spec=a.reward, train_cfg=cfg, minutes=a.minutes, resume=a.resume,
                              progress=a.progress, max_iterations=a.max_iterations, warm_start=a.warm_start,
                              robot=robot)
    except (ConfigError, FileNotFoundError, FileExistsError) as exc:
        print(f"motionvl train-policy: {exc}", file=sys.stderr)
        return 2
    print(f"run dir: {result.run_dir}")
    print(f"{result.iterations} iterations, {result.total_steps} steps, {result.steps_per_s:.0f} steps/s "
          f"(stopped: {result.stop_reason}); policy: {result.policy_path}")
    if result.selected is not None:
        s = result.selected
        kind = " (its iterate, not the moving average)" if s.get("actor") == "last_iterate" else ""
        print(f"policy.onnx is iteration {s['iteration']}{kind}, best of the validated candidates (success "
              f"{s['success_rate']:.0%}, task score {s['task_score']:.3f}; selection.json); the last: policy_final.onnx")
    summary = {"run_dir": str(result.run_dir), "iterations": result.iterations, "total_steps": result.total_steps,
               "train_steps_per_s": round(result.steps_per_s, 1), "train_minutes": round(result.elapsed_s / 60, 2)}
    if a.eval_episodes > 0:
        # on the ground the run trained on (mixed: flat), at its fixed level or evaluation's default one
        terrain = "flat" if cfg.env.terrain == "mixed" else cfg.env.terrain
        summary.update(evaluate(result.policy_path, seconds=a.eval_seconds, episodes=a.eval_episodes, robot=robot,
                                terrain=terrain, terrain_level=cfg.env.terrain_level))
        (out / "eval.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0

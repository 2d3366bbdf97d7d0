"""`motionvl reward ...`: tools for generated reward code.

  motionvl reward check FILE   check FILE as training will (exit 0 ok, 1 rejected, 2 no file or bad config);
                               --run RUN_DIR: as that search's trainers will (its environment count and overrides)
  motionvl reward doc          print the reward code format, the np namespace and the state fields
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="reward_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate a reward code file (static rules + isolated test run)")
    check.add_argument("file", type=Path, help="Python source with _reward_<name>/_cost_<name> functions")
    check.add_argument("--training-config", type=Path, default=None,
                       help="training YAML whose environment the check runs like: its batch size and rollout states "
                            "(default: config/training.yaml, what train-policy uses), so the check accepts exactly "
                            "what training accepts")
    check.add_argument("--num-envs", type=int, default=None,
                       help="test batch size (default: the training config's env.num_envs)")
    check.add_argument("--run", type=Path, default=None, metavar="RUN_DIR",
                       help="a search's run directory: check on the environment its trainers use (its training config "
                            "with the run's num_envs and overrides), as the search checks its candidates")
    check.add_argument("--timeout", type=float, default=60.0, help="wall-time limit of the whole check, s")
    check.add_argument("--seed", type=int, default=None, help="seed of the test batches (default: fresh)")
    sub.add_parser("doc", help="print the reward code format and the state API (the LLM's reference)")


def run(args: argparse.Namespace) -> int:
    # Imported here so `motionvl --help` stays light.
    from motionvl.rewards import sandbox

    if args.reward_command == "doc":
        print(sandbox.reward_code_api_doc())
        return 0
    try:
        source = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"motionvl reward check: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    from motionvl.rl.config import TrainConfig
    from motionvl.robot import ConfigError

    try:
        if args.run is not None:
            env_cfg = run_environment(args.run)
        else:
            env_cfg = TrainConfig.from_yaml(args.training_config).env
    except ConfigError as exc:
        print(f"motionvl reward check: {exc}", file=sys.stderr)
        return 2
    try:
        terms = sandbox.check_reward_code(source, num_envs=args.num_envs, env_cfg=env_cfg, timeout_s=args.timeout,
                                          seed=args.seed)
    except sandbox.RewardCodeError as exc:
        print(f"{args.file}: rejected ({len(exc.problems)} problem(s)):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    listed = ", ".join(f"{'+' if t.sign > 0 else '-'}{name}" for name, t in terms.items())
    print(f"OK: terms: {listed}")
    warnings = sandbox.compile_code(source).warnings  # captured, de-duplicated and bounded
    if warnings:
        print(f"{args.file}: compiler warning(s):", file=sys.stderr)
        for line in warnings:
            print(f"  {line}", file=sys.stderr)
    return 0


def run_environment(run_dir: Path):
    """The training environment a search run's trainers use (its training config with the run's overrides)."""
    from motionvl.rl.config import TrainConfig
    from motionvl.robot import ConfigError
    from motionvl.search.ledger import Ledger
    from motionvl.search.loop import SearchError, recorded_training_overrides

    try:
        overrides = recorded_training_overrides(run_dir)
    except SearchError as exc:
        raise ConfigError(f"--run {run_dir}: {exc}") from None
    train_config = (Ledger(run_dir).get("run", "settings") or {}).get("train_config")
    return TrainConfig.from_yaml(train_config, overrides=overrides).env

"""`motionvl` command line: one subcommand per module, loaded lazily so that each stays light.

A subcommand module defines `add_arguments(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
COMMANDS = {
    "demo": ("motionvl.demo", "one policy on the reference reward: train, evaluate, render and critique it"),
    "sim": ("motionvl.sim.cli", "run the simulator: stand the robot under PD, write a video"),
    "bench": ("motionvl.bench_cli", "benchmarks: 'bench sim', 'bench train', 'bench render'"),
    "reward": ("motionvl.rewards.cli", "reward tools: 'reward check FILE' validates generated reward code"),
    "train": ("motionvl.search.cli", "the language loop: task sentence -> reward search -> ONNX policy and report"),
    "train-policy": ("motionvl.rl.cli", "train a PPO policy on a reward spec (no ROS)"),
    "eval": ("motionvl.rl.eval_cli", "evaluate an ONNX policy in the simulator, print a task score"),
    "render": ("motionvl.render.cli", "render an ONNX policy's rollout to a video and a contact sheet"),
    "critique": ("motionvl.critic.cli", "render a rollout and run a motion critic on it"),
    "synth": ("motionvl.synth.cli", "propose reward candidates for a task (rules, openai, transformers or replay)"),
    "deploy-sim": ("motionvl.ros.deploy_sim", "the deployment node driving the simulated robot over ROS (no launch)"),
    "params": ("motionvl.ros.params_reference", "every node parameter with its default and description, as a params file"),
    "analyze": ("motionvl.deploy.analysis", "plots and metrics of a deployment bag (--compare: two bags)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="motionvl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser.print_help()
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nmotionvl: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    name = argv[0]
    module = importlib.import_module(COMMANDS[name][0])
    cmd_parser = argparse.ArgumentParser(prog=f"motionvl {name}", description=COMMANDS[name][1])
    module.add_arguments(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

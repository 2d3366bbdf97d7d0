"""`motionvl bench TARGET ...`: benchmarks that print measured figures (JSON last line).

Targets: `sim` (raw batched MuJoCo vs the locomotion env), `train` (motionvl.rl.bench),
`render` (motionvl.render.bench), `deploy` (motionvl.ros.deploy_bench), `loop` (motionvl.search.bench) and `graph`
(motionvl.ros.graph_bench). Each target's module is imported only when it runs, so a
missing or heavy one does not slow or break the others.
"""

from __future__ import annotations

import argparse
import importlib
import json

# target -> (module, add-arguments function, run function, help)
TARGETS = {
    "sim": ("motionvl.sim.bench", "add_sim_bench_arguments", "main_sim",
            "raw batched MuJoCo stepping vs the full LocomotionEnv step"),
    "train": ("motionvl.rl.bench", "add_train_bench_arguments", "run_train_benchmark",
              "PPO training throughput"),
    "render": ("motionvl.render.bench", "add_render_bench_arguments", "run_render_benchmark",
               "offscreen rendering throughput"),
    "deploy": ("motionvl.ros.deploy_bench", "add_deploy_bench_arguments", "run_deploy_benchmark",
               "deployment loop over DDS: end-to-end latency and period error, idle / CPU hog, with / without RT"),
    "loop": ("motionvl.search.bench", "add_loop_bench_arguments", "run_loop_benchmark",
             "the language loop's overhead: share of its wall time not spent training (goal < 10 %)"),
    "graph": ("motionvl.ros.graph_bench", "add_graph_bench_arguments", "run_graph_benchmark",
              "CPU of the training graph's non-trainer nodes between playbacks while a trainer trains (goal < 0.1)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", choices=sorted(TARGETS), help="; ".join(f"{k}: {v[3]}" for k, v in TARGETS.items()))
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the target's options (motionvl bench TARGET --help)")


def run(args: argparse.Namespace) -> int:
    module_name, add_name, run_name, help_text = TARGETS[args.target]
    try:
        module = importlib.import_module(module_name)
        add, main = getattr(module, add_name), getattr(module, run_name)
    except (ImportError, AttributeError) as exc:
        print(f"motionvl bench {args.target}: not available yet ({module_name}: {exc})", flush=True)
        return 3
    parser = argparse.ArgumentParser(prog=f"motionvl bench {args.target}", description=help_text)
    add(parser)
    result = main(parser.parse_args(args.options))
    if isinstance(result, dict):  # a target that returns its figures: print them as the JSON last line
        print(json.dumps(result), flush=True)
        return 0
    return int(result or 0)

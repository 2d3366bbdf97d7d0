"""What running generated reward terms in the sandbox's worker process costs the training loop.

The reference reward's terms written as generated code (config/rewards/reference_generated.yaml,
the same numbers as the library's) are trained on with the training config's runner, switching
the env's reward between the isolated spec (the worker process, as training runs it) and the same
spec in process (read-only copies of the state, no worker) every iteration, in interleaved
rounds so that a machine's drift reaches both alike. Reported: the median seconds of a whole
iteration (rollout + PPO update) and of its rollout with each, the isolation's share of the
loop, and the reward call alone on recorded rollout states. Both variants bound the generated
terms' cost per step as training does (TrainConfig.reward_cost_limit), so the measured difference
is the worker's alone. Also the work accounting's calibration: numpy's time per element of each
charged operation in additions, next to what the guard charges (guard.COST), on (N, 12) float64
arrays with negative values (pow() is slowest on those); and the Python-level entries: a guarded
numpy call and a guarded operator (per call, on one environment), an element of a comparison of
tuples, a character of a number parsed from a string, a digit of a Python float rounded to
ndigits.

    .venv/bin/python bench/reward_isolation.py --envs 512 --rounds 5

`motionvl bench train --reward config/rewards/reference_generated.yaml --reward-isolation
{process,in-process}` measures the same two ways in separate runs (its three throughputs each).
The JSON last line holds the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from motionvl.rewards.sandbox import compile_code, random_reward_state
from motionvl.rewards.sandbox.guard import COST
from motionvl.rewards.sandbox.test_states import rollout_pool
from motionvl.rewards.spec import load_reward_spec
from motionvl.rl.config import TrainConfig
from motionvl.rl.estimator import estimator_training
from motionvl.rl.trainer import bound_reward_cost, build_runner, run_iteration, update_thread_count

SPEC = Path(__file__).resolve().parents[1] / "config" / "rewards" / "reference_generated.yaml"
CALIBRATION = {  # guard.COST entry -> a numpy call it charges, on x (N, 12) float64 with negative values
    "+": lambda x: x + x, "abs": np.abs, "square": np.square, "minimum": lambda x: np.minimum(x, -x),
    "divide": lambda x: x / 0.7, "clip": lambda x: np.clip(x, -0.5, 0.5), "where": lambda x: np.where(x > 0, x, -x),
    "sign": np.sign, "exp": np.exp, "round": lambda x: np.round(x, 3), "argmax": lambda x: np.argmax(x, axis=1),
    "sqrt": lambda x: np.sqrt(np.abs(x)), "log": lambda x: np.log(np.abs(x) + 1), "tanh": np.tanh, "arctan": np.arctan,
    "stack": lambda x: np.stack((x, x), axis=1), "small-power": lambda x: x ** -1,
    "arccos": lambda x: np.arccos(np.clip(x, -1, 1)), "heaviside": lambda x: np.heaviside(x, 0.5),
    "sum": lambda x: np.sum(x, axis=1), "mean": lambda x: np.mean(x, axis=1), "prod": lambda x: np.prod(x, axis=1),
    "norm": lambda x: np.linalg.norm(x, axis=1), "arctan2": lambda x: np.arctan2(x, 1.0 - x),
    "nan_to_num": np.nan_to_num, "max": lambda x: np.max(x, axis=1), "cumsum": lambda x: np.cumsum(x, axis=1),
    "std": lambda x: np.std(x, axis=1), "fmod": lambda x: np.fmod(x, 0.7), "sin": np.sin, "cos": np.cos,
    "%": lambda x: x % 0.7, "//": lambda x: x // 0.7, "hypot": lambda x: np.hypot(x, x),
    "median": lambda x: np.median(x, axis=1), "**": lambda x: x ** 3,
    "python": lambda x: np.array(x[0].tolist()),
}


def _per_call(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


LOOPED = 64  # operations in the guarded loops that time a call's and an operator's fixed cost


def _guarded_loop(body: str):
    """A guarded term running `body` LOOPED times on one environment (the fixed cost, not the elements)."""
    source = f"def _reward_t(state):\n    t = state.base_height\n    for i in range({LOOPED}):\n        {body}\n" \
             "    return t * 0.0\n"
    term = compile_code(source).terms["t"]
    state = random_reward_state(1, np.random.default_rng(0))
    return lambda: term.fn(state)


def _python_calibration() -> dict:
    """COST entry -> (call, units it is charged per): the Python-level entries' timings."""
    row, again = (0.5,) * 64, tuple(0.25 + 0.25 for _ in range(64))  # equal, not the same objects
    digits = "0." + "1234567890" * 400
    return {
        "call": (_guarded_loop("t = np.abs(t)"), LOOPED),
        "operator": (_guarded_loop("t = 1.0 + 2.0"), LOOPED),
        "item": (lambda: row == again, len(row)),
        "parse": (lambda: float(digits), len(digits)),
        "digit": (lambda: round(1.2345e300, 15), 301 + 15),
    }


def calibrate(envs: int, repeats: int = 100) -> dict:
    """{COST entry: {"charged", "measured"}}: numpy's time per element in additions, on (envs, 12) arrays, and
    the Python-level entries' time per call, item, character or digit in additions."""
    x = np.random.default_rng(0).normal(size=(envs, 12))
    add = _per_call(lambda: np.add(x, x), repeats) / x.size
    out = {}
    for name, fn in CALIBRATION.items():
        elements = x.shape[1] if name == "python" else x.size
        out[name] = {"charged": COST[name],
                     "measured": round(_per_call(lambda fn=fn: fn(x), repeats) / elements / add, 1)}
    for name, (fn, units) in _python_calibration().items():
        out[name] = {"charged": COST[name], "measured": round(_per_call(fn, repeats) / units / add, 1)}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=512, help="parallel environments")
    parser.add_argument("--rounds", type=int, default=5, help="timed iterations per variant (interleaved)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="training-config override")
    args = parser.parse_args(argv)

    cfg = TrainConfig.from_yaml(None, overrides=[f"env.num_envs={args.envs}", *args.set])
    cfg.validate()
    isolated = bound_reward_cost(load_reward_spec(SPEC), cfg)  # as training runs it
    in_process = isolated.with_isolation(False)
    vec, runner = build_runner(cfg, isolated)  # validates the spec as training does
    estimator = estimator_training(runner, vec, cfg.ppo)
    threads = update_thread_count(cfg)
    variants = {"isolated": isolated, "in_process": in_process}
    times = {name: {"iteration_s": [], "rollout_s": []} for name in variants}
    try:
        for round_ in range(args.rounds + 1):  # the first round warms up (the worker starts) and is dropped
            for name, spec in variants.items():
                vec.env.reward_fn = spec
                start = time.perf_counter()
                info = run_iteration(runner, vec, threads, estimator)
                if round_:
                    times[name]["iteration_s"].append(time.perf_counter() - start)
                    times[name]["rollout_s"].append(info["collect_s"])
        pool = rollout_pool(None, cfg.env, seed=0)
        state = pool.sample(args.envs, np.random.default_rng(0))
        reward_call = {name: _per_call(lambda spec=spec: spec(state), 20) for name, spec in variants.items()}
    finally:
        isolated.close()
    median = {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}
    extra = median["isolated"]["iteration_s"] - median["in_process"]["iteration_s"]
    result = {
        "envs": args.envs, "rounds": args.rounds, "steps_per_iteration": cfg.ppo.num_steps_per_env,
        "iteration_s": {k: round(v["iteration_s"], 4) for k, v in median.items()},
        "rollout_s": {k: round(v["rollout_s"], 4) for k, v in median.items()},
        "isolation_share_of_loop": round(extra / median["isolated"]["iteration_s"], 4),
        "reward_call_ms": {k: round(v * 1e3, 3) for k, v in reward_call.items()},
        "reward_call_extra_ms_per_step": round((reward_call["isolated"] - reward_call["in_process"]) * 1e3, 3),
        "work_cost_per_element": calibrate(args.envs),
        "goal_share": 0.05,
    }
    under = {k: v for k, v in result["work_cost_per_element"].items() if v["measured"] > v["charged"]}
    if under:
        print(f"charged below the measured cost on this machine: {under}", file=sys.stderr)
    print(f"isolation adds {result['isolation_share_of_loop']:.1%} to a training iteration at {args.envs} envs "
          f"({result['iteration_s']}); reward call {result['reward_call_ms']} ms", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

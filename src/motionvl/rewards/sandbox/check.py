"""The check of generated reward code: run it the way training will, before training does.

`check_reward_code` applies the static rules and the restricted compile here, then runs every
term in the same kind of worker process training uses (isolation.IsolatedTerms: same limits,
same guards, same stack), on the batches of test_states.check_batches: the run's environment
count and fewer, a fresh seed, rollouts at the training gait periods, states late in a training
episode, plausible and extreme states, several calls in a row. Anything training would fail on a
batch like these, the check rejects; what the check accepts, training runs with the same
guarantees, and measures what it costs per step (cost.py) on the states the check cannot foresee.
Problems name the batch they appeared on.
"""

from __future__ import annotations

import time

import numpy as np

from motionvl.rewards.sandbox.errors import RewardCodeError, problem
from motionvl.rewards.sandbox.instrument import RewardTerm, compile_code
from motionvl.rewards.sandbox.isolation import CALL_DEADLINE_S, IsolatedTerms
from motionvl.rewards.sandbox.test_states import check_batches, training_batch_size

MAX_CHECK_ENVS = 65_536
"""Largest batch the check builds (the states are built in this process)."""
DEFAULT_TIMEOUT_S = 60.0
"""Wall-time limit of a whole check, seconds (each call also has the training deadline)."""


def check_reward_code(source: str, *, num_envs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                      seed: int | None = None, robot=None, env_cfg=None,
                      deadline_s: float = CALL_DEADLINE_S) -> dict[str, RewardTerm]:
    """Full validation of `source`: static rules, restricted compile, then every term run in a worker process
    on the check's batches of `num_envs` environments (None: the training batch size, env_cfg's num_envs or
    the environment's default) of `robot`, drawn with `seed` (None: fresh). timeout_s bounds the whole run,
    deadline_s each call as in training. Returns the terms keyed by name; raises RewardCodeError."""
    num_envs = training_batch_size(env_cfg) if num_envs is None else int(num_envs)
    if not 1 <= num_envs <= MAX_CHECK_ENVS:
        raise ValueError(f"num_envs must be within [1, {MAX_CHECK_ENVS}], got {num_envs}")
    compiled = compile_code(source)
    seed = int(np.random.SeedSequence().entropy % (2**32)) if seed is None else int(seed)
    rng = np.random.default_rng(seed)
    end = time.monotonic() + timeout_s
    runner = IsolatedTerms(compiled, deadline_s=deadline_s, start_deadline_s=timeout_s)
    label, batch_envs = "start-up", num_envs
    try:
        for label, state in check_batches(num_envs, rng, robot, env_cfg):
            batch_envs = state.num_envs
            left = end - time.monotonic()
            if left <= 0:
                raise RewardCodeError(problem(1, "timeout", f"the check did not finish within {timeout_s:g} s "
                                              f"(stopped before the {label}); make the terms cheaper"))
            runner.deadline_s = min(deadline_s, left)
            runner.evaluate(state)
    except RewardCodeError as exc:
        leftovers = runner.close()
        raise RewardCodeError([_on(p, label, batch_envs, seed) for p in exc.problems] + _side_effects(leftovers)) from None
    except Exception as exc:  # noqa: BLE001 - the check answers with a rejection, never a crash
        runner.close()
        raise RewardCodeError(problem(1, "sandbox-error", f"the check failed on the {label} "
                                      f"({type(exc).__name__}); simplify the code")) from None
    leftovers = runner.close()
    if leftovers:
        raise RewardCodeError(_side_effects(leftovers))
    return compiled.terms


def _on(text: str, label: str, num_envs: int, seed: int) -> str:
    return f"{text} [on the {label}, {num_envs} environments, seed {seed}]"


def _side_effects(leftovers: list[str]) -> list[str]:
    if not leftovers:
        return []
    return [problem(1, "side-effect", f"the test run created {len(leftovers)} file(s) in its working directory")]

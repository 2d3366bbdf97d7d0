"""A bound on what generated terms cost per training step, measured where they run.

The work accounting (guard.py) and the per-call deadline bound one call; neither sees a term that
stays under both yet makes every step of a rollout many times slower, nor one that is slow only
on states the check never produced. `StepCost` measures: each call's CPU time of the generated
terms (the worker's own clock, so another process on the machine does not count) is held against
the CPU time of a reference reward (the library's hand-written reward) on the same batch, sampled
on the first calls and every SAMPLE_EVERY-th after. Over a window of WINDOW_CALLS calls (after
WARMUP_CALLS, whose cold caches say nothing) the terms may spend at most `limit` times the
reference's median; a window that has spent more fails the candidate at once, naming the costliest
term, so a slow candidate stops within a window of steps (one PPO iteration at 24 steps per env),
never at the end of the run's time budget.
"""

from __future__ import annotations

import collections
import statistics
import time
from typing import Callable

import numpy as np

from motionvl.rewards.sandbox.errors import RewardCodeError, problem
from motionvl.rewards.state import RewardState

WINDOW_CALLS = 24
"""Calls whose generated-term time is summed before it is judged (and the window starts again)."""
WARMUP_CALLS = 2
"""First calls not counted: the worker's and numpy's first passes over new arrays are slow for everyone."""
SAMPLE_EVERY = 16
"""After the first REFERENCE_SAMPLES calls, the reference reward is timed on every SAMPLE_EVERY-th batch."""
REFERENCE_SAMPLES = 9
"""Reference timings kept (the median is the yardstick); the first REFERENCE_SAMPLES + 1 calls all take one."""


class StepCost:
    """Hold the generated terms' CPU time per call within `limit` times a reference reward's on the same batch.

    `reference(state)` evaluates the reference reward (its result is discarded); `record` takes each call's
    per-term CPU seconds and raises RewardCodeError once a window of calls is over its allowance."""

    def __init__(self, limit: float, reference: Callable[[RewardState], object], *, window: int = WINDOW_CALLS,
                 warmup: int = WARMUP_CALLS, setting: str = "reward_cost_limit",
                 clock: Callable[[], float] = time.thread_time):
        """limit: the allowed ratio; setting: its name in messages; clock: CPU seconds of this thread (what the
        reference is timed with, as the worker times the terms)."""
        if not limit > 0:
            raise ValueError(f"the step-cost limit must be > 0, got {limit!r}")
        self.limit, self.reference, self.window, self.warmup, self.setting = float(limit), reference, window, warmup, setting
        self.clock = clock
        self.calls = 0
        self._samples: collections.deque = collections.deque(maxlen=REFERENCE_SAMPLES)
        self._spent = 0.0  # generated terms' CPU seconds in this window
        self._per_term: np.ndarray | None = None
        self._counted = 0  # calls in this window

    def reference_s(self) -> float | None:
        """The reference reward's median CPU seconds per call so far (None before any sample)."""
        return statistics.median(self._samples) if self._samples else None

    def record(self, state: RewardState, term_cpu_s, terms) -> None:
        """Account one call: `term_cpu_s` the CPU seconds of each of `terms` (RewardTerm) on `state`."""
        self.calls += 1
        if self.calls <= REFERENCE_SAMPLES + 1 or self.calls % SAMPLE_EVERY == 0:
            start = self.clock()
            self.reference(state)
            if self.calls > 1:  # the reference's own first call warms its caches
                self._samples.append(self.clock() - start)
        if self.calls <= self.warmup:
            return
        cpu = np.asarray(term_cpu_s, dtype=np.float64)
        self._spent += float(cpu.sum())
        self._per_term = cpu.copy() if self._per_term is None else self._per_term + cpu
        self._counted += 1
        reference = self.reference_s()
        if reference is not None and self._spent > self.limit * reference * self.window:
            raise RewardCodeError(self._problem(state.num_envs, reference, terms))
        if self._counted >= self.window:
            self._spent, self._per_term, self._counted = 0.0, None, 0

    def _problem(self, num_envs: int, reference: float, terms) -> str:
        per_call = self._spent / self._counted
        worst = int(np.argmax(self._per_term))
        term, share = terms[worst], float(self._per_term[worst] / max(self._spent, 1e-12))
        return problem(term.line, "step-cost", f"the generated terms took {per_call * 1e3:.3g} ms of CPU per training "
                       f"step on {num_envs} environments, {per_call / reference:.1f}x the reference reward's "
                       f"{reference * 1e3:.3g} ms on the same batches (limit {self.limit:g}x, the training setting "
                       f"{self.setting}); `{term.source_name}` took {share:.0%} of it. Make the terms cheaper: "
                       "vectorise, drop Python loops and repeated numpy calls, compute shared values once")

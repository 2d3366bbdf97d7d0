"""What a term call must return: one finite float per environment within OUTPUT_LIMIT.

Terms are documented to stay roughly within [0, 1] (spec weights in [0, 1] then mean the same
for every term); a value beyond ten times that range is no longer a reward shape but a number
that swamps every other term and, near the float limits (1e308, 2**63), turns training into
NaN. The check rejects such a candidate and training fails it, naming the term and the value.
"""

from __future__ import annotations

import numpy as np

from motionvl.rewards.sandbox.errors import RewardCodeError, problem, problem_from_exception
from motionvl.rewards.sandbox.instrument import RewardTerm
from motionvl.rewards.state import RewardState

OUTPUT_LIMIT = 10.0
"""Largest |value| a generated term may return: ten times its documented [0, 1] range."""


def evaluate_term(term: RewardTerm, state: RewardState) -> np.ndarray:
    """Call `term` and return its float64 (N,) output; RewardCodeError on errors or a bad output."""
    try:
        out = term.fn(state)
    except Exception as exc:  # noqa: BLE001 - whatever the candidate raised is its problem, with its line
        raise RewardCodeError(problem_from_exception(exc, term.filename, term.line)) from None
    return check_output(term, out, state.num_envs)


def check_output(term: RewardTerm, out, n: int) -> np.ndarray:
    """`out` as a float64 (N,) array if it is one: numeric, of shape (n,), finite, within OUTPUT_LIMIT."""
    name = f"`{term.source_name}`"
    if not isinstance(out, np.ndarray):
        kind = "a scalar" if isinstance(out, (int, float, np.generic)) else \
            "None (missing return?)" if out is None else type(out).__name__
        raise RewardCodeError(problem(term.line, "shape", f"{name} returned {kind}; return one value per environment, "
                                      f"an ({n},) array (e.g. value * np.ones_like(state.base_height))"))
    if out.dtype.kind not in "biuf":
        raise RewardCodeError(problem(term.line, "dtype", f"{name} returned dtype {out.dtype.name}; return floats"))
    if out.shape != (n,):
        raise RewardCodeError(problem(term.line, "shape", f"{name} returned shape {out.shape}, expected ({n},); reduce "
                                      "per-joint/per-foot axes with np.sum(..., axis=1) or select a column"))
    out = out.astype(np.float64)  # a copy: the caller owns it
    finite = np.isfinite(out)
    if not finite.all():
        raise RewardCodeError(problem(term.line, "non-finite", f"{name} returned NaN/inf for {int(n - finite.sum())} of "
                                      f"{n} environments; guard divisions and logs (x / (y + 1e-6), "
                                      "np.log(np.maximum(x, 1e-6))) and clip inputs"))
    return check_range(term, out)


def check_range(term: RewardTerm, out: np.ndarray) -> np.ndarray:
    """`out` if every value is within OUTPUT_LIMIT; else RewardCodeError naming the term and the worst value."""
    worst = int(np.argmax(np.abs(out))) if out.size else 0
    if out.size and not abs(out[worst]) <= OUTPUT_LIMIT:
        count = int(np.count_nonzero(~(np.abs(out) <= OUTPUT_LIMIT)))
        raise RewardCodeError(problem(term.line, "output-range", f"`{term.source_name}` returned {out[worst]:.3g} "
                                      f"({count} of {out.size} environments beyond +-{OUTPUT_LIMIT:g}, ten times the "
                                      "documented [0, 1] term range); normalise it, e.g. np.exp(-error / sigma) or "
                                      "np.clip(x, 0, 1)"))
    return out

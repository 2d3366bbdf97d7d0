"""A safe home for generated (untrusted) reward code, one layer per module:

  rules.py        static rules, checked before anything runs (what may be written)
  instrument.py   restricted compile: operators routed through the guard, a whitelist namespace
  namespace.py    what code can call: np wrappers and methods of exact signature, the builtins
  guard.py        run-time limits: array sizes, weighted work accounting, growth of ints/strings
  readonly.py     the state generated code sees: copies no route can write
  outputs.py      what a term must return (finite (N,) values within +-OUTPUT_LIMIT)
  isolation.py    where terms run: a limited worker process with a deadline per call (worker.py)
  cost.py         a bound on the terms' CPU time per training step against the reference reward's
  test_states.py  the check's batches: rollouts, plausible and extreme states at training size
  check.py        the check: all of the above on the check's batches, before training

Reward code format (the synthesizer prompt quotes this)
-------------------------------------------------------
A Python module holding only:
- term functions `def _reward_<name>(state):` (added to the reward) and `def _cost_<name>(state):`
  (subtracted). Each returns one float per environment: an (N,) array computed from `state`, a
  read-only RewardState whose fields are listed below. <name> uses lowercase letters, digits and
  `_`, and is not a library term's name (`alive`, `orientation`, ...: weight those in the spec, or
  name your own version differently, e.g. `alive_gen`). Weights in [0, 1] come from the reward spec, not from the code, so keep every term within
  [0, 1], e.g. `np.exp(-err / sigma)`; a value beyond +-10 rejects the candidate.
- optional helper functions with lowercase names (semantic state variables) that terms call;
- optional module-level constants: numbers, strings, tuples/lists of them (`SIGMA = 0.25`).
`np` is NOT numpy: it is a namespace holding only whitelisted math (listed below, with the state
fields); masks are applied with np.where or by multiplying. Functions take their documented
arguments only (no out=, dtype=, shape=, by keyword or position). Arrays support a few methods
(`x.sum(axis=1)`, `x.clip(0, 1)`, `x.astype(float)`, ...) and the attributes T, shape, ndim, size.
Builtins: abs min max len range float int bool round sum enumerate zip. Example:

    SIGMA = 0.25

    def forward_speed_error(state):
        return np.square(state.base_lin_vel[:, 0] - state.command[:, 0])

    def _reward_track_forward_speed(state):
        return np.exp(-forward_speed_error(state) / SIGMA)

    def _cost_torque(state):
        return np.mean(np.square(state.joint_torque / state.effort_limit), axis=1)

Rules (checked before anything runs; each problem reads `line L: rule: what to do instead`)
------------------------------------------------------------------------------------------
- Top level: only `def`s, constants and a docstring. No import, class, global/nonlocal, try,
  with, while, raise, del, assert, lambda, yield/async, walrus, f-strings, dict/set displays,
  nested functions or decorators.
- Names: locals, parameters, module constants, module functions (only called, never passed as
  values), `np`, `state` and the builtins above. Nothing starting with `_` except term names
  (so no dunders), no open/exec/eval/getattr/__import__/... .
- Attributes: `state.<documented field>`, `np.<listed name>`, and the listed array methods and
  attributes on any value. No attribute starting with `_`, no str.format. `np.float64` and the
  other dtype names are only arguments of `x.astype(...)`.
- Calls: module functions, `np.<function>`, the builtins, listed array methods; keywords only
  axis, keepdims, ord, decimals, ddof, nan/posinf/neginf, min/max/a_min/a_max, start, strict.
- Loops: `for`/comprehensions only over range(<int literals>) with <= 64 steps, a literal
  tuple/list, a module-level tuple constant, state.joint_names, or enumerate/zip of these.
  No recursion (the call graph must be acyclic), helpers nested at most 24 calls deep. The
  statically counted operations of a term (loops multiply, calls add) must stay <= 20000, those
  of all terms together <= 100000.
- No mutation: assignments only to plain names (`x += y` means `x = x + y`); no `out=`. The
  state's arrays are read-only copies anyway.
- Literals: ints <= 2**63, strings <= 4096 chars, displays <= 256 items; `**` exponent literals
  within [-64, 64]; `seq * n` with a literal n <= 4096; no `@`, `<<`, `>>`, `'%'` formatting,
  chained comparisons (`a < b < c`: write `(a < b) & (b < c)`).
- At run time intermediate arrays stay <= 64 values per environment; a term call builds <= 4096
  array elements per environment in all and does <= 65536 additions' worth of work per
  environment, all terms of a step together <= 131072 (per element: exp/log/sqrt count 8, a
  reduction along an axis 32-64, sin/cos, %, // and a median 256, a power other than ** 2, ** 0.5
  or ** -1 2048; per call of a numpy function or array method 8192 and per operator on plain
  numbers 4096 whatever the size, so loops over scalars are dear; per element a comparison of
  tuples/lists visits 64, per character of float("...") 8, per digit of round(x, ndigits) on a
  Python number 256); numpy takes numbers,
  numeric arrays and flat lists of numbers (no nested lists, no strings); norms are vector norms
  (give axis=-1 for rows); indices are plain ints (no masks or index arrays: use np.where);
  ints/strings/sequences cannot grow without bound.
- Terms run in a separate process with CPU, memory and file limits and a deadline per call,
  in the check and in training alike. The check calls every term several times on batches of
  the training size and smaller ones: states recorded from the training environment under a
  random policy at the training gait periods (falls and impacts included), states as late in a
  training episode, plausible random states and extreme but valid ones; it requires finite (N,)
  arrays within [-10, 10]. Training measures the terms' CPU time per step: more than
  reward_cost_limit (default 8) times the hand-written reference reward's on the same batches
  fails the candidate.
"""

from __future__ import annotations

from motionvl.rewards.sandbox.check import check_reward_code
from motionvl.rewards.sandbox.cost import StepCost
from motionvl.rewards.sandbox.errors import GuardError, RewardCodeError
from motionvl.rewards.sandbox.instrument import CompiledCode, RewardTerm, compile_code, compile_reward_code
from motionvl.rewards.sandbox.isolation import CALL_DEADLINE_S, InProcessTerms, IsolatedTerms
from motionvl.rewards.sandbox.namespace import ARRAY_METHODS, NP_FUNCTIONS, NP_NAMES, SEQUENCE_METHODS
from motionvl.rewards.sandbox.outputs import OUTPUT_LIMIT, evaluate_term
from motionvl.rewards.sandbox.rules import SAFE_ATTRS, STATE_ATTRS
from motionvl.rewards.sandbox.test_states import extreme_reward_state, random_reward_state
from motionvl.rewards.state import STATE_API_DOC

__all__ = [
    "CALL_DEADLINE_S", "OUTPUT_LIMIT", "STATE_ATTRS", "CompiledCode", "GuardError", "InProcessTerms", "IsolatedTerms",
    "RewardCodeError", "RewardTerm", "StepCost", "check_reward_code", "compile_code", "compile_reward_code", "evaluate_term",
    "extreme_reward_state", "random_reward_state", "reward_code_api_doc",
]


def reward_code_api_doc() -> str:
    """Format, math namespace and state fields: everything the synthesizer prompt needs."""
    body = __doc__.split("Reward code format (the synthesizer prompt quotes this)")[-1].strip("-\n ")
    return "\n".join([
        body,
        "",
        "np functions: " + ", ".join(sorted(NP_FUNCTIONS)),
        "np constants and dtype names: " + ", ".join(sorted(NP_NAMES - NP_FUNCTIONS)),
        "array methods: " + ", ".join(sorted(ARRAY_METHODS)) + "; string/tuple methods: "
        + ", ".join(sorted(SEQUENCE_METHODS)) + "; array attributes: " + ", ".join(sorted(SAFE_ATTRS)),
        "",
        STATE_API_DOC,
    ])

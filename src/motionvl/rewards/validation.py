"""The one validation entry point for reward specs: everything that trains on a spec calls it.

    validate_spec(spec, robot=None) -> None, or raises RewardValidationError

It runs, in order: the spec's own checks (keys, weights, library terms and their params), the
static rules and restricted compile of its generated code, the isolated test run of that code
(a separate, resource- and time-limited process), and, given a robot, one evaluation of the
library terms on that robot's joints (a joint pattern that matches nothing fails here, not in
training). The error's str() is a bounded message meant to go back to the LLM that wrote the
spec: at most MAX_PROBLEMS lines of `line L: rule: what to do`, quoting the candidate only in
short excerpts (see messages.py).

Callers: `train_policy` and `build_runner` (so every runner, bench scripts included), the
policy_trainer node's intake (`TrainingJob.from_json`), `motionvl bench train --reward`, and
the reward synthesizer for every candidate. A spec whose code already passed the isolated test
in this process is not run again (the result is remembered by the code's hash).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

from motionvl.rewards.messages import bound_problems, bounded_message, excerpt
from motionvl.rewards.spec import RewardSpec, RewardSpecError

DEFAULT_TIMEOUT_S = 5.0
"""Wall-time limit of the isolated test run, seconds."""

_PASSED_CODE: OrderedDict[str, bool] = OrderedDict()  # sha256 of code that passed its isolated test
_PASSED_CODE_SIZE = 256
_PASSED_LOCK = threading.Lock()


class RewardValidationError(RewardSpecError):
    """A reward spec failed validation. `problems` are bounded `line L: rule: ...` / `term 'x': ...`
    lines; str() is a heading plus those lines, at most messages.MAX_MESSAGE_CHARS long, fit to go
    back to the LLM verbatim."""

    def __init__(self, problems, where: str = "reward spec"):
        self.problems = bound_problems([problems] if isinstance(problems, str) else problems)
        self.where = excerpt(where, 80)
        super().__init__(bounded_message(f"{self.where} rejected ({len(self.problems)} problem(s)):", self.problems))


def validate_spec(spec, robot=None, *, num_envs: int = 64, timeout_s: float = DEFAULT_TIMEOUT_S,
                  seed: int | None = None) -> None:
    """Validate `spec` (a RewardSpec, or a mapping in RewardSpec.to_dict() form) for training on `robot`
    (a RobotConfig; None: the package's robot config). Returns None; raises RewardValidationError.

    num_envs: batch size of the isolated test run; timeout_s: its wall-time limit; seed: its random
    batches (None: fresh each call)."""
    where = "reward spec"
    try:
        if isinstance(spec, Mapping):
            spec = RewardSpec.from_dict(dict(spec))
        elif not isinstance(spec, RewardSpec):
            raise RewardValidationError(f"expected a RewardSpec or a mapping, got {type(spec).__name__}")
    except RewardValidationError:
        raise
    except RewardSpecError as exc:
        raise RewardValidationError(_spec_problems(str(exc)), where) from None
    where = f"reward spec '{spec.name}'" if spec.name else where
    problems = []
    if spec.code:
        problems += _test_code(spec.code, num_envs=num_envs, timeout_s=timeout_s, seed=seed)
    if not problems:
        problems += _library_problems(spec, robot)
    if problems:
        raise RewardValidationError(problems, where)


def _spec_problems(message: str) -> list[str]:
    """A RewardSpecError's message ('where: a; b' or 'where:\\n  - a\\n  - b') as one line per problem."""
    lines = [line.strip().removeprefix("- ") for line in message.splitlines()]
    return [line for line in lines if line and not line.endswith(":")] or [message]


def _test_code(code: str, *, num_envs: int, timeout_s: float, seed: int | None) -> list[str]:
    from motionvl.rewards import sandbox

    key = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
    with _PASSED_LOCK:
        if key in _PASSED_CODE:
            _PASSED_CODE.move_to_end(key)
            return []
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**32))
    try:
        sandbox.check_reward_code(code, num_envs=num_envs, timeout_s=timeout_s, seed=seed)
    except sandbox.RewardCodeError as exc:
        return list(exc.problems)
    with _PASSED_LOCK:
        _PASSED_CODE[key] = True
        while len(_PASSED_CODE) > _PASSED_CODE_SIZE:
            _PASSED_CODE.popitem(last=False)
    return []


def _library_problems(spec: RewardSpec, robot) -> list[str]:
    """Every weighted library term evaluated once on a plausible batch of `robot`'s joints."""
    from motionvl.rewards.sandbox import random_reward_state

    library = [t for t in spec.terms if t.source == "library"]
    if not library:
        return []
    state = random_reward_state(8, np.random.default_rng(0), robot=robot)
    try:
        spec.check(state, only=[t.name for t in library])
    except RewardSpecError as exc:
        return _spec_problems(str(exc))
    return []

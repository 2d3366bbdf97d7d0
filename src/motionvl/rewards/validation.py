"""The one validation entry point for reward specs: everything that trains on a spec calls it.

    validate_spec(spec, robot=None, *, num_envs=None, env_cfg=None) -> None, or RewardValidationError

It runs, in order: the spec's own checks (keys, weights, library terms and their params), the
static rules and restricted compile of its generated code, the check of that code (sandbox/
check.py: every term run in the same limited worker process training uses, on batches of the
training size from rollouts of the training environment, plausible and extreme states), and one
evaluation of the library terms on the robot's joints (a joint pattern that matches nothing fails
here, not in training). The error's str() is a bounded message meant to go back to the LLM that
wrote the spec: at most MAX_PROBLEMS lines of `line L: rule: what to do`, quoting the candidate
only in short excerpts (see messages.py).

Callers: `train_policy` and `build_runner` (so every runner, bench scripts included), the
policy_trainer node's intake (`TrainingJob.from_json`), `motionvl bench train --reward`,
`motionvl reward check` (through the sandbox's check), and the reward synthesizer for every
candidate. Code that passed for a robot and batch size in this process is not run again (the
result is remembered by the code's hash, with the conditions it was checked under).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

from motionvl.rewards.messages import bound_problems, bounded_message, excerpt, quote
from motionvl.rewards.sandbox.check import DEFAULT_TIMEOUT_S
from motionvl.rewards.spec import RewardSpec, RewardSpecError

_PASSED_CODE: OrderedDict[tuple, bool] = OrderedDict()  # (sha256 of code, robot, batch size, conditions) that passed
_PASSED_CODE_SIZE = 256
_PASSED_LOCK = threading.Lock()


class RewardValidationError(RewardSpecError):
    """A reward spec failed validation. `problems` are bounded `line L: rule: ...` / `term 'x': ...`
    lines; str() is a heading plus those lines, at most messages.MAX_MESSAGE_CHARS long, fit to go
    back to the LLM verbatim."""

    def __init__(self, problems, where: str = "reward spec", outcome: str = "rejected"):
        self.problems = bound_problems([problems] if isinstance(problems, str) else problems)
        self.where = excerpt(where, 80)
        super().__init__(bounded_message(f"{self.where} {outcome} ({len(self.problems)} problem(s)):", self.problems))


def validate_spec(spec, robot=None, *, num_envs: int | None = None, env_cfg=None,
                  timeout_s: float = DEFAULT_TIMEOUT_S, seed: int | None = None) -> None:
    """Validate `spec` (a RewardSpec, or a mapping in RewardSpec.to_dict() form) for training on `robot`
    (a RobotConfig; None: the package's robot config). Returns None; raises RewardValidationError.

    The generated code's check runs like training: batches of `num_envs` environments (None: env_cfg's
    num_envs, else the environment's default 512), states recorded from env_cfg's environment (None: the
    default EnvConfig), a fresh random `seed` unless one is given; timeout_s bounds the whole check."""
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
    where = f"reward spec {quote(spec.name)}" if spec.name else where
    problems = []
    if spec.code:
        problems += _test_code(spec.code, robot=robot, num_envs=num_envs, env_cfg=env_cfg, timeout_s=timeout_s,
                               seed=seed)
    if not problems:
        problems += _library_problems(spec, robot)
    if problems:
        raise RewardValidationError(problems, where)


def _spec_problems(message: str) -> list[str]:
    """A RewardSpecError's message ('where: a; b' or 'where:\\n  - a\\n  - b') as one line per problem."""
    lines = [line.strip().removeprefix("- ") for line in message.splitlines()]
    return [line for line in lines if line and not line.endswith(":")] or [message]


def _test_code(code: str, *, robot, num_envs, env_cfg, timeout_s: float, seed: int | None) -> list[str]:
    from motionvl.rewards import sandbox
    from motionvl.rewards.sandbox.test_states import check_conditions, training_batch_size

    num_envs = training_batch_size(env_cfg) if num_envs is None else int(num_envs)
    robot_key = None if robot is None else (robot.name, robot.joint_names)
    key = (hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest(), robot_key, num_envs,
           check_conditions(env_cfg))
    with _PASSED_LOCK:
        if key in _PASSED_CODE:
            _PASSED_CODE.move_to_end(key)
            return []
    try:
        sandbox.check_reward_code(code, num_envs=num_envs, timeout_s=timeout_s, seed=seed, robot=robot,
                                  env_cfg=env_cfg)
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

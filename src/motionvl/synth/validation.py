"""From a proposed spec (a dict out of a model's answer or the rules) to a validated RewardSpec or a rejection.

Every candidate passes `check_spec` before it can cost any training: the sandbox's single entry
point `motionvl.rewards.validate_spec` (RewardSpec's names, weights in [0, 1] and parameters, the
restricted compile and the isolated, time- and memory-limited test run of generated code, the
library terms against the robot). Its bounded message is what goes back to the model for repair.
"""

from __future__ import annotations

from typing import Any

from motionvl.rewards import validate_spec
from motionvl.rewards.spec import RewardSpec
from motionvl.synth.api import bounded


def check_spec(raw: Any, *, where: str = "candidate", robot=None, environment: dict | None = None
               ) -> tuple[RewardSpec | None, str | None]:
    """(spec, None) when `raw` (a spec dict or RewardSpec) passes every check, else (None, bounded reason).
    environment: the run's training environment (an EnvConfig mapping, its num_envs the run's): generated code is
    checked on its batch size and states, as training will run it (None: the environment's defaults)."""
    try:
        validate_spec(raw, robot=robot, env_cfg=environment_config(environment))
        spec = raw if isinstance(raw, RewardSpec) else RewardSpec.from_dict(raw, where=where)
    except ValueError as exc:  # RewardValidationError (a RewardSpecError): the message is meant for the model
        return None, bounded(str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever else the checks raise rejects this candidate, not the caller
        return None, bounded(f"the spec could not be checked: {type(exc).__name__}: {exc}")
    return spec, None


def environment_config(environment: dict | None):
    """An EnvConfig from its mapping (None: None); ValueError naming a bad key."""
    if environment is None:
        return None
    from motionvl.envs.config import EnvConfig, dataclass_from_dict

    return dataclass_from_dict(EnvConfig, dict(environment), "the run's training environment")

"""From a proposed spec (a dict out of a model's answer or the rules) to a validated RewardSpec or a rejection.

Every candidate passes `check_spec` before it can cost any training: `RewardSpec` (names, weights in
[0, 1], parameters, the restricted compile of generated code) and then the sandbox's single entry
point `motionvl.rewards.validate_spec` (the isolated, time- and memory-limited test run of the
code). The message of a refusal is what goes back to the model for repair.
"""

from __future__ import annotations

from typing import Any

from motionvl.rewards.spec import RewardSpec
from motionvl.synth.api import bounded


def validate(spec: RewardSpec, robot=None) -> None:
    """The sandbox's one check of a spec; raises ValueError (RewardValidationError / RewardSpecError)."""
    try:
        from motionvl.rewards import validate_spec
    except ImportError:  # until the sandbox's entry point lands: today's isolated test of generated code
        spec.test_generated_code()
        return
    validate_spec(spec, robot=robot)


def check_spec(raw: Any, *, where: str = "candidate", robot=None) -> tuple[RewardSpec | None, str | None]:
    """(spec, None) when `raw` (a spec dict or RewardSpec) passes every check, else (None, bounded reason)."""
    try:
        spec = raw if isinstance(raw, RewardSpec) else RewardSpec.from_dict(raw, where=where)
        validate(spec, robot=robot)
    except ValueError as exc:  # RewardSpecError, RewardValidationError, RewardCodeError: messages meant for the model
        return None, bounded(str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever else the checks raise rejects this candidate, not the caller
        return None, bounded(f"the spec could not be checked: {type(exc).__name__}: {exc}")
    return spec, None

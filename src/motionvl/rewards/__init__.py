"""Reward terms, reward specs, and the sandbox for generated reward code (no ROS).

`validate_spec(spec, robot=None)` is the one validation entry point (see validation.py); it and
`RewardValidationError` are importable from here, loaded on first use so that importing one
submodule stays light.
"""

_LAZY = {"validate_spec": "motionvl.rewards.validation", "RewardValidationError": "motionvl.rewards.validation"}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

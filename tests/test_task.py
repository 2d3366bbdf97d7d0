"""motionvl.task: what the keyword rules read from task sentences."""

import pytest

from motionvl.task import parse_task


@pytest.mark.parametrize("task, expected", [
    ("walk forward with straight knees at 0.6 m/s", dict(gait="walk", direction="forward", speed=0.6, knees="straight")),
    ("turn left in place", dict(gait="turn", turn="left", in_place=True)),
    ("stand upright", dict(gait="stand", torso="upright")),
    ("run fast", dict(gait="run", speed_word="fast")),
    ("march in place with high knees", dict(gait="step", steps=["high"])),
    ("sidestep to the right at 20 cm/s", dict(direction="right", speed=pytest.approx(0.2))),
    ("walk backward slowly without falling", dict(direction="backward", speed_word="slow", stable=True)),
])
def test_task_rules(task, expected):
    spec = parse_task(task)
    for key, value in expected.items():
        assert getattr(spec, key) == value, (key, spec)
    assert spec.unjudged == []

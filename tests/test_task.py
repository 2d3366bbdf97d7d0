"""motionvl.task: what the keyword rules read from task sentences, and the task object they make: command,
terrain and success criterion (the sentence -> command/terrain/criterion table)."""

import json

import pytest

from motionvl.task import (DEFAULT_COMMAND, SPEEDS, TURN_RATE, Criterion, Task, TaskError, criterion_for_command,
                           make_task, parse_task, policy_task, tool_task)


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


# ----------------------------------------------------------------------------- the task object

F, B, S = SPEEDS["forward"], SPEEDS["backward"], SPEEDS["sideways"]
# sentence -> (motion, command, terrain, terrain level, criterion, a shipped reference fits)
TABLE = [
    ("walk forward with straight knees", "walk", (F, 0, 0), "flat", None, "distance", True),
    ("walk forward at 0.3 m/s with straight knees", "walk", (0.3, 0, 0), "flat", None, "distance", True),
    ("walk with high steps", "walk", (F, 0, 0), "flat", None, "distance", True),
    ("walk with an upright torso", "walk", (F, 0, 0), "flat", None, "distance", True),
    ("with straight knees", "walk", DEFAULT_COMMAND, "flat", None, "distance", True),
    ("walk slowly", "walk", (0.3, 0, 0), "flat", None, "distance", True),
    ("walk fast", "walk", (0.9, 0, 0), "flat", None, "distance", True),
    ("walk at 0.9 m/s", "walk", (0.9, 0, 0), "flat", None, "distance", True),
    ("walk at 2 km/h", "walk", (2 / 3.6, 0, 0), "flat", None, "distance", True),
    ("run", "run", (0.9, 0, 0), "flat", None, "distance", True),
    ("run at 1.2 m/s", "run", (1.2, 0, 0), "flat", None, "distance", True),
    ("walk backward", "walk", (-B, 0, 0), "flat", None, "distance", True),
    ("walk backward slowly", "walk", (-0.15, 0, 0), "flat", None, "distance", True),
    ("walk backward at 0.4 m/s", "walk", (-0.4, 0, 0), "flat", None, "distance", True),
    ("walk sideways", "walk", (0, S, 0), "flat", None, "distance", True),
    ("sidestep to the right", "walk", (0, -S, 0), "flat", None, "distance", True),
    ("walk to the left at 20 cm/s", "walk", (0, 0.2, 0), "flat", None, "distance", True),
    ("walk forward while turning left", "walk", (F, 0, TURN_RATE), "flat", None, "distance", True),
    ("turn left in place", "turn in place", (0, 0, TURN_RATE), "flat", None, "turn", False),
    ("turn right", "turn in place", (0, 0, -TURN_RATE), "flat", None, "turn", False),
    ("turn right slowly", "turn in place", (0, 0, -0.25), "flat", None, "turn", False),
    ("spin around", "turn in place", (0, 0, TURN_RATE), "flat", None, "turn", False),
    ("turn left at 30 deg/s", "turn in place", (0, 0, 0.5236), "flat", None, "turn", False),
    ("stand still", "stand", (0, 0, 0), "flat", None, "stand", True),
    ("stand upright without falling", "stand", (0, 0, 0), "flat", None, "stand", True),
    ("march in place with high knees", "step in place", (0, 0, 0), "flat", None, "in_place", True),
    ("hop in place", "hop in place", (0, 0, 0), "flat", None, "in_place", True),
    ("walk on uneven ground", "walk", (F, 0, 0), "rough", None, "progress", True),
    ("walk over rough terrain at level 3", "walk", (F, 0, 0), "rough", 3, "progress", True),
    ("walk forward on flat ground", "walk", (F, 0, 0), "flat", None, "distance", True),
    ("climb the stairs", "walk", (F, 0, 0), "stairs_up", None, "progress", False),
    ("go upstairs slowly", "walk", (0.3, 0, 0), "stairs_up", None, "progress", False),
    ("walk down the stairs", "walk", (F, 0, 0), "stairs_down", None, "progress", False),
    ("walk up a slope", "walk", (F, 0, 0), "slope_up", None, "progress", True),
    ("walk downhill with short steps", "walk", (F, 0, 0), "slope_down", None, "progress", True),
    ("walk up the steps with high steps", "walk", (F, 0, 0), "stairs_up", None, "progress", False),
]


# the sentences of TABLE that ask a speed: walking faster than asked does not succeed
ASK_A_SPEED = {"walk forward at 0.3 m/s with straight knees", "walk slowly", "walk fast", "walk at 0.9 m/s",
               "walk at 2 km/h", "run", "run at 1.2 m/s", "walk backward slowly", "walk backward at 0.4 m/s",
               "walk to the left at 20 cm/s", "go upstairs slowly"}


@pytest.mark.parametrize("sentence, motion, command, terrain, level, criterion, fits", TABLE, ids=[t[0] for t in TABLE])
def test_the_sentence_decides_command_terrain_and_criterion(sentence, motion, command, terrain, level, criterion, fits):
    task = make_task(sentence)
    assert task.motion == motion
    assert task.command == pytest.approx(command, abs=1e-4)
    assert (task.terrain, task.terrain_level, task.criterion.kind, task.reference_fits) == (terrain, level, criterion, fits)
    assert task.unjudged == [], task.unjudged
    most = task.criterion.max_fraction
    assert most == (pytest.approx(2 - task.criterion.success_fraction) if sentence in ASK_A_SPEED else None), most


def test_the_table_holds_at_least_thirty_sentences_and_every_motion_and_terrain():
    assert len(TABLE) >= 30
    assert {t[1] for t in TABLE} >= {"walk", "run", "turn in place", "stand", "step in place"}
    assert {t[3] for t in TABLE} == {"flat", "rough", "slope_up", "slope_down", "stairs_up", "stairs_down"}


@pytest.mark.parametrize("sentence", ["dance the tango", "juggle three balls", "recite a poem loudly"])
def test_a_sentence_nothing_can_be_commanded_or_judged_from_stops_naming_it(sentence):
    with pytest.raises(TaskError, match="nothing in the task .* can be commanded or judged") as err:
        make_task(sentence)
    assert sentence in str(err.value) and "--command" in str(err.value)
    task = make_task(sentence, command=(0.3, 0.0, 0.0), allow_unjudged=True)  # a model synthesizer, a given command
    assert task.command == (0.3, 0.0, 0.0) and task.command_source == "given" and task.criterion.kind == "distance"
    assert task.unjudged == [sentence]
    with pytest.raises(TaskError):  # the rules backend cannot propose for it, whatever the command
        make_task(sentence, command=(0.3, 0.0, 0.0))


@pytest.mark.parametrize("sentence, understood, unjudged", [
    ("juggle while standing", "stand", ["juggle"]),
    ("climb 10 cm stairs", "walk", ["10 cm"]),
    ("walk forward like a penguin", "walk", ["like a penguin"]),
])
def test_parts_the_rules_do_not_understand_are_kept_beside_what_they_command(sentence, understood, unjudged):
    task = make_task(sentence)
    assert task.motion == understood and task.unjudged == unjudged


def test_a_given_command_replaces_the_sentences_and_the_limits_refuse_the_impossible():
    task = make_task("walk forward", command=(0.4, 0.0, 0.1))
    assert task.command == (0.4, 0.0, 0.1) and task.command_source == "given"
    with pytest.raises(TaskError, match="beyond"):
        make_task("walk forward at 3 m/s")


def test_a_task_sets_only_what_it_needs_and_walking_keeps_the_defaults():
    assert make_task("walk forward with straight knees").env == {}
    assert make_task("walk backward slowly").env == {}
    assert make_task("stand still").env == {"env.gait_stand_below": 0.1}, "standing rests the stepping feed-forward"
    assert make_task("stand still").spread == (0.0, 0.0, 0.0), "standing trains at its command exactly"
    overrides = make_task("turn left in place").training_overrides(0.5, ((-0.5, 1.0), (-0.3, 0.3), (-1.0, 1.0)))
    assert "env.commands.task=[0.0, 0.0, 0.5]" in overrides and "env.commands.task_share=0.5" in overrides
    assert not any(o.startswith(("env.terrain", "env.gait")) for o in overrides)
    fast = make_task("run at 1.2 m/s").training_overrides(0.5, ((-0.5, 1.0), (-0.3, 0.3), (-1.0, 1.0)))
    assert "env.commands.vx=[-0.5, 1.2]" in fast, "a command outside the base's ranges widens them"
    assert "env.commands.task_share=0.5" in fast, "and is practised"
    ranges, start = ((-0.5, 1.0), (-0.3, 0.3), (-1.0, 1.0)), ((0.3, 0.8), (-0.1, 0.1), (-0.3, 0.3))
    for walk in ("walk forward with straight knees", "walk forward slowly"):
        overrides = make_task(walk).training_overrides(0.5, ranges, start)
        assert not any(o.startswith("env.commands.task_share") for o in overrides), \
            f"{walk}: the base's curriculum starts with it"
    for walk in ("walk backward slowly", "walk sideways to the left"):
        overrides = make_task(walk).training_overrides(0.5, ranges, start)
        assert "env.commands.task_share=0.5" in overrides, f"{walk}: the curriculum reaches it late"
        assert not any(o.startswith("env.commands.task_share") for o in make_task(walk).training_overrides(
            0.5, ranges)), f"{walk}: without a curriculum the base's ranges train it"
    sideways = make_task("walk sideways to the left")
    assert sideways.env == {"env.gait_lateral_stride": 0.3}, "side-stepping gets the lateral stride"
    assert "env.gait_lateral_stride=0.3" in sideways.training_overrides(0.5, ranges, start)
    rough = make_task("walk on rough ground at level 2").training_overrides(0.0)
    assert "env.terrain=rough" in rough and "env.terrain_level=2" in rough
    assert not any(o.startswith("env.commands.task") for o in rough), "share 0: the base's distribution alone"


def test_a_task_round_trips_through_its_record_and_tools_find_it_in_a_policys_metadata():
    task = make_task("turn left in place")
    again = Task.from_dict(json.loads(json.dumps(task.to_dict())))
    assert again.to_dict() == task.to_dict() and again.spec.turn == "left"
    assert policy_task({"task": task.to_dict()}).command == task.command
    assert policy_task({"task": "stand still"}).motion == "stand", "an older file records the sentence alone"
    assert policy_task({"task": "dance the tango"}) is None and policy_task({}) is None
    assert tool_task(None, {"task": task.to_dict()}).command == (0.0, 0.0, 0.5)
    assert tool_task(None, {"task": task.to_dict()}, command=(0.0, 0.0, 0.3)).command == (0.0, 0.0, 0.3)
    assert tool_task("walk backward", {"task": task.to_dict()}).command == (-0.3, 0.0, 0.0), "--task wins"
    assert tool_task(None, None) is None
    assert tool_task("dance the tango", None, strict=False) is None


def test_criteria_follow_a_bare_command_and_refuse_nonsense():
    assert criterion_for_command((0.6, 0, 0)).kind == "distance"
    assert criterion_for_command((0, 0, 0.5)).kind == "turn"
    assert criterion_for_command((0, 0, 0)).kind == "in_place"
    with pytest.raises(TaskError):
        Criterion("fly")
    with pytest.raises(TaskError):
        Criterion("stand", min_contact=1.5)
    assert "both feet in contact >= 90%" in make_task("stand still").describe()
    assert ">= 2.50 m and <= 3.50 m of the commanded 3.00 m" in make_task("walk forward slowly").describe()
    with pytest.raises(TaskError, match="max_fraction"):
        Criterion("distance", max_fraction=0.9)

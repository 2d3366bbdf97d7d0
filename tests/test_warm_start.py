"""Warm start (motionvl.rl.warm_start): a new run from another run's checkpoint, with another reward spec."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import yaml

from motionvl.envs.config import Schedule
from motionvl.rewards.spec import RewardSpec
from motionvl.rl.trainer import build_runner, train_policy
from motionvl.rl.warm_start import WarmStart
from motionvl.robot import ConfigError
from rl_fixtures import tiny_config

WALK = RewardSpec.from_dict({"name": "walk", "terms": {"tracking_lin_vel": 1.0, "orientation": 0.3}})
STRAIGHT_KNEES = WALK.with_weights({"orientation": 0.6})


def schedule_config():
    """Tiny runs whose gait period falls 0.7 -> 0.5 s over iterations 2-6 and whose command curriculum
    cannot move (so the level carried over is the one saved)."""
    cfg = tiny_config(gait_period_s=0.5, gait_period_schedule=Schedule(start=0.7, iterations=(2, 6)))
    cfg.env.commands = dataclasses.replace(cfg.env.commands, curriculum=True, curriculum_error=0.0)
    cfg.ppo.init_std = 0.5
    return cfg


@pytest.fixture(scope="module")
def parent(tmp_path_factory, robot):
    run_dir = tmp_path_factory.mktemp("parent")
    train_policy(run_dir, WALK, schedule_config(), max_iterations=3, progress=False, robot=robot)
    ckpt = torch.load(run_dir / "checkpoints/latest.pt", weights_only=False)
    ckpt["infos"]["command_level"] = 0.4  # as a run whose curriculum had widened would have saved it
    torch.save(ckpt, run_dir / "checkpoints/latest.pt")
    torch.save(ckpt, run_dir / "checkpoints/model_3.pt")
    return run_dir


def _history(run_dir):
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def test_warm_start_carries_networks_normaliser_optimiser_and_curriculum_level(parent, robot):
    cfg = schedule_config()
    start = WarmStart.load(parent, cfg.to_dict())
    assert start.checkpoint == parent / "checkpoints/model_3.pt" and start.iteration == 3
    vec, runner = build_runner(cfg, STRAIGHT_KNEES, robot)
    fresh_std = float(runner.alg.get_policy().distribution.std_param.detach().mean())
    start.apply(runner, env=vec.env)
    for name, saved in (("actor", start.saved["actor_state_dict"]), ("critic", start.saved["critic_state_dict"])):
        mine = getattr(runner.alg, f"_raw_{name}").state_dict()
        assert mine.keys() == saved.keys()
        assert all(torch.equal(mine[k], saved[k]) for k in saved), f"the {name} (with its normaliser) carries over"
    assert any("normalizer" in k for k in start.saved["actor_state_dict"]), "the normaliser is in the state"
    assert float(runner.alg.get_policy().distribution.std_param.detach().mean()) != pytest.approx(fresh_std), "the parent's action std"
    saved_lr = start.saved["optimizer_state_dict"]["param_groups"][0]["lr"]
    assert runner.alg.learning_rate == saved_lr and runner.alg.optimizer.state, "Adam's state and the adaptive rate"
    assert vec.env.command_level == pytest.approx(0.4)
    assert runner.current_learning_iteration == 0, "the child counts its own iterations"


def test_a_warm_started_run_trains_on_the_new_spec_and_continues_the_parents_schedules(parent, robot, tmp_path):
    child = tmp_path / "child"
    result = train_policy(child, STRAIGHT_KNEES, schedule_config(), max_iterations=2, progress=False, robot=robot,
                          warm_start=parent)
    assert result.iterations == 2
    history = _history(child)
    assert [r["iteration"] for r in history] == [1, 2], "budgets and history count the child's own iterations"
    # the parent trained iterations 0-2 of the schedule; the child continues at 3 and 4
    assert [r["gait_period_s"] for r in history] == pytest.approx([0.65, 0.6])
    assert history[0]["command_level"] == pytest.approx(0.4)
    assert RewardSpec.from_dict(yaml.safe_load((child / "reward_spec.yaml").read_text())) == STRAIGHT_KNEES
    recorded = yaml.safe_load((child / "config.yaml").read_text())["warm_start"]
    assert recorded == str((parent / "checkpoints/model_3.pt").resolve()), "config.yaml names the file started from"

    # a resume of the child keeps both its spec (no other) and its place in the parent's schedule
    with pytest.raises(ConfigError, match="cannot resume .* with another reward spec"):
        train_policy(child, WALK, None, resume=True, max_iterations=3, progress=False, robot=robot)
    with pytest.raises(ConfigError, match="while resuming"):
        train_policy(child, None, None, resume=True, max_iterations=3, progress=False, robot=robot, warm_start=parent)
    train_policy(child, None, None, resume=True, max_iterations=4, progress=False, robot=robot)
    assert [r["gait_period_s"] for r in _history(child)] == pytest.approx([0.65, 0.6, 0.55, 0.5])


def test_warm_start_from_a_bad_path_or_another_policy_interface_says_why_and_writes_nothing(parent, robot, tmp_path):
    run = tmp_path / "child"

    def start(source, cfg=None):
        train_policy(run, WALK, cfg or schedule_config(), max_iterations=1, progress=False, robot=robot,
                     warm_start=source)

    with pytest.raises(FileNotFoundError, match="no such run directory or checkpoint file"):
        start(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no checkpoint"):
        start(tmp_path / "empty")
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(ConfigError, match="not a readable checkpoint"):
        start(tmp_path / "notes.pt")
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(ConfigError, match="not a MotionVL training checkpoint"):
        start(tmp_path / "other.pt")
    other_interface = schedule_config()
    other_interface.env.obs_history = 2
    other_interface.ppo.actor_hidden_dims = (16,)
    with pytest.raises(ConfigError, match=r"env.obs_history: 5 -> 2; ppo.actor_hidden_dims: \[32, 32\] -> \[16\]"):
        start(parent, other_interface)
    assert not run.exists(), "a refused warm start leaves no run directory behind"
    with pytest.raises(ConfigError, match="from its own checkpoint"):
        WarmStart.load(parent / "checkpoints/model_3.pt", schedule_config().to_dict(), run_dir=parent)

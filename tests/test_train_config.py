"""The training configuration (motionvl.rl.config): shipped defaults, schedules, loading and errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from motionvl.envs.config import EnvConfig, Schedule
from motionvl.rl.config import TrainConfig
from motionvl.robot import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def assert_refused(tmp_path, text: str, message: str) -> None:
    """A training YAML of `text` is refused with a ConfigError matching `message`."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_yaml(bad)


def test_the_shipped_training_config_randomises_with_the_papers_ranges_and_each_switch_turns_off():
    r = TrainConfig.from_yaml(None).env.randomization
    assert (r.friction, tuple(r.friction_range)) == (True, (0.2, 1.3))
    assert (r.gain_scale, tuple(r.gain_scale_range)) == (True, (0.8, 1.2))
    assert (r.joint_friction, tuple(r.joint_friction_range)) == (True, (0.1, 3.0))
    assert (r.push, r.push_interval_s) == (True, 8.0)
    assert (r.latency, tuple(r.latency_range)) == (True, (1, 10))
    for switch in ("friction", "gain_scale", "joint_friction", "push", "latency"):
        off = TrainConfig.from_yaml(None, overrides=[f"env.randomization.{switch}=false"]).env.randomization
        assert getattr(off, switch) is False
        assert all(getattr(off, other) for other in ("friction", "gain_scale", "joint_friction", "push", "latency")
                   if other != switch)


def test_the_shipped_training_yaml_lists_defaults_and_overrides_none():
    assert TrainConfig.from_yaml(None) == TrainConfig(), "config/training.yaml and the dataclass defaults differ"


def test_a_schedule_moves_a_setting_from_its_start_to_its_value_and_loads_like_any_key(tmp_path):
    ramp = Schedule(start=0.7, iterations=(1300, 1500))
    assert [ramp.at(0.6, i) for i in (0, 1300, 1400, 1500, 9000)] == pytest.approx([0.7, 0.7, 0.65, 0.6, 0.6])
    step = Schedule(start=0.0, iterations=(1300, 1300))
    assert [step.at(0.5, i) for i in (0, 1299, 1300, 9000)] == [0.0, 0.0, 0.5, 0.5]
    env = EnvConfig(gait_period_s=0.6, gait_period_schedule=None)
    assert (env.scheduled("gait_period_s", 0), env.scheduled("rough_fraction", 0)) == (0.6, 0.0)
    assert EnvConfig().scheduled("gait_period_s", None) == 0.6, "an env that does not train: the setting's own value"
    # null turns a schedule off; a partial one keeps the rest of the default
    cfg = TrainConfig.from_dict({"env": {"gait_period_schedule": None, "rough_fraction_schedule": {"start": 0.25}}})
    assert cfg.env.gait_period_schedule is None
    assert cfg.env.rough_fraction_schedule == Schedule(start=0.25, iterations=(1300, 1300))
    for text, msg in (("env: {gait_period_schedule: {start: 0}}", "gait_period_schedule.start"),
                      ("env: {gait_period_schedule: {start: fast}}", "expected a number"),
                      ("env: {gait_period_schedule: {iterations: [1500, 1300]}}", "gait_period_schedule.iterations"),
                      ("env: {rough_fraction_schedule: {iterations: [true, 9]}}", "rough_fraction_schedule.iterations"),
                      ("env: {rough_fraction_schedule: {start: 1.5}}", "rough_fraction_schedule.start"),
                      ("env: {gait_period_s: -0.7}", "gait_period_s"), ("env: {rough_fraction: 2}", "rough_fraction"),
                      ("env: {gait_period_schedule: 0.7}", "expected a mapping"),
                      ("env: {gait_period_schedule: {final: 0.7}}", "unknown keys")):
        assert_refused(tmp_path, text, msg)


def test_training_config_loads_and_rejects_bad_values(tmp_path):
    cfg = TrainConfig.from_yaml(ROOT / "config" / "training.yaml")
    assert cfg.to_rsl_rl()["algorithm"]["num_learning_epochs"] == cfg.ppo.num_learning_epochs
    for text, msg in (("ppo: {num_epochs: 3}", "unknown keys"), ("ppo: {num_mini_batches: two}", "expected a number"),
                      ("env: {num_env: 3}", "unknown keys"), ("[1, 2]", "expected a mapping"),
                      ("ppo: {schedule: cosine}", "schedule"), ("update_torch_threads: 0", "update_torch_threads"),
                      ("env: {commands: {heading_gain: -0.5}}", "heading_gain"),
                      ("policy_average_iterations: 0.5", "policy_average_iterations"),
                      ("env: {randomization: {push_velocity: -0.1}}", "push_velocity"),
                      ("env: {randomization: {latency_range: [0, 10]}}", "latency_range"),
                      ("env: {randomization: {latency_range: [8, 4]}}", "latency_range"),
                      ("ppo: {desired_kl: -0.01}", "desired_kl"), ("warm_start: 3", "warm_start"),
                      ("ppo: {estimator_num_epochs: 0}", "estimator_num_epochs"),
                      ("ppo: {estimator_num_epochs: 1.5}", "estimator_num_epochs")):
        assert_refused(tmp_path, text, msg)


def test_training_config_overrides_are_checked_like_the_file(tmp_path):
    base = ROOT / "config" / "training.yaml"
    cfg = TrainConfig.from_yaml(base, ["seed=3", "ppo.desired_kl=0.03", "ppo.symmetry_augmentation=true",
                                       "ppo.actor_hidden_dims=[64, 32]", "env.commands.vx=[0.0, 0.8]"])
    assert (cfg.seed, cfg.ppo.desired_kl, cfg.ppo.symmetry_augmentation) == (3, 0.03, True)
    assert tuple(cfg.ppo.actor_hidden_dims) == (64, 32) and tuple(cfg.env.commands.vx) == (0.0, 0.8)
    assert cfg.ppo.num_mini_batches == TrainConfig.from_yaml(base).ppo.num_mini_batches  # the rest is the file's
    for override, msg in (("ppo.desird_kl=0.03", "unknown keys"), ("ppo.desired_kl=abc", "expected a number"),
                          ("seed.x=1", "seed is a value"), ("ppo.desired_kl", "KEY=VALUE"), ("ppo..x=1", "KEY=VALUE"),
                          ("update_torch_threads=0", "update_torch_threads")):
        with pytest.raises(ConfigError, match=msg):
            TrainConfig.from_yaml(base, [override])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "motionvl.cli", "train-policy", "--out", str(out), "--set",
                           "ppo.desird_kl=0.03", "--minutes", "0.1"], capture_output=True, text=True, env=env,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "desird_kl" in proc.stderr and not out.exists()

"""Push recovery map: body-frame push directions, phases of the push, falls counted after it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from motionvl.envs.config import EnvConfig, RandomizationConfig
from motionvl.policy_io import PolicyContract
from motionvl.rl.config import PPOConfig, TrainConfig
from motionvl.rl.evaluate import batch_evaluation_env, evaluate
from motionvl.rl.export import export_policy, load_policy
from motionvl.rl.trainer import build_runner
from motionvl.robot import ConfigError, load_robot_config
from motionvl.sim.math import to_heading_frame

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # bench/ scripts are not installed
from push_recovery import SECTORS, plot_push_recovery, push_recovery_map, push_sector  # noqa: E402


def test_heading_frame_and_push_sectors():
    # a robot facing +y (yaw 90 deg): a world +y push is ahead of it, a world +x push on its right
    yaw = np.full(4, np.pi / 2)
    world = np.array([[0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [1.0, 0.0]])
    body = to_heading_frame(world, yaw)
    np.testing.assert_allclose(body, [[1, 0], [0, 1], [-1, 0], [0, -1]], atol=1e-12)
    assert [SECTORS[i] for i in push_sector(body)] == ["forward", "left", "backward", "right"]
    # sector borders lie on the diagonals
    assert [SECTORS[i] for i in push_sector(np.array([[1.0, 0.9], [1.0, 1.1], [-0.2, -1.0]]))] == \
        ["forward", "left", "right"]


@pytest.fixture(scope="module")
def standing_policy(tmp_path_factory):
    """An exported policy whose every weight is zero: action 0, the default pose held by PD."""
    robot = load_robot_config()
    cfg = TrainConfig(env=EnvConfig(num_envs=4, num_threads=1, gait_period_s=0.7, gait_period_schedule=None,
                                    gait_feedforward=0.0, gait_stride_feedforward=0.0),
                      ppo=PPOConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,)))

    def reward(s):
        return np.zeros(s.num_envs), {}

    vec, runner = build_runner(cfg, reward, robot)
    actor = runner.alg.get_policy()
    with torch.no_grad():
        for p in actor.parameters():
            p.zero_()
    path = tmp_path_factory.mktemp("policy") / "stand.onnx"
    return export_policy(actor, path, PolicyContract.for_training(robot, cfg.env))


def test_the_map_moves_the_push_over_the_gait_period_on_the_same_episodes(standing_policy):
    # a robot holding its default pose falls after ~2 s: push it at 0.5 s, while it still stands
    result = push_recovery_map(standing_policy, phases=2, episodes=8, seconds=2.5, seed=3, push_interval_s=0.5)
    first, second = result["phases"]
    # the first phase is where evaluation pushes; the second is about half a gait period (18 steps) earlier
    assert first["push_time_s"] == pytest.approx(0.5) and second["push_time_s"] == pytest.approx(0.5 - 18 * 0.02)
    assert result["evaluation_push_phase"] == first["gait_phase"] == pytest.approx((0.5 / 0.7) % 1, abs=1e-3)
    assert (first["gait_phase"] - second["gait_phase"]) % 1 == pytest.approx(18 / 35, abs=1e-3)
    for row in result["phases"]:
        assert row["fell_before_push"] == 0
        assert sum(row["pushes"]) == 8
        assert all(0 <= f <= p for f, p in zip(row["falls"], row["pushes"]))
    # both phases meet the same episodes with the same push vectors, so the same directions
    assert first["pushes"] == second["pushes"] and first["push_speed_mean"] == second["push_speed_mean"]
    # the falls after the push, counted here directly on the same episodes with the action the policy gives (0)
    env = batch_evaluation_env(load_policy(standing_policy), seconds=2.5, episodes=8, command=(0.6, 0.0, 0.0), seed=3,
                               randomization=dataclasses.replace(RandomizationConfig(), push_interval_s=0.5))
    fell = np.zeros(8, bool)
    for _ in range(int(round(2.5 / env.dt))):
        fell |= env.step(np.zeros((8, env.num_joints)))[2]
    assert sum(first["falls"]) == fell.sum()
    total_pushes = sum(sum(r["pushes"]) for r in result["phases"])
    total_falls = sum(sum(r["falls"]) for r in result["phases"])
    assert result["fall_rate"] == pytest.approx(total_falls / total_pushes, abs=1e-4)


def test_episodes_too_short_to_see_the_recovery_are_refused(standing_policy):
    with pytest.raises(ConfigError, match="too soon after the push"):
        push_recovery_map(standing_policy, phases=1, episodes=1, seconds=9.0)


def test_heatmap_and_bench_command(standing_policy, tmp_path):
    result = {"episodes": 4, "sectors": list(SECTORS), "evaluation_push_phase": 0.43,
              "phases": [{"gait_phase": 0.43, "pushes": [1, 1, 1, 1], "falls": [0, 0, 0, 1]},
                         {"gait_phase": 0.93, "pushes": [2, 0, 1, 1], "falls": [0, 0, 1, 0]}]}
    png = plot_push_recovery(result, tmp_path / "map.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "push_recovery.py"), f"stand={standing_policy}",
                           "--phases", "1", "--episodes", "2", "--seconds", "10", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["label"] == "stand" and len(line["phases"]) == 1
    assert Path(line["heatmap"]).exists() and (tmp_path / "out" / "stand_push_recovery.json").exists()


def test_evaluation_without_pushes_keeps_the_rest_of_the_randomisation(standing_policy, monkeypatch):
    # the zero policy stands ~2 s: evaluation pushes every 0.5 s here instead of every 8 s
    import motionvl.rl.evaluate as evaluation

    @dataclasses.dataclass
    class FrequentPushes(RandomizationConfig):
        push_interval_s: float = 0.5

    monkeypatch.setattr(evaluation, "RandomizationConfig", FrequentPushes)
    kw = dict(seconds=1.0, episodes=3, randomize=True, command=(0.0, 0.0, 0.0), seed=3, return_trajectories=True)
    pushed = evaluate(standing_policy, **kw)
    calm = evaluate(standing_policy, pushes=False, **kw)
    assert pushed["pushes"] and not calm["pushes"] and not evaluate(standing_policy, seconds=0.1, episodes=1)["pushes"]
    for a, b in zip(pushed["trajectories"], calm["trajectories"]):
        t = a.time - a.time[0]
        before, after = t < 0.5 - 1e-6, t > 0.55
        assert not a.fell[before].any()
        # same starts, friction, gains and latency: the two runs part only at the push
        np.testing.assert_array_equal(a.qvel[before], b.qvel[before])
        assert np.abs(a.qvel[after, :2] - b.qvel[after, :2]).max() > 0.05
    cli = subprocess.run([sys.executable, "-m", "motionvl.cli", "eval", "--policy", str(standing_policy), "--seconds",
                          "0.2", "--episodes", "1", "--randomize", "--no-pushes"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60, cwd=ROOT)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout.strip().splitlines()[-1])["pushes"] is False

"""Concurrent velocity estimator (motionvl.rl.estimator): kept apart from PPO, fitted on the rollout,
exported inside the ONNX graph, saved and resumed with the run (tiny budgets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from motionvl.policy_io import PolicyContract
from motionvl.rl.estimator import EstimatorTraining, VelocityEstimatorModel, estimator_training
from motionvl.rl.export import export_policy, load_policy
from motionvl.rl.trainer import build_runner, run_iteration, train_policy
from motionvl.robot import ConfigError, load_robot_config
from rl_fixtures import PlaceholderReward, tiny_config


def estimator_config():
    cfg = tiny_config()
    cfg.ppo.velocity_estimator = True
    return cfg


@pytest.fixture(scope="module")
def robot():
    return load_robot_config()


@pytest.fixture(scope="module")
def built(robot):
    cfg = estimator_config()
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    return cfg, vec, runner, estimator_training(runner, vec, cfg.ppo)


def snapshot(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def changed(before: list[torch.Tensor], module: torch.nn.Module) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


def test_config_builds_the_estimator_actor_and_its_target_is_the_critics_base_velocity(built):
    cfg, vec, runner, estimator = built
    actor = runner.alg.get_policy()
    assert isinstance(actor, VelocityEstimatorModel)
    assert actor.mlp[0].in_features == vec.num_obs + 3, "the policy MLP sees observations + the 3 estimates"
    assert estimator.target_slice == slice(vec.num_obs, vec.num_obs + 3)
    # the target columns are the env's base velocity, scaled as the privileged layout says
    scale = dict((n, s) for n, _, s in vec.env.privileged_layout)["base_lin_vel"]
    critic = vec.get_observations()["critic"][:, estimator.target_slice].numpy()
    assert np.allclose(critic, vec.env.state.base_lin_vel * scale, atol=1e-5)
    plain = tiny_config()
    plain.ppo.velocity_estimator = False
    assert estimator_training(runner, vec, plain.ppo) is None, "off: no estimator training"
    assert plain.to_rsl_rl()["actor"]["class_name"] == "rsl_rl.models.MLPModel"


def test_ppo_never_moves_the_estimator_and_the_regression_moves_only_the_estimator(built):
    _, vec, runner, estimator = built
    actor = runner.alg.get_policy()
    est0, mlp0 = snapshot(actor.estimator), snapshot(actor.mlp)
    info = run_iteration(runner, vec, None, estimator=None)
    assert "estimator" not in info["losses"]
    assert changed(mlp0, actor.mlp) and not changed(est0, actor.estimator), "PPO's loss must not reach the estimator"
    mlp1, mean1 = snapshot(actor.mlp), actor.obs_normalizer.mean.clone()
    loss = estimator.update(runner.alg.storage)
    assert np.isfinite(loss) and loss > 0
    assert changed(est0, actor.estimator) and not changed(mlp1, actor.mlp)
    assert torch.equal(mean1, actor.obs_normalizer.mean), "the regression does not touch the normaliser statistics"


def test_regression_learns_the_target_from_the_rollout(built):
    _, vec, runner, estimator = built
    info = run_iteration(runner, vec, None, estimator)
    first = info["losses"]["estimator"]
    storage = runner.alg.storage
    for _ in range(60):
        last = estimator.update(storage)
    assert last < 0.3 * first, (first, last)
    obs = storage.observations.flatten(0, 1)
    target = obs["critic"][:, estimator.target_slice]
    with torch.no_grad():
        residual = torch.mean((runner.alg.get_policy().estimate(obs) - target) ** 2)
    assert residual < 0.5 * torch.mean((target - target.mean(0)) ** 2), "better than predicting the mean velocity"


def test_regression_makes_estimator_num_epochs_passes_of_num_mini_batches_steps(robot):
    cfg = estimator_config()
    cfg.ppo.estimator_num_epochs, cfg.ppo.num_learning_epochs = 2, 3  # the regression's own count, not PPO's
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    estimator = estimator_training(runner, vec, cfg.ppo)
    run_iteration(runner, vec, None, estimator)
    steps = {int(s["step"]) for s in estimator.optimizer.state_dict()["state"].values()}
    assert steps == {2 * cfg.ppo.num_mini_batches}, steps


def test_onnx_graph_holds_the_estimator(built, robot, tmp_path):
    cfg, vec, runner, _ = built
    actor = runner.alg.get_policy()
    actor.eval()
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(64, vec.num_obs, generator=gen) * 3.0
    meta = PolicyContract.for_training(robot, cfg.env)
    policy = load_policy(export_policy(actor, tmp_path / "p.onnx", meta))
    with torch.no_grad():
        expected = actor(TensorDict({"policy": obs}, batch_size=[64])).clamp(-1, 1).numpy()
    got = policy(obs.numpy())
    assert np.max(np.abs(got - expected)) < 1e-5
    target = {name: (size, scale) for name, size, scale in vec.env.privileged_layout}["base_lin_vel"]
    marked = policy.velocity_estimator  # the file says its actions rest on an estimate, and of what
    assert marked["inside_graph"] and marked["frame"] == "body"
    assert (marked["estimates"], marked["size"], marked["scale"]) == ("base_lin_vel", *target)
    with torch.no_grad():  # a different estimate changes the exported actions: the estimator is in the graph
        actor.estimator[-1].bias.add_(1.0)
    moved = load_policy(export_policy(actor, tmp_path / "q.onnx", meta))(obs.numpy())
    with torch.no_grad():
        actor.estimator[-1].bias.sub_(1.0)
    assert np.max(np.abs(moved - got)) > 1e-3
    with pytest.raises(NotImplementedError, match="export_policy"):
        actor.as_onnx(verbose=False)


def test_training_logs_the_loss_and_resume_keeps_the_regression_state(robot, tmp_path):
    run_dir = tmp_path / "est"
    seen = []
    train_policy(run_dir, PlaceholderReward(), estimator_config(), max_iterations=2, progress=False, robot=robot,
                 on_iteration=seen.append)
    assert all(np.isfinite(r["losses"]["estimator"]) for r in seen)
    state = torch.load(run_dir / "checkpoints/latest.pt", weights_only=False)
    saved = state["infos"]["estimator_training"]["optimizer"]
    assert saved["state"], "the estimator's Adam moments are checkpointed"
    assert any(k.startswith("estimator.") for k in state["actor_state_dict"])
    result = train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=3, progress=False,
                          robot=robot)
    assert result.iterations == 3
    resumed = torch.load(run_dir / "checkpoints/latest.pt", weights_only=False)["infos"]["estimator_training"]
    steps = lambda s: max(int(v["step"]) for v in s["optimizer"]["state"].values())  # noqa: E731
    assert steps(resumed) > steps({"optimizer": saved}), "the resumed run continued the saved optimiser"


def test_bad_estimator_settings_are_refused(built):
    cfg = estimator_config()
    cfg.ppo.estimator_hidden_dims = ()
    with pytest.raises(ConfigError, match="estimator_hidden_dims"):
        cfg.validate()
    _, _, runner, _ = built
    with pytest.raises(ValueError, match="columns"):
        EstimatorTraining(runner.alg.get_policy(), slice(0, 2))
    with pytest.raises(TypeError, match="VelocityEstimatorModel"):
        EstimatorTraining(torch.nn.Linear(2, 2), slice(0, 3))


def test_estimator_bias_reports_the_estimate_against_the_true_velocity(robot, tmp_path):
    root = Path(__file__).resolve().parents[1]
    run_dir = tmp_path / "est"
    train_policy(run_dir, PlaceholderReward(), estimator_config(), max_iterations=2, progress=False, robot=robot)
    # the script rebuilds the runner from the run's files: a library spec in place of the placeholder
    (run_dir / "reward_spec.yaml").write_text((root / "config" / "rewards" / "reference.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(root / "src")}

    def bias_rows(*extra):
        proc = subprocess.run([sys.executable, "bench/estimator_bias.py", str(run_dir), "--episodes", "4",
                               "--seconds", "1.5", *extra], capture_output=True, text=True, env=env, timeout=300, cwd=root)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    rows = bias_rows()
    assert [r["terrain"] for r in rows] == ["flat", "rough"] and all(r["iteration"] == 2 for r in rows)
    for r in rows:
        est, true, bias, rmse = (np.array(r[k]) for k in ("estimated_velocity_mps", "true_velocity_mps", "bias_mps", "rmse_mps"))
        assert np.allclose(est - true, bias, atol=2e-4) and np.all(rmse >= np.abs(bias) - 1e-4)
        # every upright episode sits in exactly one latency group and one friction third
        assert 0 <= r["upright_episodes"] <= 4
        for groups in (r["pace_by_latency"], r["pace_by_ground_friction"]):
            assert sum(g["episodes"] for g in groups) == r["upright_episodes"]
        assert all(2.0 <= g["latency_ms"] <= 20.0 for g in r["pace_by_latency"])
        assert set(r["speed_correlation"]) == {"latency_ms", "ground_friction", "gain_scale", "joint_friction_scale"}
    # shift the estimator's output by 0.4 (scaled units, x2 of m/s) in the checkpoint: the reported
    # estimate moves by 0.2 m/s on each axis (the truth, and so the bias, moves with the policy's new actions)
    checkpoint = run_dir / "checkpoints" / "model_2.pt"
    state = torch.load(checkpoint, weights_only=False)
    last_bias = max(k for k in state["actor_state_dict"] if k.startswith("estimator.") and k.endswith(".bias"))
    state["actor_state_dict"][last_bias] += 0.4
    torch.save(state, checkpoint)
    shifted = bias_rows("--terrain", "flat")
    moved = np.array(shifted[0]["estimated_velocity_mps"]) - np.array(rows[0]["estimated_velocity_mps"])
    assert np.allclose(moved, 0.2, atol=0.05), (moved, np.array(shifted[0]["bias_mps"]) - np.array(rows[0]["bias_mps"]))
    # --run-average reads the checkpoint's moving average, which the shift did not touch
    averaged = bias_rows("--terrain", "flat", "--run-average")
    assert not np.allclose(np.array(averaged[0]["bias_mps"]) - np.array(rows[0]["bias_mps"]), 0.2, atol=0.1), averaged

    plain = tmp_path / "plain"
    without = tiny_config()
    without.ppo.velocity_estimator = False
    train_policy(plain, PlaceholderReward(), without, max_iterations=1, progress=False, robot=robot)
    proc = subprocess.run([sys.executable, "bench/estimator_bias.py", str(plain)], capture_output=True, text=True,
                          env=env, timeout=120, cwd=root)
    assert proc.returncode == 2 and "without ppo.velocity_estimator" in proc.stderr


def test_pace_by_draw_groups_each_episode_by_its_draws(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    from estimator_bias import pace_by_draw

    latency = np.repeat([2.0, 4.0, 20.0], 4)
    friction = np.tile([0.25, 0.6, 1.0, 1.3], 3)  # 1.3, the range's top, belongs to the last third
    speed = 0.5 + 0.01 * latency  # the pace follows the latency only
    out = pace_by_draw(speed, speed - 0.02, {"latency_ms": latency, "ground_friction": friction,
                                             "gain_scale": np.ones(12), "joint_friction_scale": np.ones(12)},
                       friction_range=(0.2, 1.3))
    assert out["upright_episodes"] == 12
    assert [(g["latency_ms"], g["episodes"]) for g in out["pace_by_latency"]] == [(2.0, 4), (4.0, 4), (20.0, 4)]
    assert [g["true_vx_mps"] for g in out["pace_by_latency"]] == pytest.approx([0.52, 0.54, 0.70])
    assert [g["estimated_vx_mps"] for g in out["pace_by_latency"]] == pytest.approx([0.50, 0.52, 0.68])
    assert [g["episodes"] for g in out["pace_by_ground_friction"]] == [3, 3, 6]
    assert all(g["true_vx_mps"] == pytest.approx(speed.mean(), abs=1e-4) for g in out["pace_by_ground_friction"])
    corr = out["speed_correlation"]
    assert corr["latency_ms"] == pytest.approx(1.0) and abs(corr["ground_friction"]) < 1e-6
    assert corr["gain_scale"] is None and corr["joint_friction_scale"] is None

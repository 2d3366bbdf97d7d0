"""ONNX export of a trained actor and the deployment contract it carries (motionvl.rl.export)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from motionvl.envs.locomotion import LocomotionEnv
from motionvl.policy_io import ContractError, PolicyContract
from motionvl.rl.evaluate import evaluate
from motionvl.rl.export import export_policy, load_policy
from motionvl.rl.trainer import build_runner
from rl_fixtures import PlaceholderReward, tiny_config


def test_gait_feedforward_is_part_of_the_contract_every_evaluation_follows(robot, tmp_path):
    from motionvl.rl.evaluate import batch_evaluation_env

    cfg = tiny_config(gait_feedforward=0.3, gait_stride_feedforward=0.2, gait_stand_below=-1.0)
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    assert vec.env.contract.gait_feedforward == 0.3
    path = export_policy(runner.alg.get_policy(), tmp_path / "p.onnx", PolicyContract.for_training(robot, cfg.env))
    policy = load_policy(path)
    c = policy.contract
    assert (c.gait_feedforward, c.gait_stride_feedforward, c.gait_stand_below) == pytest.approx((0.3, 0.2, -1.0))
    assert c.feedforward_joints == (("left_hip_pitch", "left_knee", "left_ankle_pitch"),
                                    ("right_hip_pitch", "right_knee", "right_ankle_pitch"))
    # evaluation applies the policy's own contract, not the defaults of an EnvConfig
    env = batch_evaluation_env(policy, seconds=1.0, episodes=2, robot=robot)
    assert env.contract == c and env.cfg.gait_feedforward != c.gait_feedforward
    assert np.any(env.action_law.feedforward(np.array([[0.5, 0, 0]]), np.array([0.25])) != 0.0)
    # a file of the earlier metadata format is refused, naming why
    meta = c.to_metadata()
    meta["format"] = "motionvl-policy/1"
    old = tmp_path / "old.onnx"
    import onnx
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, {k: json.dumps(v) for k, v in meta.items()})
    onnx.save(model, str(old))
    with pytest.raises(ContractError, match="format is 'motionvl-policy/1'"):
        load_policy(old)


def test_onnx_matches_torch_with_normalisation(robot, tmp_path):
    cfg = tiny_config()
    cfg.ppo.velocity_estimator = False  # the plain actor (test_estimator exports the other)
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    actor = runner.alg.get_policy()
    actor.train()
    gen = torch.Generator().manual_seed(0)
    actor.obs_normalizer.update(torch.randn(256, vec.num_obs, generator=gen) * 3.0 + 1.5)  # non-trivial statistics
    actor.eval()
    assert not torch.allclose(actor.obs_normalizer.mean, torch.zeros(vec.num_obs))
    path = export_policy(actor, tmp_path / "p.onnx", PolicyContract.for_training(robot, cfg.env))
    policy = load_policy(path)
    assert policy.velocity_estimator is None, "no estimator, no estimator metadata"
    obs = torch.randn(64, vec.num_obs, generator=gen) * 4.0
    with torch.no_grad():
        expected = actor(TensorDict({"policy": obs}, batch_size=[64])).clamp(-1, 1).numpy()
    got = policy(obs.numpy())
    assert got.shape == (64, robot.num_joints)
    assert np.max(np.abs(got - expected)) < 1e-5
    assert np.allclose(policy(obs[0].numpy()), got[0], atol=1e-6)


def test_a_reused_graph_carries_the_new_weights_and_a_stale_one_falls_back_to_a_full_export(robot, tmp_path,
                                                                                            monkeypatch):
    import onnx

    from motionvl.rl import export

    cfg = tiny_config()
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    actor = runner.alg.get_policy()
    meta = PolicyContract.for_training(robot, cfg.env)
    export_policy(actor, tmp_path / "first.onnx", meta)  # this architecture's graph, if no test exported it yet
    torch_exports = []
    full_export = export._torch_export
    monkeypatch.setattr(export, "_torch_export", lambda *a: torch_exports.append(1) or full_export(*a))
    gen = torch.Generator().manual_seed(1)

    def train_a_little():
        with torch.no_grad():
            for p in actor.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        actor.train()
        actor.obs_normalizer.update(torch.randn(256, vec.num_obs, generator=gen) * 2.0 - 0.5)
        actor.eval()

    def onnx_vs_torch(path) -> float:
        obs = torch.randn(64, vec.num_obs, generator=gen) * 3.0
        with torch.no_grad():
            expected = actor(TensorDict({"policy": obs}, batch_size=[64])).clamp(-1, 1).numpy()
        return float(np.max(np.abs(load_policy(path)(obs.numpy()) - expected)))

    train_a_little()
    path = export_policy(actor, tmp_path / "reused.onnx", meta)
    assert torch_exports == [], "the same architecture reuses the graph"
    assert onnx_vs_torch(path) < 1e-5
    assert load_policy(path).metadata["joint_names"] == list(robot.joint_names)
    # a graph holding a tensor under a name the actor does not have (as a constant the exporter folded):
    # writing the weights misses it, ONNX Runtime disagrees with torch, and the policy is exported afresh
    key = export.PolicyExportWrapper(actor).architecture()
    stale = export._GRAPHS[key]
    first = next(i for i in stale.graph.initializer if i.name == "mlp.0.weight")
    first.name = "folded_weight"
    for node in stale.graph.node:
        node.input[:] = ["folded_weight" if x == "mlp.0.weight" else x for x in node.input]
    onnx.checker.check_model(stale)
    train_a_little()
    path = export_policy(actor, tmp_path / "fresh.onnx", meta)
    assert torch_exports == [1]
    assert onnx_vs_torch(path) < 1e-5
    assert "mlp.0.weight" in {i.name for i in export._GRAPHS[key].graph.initializer}, "the fresh graph replaced it"


def test_contract_round_trip_and_mismatch(trained_run, robot):
    policy = load_policy(trained_run[0] / "policy.onnx")
    policy.contract.check_robot(robot)
    assert policy.contract == PolicyContract.from_metadata(policy.metadata)
    assert policy.contract.joint_names == robot.joint_names
    assert [b.name for b in policy.contract.obs_layout][:3] == ["base_ang_vel", "projected_gravity", "command"]
    c = policy.contract
    # the shipped interface: five frames of history, the stepping fold, the clock at the schedule's start
    assert c.history_frames == 5 and c.gait_period == pytest.approx(0.7) and c.gait_feedforward == 0.2
    assert policy.metadata["velocity_limit"] == robot.velocity_limit.tolist(), "the deployment node enforces them"
    names = list(robot.joint_names)
    names[2], names[3] = names[3], names[2]
    with pytest.raises(ContractError, match="joint order"):
        dataclasses.replace(c, joint_names=tuple(names)).check_robot(robot)
    with pytest.raises(ContractError, match="joint count"):
        dataclasses.replace(c, joint_names=tuple(names[:-1])).check_robot(robot)
    with pytest.raises(ContractError, match="kp"):
        dataclasses.replace(c, kp=(1.0,) * robot.num_joints).check_robot(robot)
    other = robot.action_scales.copy()
    other[3] *= 2.0
    with pytest.raises(ContractError, match="action_scale"):
        dataclasses.replace(c, action_scale=tuple(other)).check_robot(robot)


def test_a_policy_that_sees_its_heading_error_carries_it_in_its_contract_and_evaluates(robot, tmp_path):
    cfg = tiny_config(heading_observation=True)
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    path = export_policy(runner.alg.get_policy(), tmp_path / "p.onnx", PolicyContract.for_training(robot, cfg.env))
    policy = load_policy(path)
    assert policy.contract.heading_observation
    assert policy.num_obs == vec.num_obs == LocomotionEnv(robot, tiny_config(heading_observation=False).env).num_obs + 1
    layout = policy.metadata["obs_layout"]
    assert [b["name"] for b in layout][:4] == ["base_ang_vel", "projected_gravity", "command", "heading_error"]
    assert layout[3]["clip"] == 1.0  # what a deployment needs to build the input
    assert sum(b["size"] for b in layout) == policy.num_obs
    result = evaluate(policy, seconds=0.2, episodes=2, command=(0.4, 0.0, 0.0), robot=robot)
    assert result["episodes"] == 2  # the evaluation env gave the policy the input it was trained with


def test_metadata_describes_every_observation_entry_of_an_env_with_history(robot):
    env = LocomotionEnv(robot, tiny_config(obs_history=3, heading_observation=True).env)
    layout = PolicyContract.for_training(robot, env.cfg).to_metadata()["obs_layout"]
    assert sum(b["size"] for b in layout) == env.num_obs
    history = layout[-1]
    assert history["name"] == "history" and history["frames"] == 3
    frame_size = env.contract.frame_size
    assert [(b["name"], b["size"]) for b in history["frame"]] == [(b.name, b.size) for b in env.contract.history_frame]
    assert history["size"] == 3 * frame_size

    # what a deployment must rebuild from that description: zeros after a reset, then each step the
    # previous observation's proprioceptive blocks (already scaled) in front, the oldest frame dropped
    starts = np.cumsum([0] + [b["size"] for b in layout])
    blocks = {b["name"]: slice(int(a), int(a + b["size"])) for b, a in zip(layout, starts)}
    frame_of = lambda obs: np.concatenate([obs[:, blocks[b["name"]]] for b in history["frame"]], axis=1)  # noqa: E731
    previous = [env.observations().copy()]
    assert np.all(previous[0][:, blocks["history"]] == 0.0) and history["reset_value"] == 0.0
    rng = np.random.default_rng(0)
    for _ in range(4):
        obs, *_ = env.step(rng.uniform(-1, 1, (env.num_envs, env.num_joints)))
        frames = obs[:, blocks["history"]].reshape(env.num_envs, 3, frame_size)
        expected = [frame_of(p) for p in previous[::-1][:3]]
        expected += [np.zeros_like(expected[0])] * (3 - len(expected))
        np.testing.assert_allclose(frames, np.stack(expected, axis=1), atol=1e-12)
        previous.append(obs.copy())

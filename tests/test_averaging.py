"""The moving average of the actor the run exports (motionvl.rl.averaging)."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from tensordict import TensorDict

from motionvl.rl.export import load_policy
from motionvl.rl.trainer import build_runner, train_policy
from rl_fixtures import PlaceholderReward, tiny_config


def test_policy_average_is_an_ema_of_parameters_with_the_current_normaliser():
    from motionvl.rl.averaging import PolicyAverage

    class Actor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.register_buffer("stat", torch.zeros(2))

    actor = Actor()
    average = PolicyAverage(actor, iterations=2)  # decay 0.5
    assert average.updates == 0 and torch.equal(average.averaged_actor(actor).layer.weight, actor.layer.weight)
    seen = []
    for value in (1.0, 3.0, 7.0):
        with torch.no_grad():
            actor.layer.weight.fill_(value)
            actor.stat.fill_(value)
        average.update(actor)
        seen.append(value)
    # W0 = 1, W1 = 0.5 * 1 + 0.5 * 3 = 2, W2 = 0.5 * 2 + 0.5 * 7 = 4.5
    averaged = average.averaged_actor(actor)
    assert average.updates == 3 and torch.allclose(averaged.layer.weight, torch.full((1, 2), 4.5))
    assert torch.equal(averaged.stat, torch.full((2,), 7.0)), "normaliser statistics are the current actor's"
    assert torch.equal(actor.layer.weight, torch.full((1, 2), 7.0)), "the training actor is left alone"
    again = PolicyAverage(Actor(), iterations=2)
    again.load_state_dict(average.state_dict())
    assert again.updates == 3 and torch.allclose(again.averaged_actor(actor).layer.weight, averaged.layer.weight)
    with pytest.raises(ValueError, match=">= 1"):
        PolicyAverage(actor, iterations=0.5)


def test_averaged_run_exports_the_average_and_the_last_iterate_and_resumes_it(robot, tmp_path):
    from motionvl.rl.averaging import PolicyAverage

    cfg = tiny_config()
    cfg.policy_average_iterations = 3.0
    run_dir = tmp_path / "avg"
    first = train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=2, progress=False, robot=robot)
    assert first.last_iterate_path == run_dir / "policy_last_iterate.onnx" and first.last_iterate_path.is_file()
    result = train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=4, progress=False, robot=robot)
    state = torch.load(run_dir / "checkpoints/latest.pt", weights_only=False)
    assert state["infos"]["policy_average"]["average"]["n_averaged"] == 4, "the average survives a resume"

    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    runner.load(str(run_dir / "checkpoints/latest.pt"))
    actor = runner.alg.get_policy()
    average = PolicyAverage(actor, cfg.policy_average_iterations)
    average.load_state_dict(state["infos"]["policy_average"])
    obs = torch.randn(32, vec.num_obs, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expect_avg = average.averaged_actor(actor)(TensorDict({"policy": obs}, batch_size=[32])).clamp(-1, 1).numpy()
        expect_last = actor(TensorDict({"policy": obs}, batch_size=[32])).clamp(-1, 1).numpy()
    got_avg, got_last = load_policy(result.policy_path)(obs.numpy()), load_policy(result.last_iterate_path)(obs.numpy())
    assert np.max(np.abs(got_avg - expect_avg)) < 1e-5 and np.max(np.abs(got_last - expect_last)) < 1e-5
    assert np.max(np.abs(got_avg - got_last)) > 1e-4, "policy.onnx is the average, not the last iterate"
    cfg.policy_average_iterations = 0
    plain = train_policy(tmp_path / "plain", PlaceholderReward(), cfg, max_iterations=1, progress=False, robot=robot)
    assert plain.last_iterate_path is None and not (tmp_path / "plain" / "policy_last_iterate.onnx").exists()

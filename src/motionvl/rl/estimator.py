"""Concurrent state estimation: the actor estimates the base velocity it cannot measure.

A robot has no sensor for its base's linear velocity; the actor only sees the IMU, the joints
and their recent history, so it learns its pace through the tracking reward alone, and policies
trained for ten minutes here walk with an offset of 0.1-0.2 m/s under every command
(experiment log, bench/RESULTS.md in git history: seed 3 with the gait-period schedule). Ji et al. (2022, "Concurrent Training
of a Control Policy and a State Estimator for Dynamic and Robust Legged Locomotion") train a
small estimator network beside the policy: it regresses the base velocity from the policy's own
observations with a supervised loss, and the policy gets the estimate as an extra input.

Here the estimator is part of the actor (`VelocityEstimatorModel`, an rsl_rl MLPModel), so it
lands in the same ONNX graph and a robot feeds exactly the observations it fed before. Its
target is the critic's privileged `base_lin_vel` block (`PRIVILEGED_LAYOUT`, scaled as there),
which the rollout storage already holds. PPO's gradient does not reach the estimator (its output
enters the policy MLP detached); `EstimatorTraining.update` fits it on each rollout after PPO's
update, with its own optimiser.
"""

from __future__ import annotations

import torch
from rsl_rl.models import MLPModel
from rsl_rl.modules import MLP

ESTIMATED_BLOCK = "base_lin_vel"
"""The privileged observation block the estimator regresses (the critic's, with its scale)."""


class VelocityEstimatorModel(MLPModel):
    """rsl_rl MLPModel whose MLP input is [normalised observations, estimate of the base velocity].

    estimator_hidden_dims: hidden layers of the estimator MLP (its input: the normalised observations).
    estimate_dim: size of the estimated block (3: base_lin_vel).
    The other arguments are MLPModel's.
    """

    def __init__(self, obs, obs_groups, obs_set, output_dim, hidden_dims=(256, 256, 256), activation="elu",
                 obs_normalization=False, distribution_cfg=None, estimator_hidden_dims=(64, 32), estimate_dim=3):
        self._estimate_dim = int(estimate_dim)  # read by _get_latent_dim inside MLPModel.__init__
        super().__init__(obs, obs_groups, obs_set, output_dim, hidden_dims, activation, obs_normalization,
                         distribution_cfg)
        self.estimator = MLP(self.obs_dim, self._estimate_dim, list(estimator_hidden_dims), activation)

    @property
    def estimate_dim(self) -> int:
        return self._estimate_dim

    def _get_latent_dim(self) -> int:
        return self.obs_dim + self._estimate_dim

    def get_latent(self, obs, masks=None, hidden_state=None) -> torch.Tensor:
        normalized = super().get_latent(obs, masks, hidden_state)
        # no gradient: the estimator learns from its regression target only, never from PPO's loss,
        # and the PPO update's forward passes keep no autograd record of it
        with torch.no_grad():
            estimate = self.estimator(normalized)
        return torch.cat([normalized, estimate], dim=-1)

    def normalized_input(self, obs) -> torch.Tensor:
        """The estimator's input: the actor's observation groups of `obs` (a TensorDict), normalised."""
        return super().get_latent(obs)

    def estimate(self, obs) -> torch.Tensor:
        """The estimator's output for an observation TensorDict."""
        return self.estimator(self.normalized_input(obs))

    def as_jit(self):  # rsl_rl's own export wrappers would drop the estimator
        raise NotImplementedError("export with motionvl.rl.export.export_policy, which keeps the estimator")

    def as_onnx(self, verbose: bool):
        raise NotImplementedError("export with motionvl.rl.export.export_policy, which keeps the estimator")


class EstimatorTraining:
    """Fits an actor's estimator on the rollout in the PPO storage (call after `alg.update()`).

    actor: the VelocityEstimatorModel being trained (the runner's `alg.get_policy()`).
    target_slice: columns of the critic observation group holding the regression target.
    learning_rate, num_epochs, num_mini_batches: the regression's Adam step size and passes over the rollout.
    """

    def __init__(self, actor: VelocityEstimatorModel, target_slice: slice, learning_rate: float = 1e-3,
                 num_epochs: int = 5, num_mini_batches: int = 4, target_group: str = "critic"):
        if not isinstance(actor, VelocityEstimatorModel):
            raise TypeError(f"EstimatorTraining needs a VelocityEstimatorModel actor, got {type(actor).__name__}")
        width = len(range(*target_slice.indices(1 << 30)))
        if width != actor.estimate_dim:
            raise ValueError(f"target has {width} columns, the estimator outputs {actor.estimate_dim}")
        self.actor, self.target_slice, self.target_group = actor, target_slice, target_group
        self.num_epochs, self.num_mini_batches = int(num_epochs), int(num_mini_batches)
        self.optimizer = torch.optim.Adam(actor.estimator.parameters(), lr=learning_rate)

    def update(self, storage) -> float:
        """Regression passes over the rollout in `storage` (an rsl_rl RolloutStorage); returns the mean MSE."""
        observations = storage.observations.flatten(0, 1)
        with torch.no_grad():  # inputs and targets once, not per mini-batch (the normaliser does not change here)
            inputs = self.actor.normalized_input(observations)
            targets = observations[self.target_group][:, self.target_slice]
        total = inputs.shape[0]
        size = max(total // self.num_mini_batches, 1)
        losses = []
        for _ in range(self.num_epochs):
            order = torch.randperm(total, device=inputs.device)
            for start in range(0, size * self.num_mini_batches, size):
                rows = order[start:start + size]
                loss = torch.nn.functional.mse_loss(self.actor.estimator(inputs[rows]), targets[rows])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                losses.append(loss.detach())
        return float(torch.stack(losses).mean())

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


def estimator_training(runner, vec, ppo_cfg) -> EstimatorTraining | None:
    """The EstimatorTraining of a runner built with `ppo_cfg.velocity_estimator` on, else None."""
    if not ppo_cfg.velocity_estimator:
        return None
    env = vec.env
    offset = vec.num_obs
    for name, size, _scale in env.privileged_layout:
        if name == ESTIMATED_BLOCK:
            return EstimatorTraining(runner.alg.get_policy(), slice(offset, offset + size),
                                     learning_rate=ppo_cfg.estimator_learning_rate,
                                     num_epochs=ppo_cfg.estimator_num_epochs, num_mini_batches=ppo_cfg.num_mini_batches)
        offset += size
    raise ValueError(f"the critic observations have no {ESTIMATED_BLOCK} block to train the estimator on")

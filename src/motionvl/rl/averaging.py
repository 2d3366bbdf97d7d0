"""Exponential moving average of the actor's weights: the policy a run exports when averaging is on.

Consecutive PPO iterates of one run walk very differently at test time: on the same 512
randomised episodes, checkpoints 25 iterations apart walked 5 m in 79 % and 94 % of them
(bench/RESULTS.md, policy averaging), mostly through how much the heading drifts. The average
of the recent iterates is a steadier policy than any one of them. Training itself continues on
the last iterate; only the exported and evaluated policy is the average.

torch's own `AveragedModel` keeps the average. Only parameters are averaged: the observation
normaliser's statistics are buffers and are taken from the current actor, the latest estimate.
"""

from __future__ import annotations

import copy

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


class PolicyAverage:
    """EMA of an actor's parameters with a time constant of `iterations` updates (decay 1 - 1/iterations)."""

    def __init__(self, actor: torch.nn.Module, iterations: float):
        if iterations < 1:
            raise ValueError(f"policy average over {iterations} iterations: expected >= 1")
        self.iterations = float(iterations)
        self._average = AveragedModel(actor, multi_avg_fn=get_ema_multi_avg_fn(1.0 - 1.0 / self.iterations),
                                      use_buffers=False)

    @property
    def updates(self) -> int:
        """Iterates averaged so far (the first one is copied as is)."""
        return int(self._average.n_averaged)

    def update(self, actor: torch.nn.Module) -> None:
        """Fold the actor's current weights into the average (call once per PPO update)."""
        self._average.update_parameters(actor)

    def averaged_actor(self, actor: torch.nn.Module) -> torch.nn.Module:
        """A module like `actor` carrying the averaged weights and `actor`'s buffers (the normaliser
        statistics); `actor` itself is left as it is. Before any update, the weights are `actor`'s."""
        # a copy of the average's own module, which never ran forward: the training actor may hold
        # tensors of the last autograd graph (its action distribution), which deepcopy refuses
        out = copy.deepcopy(self._average.module)
        weights = actor if self.updates == 0 else self._average.module
        with torch.no_grad():
            for mine, source in zip(out.parameters(), weights.parameters(), strict=True):
                mine.copy_(source)
            for mine, source in zip(out.buffers(), actor.buffers(), strict=True):
                mine.copy_(source)
        return out

    def state_dict(self) -> dict:
        return {"iterations": self.iterations, "average": self._average.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._average.load_state_dict(state["average"])

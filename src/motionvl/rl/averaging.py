"""Exponential moving average of the actor's weights: the policy a run exports when averaging is on.

Consecutive PPO iterates of one run walk very differently at test time: on the same 512
randomised episodes, checkpoints 25 iterations apart walked 5 m in 79 % and 94 % of them
(experiment log, bench/RESULTS.md in git history: policy averaging), mostly through how much the heading drifts. The average
of the recent iterates is a steadier policy than any one of them. Training itself continues on
the last iterate; only the exported and evaluated policy is the average.

torch's own `AveragedModel` keeps the average. Only parameters are averaged: the observation
normaliser's statistics are buffers and are taken from the current actor, the latest estimate.
"""

from __future__ import annotations

import copy

import torch
from torch.optim.swa_utils import AveragedModel


class PolicyAverage:
    """EMA of an actor's parameters with a time constant of `iterations` updates: each update after the
    first (a copy) folds the actor in with weight 1 / iterations."""

    def __init__(self, actor: torch.nn.Module, iterations: float):
        if iterations < 1:
            raise ValueError(f"policy average over {iterations} iterations: expected >= 1")
        self.iterations = float(iterations)
        self._average = AveragedModel(actor, multi_avg_fn=self._fold, use_buffers=False)

    @torch.no_grad()
    def _fold(self, averaged: list, current: list, n_averaged: torch.Tensor) -> None:
        # AveragedModel calls this with the count before the update; the first update only copies
        weight = 1.0 / self.iterations
        for mine, source in zip(averaged, current, strict=True):
            mine.lerp_(source, weight)

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


def checkpoint_average(checkpoint_infos: dict, actor: torch.nn.Module) -> torch.nn.Module | None:
    """The averaged actor a trainer checkpoint kept (its "infos" dict; `actor`: one of the same
    architecture, whose buffers it takes), i.e. the policy.onnx the run would have exported there;
    None when the run trained without averaging (policy_average_iterations 0)."""
    state = checkpoint_infos.get("policy_average")
    if state is None:
        return None
    kept = PolicyAverage(actor, state["iterations"])
    kept.load_state_dict(state)
    return kept.averaged_actor(actor)

"""The mirror loss of rsl_rl's symmetry extension, computed without its wasted half.

rsl_rl's `Symmetry.compute_loss` (mirror loss on, data augmentation off) stacks every mini-batch
with its mirror image, both groups of observations, and runs the actor with gradients over the
2B rows; the original B rows only give the detached target, so half of that forward pass and
of its backward pass is spent on rows the loss cannot differentiate. `LeanMirrorLoss` gives the
same loss and the same gradient: the target (the mirrored action means on the original rows) from a
forward pass without autograd, and the differentiated forward pass over the B mirrored rows of the
actor's own observation groups only. `compare_with_rsl_rl` checks that on a mini-batch (the test and
bench/mirror_loss_cost.py, which also measures the difference in time).

With data augmentation on, the batch already holds both halves and the parent's computation is used.
"""

from __future__ import annotations

import torch
from rsl_rl.extensions import Symmetry
from tensordict import TensorDict

from motionvl.rl.vecenv import mirror_rows


class LeanMirrorLoss(Symmetry):
    """`Symmetry` whose `compute_loss` differentiates only the mirrored rows (see the module docstring)."""

    @classmethod
    def replacing(cls, symmetry: Symmetry) -> "LeanMirrorLoss":
        """The lean counterpart of a `Symmetry` rsl_rl's PPO built from its `symmetry_cfg`."""
        return cls(env=symmetry.env, data_augmentation_func=symmetry.data_augmentation_func,
                   use_data_augmentation=symmetry.use_data_augmentation, use_mirror_loss=symmetry.use_mirror_loss,
                   mirror_loss_coeff=symmetry.mirror_loss_coeff)

    def compute_loss(self, actor, batch, original_batch_size: int) -> torch.Tensor:
        if self.use_data_augmentation:
            return super().compute_loss(actor, batch, original_batch_size)
        rows = original_batch_size
        obs = batch.observations[:rows]
        groups = list(actor.obs_groups)
        with torch.no_grad():
            target = mirror_rows(self.env, actor(obs.select(*groups)), "action")
        mirrored = TensorDict({g: mirror_rows(self.env, obs[g], g) for g in groups}, batch_size=[rows],
                              device=obs.device)
        loss = torch.nn.functional.mse_loss(actor(mirrored), target)
        return loss if self.use_mirror_loss else loss.detach()


def rsl_rl_mirror_loss(lean: LeanMirrorLoss) -> Symmetry:
    """rsl_rl's own `Symmetry` with the lean one's mirror and weight, mirror loss on, no augmentation."""
    return Symmetry(env=lean.env, data_augmentation_func=lean.data_augmentation_func, use_mirror_loss=True,
                    mirror_loss_coeff=lean.mirror_loss_coeff)


def compare_with_rsl_rl(lean: LeanMirrorLoss, actor, batch) -> dict:
    """The lean and rsl_rl's mirror loss of `actor` on one mini-batch (no augmentation), and the largest
    difference between their actor gradients. Leaves the actor's gradients zeroed; rsl_rl's computation
    replaces `batch.observations` with the doubled batch, so it runs second."""
    reference = rsl_rl_mirror_loss(lean)
    size = batch.observations.batch_size[0]
    losses, gradients = [], []
    for symmetry in (lean, reference):
        actor.zero_grad()
        loss = symmetry.compute_loss(actor, batch, size)
        loss.backward()
        losses.append(loss.item())
        gradients.append([p.grad.detach().clone() for p in actor.parameters() if p.grad is not None])
    actor.zero_grad()
    if not gradients[0] or len(gradients[0]) != len(gradients[1]):
        raise RuntimeError("the two mirror losses reached different actor parameters")
    return {"loss_lean": losses[0], "loss_rsl_rl": losses[1],
            "max_abs_gradient_difference": max(float((a - b).abs().max()) for a, b in zip(*gradients))}

"""Warm start: a new training run that begins where another run's checkpoint stopped.

The language loop trains candidate rewards from the best policy so far rather than from scratch
(DESIGN.md, "The search"). `train_policy(..., warm_start=PATH)` (or `TrainConfig.warm_start`) builds
a new run directory whose networks start from PATH, a run directory (its checkpoints/latest.pt, the
iterate its training stopped on) or one checkpoint file of it (checkpoints/model_<it>.pt).

What carries over, and why:
- the actor and the critic, the observation normalisers inside them, and with the velocity estimator
  its network: the policy being refined; the critic's value estimate is the best start for a reward
  that is usually a focused edit of the parent's;
- the action std (a parameter of the actor): the parent's exploration level. Resetting it to
  ppo.init_std would shake a settled gait before the new reward can shape it; the entropy bonus
  widens it again where the new reward pays for exploring;
- PPO's optimiser state (Adam's moments) and the adaptive learning rate it settled at, and the
  estimator's optimiser: a fresh Adam's first steps move every weight by about the learning rate,
  whatever its gradient, which is a large jolt to a trained policy;
- the iteration the parent stopped at, for the schedules only (gait period, rough ground): they
  continue from there, so the child trains in the setting the parent ended in; and the command
  curriculum's level and the terrain curriculum's level of each env, for the same reason.
What does not: the reward spec (the point of a warm start), the budgets (minutes, max_iterations
count this run's own iterations, from 1), the seed's random streams and episodes (a new run), the
history and term statistics, the policy average (it starts at the parent's last iterate).

The parent must have trained the same policy interface (observation layout, action law, network
shapes, physics step): those keys are compared and every difference is named in the error.
A resumed run continues from its own checkpoints and refuses another reward spec; a warm start is
the explicit way to train an existing policy on a new one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from motionvl.robot import ConfigError

INTERFACE_KEYS = (
    "env.obs_history", "env.heading_observation", "env.critic_sees_randomization", "env.sim_dt", "env.decimation",
    "env.gait_feedforward", "env.gait_stride_feedforward", "env.gait_lateral_stride", "env.gait_stand_below",
    "ppo.actor_hidden_dims", "ppo.critic_hidden_dims", "ppo.activation", "ppo.obs_normalization",
    "ppo.velocity_estimator", "ppo.estimator_hidden_dims",
)
"""Training-config keys that shape the policy's inputs, outputs and networks: a warm start needs the
parent's values (the checkpoint's weights would not fit or would mean something else)."""


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """A parent checkpoint, loaded and checked against the child's config."""

    checkpoint: Path
    """The checkpoint file the child starts from."""
    iteration: int
    """PPO iterations the parent had trained: where the child's schedules continue."""
    saved: dict = dataclasses.field(repr=False)
    """The checkpoint as torch.load returned it (rsl_rl's dict, our counters in "infos")."""

    @property
    def infos(self) -> dict:
        return self.saved.get("infos") or {}

    @classmethod
    def load(cls, path: str | Path, train_config: dict, run_dir: Path | None = None) -> "WarmStart":
        """The parent at `path` (a run directory or a checkpoint file) for a child trained with
        `train_config` (TrainConfig.to_dict()) in `run_dir`; ConfigError / FileNotFoundError say what is wrong."""
        path = Path(path).expanduser()
        checkpoint = path / "checkpoints" / "latest.pt" if path.is_dir() else path
        if not path.exists():
            raise FileNotFoundError(f"cannot warm-start from {path}: no such run directory or checkpoint file")
        if not checkpoint.exists():
            raise FileNotFoundError(f"cannot warm-start from {path}: the directory holds no checkpoint "
                                    f"({checkpoint} is missing; is it a training run directory?)")
        if run_dir is not None and checkpoint.resolve().is_relative_to(Path(run_dir).resolve()):
            raise ConfigError(f"cannot warm-start {run_dir} from its own checkpoint {checkpoint}: resume it instead")
        try:
            saved = torch.load(checkpoint, weights_only=False, map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - torch raises many types for a file it cannot read
            raise ConfigError(f"cannot warm-start from {checkpoint}: not a readable checkpoint "
                              f"({type(exc).__name__}: {exc})") from exc
        if not isinstance(saved, dict) or not {"actor_state_dict", "critic_state_dict"} <= set(saved):
            raise ConfigError(f"cannot warm-start from {checkpoint}: not a MotionVL training checkpoint "
                              f"(no actor and critic weights)")
        infos = saved.get("infos") or {}
        parent_config = infos.get("train_config")
        if not isinstance(parent_config, dict):
            raise ConfigError(f"cannot warm-start from {checkpoint}: it records no training config to check against")
        differences = interface_differences(parent_config, train_config)
        if differences:
            raise ConfigError(f"cannot warm-start from {checkpoint}: the parent trained another policy interface "
                              f"({'; '.join(differences)}). Train the child with the parent's values of these keys")
        iteration = int(infos.get("iteration", saved.get("iter", 0)))
        if path.is_dir():  # latest.pt moves on if the parent is resumed; its copy of that iteration stays
            kept = checkpoint.with_name(f"model_{iteration}.pt")
            checkpoint = kept if kept.exists() else checkpoint
        return cls(checkpoint=checkpoint, iteration=iteration, saved=saved)

    def apply(self, runner, estimator=None, env=None) -> None:
        """Load the parent's networks and optimiser state into a freshly built runner (and estimator
        training, env command curriculum level and terrain levels); the runner's own iteration count stays at 0."""
        try:
            runner.alg.load(self.saved, {"actor": True, "critic": True, "optimizer": True, "iteration": False},
                            strict=True)
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ConfigError(f"cannot warm-start from {self.checkpoint}: its networks do not fit this run's "
                              f"({str(exc).splitlines()[0]}); was it trained on another robot?") from exc
        if estimator is not None and "estimator_training" in self.infos:
            estimator.load_state_dict(self.infos["estimator_training"])
        if env is not None and env.cfg.commands.curriculum:
            env.command_level = float(self.infos.get("command_level", 0.0))
        if env is not None and env.terrain_curriculum and "terrain_levels" in self.infos:
            env.start_terrain_levels(self.infos["terrain_levels"])  # the curriculum goes on where the parent was


def interface_differences(parent: dict, child: dict) -> list[str]:
    """'key: parent -> child' for every INTERFACE_KEYS entry the two config dicts disagree on."""
    def value(cfg: dict, key: str):
        for part in key.split("."):
            cfg = cfg.get(part) if isinstance(cfg, dict) else None
        return list(cfg) if isinstance(cfg, tuple) else cfg

    return [f"{key}: {value(parent, key)!r} -> {value(child, key)!r}"
            for key in INTERFACE_KEYS if value(parent, key) != value(child, key)]

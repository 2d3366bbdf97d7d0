"""Test helpers for the PPO trainer tests: a placeholder reward, a tiny training configuration, histories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from motionvl.envs.config import EnvConfig
from motionvl.rl.config import PPOConfig, TrainConfig


class PlaceholderReward:
    """Stand-in for a RewardSpec (callable + to_dict), injected so these tests do not depend on it."""

    def __call__(self, s):
        terms = {"alive": np.ones(s.num_envs),
                 "track_vel": np.exp(-np.sum((s.command[:, :2] - s.base_lin_vel[:, :2]) ** 2, axis=1) / 0.25)}
        return terms["alive"] + terms["track_vel"], terms

    def to_dict(self) -> dict:
        return {"name": "placeholder", "terms": {"alive": 1.0, "track_vel": 1.0}}


def tiny_config(**env) -> TrainConfig:
    env_cfg = EnvConfig(num_envs=16, episode_length_s=0.2, num_threads=1, **env)
    ppo = PPOConfig(num_steps_per_env=8, num_learning_epochs=1, num_mini_batches=2, actor_hidden_dims=(32, 32),
                    critic_hidden_dims=(32, 32))
    # a fixed update thread count: the adaptive one follows the machine's load, and float sums split over
    # another number of threads differ in the last bits (tests compare runs bit for bit)
    return TrainConfig(env=env_cfg, ppo=ppo, save_interval=1, minutes=5.0, adapt_update_threads=False)


TIMING_FIELDS = ("elapsed_s", "steps_per_s", "collect_s", "learn_s")
"""History record fields that depend on the machine's speed, not on what was trained."""


def history_without_timings(run_dir: Path) -> list[dict]:
    """A run's history.jsonl records without TIMING_FIELDS: equal for two runs that trained the same."""
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_FIELDS}
            for line in (Path(run_dir) / "history.jsonl").read_text().splitlines()]

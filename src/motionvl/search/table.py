"""Per-term episode rewards of a policy on held-out episodes: the rows of the paper's Table I.

Every row is measured under the same reward terms at weight 1 (each term's normalised, signed value),
so rows trained on different rewards compare: a term's entry is its mean over episodes of the sum of
its per-step values (x dt) up to the episode's first fall, per second of episode, as the training
history reports its terms. The episodes are the search's held-out randomised ones.
"""

from __future__ import annotations

import numpy as np

from motionvl.rewards.spec import RewardSpec
from motionvl.search.config import EvaluationConfig
from motionvl.task import DEFAULT_COMMAND


def table_spec(specs: list[dict]) -> RewardSpec:
    """The union of the specs' terms, each at weight 1 (a later spec's params and code win)."""
    terms: dict[str, dict] = {}
    code = None
    for spec in specs:
        for name, entry in (spec.get("terms") or {}).items():
            entry = {"weight": entry} if isinstance(entry, (int, float)) else dict(entry)
            terms[name] = {**entry, "weight": 1.0}
        code = spec.get("code") or code
    raw = {"name": "table_terms", "description": "every term at weight 1", "terms": terms}
    if code:
        raw["code"] = code
    return RewardSpec.from_dict(raw, where="Table I terms")


def episode_term_rewards(policy_path, spec: RewardSpec, evaluation: EvaluationConfig, robot=None, *,
                         command=DEFAULT_COMMAND, terrain: str = "flat", terrain_level: int | None = None) -> dict[str, float]:
    """{term: mean per-second episode reward} of the policy on the held-out episodes (module docstring) at the task's
    `command`, `terrain` and `terrain_level`, on `robot` (RobotConfig; None: the package's)."""
    from motionvl.rl.evaluate import batch_evaluation_env
    from motionvl.rl.export import load_policy
    from motionvl.rl.trainer import agree_on_standing

    policy = load_policy(policy_path)
    env = batch_evaluation_env(policy, seconds=evaluation.seconds, episodes=evaluation.episodes, randomize=True,
                               command=tuple(command), robot_dt=not evaluation.training_physics,
                               seed=evaluation.seed, robot=robot, terrain=terrain, terrain_level=terrain_level)
    reward = agree_on_standing(spec, env.cfg)
    step_terms: list = []

    def capture(state):  # called inside env.step on the state before fallen envs are reset
        total, terms = reward(state)
        step_terms.append((terms, np.asarray(state.terminated, dtype=bool).copy()))
        return total, terms

    env.reward_fn = capture
    obs = env.observations()
    alive = np.ones(env.num_envs, dtype=bool)
    sums: dict[str, np.ndarray] = {}
    for _ in range(int(round(evaluation.seconds / env.dt))):
        obs, *_ = env.step(policy(obs))
        terms, terminated = step_terms.pop()
        for name, value in terms.items():
            sums.setdefault(name, np.zeros(env.num_envs))[alive] += np.asarray(value)[alive]
        alive &= ~terminated
    return {name: round(float(np.mean(total) / evaluation.seconds), 5) for name, total in sums.items()}

"""rsl_rl `VecEnv` adapter over the numpy `LocomotionEnv`.

Observations are a TensorDict with two groups: "policy" (the actor observation, exactly what the
exported ONNX policy receives) and "critic" (policy + privileged observations). Rewards, dones
and time-outs are torch tensors on `device`. Per-term episode rewards go to `extras["log"]` as
"/episode_reward/<term>" (the keys rsl_rl and TensorBoard show), and are also accumulated here
so that a trainer can read per-iteration statistics with `pop_stats()`.

`mirror_batch` is the data-augmentation function of rsl_rl's symmetry extension for this env
(PPOConfig.symmetry_augmentation / mirror_loss_coeff; the maps are motionvl.envs.mirror's).
"""

from __future__ import annotations

import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from motionvl.envs.locomotion import LocomotionEnv
from motionvl.envs.mirror import EnvMirror


class LocomotionVecEnv(VecEnv):
    def __init__(self, env: LocomotionEnv, device: str | torch.device = "cpu"):
        self.env = env
        self.device = torch.device(device)
        self.num_envs = env.num_envs
        self.num_actions = env.num_joints
        self.num_obs = env.num_obs
        self.num_privileged_obs = env.num_privileged
        self.max_episode_length = env.max_episode_length
        self.cfg = env.cfg.to_dict()
        self._obs = self._pack(env.observations())  # the state after the env's own reset
        self._return = np.zeros(self.num_envs)
        self._length = np.zeros(self.num_envs, dtype=np.int64)
        self._clear_stats()
        self._mirror: dict | None = None

    # ------------------------------------------------------------------ rsl_rl VecEnv API
    @property
    def episode_length_buf(self) -> torch.Tensor:
        return torch.from_numpy(self.env.episode_length).to(self.device)

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length[:] = np.asarray(torch.as_tensor(value).cpu(), dtype=np.int64)

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions.detach().to("cpu", torch.float64).numpy())
        self._obs = self._pack(obs)
        done = terminated | truncated
        extras = {"time_outs": self._tensor(info["time_outs"], torch.float32)}
        self._return += reward
        self._length += 1
        if done.any():
            n = int(done.sum())
            log = {f"/episode_reward/{k}": v for k, v in info["episode"].items()}
            log["/episode/fall_fraction"] = float(terminated.sum()) / n
            extras["log"] = log
            self._episodes += n
            self._falls += int(terminated.sum())
            self._return_sum += float(self._return[done].sum())
            self._length_sum += int(self._length[done].sum())
            for k, v in info["episode"].items():
                self._term_sum[k] = self._term_sum.get(k, 0.0) + v * n
            self._return[done] = 0.0
            self._length[done] = 0
        self._reward_sum += float(reward.sum())
        self._steps += self.num_envs
        return self._obs, self._tensor(reward, torch.float32), self._tensor(done, torch.long), extras

    def sync_observations(self) -> TensorDict:
        """Re-read the observations after the wrapped env was stepped or reset directly."""
        self._obs = self._pack(self.env.observations())
        return self._obs

    def episode_state(self) -> dict:
        """The wrapped env's episodes in flight and their returns and lengths so far (`load_episode_state`)."""
        return {"env": self.env.episode_state(), "return": self._return.copy(), "length": self._length.copy()}

    def load_episode_state(self, saved: dict) -> None:
        self.env.load_episode_state(saved["env"])
        self._return[:] = saved["return"]
        self._length[:] = saved["length"]
        self.sync_observations()

    # ------------------------------------------------------------------ statistics
    def pop_stats(self) -> dict:
        """Statistics since the last call: finished episodes, their mean return and length, per-term means."""
        n = self._episodes
        stats = {
            "episodes": n,
            "mean_step_reward": self._reward_sum / max(self._steps, 1),
            "mean_return": self._return_sum / n if n else None,
            "mean_episode_length": self._length_sum / n if n else None,
            "fall_fraction": self._falls / n if n else None,
            "terms": {k: v / n for k, v in self._term_sum.items()} if n else {},
        }
        self._clear_stats()
        return stats

    def _clear_stats(self) -> None:
        self._episodes = self._falls = self._length_sum = self._steps = 0
        self._return_sum = self._reward_sum = 0.0
        self._term_sum: dict[str, float] = {}

    # ------------------------------------------------------------------ conversion
    def _tensor(self, array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device=self.device, dtype=dtype)

    def _pack(self, obs: np.ndarray) -> TensorDict:
        policy = obs.astype(np.float32)
        critic = np.concatenate([policy, self.env.privileged_observations().astype(np.float32)], axis=1)
        return TensorDict({"policy": self._tensor(policy, torch.float32), "critic": self._tensor(critic, torch.float32)},
                          batch_size=[self.num_envs], device=self.device)

    # ------------------------------------------------------------------ symmetry
    def mirror_maps(self) -> dict:
        """{"policy" | "critic" | "action": (index, sign)} as tensors on `device`, built on first use."""
        if self._mirror is None:
            m = EnvMirror.of(self.env)
            as_tensors = lambda i, s: (torch.as_tensor(i, device=self.device),  # noqa: E731
                                       torch.as_tensor(s, dtype=torch.float32, device=self.device))
            self._mirror = {"policy": as_tensors(m.obs_index, m.obs_sign),
                            "critic": as_tensors(m.critic_index, m.critic_sign),
                            "action": as_tensors(m.action_index, m.action_sign)}
        return self._mirror


def mirror_batch(env: LocomotionVecEnv, obs: TensorDict | None = None, actions: torch.Tensor | None = None):
    """rsl_rl symmetry `data_augmentation_func`: each batch followed by its left-right mirror image
    (rows [0, B) as given, [B, 2B) mirrored); None stays None."""
    def doubled(x: torch.Tensor, key: str) -> torch.Tensor:
        return torch.cat([x, mirror_rows(env, x, key)], dim=0)

    obs_aug = None
    if obs is not None:
        obs_aug = TensorDict({k: doubled(v, k) for k, v in obs.items()}, batch_size=[2 * obs.batch_size[0]],
                             device=obs.device)
    actions_aug = doubled(actions, "action") if actions is not None else None
    return obs_aug, actions_aug


def mirror_rows(env: LocomotionVecEnv, x: torch.Tensor, key: str) -> torch.Tensor:
    """The left-right mirror image of each row of `x`, a batch of `key` ("policy" or "critic"
    observations, or "action")."""
    index, sign = env.mirror_maps()[key]
    return x[..., index] * sign.to(x.dtype)

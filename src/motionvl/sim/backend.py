"""Physics backends: N copies of one model stepped together outside Python.

`MujocoBatchBackend` uses mujoco.batch.Batch (MuJoCo >= 4.0): one persistent MjData per
simulation, stepped on a thread pool in C. A GPU backend (MuJoCo Warp) can be added behind the
same small interface: `num_envs`, state views `qpos`/`qvel`/`ctrl`, outputs `sensordata`,
`actuator_force`, `xpos`, and `step`, `step_with_latency`, `reset`, `forward`,
`per_env_model_field`.
"""

from __future__ import annotations

import os

import mujoco
import mujoco.batch
import numpy as np


def default_num_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


class MujocoBatchBackend:
    def __init__(self, model: mujoco.MjModel, num_envs: int, num_threads: int | None = None):
        self.model = model
        self.num_envs = int(num_envs)
        self.num_threads = int(num_threads or default_num_threads())
        self.batch = mujoco.batch.Batch(model, nsim=self.num_envs, nthread=self.num_threads, persistent=True)
        # live (N, ...) views: writing qpos/qvel/ctrl changes the next step's state
        self.qpos = self.batch.bind("qpos")
        self.qvel = self.batch.bind("qvel")
        self.ctrl = self.batch.bind("ctrl")
        self.sensordata = self.batch.bind("sensordata")
        self.actuator_force = self.batch.bind("actuator_force")
        self.xpos = self.batch.bind("xpos")
        self._record_out: dict | None = None

    def reset(self, ids: np.ndarray | None = None, keyframe: int = 0) -> None:
        self.batch.reset(ids=ids, keyframe=keyframe)

    def forward(self, ids: np.ndarray | None = None) -> None:
        self.batch.forward(ids=ids)

    def step(self, nstep: int) -> None:
        """Advance every simulation by nstep physics steps with the current ctrl held."""
        # mjSTAGE_VEL: positions, velocities and their sensors are current after the call; in a
        # persistent batch the next step continues from these stages at no extra cost.
        self.batch.step(nstep=nstep, stage=mujoco.mjtStage.mjSTAGE_VEL)

    def step_with_latency(self, old_ctrl: np.ndarray, new_ctrl: np.ndarray, latency: np.ndarray, nstep: int) -> None:
        """Advance nstep physics steps; env i applies new_ctrl[i] from substep latency[i] on.

        Models the delay between a policy output and the motor driver taking it. Envs that share
        a latency are stepped together: at most two calls per distinct latency.
        """
        self.ctrl[:] = old_ctrl
        for lat in np.unique(latency):
            ids = np.flatnonzero(latency == lat)
            lat = int(lat)
            if lat >= nstep:
                self.batch.step(ids=ids, nstep=nstep, stage=mujoco.mjtStage.mjSTAGE_VEL)
                continue
            if lat > 0:
                self.batch.step(ids=ids, nstep=lat)
            self.ctrl[ids] = new_ctrl[ids]
            self.batch.step(ids=ids, nstep=nstep - lat, stage=mujoco.mjtStage.mjSTAGE_VEL)
        self.ctrl[:] = new_ctrl

    def per_env_model_field(self, name: str) -> np.ndarray:
        """A live (N, ...) per-simulation copy of a model field, for domain randomisation."""
        return self.batch.expand(name)

    def set_const(self) -> None:
        self.batch.set_const()

    def get_data(self, env: int) -> mujoco.MjData:
        return self.batch.get_data(env)

    def get_model(self, env: int) -> mujoco.MjModel:
        return self.batch.get_model(env)

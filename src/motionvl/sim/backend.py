"""Physics backends: N copies of one model stepped together outside Python.

`MujocoBatchBackend` uses mujoco.batch.Batch (MuJoCo >= 4.0): one persistent MjData per
simulation, stepped on a thread pool in C. A GPU backend (MuJoCo Warp) can be added behind the
same small interface: `num_envs`, state views `qpos`/`qvel`/`ctrl`, outputs `sensordata`,
`actuator_force`, `xpos`, and `step`, `reset`, `forward`, `per_env_model_field`, for
command latency `set_ctrl_delay` and `reset_ctrl_history`, and for checkpoints `state_dict` and
`load_state_dict`.
"""

from __future__ import annotations

import os

import mujoco
import mujoco.batch
import numpy as np


STATE_FIELDS = ("time", "qpos", "qvel", "act", "history", "qacc_warmstart", "ctrl", "qfrc_applied", "xfrc_applied",
                "eq_active", "mocap_pos", "mocap_quat", "userdata", "plugin_state", "plastic")
"""MjData fields of mjSTATE_INTEGRATION: what mj_step reads besides the model (warm start and ctrl
history included, so that a restored simulation continues bit for bit)."""


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
        # ctrl history samples per actuator (build_model's ctrl_history; one length for all, else 0)
        nsample = model.actuator_history[:, 0]
        self.ctrl_history = int(nsample[0]) if nsample.size and np.all(nsample == nsample[0]) else 0
        self._ctrl_delay: np.ndarray | None = None  # (N, nu) actuator_delay, expanded on first use
        self._history_rows: tuple | None = None  # history and time views, slot indices; bound on first use

    def reset(self, ids: np.ndarray | None = None, keyframe: int = 0, forward: bool = True) -> None:
        """Reset to a keyframe; forward=False skips mj_forward, for a caller that writes the
        state next and calls forward() itself (one forward per reset instead of two)."""
        stage = mujoco.mjtStage.mjSTAGE_ACC if forward else mujoco.mjtStage.mjSTAGE_NONE
        self.batch.reset(ids=ids, keyframe=keyframe, stage=stage)

    def forward(self, ids: np.ndarray | None = None) -> None:
        self.batch.forward(ids=ids)

    def step(self, nstep: int) -> None:
        """Advance every simulation by nstep physics steps with the current ctrl held."""
        # mjSTAGE_VEL: positions, velocities and their sensors are current after the call; in a
        # persistent batch the next step continues from these stages at no extra cost.
        self.batch.step(nstep=nstep, stage=mujoco.mjtStage.mjSTAGE_VEL)

    def set_ctrl_delay(self, ids: np.ndarray, steps: np.ndarray) -> None:
        """Make simulation ids[i] apply a new ctrl steps[i] physics steps late (0: at once).

        Models the delay between a policy output and the motor driver taking it: in a step(nstep)
        after ctrl is written, the first steps[i] substeps still apply the previous ctrl and the
        rest the new one. MuJoCo does this inside mj_step (per-simulation actuator_delay, read
        from the ctrl history of a model built with ctrl_history >= steps), so one batched call
        serves every latency instead of one call per latency group.

        MuJoCo reads the delayed ctrl at time - delay by zero-order hold and counts a sample as
        an exact hit only within 1e-15 s; d.time drifts further from k * dt within an episode
        (from t = 16 s at dt = 5 ms), so a delay of exactly k steps would now and then read the
        sample one step older (k + 1 steps of latency). k - 1/2 steps reads between two samples:
        always sample k. Tested bit-identical to switching ctrl between single substeps.
        """
        steps = np.asarray(steps)
        if np.any(steps > self.ctrl_history):
            raise ValueError(f"ctrl delay of {int(steps.max())} steps exceeds the model's ctrl history "
                             f"({self.ctrl_history} samples; build_model(..., ctrl_history=...))")
        if self._ctrl_delay is None:
            self._ctrl_delay = self.batch.expand("actuator_delay")
        delay = np.where(steps > 0, (steps - 0.5) * self.model.opt.timestep, 0.0)
        self._ctrl_delay[ids] = delay[:, None]

    def reset_ctrl_history(self, ids: np.ndarray, ctrl: np.ndarray) -> None:
        """Record ctrl, (n, nu), as the control of the past history samples of simulations ids.

        A reset zeroes the history values, so a delayed actuator would otherwise pull towards
        a zero target in its first substeps. Does what mj_initCtrlHistory does for one MjData
        (timestamps time - nsample * dt ... time - dt), for many simulations in one write
        into the history rows; buffer layout per actuator: [user, cursor, times(n), values(n)].
        """
        n = self.ctrl_history
        if n == 0:
            raise ValueError("the model has no ctrl history (build_model(..., ctrl_history=...))")
        if self._history_rows is None:
            adr = self.model.actuator_historyadr[:, None]
            self._history_rows = (self.batch.bind("history"), self.batch.bind("time"),
                                  adr[:, 0] + 1, adr + 2 + np.arange(n), adr + 2 + n + np.arange(n))
        history, time, cursor, times, values = self._history_rows
        ids = np.asarray(ids)
        rows = ids[:, None, None]
        history[ids[:, None], cursor] = n - 1  # newest sample in the last slot, as mj_resetData leaves it
        history[rows, times] = time[ids][:, None, None] - (n - np.arange(n)) * self.model.opt.timestep
        history[rows, values] = np.asarray(ctrl)[:, :, None]

    def per_env_model_field(self, name: str) -> np.ndarray:
        """A live (N, ...) per-simulation copy of a model field, for domain randomisation."""
        return self.batch.expand(name)

    def state_dict(self) -> dict:
        """Copies of every simulation's integration state and of the model fields made per-simulation."""
        state = {name: self.batch.bind(name).copy() for name in STATE_FIELDS if self.batch.bind(name).size}
        model = {name: values.copy() for name in sorted(mujoco.batch.MODEL_FIELDS)
                 if (values := self.batch.expanded(name)) is not None}
        return {"num_envs": self.num_envs, "state": state, "model": model}

    def load_state_dict(self, saved: dict) -> None:
        """Put back what `state_dict` copied; the next step continues as the saved batch's would have.
        ValueError when it was saved from another number of simulations or another model."""
        if saved.get("num_envs") != self.num_envs:
            raise ValueError(f"saved from {saved.get('num_envs')} simulations, this batch runs {self.num_envs}")
        for kind, fields, live in (("state", saved["state"], self.batch.bind), ("model", saved["model"], self.batch.expand)):
            for name, values in fields.items():
                target = live(name)
                if target.shape != values.shape:
                    raise ValueError(f"saved {kind} field {name} has shape {values.shape}, this model's {target.shape}")
        for name, values in saved["state"].items():
            self.batch.bind(name)[...] = values
        for name, values in saved["model"].items():
            self.batch.expand(name)[...] = values
        if set(saved["model"]) & set(mujoco.MjModel._setconst_inputs):
            self.batch.set_const()
        # the stages a step leaves behind (step's mjSTAGE_VEL), from which the next step continues
        self.batch.forward(stage=mujoco.mjtStage.mjSTAGE_VEL)

    def set_const(self) -> None:
        self.batch.set_const()

    def get_data(self, env: int) -> mujoco.MjData:
        return self.batch.get_data(env)

    def get_model(self, env: int) -> mujoco.MjModel:
        return self.batch.get_model(env)

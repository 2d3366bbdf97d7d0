"""A recorded rollout of one environment: what the renderer films and the critics analyse."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np


@dataclasses.dataclass
class Trajectory:
    """One environment's rollout sampled at the policy rate (T samples).

    Arrays are float64; frames as in `motionvl.rewards.state` (world z up, body x forward).
    """

    dt: float
    """Seconds between samples (the policy period)."""
    joint_names: tuple
    """Actuated joint names in robot-config order."""
    time: np.ndarray
    """(T,) seconds since the rollout started."""
    qpos: np.ndarray
    """(T, nq) full MuJoCo qpos: free joint (xyz, quat wxyz) then the joints in config order."""
    qvel: np.ndarray
    """(T, nv) full MuJoCo qvel: free joint (world linear, body angular) then joints."""
    foot_pos: np.ndarray
    """(T, 2, 3) left/right sole-centre world positions, metres."""
    foot_vel: np.ndarray
    """(T, 2, 3) left/right sole-centre world velocities, m/s."""
    foot_contact: np.ndarray
    """(T, 2) bool, sole in contact with the ground."""
    command: np.ndarray
    """(T, 3) velocity command (vx, vy, yaw rate) in effect."""
    fell: np.ndarray
    """(T,) bool, the fall/termination condition held at this sample."""
    joint_torque: np.ndarray | None = None
    """(T, J) applied joint torques, N m (optional)."""
    joint_roles: tuple = ()
    """(side, kind) of each joint as the robot config declares them (RobotConfig.joint_roles)."""
    ground_height: np.ndarray | None = None
    """(T, 3) terrain height (m) under the base, the left sole and the right sole; None: level ground at z = 0."""

    @property
    def base_pos(self) -> np.ndarray:
        return self.qpos[:, 0:3]

    @property
    def base_quat(self) -> np.ndarray:
        return self.qpos[:, 3:7]

    @property
    def joint_pos(self) -> np.ndarray:
        return self.qpos[:, 7:]

    @property
    def joint_vel(self) -> np.ndarray:
        return self.qvel[:, 6:]

    @property
    def duration(self) -> float:
        return float(len(self.time) * self.dt)

    def save(self, path: str | Path) -> None:
        """Write to a .npz file (arrays) with the joint names, roles and dt alongside."""
        arrays = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if isinstance(getattr(self, f.name), np.ndarray)}
        np.savez_compressed(path, meta=json.dumps({"dt": self.dt, "joint_names": list(self.joint_names),
                                                   "joint_roles": [list(r) for r in self.joint_roles]}), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> "Trajectory":
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            kwargs = {k: f[k] for k in f.files if k != "meta"}
        return cls(dt=float(meta["dt"]), joint_names=tuple(meta["joint_names"]),
                   joint_roles=tuple(tuple(r) for r in meta.get("joint_roles", ())), **kwargs)

"""Left-right mirror symmetry of the locomotion task (reflection through the robot's sagittal plane).

A biped walking is symmetric: the mirror image of a good motion under the mirrored command is
a good motion too. PPO can use that (rsl_rl's symmetry extension, Mittal et al., ICRA 2024):
append mirrored observation/action pairs to every mini-batch and/or penalise the actor for
disagreeing with its mirrored self. A policy that treats both sides alike cannot have a
one-way yaw bias at a zero yaw-rate command.

Everything here is an index permutation and a sign per entry, derived from the robot config's
joint roles, the MuJoCo model's joint axes and the observation layout, so that a wrong robot file
fails loudly instead of teaching the policy a wrong mirror:
  joints         each left joint <-> the right joint of the same kind (joints on the midline map to
                 themselves; RobotConfig.mirror_partner); the sign is how the partner's
                 axis relates to the reflected axis (hinge axes are pseudovectors: a reflection
                 y -> -y maps (ax, ay, az) to (-ax, ay, -az)), so roll/yaw joints flip, pitch don't;
  angular vel.   (wx, wy, wz) -> (-wx, wy, -wz)       linear vel. (vx, vy, vz) -> (vx, -vy, vz)
  gravity        (gx, gy, gz) -> (gx, -gy, gz)        command (vx, vy, yaw rate) -> (vx, -vy, -yaw rate)
  heading error  -> -heading error
  gait phase     phase + 1/2 (the legs are half a period apart): (sin, cos) -> (-sin, -cos)
  foot contacts  swapped.
  randomisation draws (critic only): scalars unchanged, per-joint gain/friction scales permuted.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from motionvl.robot import ConfigError, RobotConfig

# (index permutation within the block, sign) of each observation block that is not joint-indexed
_VECTOR_BLOCKS = {
    "base_ang_vel": ([0, 1, 2], [-1.0, 1.0, -1.0]),
    "projected_gravity": ([0, 1, 2], [1.0, -1.0, 1.0]),
    "command": ([0, 1, 2], [1.0, -1.0, -1.0]),
    "heading_error": ([0], [-1.0]),
    "gait_phase_sin_cos": ([0, 1], [-1.0, -1.0]),
    "base_lin_vel": ([0, 1, 2], [1.0, -1.0, 1.0]),
    "base_height": ([0], [1.0]),
    "foot_contact": ([1, 0], [1.0, 1.0]),  # (left, right)
    # randomisation draws the critic may see: scalars of the whole robot or world
    "ground_friction": ([0], [1.0]),
    "latency_periods": ([0], [1.0]),
    "added_mass": ([0], [1.0]),
    "push_phase": ([0], [1.0]),
}
# per-joint blocks; the draws (gain and friction scales) are magnitudes, so only the permutation applies
_JOINT_BLOCKS = ("joint_pos_rel", "joint_vel", "last_action")
_JOINT_MAGNITUDE_BLOCKS = ("gain_scale_log", "joint_friction_scale_log")


def joint_mirror(model: mujoco.MjModel, robot: RobotConfig, tol: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """(perm, sign) with mirrored_q = sign * q[perm], from the robot's joint roles and the joints' axes at qpos0.

    Raises ConfigError when a joint has no partner, or the partner's anchor or axis is not the
    mirror image of the joint's (an asymmetric robot cannot use the mirror augmentation).
    """
    names = list(robot.joint_names)
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    reflect_point = np.array([1.0, -1.0, 1.0])
    reflect_axis = np.array([-1.0, 1.0, -1.0])  # a pseudovector under y -> -y
    base_y = float(data.xpos[1][1])  # the floating base, the world's first child
    perm, sign = np.zeros(len(names), dtype=np.int64), np.zeros(len(names))
    for i, name in enumerate(names):
        k = robot.mirror_partner(i)
        if k is None:
            side, kind = robot.joint_roles[i]
            raise ConfigError(f"mirror symmetry: joint '{name}' ({side} {kind}) has no partner: no joint of the "
                              f"robot config is declared as the {'right' if side == 'left' else 'left'} {kind}")
        partner = names[k]
        a, b = model.joint(name).id, model.joint(partner).id
        anchor_a, anchor_b = data.xanchor[a].copy(), data.xanchor[b].copy()
        anchor_a[1] -= base_y
        anchor_b[1] -= base_y
        if not np.allclose(anchor_b, anchor_a * reflect_point, atol=tol):
            raise ConfigError(f"mirror symmetry: joint '{partner}' at {np.round(anchor_b, 4).tolist()} is not the "
                              f"mirror image of '{name}' at {np.round(anchor_a, 4).tolist()}")
        s = float(np.dot(data.xaxis[b], data.xaxis[a] * reflect_axis))
        if abs(abs(s) - 1.0) > tol:
            raise ConfigError(f"mirror symmetry: the axis of '{partner}' {np.round(data.xaxis[b], 4).tolist()} is "
                              f"not (minus) the mirrored axis of '{name}' {np.round(data.xaxis[a], 4).tolist()}")
        perm[i], sign[i] = names.index(partner), np.sign(s)
    return perm, sign


def _block_maps(layout: list, joint_perm: np.ndarray, joint_sign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    index, sign, offset = [], [], 0
    for name, size, _ in layout:
        if name in _JOINT_BLOCKS:
            p, s = joint_perm, joint_sign
        elif name in _JOINT_MAGNITUDE_BLOCKS:
            p, s = joint_perm, np.ones_like(joint_sign)
        elif name in _VECTOR_BLOCKS:
            p, s = _VECTOR_BLOCKS[name]
        else:
            raise ConfigError(f"mirror symmetry: no mirror rule for observation block '{name}'")
        if len(p) != size:
            raise ConfigError(f"mirror symmetry: block '{name}' has {size} entries, its rule {len(p)}")
        index.append(np.asarray(p) + offset)
        sign.append(np.asarray(s, dtype=np.float64))
        offset += size
    return np.concatenate(index), np.concatenate(sign)


@dataclasses.dataclass(frozen=True)
class EnvMirror:
    """mirrored = sign * x[..., index] for the actor observation, the critic observation and the action."""

    obs_index: np.ndarray
    obs_sign: np.ndarray
    critic_index: np.ndarray
    critic_sign: np.ndarray
    action_index: np.ndarray
    action_sign: np.ndarray

    @classmethod
    def of(cls, env) -> "EnvMirror":
        """The mirror maps of a LocomotionEnv: its model's joints, its observation and history layout."""
        perm, sign = joint_mirror(env.model, env.robot)
        for key in ("action_scales", "kp", "kd"):
            values = getattr(env.robot, key)
            if not np.allclose(values[perm], values):
                pairs = [f"{env.robot.joint_names[i]} {values[i]:g} vs {env.robot.joint_names[perm[i]]} {values[perm[i]]:g}"
                         for i in range(len(values)) if i < perm[i] and not np.isclose(values[perm[i]], values[i])]
                raise ConfigError(f"mirror symmetry: {key} differs between mirrored joints: " + ", ".join(pairs))
        contract = env.contract  # the actor's observation blocks, then its past frames (oldest last)
        layout = [(b.name, b.size, b.scale) for b in contract.obs_layout]
        layout += contract.history_frames * [(b.name, b.size, b.scale) for b in contract.history_frame]
        obs_index, obs_sign = _block_maps(layout, perm, sign)
        priv_index, priv_sign = _block_maps(env.privileged_layout, perm, sign)
        if obs_index.size != env.num_obs or priv_index.size != env.num_privileged:
            raise ConfigError("mirror symmetry: the observation layout does not match the observation size")
        return cls(obs_index=obs_index, obs_sign=obs_sign,
                   critic_index=np.concatenate([obs_index, priv_index + env.num_obs]),
                   critic_sign=np.concatenate([obs_sign, priv_sign]), action_index=perm, action_sign=sign)

    def obs(self, x: np.ndarray) -> np.ndarray:
        return x[..., self.obs_index] * self.obs_sign

    def critic(self, x: np.ndarray) -> np.ndarray:
        return x[..., self.critic_index] * self.critic_sign

    def action(self, a: np.ndarray) -> np.ndarray:
        return a[..., self.action_index] * self.action_sign

"""Synthetic trajectories of known gait geometry, shared by the gait-metric, evaluation and critic tests."""

from __future__ import annotations

import numpy as np

from motionvl.robot import load_robot_config
from motionvl.sim.trajectory import Trajectory

ROBOT = load_robot_config()
J = {n: i for i, n in enumerate(ROBOT.joint_names)}


def synthetic_gait(T: int = 200, dt: float = 0.02) -> Trajectory:
    """1 s gait cycle: each foot 60 % stance / 40 % swing, half a cycle apart; swing apex 8 cm."""
    names = ("left_hip_pitch", "left_knee", "right_hip_pitch", "right_knee")
    t = np.arange(T) * dt
    phase = np.stack([(t % 1.0), ((t + 0.5) % 1.0)], axis=1)
    contact = phase < 0.6 - 1e-9
    swing = np.clip((phase - 0.6) / 0.4, 0.0, 1.0)
    foot_pos = np.zeros((T, 2, 3))
    foot_pos[..., 2] = np.where(contact, 0.0, 0.08 * np.sin(np.pi * swing))
    foot_vel = np.zeros((T, 2, 3))
    foot_vel[..., 0] = np.where(contact, 0.02, 1.0)
    qpos = np.zeros((T, 7 + 4))
    qpos[:, 3], qpos[:, 5] = np.cos(0.05), np.sin(0.05)  # pitch 0.1 rad about +y (leaning forward)
    qpos[:, 8] = np.where(contact[:, 0], 0.5, 1.2)  # knees: 0.5 rad in stance, 1.2 in swing
    qpos[:, 10] = np.where(contact[:, 1], 0.5, 1.2)
    roles = (("left", "hip_pitch"), ("left", "knee"), ("right", "hip_pitch"), ("right", "knee"))
    return Trajectory(dt=dt, joint_names=names, joint_roles=roles, time=t, qpos=qpos, qvel=np.zeros((T, 6 + 4)), foot_pos=foot_pos,
                      foot_vel=foot_vel, foot_contact=contact, command=np.zeros((T, 3)), fell=np.zeros(T, bool))


def walking_trajectory(speed: float = 0.6, period: float = 1.0, seconds: float = 6.0, dt: float = 0.02,
                       clearance=(0.08, 0.08), stance_frac: float = 0.6, knee_stance: float = 0.1,
                       knee_swing: float = 1.0) -> Trajectory:
    """An ideal alternating gait: cadence 2 / period steps/s, step length speed x period / 2, soles
    fixed in stance (no slip), lifted by `clearance` (left, right) in swing."""
    n = int(round(seconds / dt)) + 1
    t = np.arange(n) * dt
    qpos = np.zeros((n, 7 + ROBOT.num_joints))
    qpos[:, 0] = speed * t
    qpos[:, 2] = 0.8
    qpos[:, 3] = 1.0
    qpos[:, 7:] = ROBOT.default_pose
    foot = np.zeros((n, 2, 3))
    contact = np.zeros((n, 2), bool)
    for k, (offset, y) in enumerate(((0.0, 0.09), (0.5, -0.09))):
        cyc = t / period - offset
        c, phase = np.floor(cyc), cyc - np.floor(cyc)
        x_stance = speed * ((c + offset) * period + stance_frac * period / 2)
        s = np.clip((phase - stance_frac) / (1 - stance_frac), 0, 1)
        swing = phase >= stance_frac
        foot[:, k, 0] = x_stance + s * speed * period
        foot[:, k, 1] = y
        foot[:, k, 2] = 0.015 + clearance[k] * np.sin(np.pi * s) * swing
        contact[:, k] = ~swing
        qpos[:, 7 + J[("left", "right")[k] + "_knee"]] = knee_stance + (knee_swing - knee_stance) * np.sin(np.pi * s) * swing
    vel = np.gradient(foot, t, axis=0)
    qvel = np.zeros((n, 6 + ROBOT.num_joints))
    qvel[:, 0] = speed
    return Trajectory(dt=dt, joint_names=ROBOT.joint_names, joint_roles=ROBOT.joint_roles, time=t, qpos=qpos,
                      qvel=qvel, foot_pos=foot, foot_vel=vel, foot_contact=contact,
                      command=np.tile([speed, 0.0, 0.0], (n, 1)), fell=np.zeros(n, bool))

"""Batched quaternion helpers (w, x, y, z), numpy, shapes (N, 4) / (N, 3)."""

from __future__ import annotations

import numpy as np


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # written out: np.cross's generic axis handling costs more than the arithmetic here
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    out[:, 0] = a[:, 1] * b[:, 2] - a[:, 2] * b[:, 1]
    out[:, 1] = a[:, 2] * b[:, 0] - a[:, 0] * b[:, 2]
    out[:, 2] = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    return out


def quat_rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate world vectors v into the frame whose orientation is q."""
    w = q[:, 0:1]
    u = q[:, 1:4]
    t = 2.0 * _cross(u, v)
    return v - w * t + _cross(u, t)


def projected_gravity(q: np.ndarray) -> np.ndarray:
    """World (0, 0, -1) expressed in the frame of orientation q (closed form of quat_rotate_inverse)."""
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    out = np.empty((len(q), 3))
    out[:, 0] = 2.0 * (w * y - x * z)
    out[:, 1] = -2.0 * (w * x + y * z)
    out[:, 2] = -(1.0 - 2.0 * (x * x + y * y))
    return out


def quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    w = q[:, 0:1]
    u = q[:, 1:4]
    t = 2.0 * _cross(u, v)
    return v + w * t + _cross(u, t)


def yaw_of(q: np.ndarray) -> np.ndarray:
    """Heading angle (rad, about world z) of (..., 4) wxyz quaternions."""
    w, x, y, z = np.moveaxis(np.asarray(q, dtype=float), -1, 0)
    return np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def to_heading_frame(v_xy: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """World-frame horizontal vectors (..., 2) in the frame turned by `yaw` (x ahead, y to the left)."""
    v_xy, yaw = np.asarray(v_xy, dtype=float), np.asarray(yaw, dtype=float)
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([c * v_xy[..., 0] + s * v_xy[..., 1], -s * v_xy[..., 0] + c * v_xy[..., 1]], axis=-1)


def wrap_angle(a: np.ndarray) -> np.ndarray:
    """Angles wrapped to [-pi, pi)."""
    return np.mod(np.asarray(a) + np.pi, 2.0 * np.pi) - np.pi


def roll_pitch_of(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Roll and pitch (rad) of (..., 4) wxyz quaternions (z-y-x Euler angles; pitch + = nose down)."""
    w, x, y, z = np.moveaxis(np.asarray(q, dtype=float), -1, 0)
    roll = np.arctan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = np.arcsin(np.clip(2.0 * (w * y - z * x), -1.0, 1.0))
    return roll, pitch


def quat_from_euler(roll: np.ndarray, pitch: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """(N, 4) wxyz quaternions of intrinsic z-y-x (yaw, then pitch, then roll) angles, rad."""
    cr, sr, cp, sp = np.cos(roll / 2), np.sin(roll / 2), np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return np.stack([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy], axis=-1)


def quat_from_yaw(yaw: np.ndarray) -> np.ndarray:
    q = np.zeros((len(yaw), 4))
    q[:, 0] = np.cos(yaw / 2)
    q[:, 3] = np.sin(yaw / 2)
    return q

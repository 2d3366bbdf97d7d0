"""Quaternion and angle helpers, numpy, quaternions (w, x, y, z): the one place MotionVL turns rotations
into one another. Rotation helpers take (N, 4) / (N, 3) batches; the angle and product helpers any
leading shape (..., 4), a single quaternion included."""

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
    """(..., 4) wxyz quaternions of intrinsic z-y-x angles, rad: yaw, then pitch, then roll (the same rotation
    as roll, pitch, yaw about the fixed x, y, z axes: Rz(yaw) Ry(pitch) Rx(roll)); inverse of roll_pitch_of
    and yaw_of."""
    cr, sr, cp, sp = np.cos(roll / 2), np.sin(roll / 2), np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return np.stack([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy], axis=-1)


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a b of (..., 4) quaternions (the frame rotated by a, then by b within it)."""
    aw, ax, ay, az = np.moveaxis(np.asarray(a, dtype=float), -1, 0)
    bw, bx, by, bz = np.moveaxis(np.asarray(b, dtype=float), -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def quat_conjugate(q: np.ndarray) -> np.ndarray:
    """The inverse rotation of (..., 4) unit quaternions."""
    return np.asarray(q, dtype=float) * np.array([1.0, -1.0, -1.0, -1.0])


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotation matrices of (..., 4) unit quaternions (they turn body vectors into world ones)."""
    w, x, y, z = np.moveaxis(np.asarray(q, dtype=float), -1, 0)
    rows = [[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]]
    return np.stack([np.stack(row, axis=-1) for row in rows], axis=-2)


def tilt_of(q: np.ndarray) -> np.ndarray:
    """Angle (rad) between the body z axis and the world's up of (..., 4) quaternions (normalised first;
    a zero quaternion counts as upside down)."""
    q = np.asarray(q, dtype=float)
    norm = np.sum(q * q, axis=-1)
    cos_tilt = np.where(norm > 0, 1.0 - 2.0 * (q[..., 1] ** 2 + q[..., 2] ** 2) / np.where(norm > 0, norm, 1.0), -1.0)
    return np.arccos(np.clip(cos_tilt, -1.0, 1.0))


def quat_from_yaw(yaw: np.ndarray) -> np.ndarray:
    q = np.zeros((len(yaw), 4))
    q[:, 0] = np.cos(yaw / 2)
    q[:, 3] = np.sin(yaw / 2)
    return q

"""The quaternion helpers (motionvl.sim.math, w x y z) against MuJoCo's own rotation."""

from __future__ import annotations

import mujoco
import numpy as np

from motionvl.sim.math import (projected_gravity, quat_conjugate, quat_from_euler, quat_multiply, quat_rotate,
                               quat_rotate_inverse, quat_to_matrix, roll_pitch_of, tilt_of, yaw_of)


def test_euler_round_trip_and_rotations_agree_with_mujoco():
    rng = np.random.default_rng(0)
    roll, pitch, yaw = rng.uniform(-1.2, 1.2, (3, 32))
    q = quat_from_euler(roll, pitch, yaw)
    got_roll, got_pitch = roll_pitch_of(q)
    np.testing.assert_allclose(got_roll, roll, atol=1e-12)
    np.testing.assert_allclose(got_pitch, pitch, atol=1e-12)
    np.testing.assert_allclose(yaw_of(q), yaw, atol=1e-12)
    v = rng.normal(size=(32, 3))
    for k in range(32):
        mat = np.zeros(9)
        mujoco.mju_quat2Mat(mat, q[k])
        np.testing.assert_allclose(quat_rotate(q[k:k + 1], v[k:k + 1])[0], mat.reshape(3, 3) @ v[k], atol=1e-12)
        np.testing.assert_allclose(quat_rotate_inverse(q[k:k + 1], v[k:k + 1])[0], mat.reshape(3, 3).T @ v[k],
                                   atol=1e-12)
    down = np.tile([0.0, 0.0, -1.0], (32, 1))
    np.testing.assert_allclose(projected_gravity(q), quat_rotate_inverse(q, down), atol=1e-12)
    assert np.all(got_pitch * projected_gravity(q)[:, 0] >= 0), "pitch + (nose down) puts gravity ahead of the body"


def test_products_matrices_and_tilt_agree_with_mujoco():
    """The helpers the deployment side uses (single quaternions, any leading shape) against MuJoCo's."""
    rng = np.random.default_rng(1)
    a = quat_from_euler(*rng.uniform(-1.2, 1.2, (3, 8)))
    b = quat_from_euler(*rng.uniform(-1.2, 1.2, (3, 8)))
    for k in range(8):
        product, mat = np.zeros(4), np.zeros(9)
        mujoco.mju_mulQuat(product, a[k], b[k])
        np.testing.assert_allclose(quat_multiply(a[k], b[k]), product, atol=1e-12)
        mujoco.mju_quat2Mat(mat, a[k])
        np.testing.assert_allclose(quat_to_matrix(a[k]), mat.reshape(3, 3), atol=1e-12)
    np.testing.assert_allclose(quat_multiply(a, quat_conjugate(a)), np.tile([1.0, 0, 0, 0], (8, 1)), atol=1e-12)
    assert quat_from_euler(0.1, -0.2, 0.7).shape == (4,)
    roll, pitch = rng.uniform(-1.0, 1.0, (2, 8))
    tilt = np.arccos(np.cos(roll) * np.cos(pitch))  # the body z axis's angle from up, whatever the yaw
    np.testing.assert_allclose(tilt_of(quat_from_euler(roll, pitch, rng.uniform(-3, 3, 8))), tilt, atol=1e-9)
    np.testing.assert_allclose(tilt_of(2.0 * quat_from_euler(0.3, 0.0, 0.0)), 0.3, atol=1e-12)  # normalised first
    assert tilt_of(np.zeros(4)) == np.pi, "a zero quaternion is upside down, never upright"

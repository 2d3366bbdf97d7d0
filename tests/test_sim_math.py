"""The quaternion helpers (motionvl.sim.math, w x y z) against MuJoCo's own rotation."""

from __future__ import annotations

import mujoco
import numpy as np

from motionvl.sim.math import (projected_gravity, quat_from_euler, quat_rotate, quat_rotate_inverse, roll_pitch_of,
                               yaw_of)


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

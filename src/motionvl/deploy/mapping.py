"""The joint-to-motor mapping and the IMU mounting of the real robot (`RobotConfig.hardware`).

The policy, the robot config and every array inside the controller are in joint order and the
joints' own sign and zero. The drives speak motor order by name: motor angle = sign x joint
angle + offset, velocity and torque = sign x the joint's; gains are the same on both sides. The
IMU reports its own frame, mounted at `imu_rpy` in the base link: the controller turns its
orientation and gyro into the base frame before they reach the policy. The simulator's emulated
drive applies the inverse (`to_motor_*`, `base_to_imu`) when asked to emulate this section, so a
non-identity mapping is tested end to end.
"""

from __future__ import annotations

import numpy as np

from motionvl.robot import MotorConfig, RobotConfig
from motionvl.sim.math import quat_conjugate, quat_from_euler, quat_multiply, quat_to_matrix


class JointMapping:
    """Joint order <-> motor order with per-motor sign and zero offset, and the IMU's mounting."""

    def __init__(self, robot: RobotConfig):
        hw = robot.hardware
        motors = hw.motors or tuple(MotorConfig(name=n, joint=n) for n in robot.joint_names)
        self.joint_names = tuple(robot.joint_names)
        self.motor_names = tuple(m.name for m in motors)
        self.identity = hw.identity
        self.joint_of_motor = np.array([self.joint_names.index(m.joint) for m in motors], dtype=np.int64)
        """motor k drives joint joint_of_motor[k]."""
        self.sign = np.array([m.sign for m in motors], dtype=np.float64)
        self.offset = np.array([m.offset for m in motors], dtype=np.float64)
        self._motor_index = {name: k for k, name in enumerate(self.motor_names)}
        self.imu_quat = quat_from_euler(*hw.imu_rpy)
        """wxyz: the IMU frame in the base frame."""
        self.imu_matrix = quat_to_matrix(self.imu_quat)
        """Rotates IMU-frame vectors into the base frame."""
        self._mount = tuple(float(v) for v in quat_conjugate(self.imu_quat))
        self._rows = tuple(tuple(float(v) for v in row) for row in self.imu_matrix)
        self._imu_identity = bool(np.array_equal(self.imu_quat, [1.0, 0.0, 0.0, 0.0]))
        self._motor_identity = bool(np.array_equal(self.joint_of_motor, np.arange(len(self.joint_names)))
                                    and np.all(self.sign == 1.0) and np.all(self.offset == 0.0))

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    # ------------------------------------------------------------------ joint space -> motor space
    def to_motor_position(self, joint_pos) -> np.ndarray:
        if self._motor_identity:
            return np.array(joint_pos, dtype=np.float64)
        return self.sign * np.asarray(joint_pos, dtype=np.float64)[self.joint_of_motor] + self.offset

    def to_motor_signed(self, joint_values) -> np.ndarray:
        """Velocities and torques: permuted and signed."""
        if self._motor_identity:
            return np.array(joint_values, dtype=np.float64)
        return self.sign * np.asarray(joint_values, dtype=np.float64)[self.joint_of_motor]

    def to_motor_unsigned(self, joint_values) -> np.ndarray:
        """Gains and magnitudes (effort and velocity limits): permuted only."""
        if self._motor_identity:
            return np.array(joint_values, dtype=np.float64)
        return np.asarray(joint_values, dtype=np.float64)[self.joint_of_motor].copy()

    def to_motor_range(self, lower, upper) -> tuple[np.ndarray, np.ndarray]:
        """Joint position bounds as motor position bounds (a sign flip swaps the ends)."""
        a, b = self.to_motor_position(lower), self.to_motor_position(upper)
        return np.minimum(a, b), np.maximum(a, b)

    # ------------------------------------------------------------------ motor space -> joint space
    def from_motor_position(self, motor_pos) -> np.ndarray:
        if self._motor_identity:
            return np.array(motor_pos, dtype=np.float64)
        out = np.empty(self.num_joints)
        out[self.joint_of_motor] = self.sign * (np.asarray(motor_pos, dtype=np.float64) - self.offset)
        return out

    def from_motor_signed(self, motor_values) -> np.ndarray:
        if self._motor_identity:
            return np.array(motor_values, dtype=np.float64)
        out = np.empty(self.num_joints)
        out[self.joint_of_motor] = self.sign * np.asarray(motor_values, dtype=np.float64)
        return out

    def from_motor_unsigned(self, motor_values) -> np.ndarray:
        out = np.empty(self.num_joints)
        out[self.joint_of_motor] = np.asarray(motor_values, dtype=np.float64)
        return out

    def motor_order(self, names) -> np.ndarray:
        """For a message's motor `names`: the position of each of our motors in it. KeyError naming
        the motors it lacks, or the names it carries more than once (which of two values is the
        motor's cannot be known). Names of other joints (hands, head, passive joints) are ignored
        here; `extra_names` lists them."""
        where = {}
        repeated = []
        for i, n in enumerate(names):
            n = str(n)
            if n in where:
                repeated.append(n)
            where[n] = i
        if repeated:
            raise KeyError(f"names given more than once: {sorted(set(repeated))}")
        missing = [n for n in self.motor_names if n not in where]
        if missing:
            raise KeyError(f"motors missing from the message: {missing}")
        return np.array([where[n] for n in self.motor_names], dtype=np.int64)

    def joint_positions(self, names, positions) -> np.ndarray | None:
        """Joint-order positions of a joint-space joint state (joint_states: every joint under its joint name;
        other names, hands or a head, are ignored). None when a joint is missing, a name is given twice or
        the lengths differ. Motor states (the drives' motor_states) are not joint space: see `motor_order`."""
        names = [str(n) for n in names]
        if len(positions) != len(names) or len(set(names)) != len(names):
            return None
        where = {n: i for i, n in enumerate(names)}
        if not all(n in where for n in self.joint_names):
            return None
        return np.array([positions[where[n]] for n in self.joint_names], dtype=np.float64)

    def extra_names(self, names) -> list[str]:
        """The names in `names` that are none of our motors."""
        return [str(n) for n in names if str(n) not in self._motor_index]

    # ------------------------------------------------------------------ IMU
    def imu_to_base(self, imu_quat, imu_vector=None):
        """(base orientation wxyz in the world, base-frame vector) from the IMU's orientation in the
        world and a vector it measured in its own frame (gyro, accelerometer); vector None: only the quat."""
        q = np.asarray(imu_quat, dtype=np.float64)
        base = quat_multiply(q, quat_conjugate(self.imu_quat))
        vec = None if imu_vector is None else self.imu_matrix @ np.asarray(imu_vector, dtype=np.float64)
        return base, vec

    def imu_to_base_scalar(self, w: float, x: float, y: float, z: float, gx: float, gy: float, gz: float):
        """`imu_to_base` of one unit quaternion and one vector given as floats, in plain arithmetic (a
        handful of numpy calls on 4-vectors cost more than the whole product): ((w, x, y, z), (gx, gy, gz))."""
        if self._imu_identity:
            return (w, x, y, z), (gx, gy, gz)
        bw, bx, by, bz = self._mount
        quat = (w * bw - x * bx - y * by - z * bz, w * bx + x * bw + y * bz - z * by,
                w * by - x * bz + y * bw + z * bx, w * bz + x * by - y * bx + z * bw)
        r0, r1, r2 = self._rows
        return quat, (r0[0] * gx + r0[1] * gy + r0[2] * gz, r1[0] * gx + r1[1] * gy + r1[2] * gz,
                      r2[0] * gx + r2[1] * gy + r2[2] * gz)

    def base_to_imu(self, base_quat, base_vector=None):
        """The inverse of `imu_to_base` (what a mounted IMU reports; used by the emulated hardware)."""
        q = np.asarray(base_quat, dtype=np.float64)
        imu = quat_multiply(q, self.imu_quat)
        vec = None if base_vector is None else self.imu_matrix.T @ np.asarray(base_vector, dtype=np.float64)
        return imu, vec

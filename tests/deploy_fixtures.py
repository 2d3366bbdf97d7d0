"""Test helpers for the deployment controller: a robot with a non-identity hardware mapping, and
its YAML for the nodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import yaml

from motionvl.deploy import PD_FIELDS
from motionvl.deploy.random_policy import write_random_policy  # noqa: F401 (the tests' policies)
from motionvl.robot import HardwareConfig, MotorConfig, load_robot_config, package_root

ROBOT = load_robot_config()
J = ROBOT.num_joints

# motors in another order than the joints, some mounted backwards, with zero offsets, and an IMU
# mounted upside down and turned: everything a real robot's hardware section may say
MOTOR_ORDER = (6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5)
MOTOR_SIGNS = (1, -1, 1, -1, 1, 1, -1, 1, 1, 1, -1, 1)
MOTOR_OFFSETS = (0.0, 0.1, -0.2, 0.05, 0.0, 0.3, 0.0, -0.1, 0.2, 0.0, 0.15, -0.05)
IMU_RPY = (np.pi, 0.0, np.pi / 2)


def hardware_section() -> dict:
    return {"motors": [{"name": f"motor_{k:02d}_{ROBOT.joint_names[j]}", "joint": ROBOT.joint_names[j],
                        "sign": float(s), "offset": float(o)}
                       for k, (j, s, o) in enumerate(zip(MOTOR_ORDER, MOTOR_SIGNS, MOTOR_OFFSETS))],
            "imu_rpy": list(IMU_RPY)}


def mapped_robot(robot=ROBOT):
    """`robot` with the non-identity hardware section above."""
    section = hardware_section()
    motors = tuple(MotorConfig(**m) for m in section["motors"])
    return dataclasses.replace(robot, hardware=HardwareConfig(motors=motors, imu_rpy=tuple(section["imu_rpy"])))


def write_robot_yaml(folder: Path, hardware: dict | None = None, **changes) -> Path:
    """The package's robot.yaml written to `folder` (URDF path made absolute), with `hardware` and
    top-level `changes` applied; returns its path."""
    source = package_root() / "config" / "robot.yaml"
    raw = yaml.safe_load(source.read_text())
    raw["urdf"] = str((package_root() / raw["urdf"]).resolve())
    if hardware is not None:
        raw["hardware"] = hardware
    raw.update(changes)
    path = Path(folder) / "robot.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def expected_limits(robot, config):
    """Motor-space bounds computed here from the robot config, independently of CommandLimits."""
    hw = robot.hardware
    if hw.motors:
        idx = [robot.joint_names.index(m.joint) for m in hw.motors]
        sign = np.array([m.sign for m in hw.motors])
        offset = np.array([m.offset for m in hw.motors])
    else:
        idx, sign, offset = list(range(J)), np.ones(J), np.zeros(J)
    mid, half = (robot.lower + robot.upper) / 2, (robot.upper - robot.lower) / 2
    share = config.target_limit_share * robot.target_limit_factor
    lo = sign * (mid - share * half)[idx] + offset
    hi = sign * (mid + share * half)[idx] + offset
    kd_max = np.maximum(robot.kd * config.gain_limit_scale, robot.kd * config.damping_scale)[idx]
    return {"q": (np.minimum(lo, hi), np.maximum(lo, hi)),
            "dq": (-robot.velocity_limit[idx], robot.velocity_limit[idx]),
            "kp": (np.zeros(J), robot.kp[idx] * config.gain_limit_scale), "kd": (np.zeros(J), kd_max),
            "tau_ff": (-robot.effort_limit[idx] * config.feedforward_limit,
                       robot.effort_limit[idx] * config.feedforward_limit),
            "tau": (-robot.effort_limit[idx], robot.effort_limit[idx])}


def assert_within(command, robot, config):
    bounds = expected_limits(robot, config)
    fields = ("tau",) if command.path == "torque" else PD_FIELDS
    for f in fields:
        v = getattr(command, f)
        assert v.shape == (J,) and np.all(np.isfinite(v)), f"{f} not finite: {v}"
        lo, hi = bounds[f]
        assert np.all(v >= lo - 1e-12) and np.all(v <= hi + 1e-12), f"{command.mode} {f} {v} outside [{lo}, {hi}]"

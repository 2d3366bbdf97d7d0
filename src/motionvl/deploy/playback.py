"""A policy played in-process through the deployment controller on the single-robot simulator.

The same `Controller` the deployment node runs (modes, faults, soft ramp, both command paths, the
joint mapping), driven cycle by cycle in simulated time against `SingleSim`'s hardware emulation,
without ROS: the language loop can play a candidate the way a robot would without a ROS graph,
and the sim-to-sim benchmark has a reference that differs from the ROS run only by the transport.

Sequence: PASSIVE on the gantry -> STAND (ramp) -> the gantry lets go -> a settle -> RUN for
`seconds`; the rollout of RUN is recorded as a `Trajectory` at the policy rate.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from motionvl.deploy.config import DeployConfig
from motionvl.deploy.controller import Controller
from motionvl.deploy.modes import Mode
from motionvl.robot import RobotConfig, load_robot_config
from motionvl.sim.math import to_heading_frame, yaw_of
from motionvl.task import DEFAULT_COMMAND

SETTLE_S = 0.5
"""Seconds of STAND on the ground after the gantry lets go, before RUN."""


def forward_distance(base_pos: np.ndarray, base_quat: np.ndarray, command) -> float:
    """Progress (m) along the commanded direction in the heading the robot had at the first sample,
    for a command without yaw rate (as `motionvl eval` measures it)."""
    cmd = np.asarray(command, dtype=float)
    speed = float(np.linalg.norm(cmd[:2]))
    direction = cmd[:2] / speed if speed > 1e-9 else np.array([1.0, 0.0])
    heading = yaw_of(np.asarray(base_quat, dtype=float)[0])
    return float(to_heading_frame(np.asarray(base_pos)[-1, :2] - np.asarray(base_pos)[0, :2], heading) @ direction)


def play(policy, *, seconds: float = 10.0, command=DEFAULT_COMMAND, path: str = "pd",
         robot: RobotConfig | None = None, config: DeployConfig | None = None, stand_seconds: float = 1.0,
         gantry: bool = True, terrain=None) -> dict:
    """Play `policy` (an ONNX path or a DeployedPolicy) for `seconds` of RUN; returns a JSON-able summary
    (distance, fall, mode transitions, faults, clips) with the RUN rollout under "trajectory"."""
    from motionvl.deploy.mapping import JointMapping
    from motionvl.sim.single import SingleSim, _sample
    from motionvl.sim.trajectory import Trajectory

    robot = robot or load_robot_config()
    config = dataclasses.replace(config or DeployConfig(), path=path, stand_seconds=stand_seconds)
    sim = SingleSim(robot, terrain, mode="effort", command_timeout=0.0, gantry=gantry)
    controller = Controller(robot, config, clock=lambda: sim.clock)
    hardware = JointMapping(robot)  # the emulated drives speak what the hardware section says
    ok, loaded = controller.load_policy(policy if not isinstance(policy, (str, Path)) else str(policy))
    if not ok:
        raise ValueError(loaded)
    steps = max(1, int(round(controller.period / robot.sim_dt)))
    run_cycles = int(round(seconds / controller.period))
    settle_cycles = int(round(SETTLE_S / controller.period))
    rows, fell, at_run = [], False, None

    def cycle() -> None:
        s = sim.state()
        controller.joint_state(hardware.motor_names, hardware.to_motor_position(s.joint_pos),
                               hardware.to_motor_signed(s.joint_vel), s.clock)
        imu_quat, gyro = hardware.base_to_imu(s.base_quat, s.imu_gyro)
        controller.imu(imu_quat, gyro, s.clock)
        controller.velocity_command(*command)
        out = controller.cycle(trigger_time=sim.clock)
        if out.path == "torque":
            sim.set_efforts(hardware.from_motor_signed(out.tau))
        else:
            sim.set_drive_commands(hardware.from_motor_position(out.q), hardware.from_motor_signed(out.dq),
                                   hardware.from_motor_unsigned(out.kp), hardware.from_motor_unsigned(out.kd),
                                   hardware.from_motor_signed(out.tau_ff))
        sim.step(steps)

    cycle()
    controller.request_mode(Mode.STAND)
    while not controller.stand_complete and controller.mode == Mode.STAND:
        cycle()
    sim.release_gantry()
    for _ in range(settle_cycles):
        cycle()
    ok, message = controller.request_mode(Mode.RUN)
    if ok:
        at_run = sim.clock
        for k in range(run_cycles):
            if k % controller.decimation == 0:
                rows.append(_sample(sim, 5.0))
            cycle()
            fell = fell or not sim.upright()
        rows.append(_sample(sim, 5.0))
    cols = list(zip(*rows)) if rows else [[]] * 9
    dt = robot.control_dt
    trajectory = Trajectory(dt=dt, joint_names=robot.joint_names, joint_roles=robot.joint_roles,
                            time=np.arange(len(rows)) * dt, qpos=np.array(cols[0]), qvel=np.array(cols[1]), foot_pos=np.array(cols[2]),
                            foot_vel=np.array(cols[3]), foot_contact=np.array(cols[4]),
                            command=np.tile(np.asarray(command, float), (len(rows), 1)), fell=np.array(cols[6]),
                            joint_torque=np.array(cols[7]),
                            ground_height=None if cols[8][0] is None else np.array(cols[8])) if rows else None
    status = controller.status()
    return {
        "path": path, "seconds": float(seconds), "command": [float(c) for c in command],
        "reached_run": ok, "refusal": None if ok else message, "run_started_at_s": at_run,
        "distance_m": forward_distance(trajectory.base_pos, trajectory.base_quat, command) if rows else 0.0,
        "fell": bool(fell), "mode": status["mode"], "faults": status["faults"],
        "transitions": [f"{t.source.value}->{t.target.value}" for t in controller.modes.transitions],
        "clips": status["clips"], "policy_steps": status["policy_steps"], "loaded": loaded, "trajectory": trajectory,
    }

"""The ROS-free single-robot simulator core, and the `motionvl sim | demo | bench sim` commands."""

from __future__ import annotations

import json
import math

import numpy as np
from pathlib import Path
import pytest

from motionvl import cli
from motionvl.robot import ConfigError, load_robot_config
from motionvl.sim.model import TerrainConfig
from motionvl.sim.single import CommandError, SingleSim, validate_joint_command

ROBOT = load_robot_config()
NAMES = ROBOT.joint_names


@pytest.mark.parametrize("values, names, message", [
    ([0.0] * 11, None, "expected 12 values"),
    ([0.0] * 13, None, "expected 12 values"),
    ([math.nan] + [0.0] * 11, None, "non-finite"),
    ([0.0] * 11 + [math.inf], None, "non-finite"),
    ([0.1], ["left_wing"], "unknown joint names \\['left_wing'\\]"),
    ([0.1, 0.2], ["left_knee", "left_knee"], "duplicate"),
    ([0.1, 0.2], ["left_knee"], "1 joint names but 2 values"),
])
def test_bad_joint_commands_are_rejected(values, names, message):
    with pytest.raises(CommandError, match=message):
        validate_joint_command(values, NAMES, names)


def test_named_subset_maps_to_config_order():
    idx, vals = validate_joint_command([0.5, -0.1], NAMES, ["right_knee", "left_hip_yaw"])
    assert list(idx) == [NAMES.index("right_knee"), 0]
    np.testing.assert_allclose(vals, [0.5, -0.1])


def test_position_targets_clipped_and_rejections_keep_last_good():
    sim = SingleSim(ROBOT)
    sim.set_position_targets(ROBOT.upper + 1.0)
    np.testing.assert_allclose(sim.target, ROBOT.upper)
    good = sim.target.copy()
    with pytest.raises(CommandError):
        sim.set_position_targets([math.nan] * 12)
    with pytest.raises(CommandError, match="'position' mode"):
        sim.set_efforts([1.0] * 12)
    np.testing.assert_allclose(sim.target, good)
    np.testing.assert_allclose(sim.data.ctrl, good)


def test_effort_mode_torque_then_watchdog_damping():
    sim = SingleSim(ROBOT, mode="effort", command_timeout=0.1)
    sim.set_efforts(np.full(12, 1000.0))
    sim.step(1)
    np.testing.assert_allclose(sim.state().joint_effort, ROBOT.effort_limit)  # clipped by the force limit
    assert sim.actuation == "torque"
    sim.step(int(0.2 / sim.model.opt.timestep))  # no new command for longer than the timeout
    assert sim.actuation == "damping"
    s = sim.state()
    # damping: tau = -Kd dq (evaluated at the start of the last step, so compare loosely)
    assert np.abs(s.joint_vel).max() > 0.01
    np.testing.assert_allclose(s.joint_effort, -ROBOT.kd * sim.data.qvel[sim.index.qvel_joints], rtol=0.3, atol=0.5)
    with pytest.raises(CommandError, match="'effort' mode"):
        sim.set_position_targets(ROBOT.default_pose)


def test_chunked_stepping_matches_single_steps_across_watchdog_deadlines():
    """step(n) runs whole chunks between watchdog deadlines; it must equal n calls of step(1)."""
    sims = [SingleSim(ROBOT, mode="effort", command_timeout=0.1) for _ in range(2)]
    for sim in sims:
        sim.set_efforts(np.linspace(-20.0, 20.0, 12))
        sim.set_velocity_command(0.5, 0.0, 0.2)
    n = int(0.25 / sims[0].model.opt.timestep)  # both time-outs expire inside this span
    sims[0].step(n)
    switched_at = None
    for k in range(n):
        sims[1].step(1)
        if switched_at is None and sims[1].actuation == "damping":
            switched_at = k
    assert switched_at is not None and sims[0].actuation == "damping"
    assert not sims[0].command.any() and not sims[1].command.any()
    np.testing.assert_array_equal(sims[0].data.qpos, sims[1].data.qpos)
    np.testing.assert_array_equal(sims[0].data.qvel, sims[1].data.qvel)
    assert sims[0].clock == pytest.approx(sims[1].clock)


def test_reset_restores_pose_and_clock_keeps_going():
    sim = SingleSim(ROBOT)
    sim.set_position_targets(ROBOT.default_pose + 0.1 * (ROBOT.upper - ROBOT.default_pose))
    sim.set_velocity_command(0.5, 0.0, 0.1)
    sim.advance(0.5)
    clock = sim.clock
    sim.reset()
    assert sim.clock == clock and sim.data.time == 0.0
    np.testing.assert_allclose(sim.target, ROBOT.default_pose)
    np.testing.assert_allclose(sim.state().joint_pos, ROBOT.default_pose)
    assert not sim.command.any()
    sim.advance(0.1)
    assert sim.clock == pytest.approx(clock + 0.1)


def test_mixed_terrain_is_refused_outside_batched_training():
    with pytest.raises(ConfigError, match="batched training"):
        SingleSim(ROBOT, TerrainConfig(kind="mixed"))


def test_imu_reads_gravity_when_standing():
    sim = SingleSim(ROBOT)
    sim.advance(1.0)
    s = sim.state()
    assert s.upright
    assert s.imu_accel[2] == pytest.approx(9.81, abs=1.0)
    assert np.linalg.norm(s.imu_gyro) < 0.5


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_sim_command_reports_upright(tmp_path, capsys):
    assert cli.main(["sim", "--seconds", "1", "--out", str(tmp_path), "--no-video"]) == 0
    result = _last_json(capsys)
    assert result["upright"] is True and result["time"] == pytest.approx(1.0)
    assert result["base_height"] > 0.75
    assert (tmp_path / "summary.json").exists() and (tmp_path / "trajectory.npz").exists()


def test_demo_trains_evaluates_renders_and_critiques(tmp_path, capsys):
    args = ["demo", "--minutes", "0.05", "--seconds", "1", "--out", str(tmp_path)]
    assert cli.main(args) == 0
    result = _last_json(capsys)
    assert 0.0 <= result["alignment_score"] <= 1.0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["iterations"] >= 1 and Path(summary["policy"]).is_file()
    assert (tmp_path / "rollout.mp4").stat().st_size > 1000
    assert json.loads((tmp_path / "feedback.json").read_text())["critic"] == "kinematic"
    # running it again resumes the same training run instead of starting over; an iteration budget
    # is the total the run reaches, whatever the clock says
    target = summary["iterations"] + 2
    assert cli.main(["demo", "--iterations", str(target)] + args[3:]) == 0
    again = json.loads((tmp_path / "summary.json").read_text())
    assert again["iterations"] == target
    with pytest.raises(SystemExit, match="iterations"):
        cli.main(["demo", "--iterations", "0"] + args[3:])


def test_bench_sim_prints_figures(capsys):
    assert cli.main(["bench", "sim", "--envs", "4", "--seconds", "0.2", "--threads", "1", "--warmup", "0.1"]) == 0
    result = _last_json(capsys)
    for key in ("env_steps_per_s", "physics_steps_per_s", "raw_physics_steps_per_s", "ratio", "envs", "threads",
                "sim_dt", "decimation", "reward"):
        assert key in result, key
    assert result["envs"] == 4 and result["threads"] == 1
    assert result["physics_steps_per_s"] == pytest.approx(result["env_steps_per_s"] * result["decimation"], rel=1e-3)
    assert result["ratio"] == pytest.approx(result["physics_steps_per_s"] / result["raw_physics_steps_per_s"], abs=2e-3)
    assert result["randomization"] == "on"
    assert cli.main(["bench", "sim", "--envs", "4", "--seconds", "0.1", "--threads", "1", "--warmup", "0.1",
                     "--randomization", "off"]) == 0
    assert _last_json(capsys)["randomization"] == "off"


def test_bench_rejects_unknown_target():
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "nope"])
    assert exc.value.code == 2

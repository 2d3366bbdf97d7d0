"""Reward-free evaluation of an exported policy (motionvl.rl.evaluate, motionvl eval)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from motionvl.rl.evaluate import episode_metrics, evaluate, push_free_mask
from motionvl.rl.export import OnnxPolicy
from motionvl.robot import ConfigError
from motionvl.task import Criterion
from gait_fixtures import synthetic_gait

ROOT = Path(__file__).resolve().parents[1]


def test_eval_cli_prints_json_last_line(trained_run):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "motionvl.cli", "eval", "--policy", str(trained_run[0] / "policy.onnx"),
                           "--seconds", "0.4", "--episodes", "2", "--command", "0.4", "0", "0"],
                          capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("forward_distance_m", "mean_speed_mps", "tracking_error_mps", "tracking_error_steady_mps", "fell_fraction", "time_upright_s",
                "success_rate", "knee_angle_stance_deg", "torso_pitch_deg", "step_frequency_hz", "swing_clearance_m",
                "stance_slip_mps", "touchdown_speed_mps", "double_support_fraction"):
        assert key in result, key
    assert result["sim_dt"] == pytest.approx(0.002) and result["decimation"] == 10  # the robot's own dt


def test_eval_cli_refuses_a_file_that_is_no_onnx_model_and_empty_budgets(trained_run, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    broken = tmp_path / "policy.onnx"
    broken.write_bytes(b"not a protobuf at all")
    policy = str(trained_run[0] / "policy.onnx")
    for args, message in ((["--policy", str(broken)], "not a loadable ONNX model"),
                          (["--policy", policy, "--episodes", "0"], "episodes must be a positive integer"),
                          (["--policy", policy, "--seconds", "-1"], "seconds must be a positive number"),
                          (["--policy", policy, "--seconds", "0.001"], "shorter than one policy period")):
        proc = subprocess.run([sys.executable, "-m", "motionvl.cli", "eval", *args], capture_output=True, text=True,
                              env=env, timeout=60, cwd=ROOT)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_eval_reports_the_share_of_steps_each_joint_sits_at_the_clip(trained_run, robot):
    class Pinned(OnnxPolicy):
        """Left hip yaw always at +clip, left hip roll at -clip in the first episode only."""

        def __call__(self, obs):
            a = np.zeros((len(obs), self.num_actions), dtype=np.float32)
            a[:, 0], a[0, 1], a[:, 2] = 1.0, -1.0, 0.99
            return a

    result = evaluate(Pinned(trained_run[0] / "policy.onnx"), seconds=0.2, episodes=2, command=(0.4, 0.0, 0.0))
    shares = result["action_at_clip"]
    assert list(shares) == list(robot.joint_names)
    assert [shares[n] for n in robot.joint_names[:4]] == [1.0, 0.5, 0.0, 0.0]


def test_steady_tracking_error_leaves_out_start_and_push_recovery():
    traj = synthetic_gait(T=500)  # 10 s at 0.02 s
    t = traj.time
    vx = np.full(len(t), 0.6)
    vx[t < 0.5] = 0.0                       # starting from standstill
    vx[(t >= 8.0) & (t < 9.0)] = 0.1        # knocked back by a push at 8 s
    vx[(t >= 3.0) & (t < 3.5)] = 0.5        # a steady-state error the metric must keep
    traj.qpos[:, 3:7] = [1.0, 0.0, 0.0, 0.0]
    traj.qvel[:, 0] = vx
    m = episode_metrics(traj, (0.6, 0.0, 0.0), 10.0, push_times=[8.0])
    assert m["tracking_error_mps"] == pytest.approx(np.mean(np.abs(vx - 0.6)))
    steady = (t >= 1.0) & ~((t >= 8.0) & (t < 9.5))
    assert m["tracking_error_steady_mps"] == pytest.approx(0.1 * 25 / steady.sum())
    no_push = episode_metrics(traj, (0.6, 0.0, 0.0), 10.0)  # without pushes the knock-back counts
    assert no_push["tracking_error_steady_mps"] > m["tracking_error_steady_mps"] + 0.05


def test_heading_error_is_the_turn_the_command_did_not_ask_for():
    traj = synthetic_gait(T=501)  # 10 s at 0.02 s
    turned = np.linspace(0.0, 4.0, len(traj.time))  # 4 rad: past pi, so the yaw wraps on the way
    traj.qpos[:, 3:7] = 0.0
    traj.qpos[:, 3], traj.qpos[:, 6] = np.cos(turned / 2), np.sin(turned / 2)
    assert episode_metrics(traj, (0.5, 0.0, 0.0), 10.0)["heading_error_deg"] == pytest.approx(np.degrees(4.0))
    assert episode_metrics(traj, (0.5, 0.0, 0.4), 10.0)["heading_error_deg"] == pytest.approx(0.0, abs=1e-9)
    assert episode_metrics(traj, (0.5, 0.0, 0.3), 10.0)["heading_error_deg"] == pytest.approx(np.degrees(1.0))
    with pytest.raises(ConfigError, match="heading_gain"):
        evaluate("never_loaded.onnx", heading_gain=-0.5)


def test_success_asks_the_given_share_of_the_commanded_distance():
    traj = synthetic_gait(T=501)  # 10 s at 0.02 s, straight ahead
    traj.qpos[:, 3:7] = [1.0, 0.0, 0.0, 0.0]
    traj.qpos[:, 0] = np.linspace(0.0, 5.2, len(traj.time))  # 5.2 m of the 6 m 0.6 m/s asks: 87 %
    assert not episode_metrics(traj, (0.6, 0.0, 0.0), 10.0)["success"], "the default asks 90 %"
    assert episode_metrics(traj, (0.6, 0.0, 0.0), 10.0, success_fraction=5 / 6)["success"]
    with pytest.raises(ConfigError, match="success_fraction"):
        evaluate("never_loaded.onnx", success_fraction=0.0)


def test_a_speed_the_sentence_asks_bounds_the_distance_from_above():
    """0.374 m/s where "walk forward slowly" asks 0.3 (a policy the search once kept for its saturated score) fails
    the bounded criterion and scores below a walk 4 % fast; without a bound both succeed with full scores."""
    from motionvl.task import make_task

    slow, plain = make_task("walk forward slowly").criterion, make_task("walk forward").criterion
    metrics = {}
    for speed in (0.374, 0.312):
        traj = synthetic_gait(T=501)
        traj.qpos[:, 3:7] = [1.0, 0.0, 0.0, 0.0]
        traj.qpos[:, 0] = np.linspace(0.0, 10 * speed, len(traj.time))
        metrics[speed] = (episode_metrics(traj, (0.3, 0.0, 0.0), 10.0, criterion=slow),
                          episode_metrics(traj, (0.3, 0.0, 0.0), 10.0, criterion=plain))
    (fast_bounded, fast_plain), (near_bounded, near_plain) = metrics[0.374], metrics[0.312]
    assert not fast_bounded["success"] and near_bounded["success"]
    assert fast_bounded["task_score"] == pytest.approx(1 - 0.074 / 0.3, abs=0.01)
    assert near_bounded["task_score"] == pytest.approx(1 - 0.012 / 0.3, abs=0.01)
    assert fast_plain["success"] and near_plain["success"] and fast_plain["task_score"] == near_plain["task_score"] == 1.0


# ----------------------------------------------------------------------------- the task's success criteria
def _turning(rate: float, seconds: float = 10.0, dt: float = 0.02):
    traj = synthetic_gait(T=int(round(seconds / dt)) + 1, dt=dt)
    heading = rate * traj.time
    traj.qpos[:, 3:7] = 0.0
    traj.qpos[:, 3], traj.qpos[:, 6] = np.cos(heading / 2), np.sin(heading / 2)
    traj.qvel[:, 5] = rate
    return traj


def test_push_free_seconds_are_the_ones_before_each_push():
    t = np.arange(0, 10.001, 0.02)
    assert np.array_equal(push_free_mask(t, [8.0]), (t >= 1.0) & (t < 8.0))
    assert np.array_equal(push_free_mask(t, [3.0, 8.0]), ((t >= 1.0) & (t < 3.0)) | ((t >= 4.5) & (t < 8.0)))
    assert np.array_equal(push_free_mask(t, []), t >= 1.0), "no push: everything after the settle"


def test_turning_in_place_succeeds_on_heading_yaw_rate_and_drift_in_the_push_free_seconds():
    turn = Criterion("turn")
    good = episode_metrics(_turning(0.5), (0.0, 0.0, 0.5), 10.0, push_times=[8.0], criterion=turn)
    assert good["success"] and good["task_score"] == pytest.approx(1.0, abs=0.01)
    assert good["yaw_rate_steady_rps"] == pytest.approx(0.5) and good["drift_mps"] == pytest.approx(0.0)
    assert good["heading_turned_deg"] == pytest.approx(np.degrees(5.0))
    slow = episode_metrics(_turning(0.3), (0.0, 0.0, 0.5), 10.0, criterion=turn)
    assert not slow["success"] and slow["yaw_rate_error_steady_rps"] == pytest.approx(0.2)
    drifting = _turning(0.5)
    drifting.qvel[:, 0] = 0.2  # travels 0.2 m/s (world x) while turning
    m = episode_metrics(drifting, (0.0, 0.0, 0.5), 10.0, push_times=[8.0], criterion=turn)
    assert not m["success"] and m["drift_mps"] == pytest.approx(0.2) and m["task_score"] == pytest.approx(0.5, abs=0.01)
    pushed = _turning(0.5)
    pushed.qvel[pushed.time >= 8.0, 0] = 1.0  # knocked away by the push at 8 s: not drift
    assert episode_metrics(pushed, (0.0, 0.0, 0.5), 10.0, push_times=[8.0], criterion=turn)["success"]
    assert not episode_metrics(pushed, (0.0, 0.0, 0.5), 10.0, criterion=turn)["success"], "without the push it is"


def test_standing_needs_both_feet_down_and_stepping_in_place_no_drift():
    stand = Criterion("stand")
    planted = synthetic_gait(T=501)
    planted.foot_contact[:] = True
    m = episode_metrics(planted, (0.0, 0.0, 0.0), 10.0, criterion=stand)
    assert m["success"] and m["double_support_fraction"] == pytest.approx(1.0) and m["task_score"] == pytest.approx(1.0)
    stepping = episode_metrics(synthetic_gait(T=501), (0.0, 0.0, 0.0), 10.0, criterion=stand)
    assert not stepping["success"] and stepping["task_score"] < 0.5, "20 % double support is no stand"
    in_place = episode_metrics(synthetic_gait(T=501), (0.0, 0.0, 0.0), 10.0)  # a zero command: stepping in place
    assert in_place["success"]
    fallen = synthetic_gait(T=501)
    fallen.foot_contact[:] = True
    fallen.fell[300:] = True
    assert not episode_metrics(fallen, (0.0, 0.0, 0.0), 10.0, criterion=stand)["success"]

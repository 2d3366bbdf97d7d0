"""The mechanics end to end: a policy trained in the test (tiny budget), `motionvl deploy-sim` over
real DDS (simulator hardware emulation with a non-identity joint mapping, the deployment node, the
recorder) through PASSIVE -> STAND -> RUN, and the bag analysed with `motionvl analyze`.

Nothing here asks the tiny policy to walk (it may well fall: the fall fault then ends RUN); the
sim-to-sim agreement of a walking policy is bench/sim_to_sim.py's question.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("rclpy")
pytest.importorskip("motionvl.policy_io", reason="the policy I/O module (motionvl.policy_io) is not on this branch yet")

from deploy_fixtures import hardware_section, write_robot_yaml  # noqa: E402
from rl_fixtures import PlaceholderReward, tiny_config  # noqa: E402


@pytest.fixture(scope="module")
def trained_policy(tmp_path_factory):
    from motionvl.rl.trainer import train_policy

    run = tmp_path_factory.mktemp("deploy_sim") / "run"
    result = train_policy(run, reward_spec=PlaceholderReward(), train_cfg=tiny_config(), max_iterations=1,
                          progress=False)
    return result.policy_path


# a shared test machine can stall the process for longer than a robot may (a fault then ends the run
# early; a host torque loop delayed by tens of ms shakes the free ankles on the gantry past their
# velocity bound): lockstep keeps the loop's delay out of the physics; the faults themselves are
# tested in test_deploy_policy / test_deployment_node
LENIENT = ("--state-timeout", 2.0, "--overrun-periods", 100, "--lockstep")


def motionvl(*args, timeout: float = 240.0) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-m", "motionvl.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON line (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1]), done.stderr


def test_deploy_sim_drive_path_recorded_and_analysed(trained_policy, tmp_path):
    robot_yaml = write_robot_yaml(tmp_path, hardware_section())
    bag = tmp_path / "bag"
    result, log = motionvl("deploy-sim", "--policy", trained_policy, "--seconds", 1.0, "--path", "pd",
                           "--record", bag, "--robot-config", robot_yaml, "--stand-seconds", 0.5, *LENIENT)
    assert result["reached_run"], log[-3000:]
    assert result["transitions"][:2] == ["PASSIVE->STAND", "STAND->RUN"]
    assert result["policy_steps"] > 0 and result["cycles"] > result["policy_steps"] - 1
    assert result["clipped_commands"]["last_line"] == 0
    for key in ("distance_m", "falls", "period_ms", "latency_ms", "overruns"):
        assert key in result
    assert "gantry released" in log and "damping commands" in log
    assert (bag / "metadata.yaml").exists()

    out = tmp_path / "analysis"
    summary, _ = motionvl("analyze", bag, "--out", out, "--robot-config", robot_yaml)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["path"] == "pd" and metrics["joint_states"] > 10 and metrics["commands"] > 10
    assert any(change.endswith("RUN") for change in metrics["mode_changes"])
    assert len(metrics["tracking_rmse_rad"]) == 12  # joint space: the motor mapping was undone
    assert metrics["torque_samples_over_limit"] == 0
    for name in ("joints.png", "torques.png", "velocity.png", "timing.png", "summary.md"):
        assert (out / name).stat().st_size > 0
    compared, _ = motionvl("analyze", "--compare", bag, bag, "--out", tmp_path / "compare", "--robot-config",
                           robot_yaml)
    assert compared["figures"] == ["compare_velocity.png", "compare_joints.png"]


def test_deploy_sim_torque_path(trained_policy):
    result, log = motionvl("deploy-sim", "--policy", trained_policy, "--seconds", 0.5, "--path", "torque",
                           "--stand-seconds", 0.2, *LENIENT)
    assert result["reached_run"], log[-3000:]
    assert result["policy_steps"] > 0 and result["cycles"] >= result["policy_steps"]


def test_the_rehearsal_options_are_the_deployment_settings_with_their_own_defaults():
    """--stand-seconds, --state-timeout, --overrun-periods, --watchdog-periods: DeployConfig's fields with its
    descriptions; a rehearsal's defaults where they differ on purpose (the help says both)."""
    import argparse
    import dataclasses

    from motionvl.dataclass_docs import field_docs
    from motionvl.deploy.config import DeployConfig
    from motionvl.ros.deploy_sim import REHEARSAL_DEFAULTS, REHEARSAL_SETTINGS, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = {a.dest: a for a in parser._actions}
    docs, robot = field_docs(DeployConfig), DeployConfig()
    for name in REHEARSAL_SETTINGS:
        assert options[name].option_strings == ["--" + name.replace("_", "-")]
        assert options[name].help.startswith(docs[name]), name
        rehearsal = REHEARSAL_DEFAULTS.get(name, (getattr(robot, name),))[0]
        assert options[name].default == rehearsal, name
    assert {"stand_seconds", "state_timeout", "watchdog_periods"} <= set(REHEARSAL_DEFAULTS)
    assert all(REHEARSAL_DEFAULTS[n][0] != getattr(robot, n) for n in REHEARSAL_DEFAULTS)
    assert "DeployConfig's: 0.1" in options["state_timeout"].help
    args = parser.parse_args(["--policy", "p.onnx", "--watchdog-periods", "7"])
    assert args.watchdog_periods == 7 and args.state_timeout == 0.5
    assert {f.name for f in dataclasses.fields(DeployConfig)} >= set(REHEARSAL_SETTINGS)

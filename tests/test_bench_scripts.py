"""The training benchmark and the bench/ scripts that train: motionvl bench train, time_to_walk,
policy_average_scan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from motionvl.rl.config import TrainConfig
from motionvl.rl.export import load_policy
from motionvl.rl.trainer import train_policy
from rl_fixtures import PlaceholderReward, tiny_config

ROOT = Path(__file__).resolve().parents[1]


def test_bench_train_measures_an_overridden_config_and_refuses_a_bad_key():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    tiny = ["--envs", "8", "--physics-threads", "1", "--seconds", "0.2", "--set", "ppo.num_steps_per_env=4",
            "--set", "ppo.num_mini_batches=1", "--set", "ppo.actor_hidden_dims=[16]",
            "--set", "ppo.critic_hidden_dims=[16]"]
    proc = subprocess.run([sys.executable, "-m", "motionvl.cli", "bench", "train", *tiny,
                           "--set", "ppo.symmetry_augmentation=true"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["envs"] == 8 and figures["ppo"]["num_steps_per_env"] == 4
    assert figures["ppo"]["actor_hidden_dims"] == [16] and figures["ppo"]["symmetry_augmentation"] is True
    assert figures["overrides"][-1] == "ppo.symmetry_augmentation=true"
    assert figures["train_steps_per_s"] > 0 and figures["env_steps_per_s"] > 0
    bad = subprocess.run([sys.executable, "-m", "motionvl.cli", "bench", "train", *tiny, "--set", "ppo.symetry=true"],
                         capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "symetry" in bad.stderr and "Traceback" not in bad.stderr
    assert bad.stdout.strip() == ""


TINY_BENCH = ["--envs", "8", "--physics-threads", "1", "--set", "ppo.num_steps_per_env=4", "--set",
              "ppo.num_mini_batches=1", "--set", "ppo.actor_hidden_dims=[16]", "--set", "ppo.critic_hidden_dims=[16]"]


def test_bench_train_under_load_and_side_by_side_report_every_policy_and_trainer():
    """`motionvl bench train --load N` measures each update-thread policy alone and beside N hogs (which are
    gone afterwards); `--trainers N` measures N loops side by side against one alone."""
    import psutil

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    loaded = subprocess.run([sys.executable, "-m", "motionvl.cli", "bench", "train", *TINY_BENCH, "--load", "1",
                             "--iterations", "2", "--update-torch-threads", "2"],
                            capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    figures = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert {(r["hogs"], r["update_threads"]) for r in figures["rows"]} == {
        (h, p) for h in (0, 1) for p in ("fixed-1", "fixed-2", "adaptive")}
    assert all(sum(r["threads_used"].values()) == 2 for r in figures["rows"])
    assert {"loaded_over_idle", "vs_best_fixed_loaded", "vs_best_fixed_idle"} <= set(figures)
    assert not [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-1:] == ["while True: pass"]]
    side = subprocess.run([sys.executable, "-m", "motionvl.cli", "bench", "train", *TINY_BENCH, "--trainers", "2",
                           "--seconds", "0.5"], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert side.returncode == 0, side.stderr[-2000:]
    figures = json.loads(side.stdout.strip().splitlines()[-1])
    assert len(figures["side_by_side"]) == 2 and figures["lone_steps_per_s"] > 0
    assert all(row["steps_per_s"] > 0 for row in figures["side_by_side"])


def test_time_to_walk_runs_each_training_seed_with_overrides(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    tiny = ["--set", "env.num_envs=8", "--set", "env.num_threads=1", "--set", "ppo.num_steps_per_env=4",
            "--set", "ppo.num_mini_batches=1", "--set", "ppo.actor_hidden_dims=[16]", "--set", "ppo.critic_hidden_dims=[16]",
            "--set", "policy_average_iterations=2"]
    out = tmp_path / "probe"
    proc = subprocess.run([sys.executable, "bench/time_to_walk.py", "--iterations", "1", "--episodes", "2", "--seconds",
                           "0.3", "--no-final", "--train-seeds", "0,3", "--confirm-episodes", "3", "--out", str(out), *tiny],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for seed in (0, 3):
        cfg = yaml.safe_load((out / f"seed_{seed}" / "config.yaml").read_text())
        assert cfg["seed"] == seed and cfg["env"]["num_envs"] == 8 and cfg["ppo"]["actor_hidden_dims"] == [16]
        row = json.loads((out / f"seed_{seed}" / "curve.json").read_text())[-1]
        assert row["iterations"] == 1 and row["confirm"]["episodes"] == 3
        assert row["confirm_last_iterate"]["episodes"] == 3  # averaging on: the last iterate on the same episodes
        # the policy's clock, the period its first iteration trained at
        assert row["gait_period_s"] == TrainConfig.from_dict(cfg).env.scheduled("gait_period_s", 0)
        assert (out / f"seed_{seed}" / "curve.png").stat().st_size > 10_000
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary == json.loads((out / "seeds.json").read_text()) and set(summary["per_seed"]) == {"0", "3"}
    assert summary["walk_5m_fraction_min"] == min(r["walk_5m_fraction"] for r in summary["per_seed"].values())
    assert summary["confirm_walk_5m_fraction_min"] == min(r["confirm"]["walk_5m_fraction"] for r in summary["per_seed"].values())

    policy = out / "seed_0" / "policy.onnx"
    again = subprocess.run([sys.executable, "bench/time_to_walk.py", "--policy", str(policy), "--episodes", "2",
                            "--seconds", "0.3", "--confirm-episodes", "2"],
                           capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-2000:]
    row = json.loads(again.stdout.strip().splitlines()[-1])
    assert row["policy"] == str(policy) and row["confirm"]["episodes"] == 2 and "walk_5m_fraction" in row
    final = subprocess.run([sys.executable, "bench/time_to_walk.py", "--policy", str(policy), "--final-only",
                            "--episodes", "1", "--seconds", "1.2", "--plot", str(tmp_path / "sweep.png")],
                           capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert final.returncode == 0, final.stderr[-2000:]
    assert (tmp_path / "sweep.png").stat().st_size > 10_000
    sweep = json.loads(final.stdout.strip().splitlines()[-1])
    assert len(sweep["command_sweep"]) == 8 and "tracking_error_no_push_mps" in sweep["rough_terrain"]
    assert sweep["mean_tracking_error_no_push_mps"] == pytest.approx(
        np.mean([c["tracking_error_no_push_mps"] for c in sweep["command_sweep"]]), abs=1e-4)
    stray = subprocess.run([sys.executable, "bench/time_to_walk.py", "--policy", str(policy), "--plot", "x.png"],
                           capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert stray.returncode == 2 and "--plot" in stray.stderr
    missing = subprocess.run([sys.executable, "bench/time_to_walk.py", "--policy", str(tmp_path / "none.onnx")],
                             capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert missing.returncode == 2 and "none.onnx" in missing.stderr
    bad = subprocess.run([sys.executable, "bench/time_to_walk.py", "--train-seeds", "0", "--set", "ppo.desird_kl=1",
                          "--out", str(tmp_path / "bad")], capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "desird_kl" in bad.stderr and not (tmp_path / "bad").exists()


def test_wilson_interval_of_the_confirmation_sample():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from time_to_walk import wilson_interval
    finally:
        sys.path.remove(str(ROOT / "bench"))
    lo, hi = wilson_interval(31, 32)
    assert 0.83 < lo < 0.85 and 0.99 < hi < 1.0  # textbook score interval of 31/32: 0.843-0.994
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    narrow = wilson_interval(497, 512)
    assert narrow[0] < 497 / 512 < narrow[1] and narrow[1] - narrow[0] < 0.04 < hi - lo


def test_policy_average_scan_rebuilds_what_training_exported(robot, tmp_path):
    cfg = tiny_config()  # save_interval 1: every iterate on disk
    cfg.policy_average_iterations = 2.0
    run_dir = tmp_path / "run"
    result = train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=3, progress=False, robot=robot)
    # the scan rebuilds the env from the run's files: a library spec in place of the placeholder
    (run_dir / "reward_spec.yaml").write_text((ROOT / "config" / "rewards" / "reference.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = tmp_path / "scan"
    proc = subprocess.run([sys.executable, "bench/policy_average_scan.py", str(run_dir), "--horizons", "2", "--window", "2",
                           "--run-average", "--episodes", "2", "--seconds", "0.3", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["policy"] for r in rows] == ["last iterate", "the run's own moving average",
                                         "moving average, 2 iterations", "mean of checkpoints 2..3 (2)"]
    assert all(r["iteration"] == 3 and r["episodes"] == 2 for r in rows)
    obs = np.random.default_rng(0).normal(size=(16, load_policy(result.policy_path).num_obs)).astype(np.float32)
    same = lambda a, b: np.max(np.abs(load_policy(a)(obs) - load_policy(b)(obs))) < 1e-5  # noqa: E731
    assert same(rows[0]["onnx"], result.last_iterate_path) and same(rows[2]["onnx"], result.policy_path)
    assert same(rows[1]["onnx"], result.policy_path), "the average kept in the checkpoint is what the run exported"
    assert not same(rows[3]["onnx"], result.policy_path)
    (run_dir / "checkpoints" / "model_1.pt").unlink()
    gaps = subprocess.run([sys.executable, "bench/policy_average_scan.py", str(run_dir), "--horizons", "2"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert gaps.returncode != 0 and "save_interval=1" in gaps.stderr

"""PPO training runs (motionvl.rl.trainer): the VecEnv adapter, the run directory, resuming after a stop,
a crash or a kill, the schedules."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from tensordict import TensorDict

from motionvl.envs.config import EnvConfig, RandomizationConfig, Schedule
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.rl.export import load_policy
from motionvl.rl.trainer import agree_on_standing, build_runner, run_iteration, train_policy, update_thread_count
from motionvl.rl.vecenv import LocomotionVecEnv
from motionvl.robot import ConfigError
from rl_fixtures import PlaceholderReward, history_without_timings, tiny_config

ROOT = Path(__file__).resolve().parents[1]


def test_vecenv_shapes_dtypes_and_episode_log(robot):
    env = LocomotionEnv(robot, EnvConfig(num_envs=16, episode_length_s=0.1, num_threads=1), PlaceholderReward())
    vec = LocomotionVecEnv(env)
    obs = vec.get_observations()
    assert isinstance(obs, TensorDict) and set(obs.keys()) == {"policy", "critic"}
    assert obs["policy"].shape == (16, env.num_obs) and obs["policy"].dtype == torch.float32
    assert obs["critic"].shape == (16, env.num_obs + env.num_privileged)
    assert torch.equal(obs["critic"][:, :env.num_obs], obs["policy"])
    logs, timeouts = [], 0
    for _ in range(6):  # episode_length_s 0.1 = 5 policy steps: every env times out once
        obs, rew, dones, extras = vec.step(torch.zeros(16, vec.num_actions))
        assert rew.shape == (16,) and rew.dtype == torch.float32
        assert dones.shape == (16,) and extras["time_outs"].shape == (16,)
        timeouts += int(extras["time_outs"].sum())
        if "log" in extras:
            logs.append(extras["log"])
    assert timeouts > 0 and logs
    assert {"/episode_reward/alive", "/episode_reward/track_vel"} <= set(logs[-1])
    stats = vec.pop_stats()
    assert stats["episodes"] > 0 and set(stats["terms"]) == {"alive", "track_vel"}
    assert vec.episode_length_buf.shape == (16,)


def test_training_writes_run_dir(trained_run):
    run_dir, result, seen = trained_run
    assert result.iterations == 2 and result.stop_reason == "max iterations"
    for name in ("config.yaml", "reward_spec.yaml", "term_stats.json", "history.jsonl", "policy.onnx",
                 "checkpoints/latest.pt", "checkpoints/model_2.pt"):
        assert (run_dir / name).exists(), name
    assert list((run_dir / "tb").iterdir())
    assert [r["iteration"] for r in seen] == [1, 2]
    stats = json.loads((run_dir / "term_stats.json").read_text())
    assert set(stats["terms"]) == {"alive", "track_vel"}
    assert {"mean", "min", "max", "last", "series"} <= set(stats["terms"]["alive"])
    assert len((run_dir / "history.jsonl").read_text().splitlines()) == 2
    with pytest.raises(FileExistsError):
        train_policy(run_dir, PlaceholderReward(), tiny_config(), max_iterations=1, progress=False)


def test_resume_continues_iteration_count(trained_run, robot, tmp_path):
    run_dir, _, _ = trained_run
    import shutil

    copy = tmp_path / "resumed"
    shutil.copytree(run_dir, copy)
    # as a run with the command curriculum on would have left it
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["env"]["commands"].update(curriculum=True, curriculum_error=0.0)  # 0: the level cannot rise here
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    ckpt = torch.load(copy / "checkpoints/latest.pt", weights_only=False)
    ckpt["infos"]["command_level"] = 0.4
    torch.save(ckpt, copy / "checkpoints/latest.pt")
    result = train_policy(copy, PlaceholderReward(), None, resume=True, max_iterations=3, progress=False, robot=robot)
    assert result.iterations == 3
    lines = [json.loads(x) for x in (copy / "history.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in lines] == [1, 2, 3]
    assert torch.load(copy / "checkpoints/latest.pt", weights_only=False)["infos"]["iteration"] == 3
    assert lines[-1]["command_level"] == pytest.approx(0.4), "the curriculum level survives a resume"


def test_a_run_stopped_and_resumed_trains_as_the_run_trained_in_one_go(robot, tmp_path):
    # every source of per-env state on: randomised gains, friction, latency, mass (set_const), pushes,
    # both floors (per-env geom_pos), observation history; episodes end mid-iteration
    cfg = tiny_config(terrain="mixed", rough_fraction=0.5, obs_history=2,
                      randomization=RandomizationConfig(added_mass=True, push_interval_s=0.1))
    cfg.save_interval = 3
    train_policy(tmp_path / "one_go", PlaceholderReward(), cfg, max_iterations=6, progress=False, robot=robot)
    stopped = tmp_path / "stopped"
    train_policy(stopped, PlaceholderReward(), cfg, max_iterations=6, progress=False, robot=robot,
                 on_iteration=lambda record: record["iteration"] < 3)  # saves at 3, where a kill at 4 or 5 leaves it
    train_policy(stopped, PlaceholderReward(), None, resume=True, max_iterations=6, progress=False, robot=robot)
    one_go = history_without_timings(tmp_path / "one_go")
    assert [r["iteration"] for r in one_go] == [1, 2, 3, 4, 5, 6]
    assert history_without_timings(stopped) == one_go
    weights = [torch.load(d / "checkpoints/latest.pt", weights_only=False)["actor_state_dict"]
               for d in (tmp_path / "one_go", stopped)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])

    # without the episodes file (deleted) the run resumes, with new episodes and a warning
    deleted = tmp_path / "deleted"
    train_policy(deleted, PlaceholderReward(), cfg, max_iterations=3, progress=False, robot=robot)
    (deleted / "checkpoints/episodes_3.pt").unlink()
    with pytest.warns(UserWarning, match="every environment in a new episode: episodes_3.pt is missing"):
        train_policy(deleted, PlaceholderReward(), None, resume=True, max_iterations=6, progress=False, robot=robot)
    assert history_without_timings(deleted)[:3] == one_go[:3]
    assert history_without_timings(deleted)[3:] != one_go[3:]

    # a damaged episodes file does not block the resume either
    damaged = tmp_path / "damaged"
    train_policy(damaged, PlaceholderReward(), cfg, max_iterations=3, progress=False, robot=robot)
    (damaged / "checkpoints/episodes_3.pt").write_bytes(b"truncated")
    with pytest.warns(UserWarning, match="every environment in a new episode: episodes_3.pt cannot be read"):
        train_policy(damaged, PlaceholderReward(), None, resume=True, max_iterations=4, progress=False, robot=robot)
    assert [r["iteration"] for r in history_without_timings(damaged)] == [1, 2, 3, 4]


class _Crash(BaseException):
    """Ends a training process the way a kill would: nothing after it runs (not even train_policy's export)."""


@pytest.mark.parametrize("crash_at", ["episodes written", "checkpoint written", "copy written", "history line cut"])
def test_a_run_crashing_while_it_writes_a_checkpoint_resumes_as_if_never_stopped(robot, tmp_path, monkeypatch,
                                                                                  crash_at):
    import motionvl.rl.run_dir as run_files

    cfg = tiny_config(obs_history=2, randomization=RandomizationConfig(push_interval_s=0.1))
    cfg.save_interval = 2
    train_policy(tmp_path / "one_go", PlaceholderReward(), cfg, max_iterations=5, progress=False, robot=robot)
    crashed = tmp_path / "crashed"
    replace = run_files.os.replace

    def crash_in_the_second_checkpoint(src, dst):
        replace(src, dst)
        if crash_at == "episodes written" and Path(dst).name == "episodes_4.pt":
            raise _Crash
        if crash_at == "checkpoint written" and Path(dst).name == "latest.pt" and (Path(dst).parent / "model_2.pt").exists():
            raise _Crash
        if crash_at == "copy written" and Path(dst).name == "model_4.pt":
            raise _Crash

    def cut_history(record):  # a kill in the middle of iteration 3's history line
        if crash_at == "history line cut" and record["iteration"] == 3:
            with (crashed / "history.jsonl").open("a") as f:
                f.write(json.dumps(record)[:17])
            raise _Crash

    monkeypatch.setattr(run_files.os, "replace", crash_in_the_second_checkpoint)
    with pytest.raises(_Crash):
        train_policy(crashed, PlaceholderReward(), cfg, max_iterations=5, progress=False, robot=robot,
                     on_iteration=cut_history)
    monkeypatch.undo()
    survived = sorted(p.name for p in (crashed / "checkpoints").iterdir())
    train_policy(crashed, PlaceholderReward(), None, resume=True, max_iterations=5, progress=False, robot=robot)
    assert history_without_timings(crashed) == history_without_timings(tmp_path / "one_go"), survived
    assert sorted(p.name for p in (crashed / "checkpoints").glob("episodes_*.pt")) == ["episodes_5.pt"]


TINY_TRAINING_YAML = {
    "seed": 0, "save_interval": 2, "selection": {"minutes": 0, "iterations": 0},
    "adapt_update_threads": False,  # compared bit for bit: the thread count must not follow the load
    "env": {"num_envs": 16, "episode_length_s": 0.2, "num_threads": 1},
    "ppo": {"num_steps_per_env": 8, "num_learning_epochs": 1, "num_mini_batches": 2,
            "actor_hidden_dims": [32, 32], "critic_hidden_dims": [32, 32]},
}


def test_a_training_process_killed_at_any_moment_resumes_and_trains_as_if_never_killed(tmp_path):
    import random
    import signal
    import time

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_TRAINING_YAML))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def train_policy_cli(out, *extra):
        return [sys.executable, "-m", "motionvl.cli", "train-policy", "--out", str(out), "--eval-episodes", "0",
                "--no-progress", *extra]

    killed, history = tmp_path / "killed", tmp_path / "killed" / "history.jsonl"
    rng = random.Random()  # a moment of its own each run; printed on failure
    moments = []
    for session, target in enumerate((4, 7)):
        extra = ("--config", str(config)) if session == 0 else ("--resume",)
        proc = subprocess.Popen(train_policy_cli(killed, *extra, "--max-iterations", "500"), env=env, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        try:  # past the first checkpoint (iteration 2), then anywhere: mid-iteration, mid-checkpoint, mid-line
            while not (history.exists() and len(history.read_text().splitlines()) >= target):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                time.sleep(0.01)
            moments.append(round(rng.uniform(0.0, 0.5), 3))
            time.sleep(moments[-1])
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(30)

    total = str(len(history.read_text().splitlines()) + 3)  # past every iteration the killed sessions reached
    resumed = subprocess.run(train_policy_cli(killed, "--resume", "--max-iterations", total), env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "new episode" not in resumed.stderr, f"the episodes in flight were continued (killed after {moments} s)"
    one_go = subprocess.run(train_policy_cli(tmp_path / "one_go", "--config", str(config), "--max-iterations", total),
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert one_go.returncode == 0, one_go.stderr
    after_kill = history_without_timings(killed)
    assert [r["iteration"] for r in after_kill] == list(range(1, int(total) + 1)), f"killed after {moments} s"
    assert after_kill == history_without_timings(tmp_path / "one_go"), f"killed after {moments} s"
    assert (killed / "policy.onnx").is_file()


def test_episodes_saved_from_another_env_size_are_refused_before_anything_changes(robot):
    small, large = (LocomotionVecEnv(LocomotionEnv(robot, EnvConfig(num_envs=n, num_threads=1), PlaceholderReward()))
                    for n in (4, 8))
    before = large.episode_state()
    with pytest.raises(ValueError, match="shape"):
        large.load_episode_state(small.episode_state())
    after = large.episode_state()
    assert all(np.array_equal(after["env"]["buffers"][k], v) for k, v in before["env"]["buffers"].items())
    assert all(np.array_equal(after["env"]["sim"]["state"][k], v) for k, v in before["env"]["sim"]["state"].items())


NAN_TERM_CODE = "def _reward_lean(state):\n    return np.log(state.base_height - 2.0)\n"
"""Passes the static checks and the restricted compile; its test run returns NaN for every env."""


def test_generated_code_that_fails_its_test_run_is_refused_before_training_writes_anything(robot, tmp_path):
    from motionvl.rewards import RewardValidationError
    from motionvl.rewards.spec import RewardSpec
    from motionvl.rl.jobs import JobError, TrainingJob

    raw = {"name": "lean", "terms": {"tracking_lin_vel": 1.0, "lean": {"weight": 0.5, "source": "generated"}},
           "code": NAN_TERM_CODE}
    spec = RewardSpec.from_dict(raw)  # construction alone does not run the code
    with pytest.raises(RewardValidationError, match=r"line 1: non-finite: `_reward_lean` returned NaN"):
        train_policy(tmp_path / "run", spec, tiny_config(), max_iterations=1, progress=False, robot=robot)
    assert not (tmp_path / "run").exists()
    with pytest.raises(JobError, match=r"line 1: non-finite"):
        TrainingJob.from_json(json.dumps({"candidate_id": "c1", "spec": raw}))
    healthy = {**raw, "code": "def _reward_lean(state):\n    return np.exp(-np.abs(state.projected_gravity[:, 0]))\n"}
    assert TrainingJob.from_json(json.dumps({"candidate_id": "c2", "spec": healthy})).spec.code


def test_a_run_resumes_only_on_the_reward_it_was_trained_on_and_budgets_must_be_positive(robot, tmp_path):
    from motionvl.rewards.spec import RewardSpec

    spec = RewardSpec.from_dict({"name": "walk", "terms": {"tracking_lin_vel": 1.0, "orientation": 0.3}})
    run = tmp_path / "run"
    train_policy(run, spec, tiny_config(), max_iterations=1, progress=False, robot=robot)
    with pytest.raises(ConfigError, match="cannot resume .* with another reward spec"):
        train_policy(run, spec.with_weights({"orientation": 0.6}), None, resume=True, max_iterations=2,
                     progress=False, robot=robot)
    assert [json.loads(l)["iteration"] for l in (run / "history.jsonl").read_text().splitlines()] == [1]
    train_policy(run, RewardSpec.from_dict(spec.to_dict()), None, resume=True, max_iterations=2, progress=False,
                 robot=robot)  # the same spec, sent again (a node's retry): resumes
    assert [json.loads(l)["iteration"] for l in (run / "history.jsonl").read_text().splitlines()] == [1, 2]
    for bad in ({"minutes": 0}, {"minutes": -1.0}, {"minutes": float("nan")}, {"max_iterations": 0},
                {"max_iterations": 2.5}):
        with pytest.raises(ConfigError, match=f"train_policy budget: {next(iter(bad))} must be"):
            train_policy(tmp_path / "other", spec, tiny_config(), progress=False, robot=robot, **bad)
    assert not (tmp_path / "other").exists()


def test_resume_of_a_checkpoint_with_other_network_shapes_says_so(trained_run, robot, tmp_path):
    import shutil

    copy = tmp_path / "old_version"
    shutil.copytree(trained_run[0], copy)
    ckpt = torch.load(copy / "checkpoints/latest.pt", weights_only=False)
    critic = ckpt["critic_state_dict"]
    critic["mlp.0.weight"] = critic["mlp.0.weight"][:, :-1]  # as written by a version with one input fewer
    torch.save(ckpt, copy / "checkpoints/latest.pt")
    with pytest.raises(RuntimeError, match="cannot resume .*Start a new run directory"):
        train_policy(copy, PlaceholderReward(), None, resume=True, max_iterations=3, progress=False, robot=robot)


def test_training_runs_on_mixed_terrain_with_rough_ground_from_an_iteration_on(robot, tmp_path):
    cfg = tiny_config(terrain="mixed", rough_fraction=0.5, rough_fraction_schedule=Schedule(0.0, (2, 2)))
    assert [cfg.env.scheduled("rough_fraction", i) for i in (0, 1, 2, 100, None)] == [0.0, 0.0, 0.5, 0.5, 0.5]
    run_dir = tmp_path / "mixed"
    result = train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=1, progress=False, robot=robot)
    assert result.iterations == 1
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["env"]["terrain"] == "mixed"
    train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=3, progress=False, robot=robot)
    lines = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    # a record's share is the one its iteration trained with; the resumed session continues the schedule
    assert [r["rough_fraction"] for r in lines] == [0.0, 0.0, 0.5]
    # the env's first resets follow the schedule at the iteration training starts from (a resumed run's)
    all_rough = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, rough_fraction=1.0))
    env = build_runner(all_rough, PlaceholderReward(), robot)[0].env
    assert not env.on_rough.any()
    assert build_runner(all_rough, PlaceholderReward(), robot, seed_offset=5, iteration=5)[0].env.on_rough.all()
    # the share the trainer sets is what later resets draw from
    env.follow_schedules(2)
    env.reset(np.arange(4))
    assert env.on_rough[:4].all() and not env.on_rough[4:].any()


def test_reward_follows_the_feedforward_on_standing_unless_it_says_otherwise(robot):
    from motionvl.rewards.spec import load_reward_spec

    reference = load_reward_spec(None)  # sets no stand_below: its gait terms follow the env's
    gait_terms = {"contact_phase", "feet_clearance", "feet_air_time"}
    assert reference.standing_thresholds() == dict.fromkeys(gait_terms, 0.1)
    stepping_cfg = tiny_config(gait_feedforward=0.2, gait_stand_below=-1.0)
    followed = agree_on_standing(reference, stepping_cfg.env)
    assert followed.standing_thresholds() == dict.fromkeys(gait_terms, -1.0)
    assert agree_on_standing(followed, stepping_cfg.env) is followed  # train_policy's, then build_runner's call
    vec, _ = build_runner(stepping_cfg, reference, robot)
    assert vec.env.reward_fn.standing_thresholds() == dict.fromkeys(gait_terms, -1.0), "the env trains the followed spec"

    def explicit(value: float, names=gait_terms):
        raw = reference.to_dict()
        for name in names:
            raw["terms"][name].setdefault("params", {})["stand_below"] = value
        return type(reference).from_dict(raw)

    with pytest.raises(ConfigError, match=r"gait_stand_below is -1 but the reward spec sets stand_below "
                                          r"contact_phase 0.1, feet_clearance 0.1, feet_air_time 0.1"):
        build_runner(stepping_cfg, explicit(0.1), robot)
    with pytest.raises(ConfigError, match=r"stand_below feet_air_time 0.1\."):  # one term is enough
        agree_on_standing(explicit(0.1, {"feet_air_time"}), stepping_cfg.env)
    # any two negative thresholds agree (neither ever stands), and an explicit value is kept
    assert set(agree_on_standing(explicit(-0.5), stepping_cfg.env).standing_thresholds().values()) == {-0.5}
    resting = tiny_config(gait_feedforward=0.2, gait_stand_below=0.1).env
    assert agree_on_standing(explicit(0.1), resting).standing_thresholds() == dict.fromkeys(gait_terms, 0.1)
    # without the feedforward the env's threshold is unused: the spec trains as written
    no_fold = tiny_config(gait_feedforward=0.0, gait_stand_below=-1.0).env
    assert agree_on_standing(explicit(0.1), no_fold).standing_thresholds() == dict.fromkeys(gait_terms, 0.1)
    assert agree_on_standing(reference, no_fold) is reference
    # a weight-0 term pays nothing, so its threshold cannot disagree
    off = explicit(0.1).with_weights(dict.fromkeys(gait_terms, 0.0))
    assert agree_on_standing(off, stepping_cfg.env).standing_thresholds() == {}


def test_gait_period_schedule_drives_the_phase_clock_and_the_contract_and_continues_after_a_resume(robot, tmp_path):
    cfg = tiny_config(gait_period_s=0.4, gait_period_schedule=Schedule(start=0.8, iterations=(1, 3)))
    # an env built for a later iteration (a resumed run) runs its phase clock at that iteration's period
    env = build_runner(cfg, PlaceholderReward(), robot, iteration=3)[0].env
    assert env.gait_period == pytest.approx(0.4)
    for _ in range(3):
        obs = env.step(np.zeros((env.num_envs, env.num_joints)))[0]
    phase = 2 * np.pi * env.episode_length * env.dt / 0.4
    clock = sum(b.size for b in env.contract.obs_layout)  # the clock closes the current frame (history follows)
    np.testing.assert_allclose(obs[:, clock - 2:clock], np.stack([np.sin(phase), np.cos(phase)], axis=1), atol=1e-9)
    run_dir = tmp_path / "run"
    train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=2, progress=False, robot=robot)
    assert load_policy(run_dir / "policy.onnx").contract.gait_period == pytest.approx(0.8), "trained at 0.8 so far"
    train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=4, progress=False, robot=robot)
    lines = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    # a record's period is the one its iteration trained with: the schedule at the iterations done before it
    assert [r["gait_period_s"] for r in lines] == pytest.approx([0.8, 0.8, 0.6, 0.4])
    assert load_policy(run_dir / "policy.onnx").contract.gait_period == pytest.approx(0.4), "the period the policy ended on"
    # evaluation envs (no iteration) run at the period they are given
    assert LocomotionEnv(robot, dataclasses.replace(cfg.env, num_envs=1)).gait_period == pytest.approx(0.4)


def test_update_runs_on_its_own_torch_threads_and_rollout_threads_come_back(robot):
    cfg = tiny_config()
    cfg.update_torch_threads = 64
    assert update_thread_count(cfg) == min(64, len(os.sched_getaffinity(0)))  # capped at the cores this process may use
    cfg.update_torch_threads = None
    assert update_thread_count(cfg) is None
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    seen, update = [], runner.alg.update
    runner.alg.update = lambda: (seen.append(torch.get_num_threads()), update())[1]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        run_iteration(runner, vec, update_threads=2)
        assert seen == [2] and torch.get_num_threads() == 1
        run_iteration(runner, vec)
        assert seen == [2, 1]
    finally:
        torch.set_num_threads(before)


def test_a_resumed_session_walks_the_same_rough_ground_with_new_random_draws(robot):
    cfg = tiny_config(terrain="rough")
    first, _ = build_runner(cfg, PlaceholderReward(), robot)
    resumed, _ = build_runner(cfg, PlaceholderReward(), robot, seed_offset=40, iteration=40)
    np.testing.assert_array_equal(first.env.ground.bumps, resumed.env.ground.bumps)
    np.testing.assert_array_equal(first.env.model.geom_pos, resumed.env.model.geom_pos)
    assert first.env.rng.random() != resumed.env.rng.random()
    other_run, _ = build_runner(dataclasses.replace(cfg, seed=cfg.seed + 1), PlaceholderReward(), robot)
    assert not np.array_equal(first.env.ground.bumps, other_run.env.ground.bumps)


def test_train_policy_and_eval_take_the_robot_config_they_are_given(tmp_path, capsys):
    from deploy_fixtures import write_robot_yaml
    from motionvl.cli import main

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_TRAINING_YAML))
    robot_yaml = write_robot_yaml(tmp_path, name="cli_test_biped")
    out = tmp_path / "run"
    assert main(["train-policy", "--out", str(out), "--config", str(config), "--max-iterations", "1", "--eval-episodes",
                 "1", "--eval-seconds", "0.2", "--no-progress", "--robot-config", str(robot_yaml)]) == 0
    assert load_policy(out / "policy.onnx").contract.robot_name == "cli_test_biped"
    assert main(["eval", "--policy", str(out / "policy.onnx"), "--seconds", "0.2", "--episodes", "1",
                 "--robot-config", str(robot_yaml)]) == 0
    capsys.readouterr()
    assert main(["train-policy", "--out", str(tmp_path / "other"), "--robot-config", str(tmp_path / "no.yaml")]) == 2
    assert "no.yaml" in capsys.readouterr().err

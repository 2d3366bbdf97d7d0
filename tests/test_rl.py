"""PPO trainer, VecEnv adapter, ONNX export/contract, evaluation and gait metrics (tiny budgets)."""

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

from motionvl.envs.config import EnvConfig, RandomizationConfig
from motionvl.envs.locomotion import LocomotionEnv
from motionvl.policy_io import ContractError, PolicyContract
from motionvl.rl.config import PPOConfig, TrainConfig
from motionvl.rl.evaluate import episode_metrics, evaluate
from motionvl.rl.export import OnnxPolicy, export_policy, load_policy
from motionvl.rl.trainer import ENV_KEYS_ADDED_LATER, agree_on_standing, build_runner, run_iteration, train_policy, update_thread_count
from motionvl.rl.vecenv import LocomotionVecEnv
from motionvl.robot import ConfigError, load_robot_config
from motionvl.sim.trajectory import Trajectory
from gait_fixtures import synthetic_gait
from rl_fixtures import PlaceholderReward, tiny_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def robot():
    return load_robot_config()


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, robot):
    run_dir = tmp_path_factory.mktemp("run")
    seen = []
    result = train_policy(run_dir, PlaceholderReward(), tiny_config(), max_iterations=2, progress=False,
                          on_iteration=seen.append, robot=robot)
    return run_dir, result, seen


# ---------------------------------------------------------------------- VecEnv adapter
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


# ---------------------------------------------------------------------- training, run dir, resume
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
    saved_cells = ckpt["infos"]["command_cell_error"]
    assert len(saved_cells) == 5 * 3 * 3 and all(np.isnan(saved_cells)), "adaptive sampling off: nothing tracked"
    ckpt["infos"]["command_cell_error"] = [0.1] * 45
    torch.save(ckpt, copy / "checkpoints/latest.pt")
    result = train_policy(copy, PlaceholderReward(), None, resume=True, max_iterations=3, progress=False, robot=robot)
    assert result.iterations == 3
    lines = [json.loads(x) for x in (copy / "history.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in lines] == [1, 2, 3]
    assert torch.load(copy / "checkpoints/latest.pt", weights_only=False)["infos"]["iteration"] == 3
    assert lines[-1]["command_level"] == pytest.approx(0.4), "the curriculum level survives a resume"
    resumed_cells = torch.load(copy / "checkpoints/latest.pt", weights_only=False)["infos"]["command_cell_error"]
    assert resumed_cells == pytest.approx([0.1] * 45), "the adaptive sampler's cell errors survive a resume"


def _history_without_timings(run_dir: Path) -> list[dict]:
    timings = {"elapsed_s", "steps_per_s", "collect_s", "learn_s"}
    return [{k: v for k, v in json.loads(line).items() if k not in timings}
            for line in (run_dir / "history.jsonl").read_text().splitlines()]


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
    one_go = _history_without_timings(tmp_path / "one_go")
    assert [r["iteration"] for r in one_go] == [1, 2, 3, 4, 5, 6]
    assert _history_without_timings(stopped) == one_go
    weights = [torch.load(d / "checkpoints/latest.pt", weights_only=False)["actor_state_dict"]
               for d in (tmp_path / "one_go", stopped)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])

    # without the episodes file (a run from before it existed) the run resumes, with new episodes and a warning
    older = tmp_path / "older"
    train_policy(older, PlaceholderReward(), cfg, max_iterations=3, progress=False, robot=robot)
    (older / "checkpoints/latest_episodes.pt").unlink()
    with pytest.warns(UserWarning, match="every environment in a new episode: latest_episodes.pt is missing"):
        train_policy(older, PlaceholderReward(), None, resume=True, max_iterations=6, progress=False, robot=robot)
    assert _history_without_timings(older)[:3] == one_go[:3]
    assert _history_without_timings(older)[3:] != one_go[3:]

    # a damaged episodes file does not block the resume either
    damaged = tmp_path / "damaged"
    train_policy(damaged, PlaceholderReward(), cfg, max_iterations=3, progress=False, robot=robot)
    (damaged / "checkpoints/latest_episodes.pt").write_bytes(b"truncated")
    with pytest.warns(UserWarning, match="every environment in a new episode: latest_episodes.pt cannot be read"):
        train_policy(damaged, PlaceholderReward(), None, resume=True, max_iterations=4, progress=False, robot=robot)
    assert [r["iteration"] for r in _history_without_timings(damaged)] == [1, 2, 3, 4]


TINY_TRAINING_YAML = {
    "seed": 0, "save_interval": 2, "selection": {"minutes": 0, "iterations": 0},
    "env": {"num_envs": 16, "episode_length_s": 0.2, "num_threads": 1},
    "ppo": {"num_steps_per_env": 8, "num_learning_epochs": 1, "num_mini_batches": 2,
            "actor_hidden_dims": [32, 32], "critic_hidden_dims": [32, 32]},
}


def _checkpoint_at_rest(ckpt_dir: Path) -> int | None:
    """The iteration of latest.pt when it and latest_episodes.pt agree and no file is half written, else None."""
    if any(p.suffix == ".tmp" for p in ckpt_dir.iterdir()) or not (ckpt_dir / "latest.pt").exists():
        return None
    try:
        latest = torch.load(ckpt_dir / "latest.pt", weights_only=False)["infos"]["iteration"]
        episodes = torch.load(ckpt_dir / "latest_episodes.pt", weights_only=False)["iteration"]
    except Exception:  # noqa: BLE001 - a file being replaced right now: look again
        return None
    return latest if latest == episodes else None


def test_a_killed_training_process_resumes_from_its_last_checkpoint_and_trains_as_if_never_killed(tmp_path):
    import signal
    import time

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY_TRAINING_YAML))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def train_policy_cli(out, *extra):
        return [sys.executable, "-m", "motionvl.cli", "train-policy", "--out", str(out), "--eval-episodes", "0",
                "--no-progress", *extra]

    killed = tmp_path / "killed"
    proc = subprocess.Popen(train_policy_cli(killed, "--config", str(config), "--max-iterations", "500"), env=env,
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    history = killed / "history.jsonl"
    deadline = time.monotonic() + 120
    try:
        while not (history.exists() and len(history.read_text().splitlines()) >= 5):
            assert proc.poll() is None and time.monotonic() < deadline, "training did not reach 5 iterations"
            time.sleep(0.01)
        # freeze it where both checkpoint files are whole and agree, then kill it as a crash would
        while True:
            proc.send_signal(signal.SIGSTOP)
            checkpoint = _checkpoint_at_rest(killed / "checkpoints")
            if checkpoint is not None:
                break
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
    trained = len(history.read_text().splitlines())
    assert checkpoint >= 4 and checkpoint <= trained < 12

    resumed = subprocess.run(train_policy_cli(killed, "--resume", "--max-iterations", "12"), env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "new episode" not in resumed.stderr, "the episodes in flight were continued"
    one_go = subprocess.run(train_policy_cli(tmp_path / "one_go", "--config", str(config), "--max-iterations", "12"),
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert one_go.returncode == 0, one_go.stderr
    after_kill = _history_without_timings(killed)
    assert [r["iteration"] for r in after_kill] == list(range(1, 13)), "no iteration lost or counted twice"
    assert after_kill == _history_without_timings(tmp_path / "one_go")
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


@pytest.mark.parametrize("key", sorted(ENV_KEYS_ADDED_LATER))
def test_a_run_written_before_an_env_key_existed_resumes_as_it_was_trained(robot, tmp_path, key):
    run_dir = tmp_path / "older_run"
    train_policy(run_dir, PlaceholderReward(), tiny_config(**{key: ENV_KEYS_ADDED_LATER[key]}), max_iterations=1,
                 progress=False, robot=robot)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    del config["env"][key]  # the config copy of a version without the key
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    result = train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=2, progress=False, robot=robot)
    assert result.iterations == 2
    # a run whose copy has the key keeps it: today's default critic, resumed with its own inputs
    fresh = tmp_path / "fresh_run"
    train_policy(fresh, PlaceholderReward(), tiny_config(), max_iterations=1, progress=False, robot=robot)
    assert train_policy(fresh, PlaceholderReward(), None, resume=True, max_iterations=2, progress=False,
                        robot=robot).iterations == 2


def test_training_runs_on_mixed_terrain_with_rough_ground_from_an_iteration_on(robot, tmp_path):
    cfg = tiny_config(terrain="mixed", rough_fraction=0.5, rough_from_iteration=2)
    assert [cfg.env.rough_fraction_at(i) for i in (0, 1, 2, 100)] == [0.0, 0.0, 0.5, 0.5]
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
    env.rough_fraction = all_rough.env.rough_fraction_at(2)
    env.reset(np.arange(4))
    assert env.on_rough[:4].all() and not env.on_rough[4:].any()


# ---------------------------------------------------------------------- ONNX export and contract
def test_gait_feedforward_is_part_of_the_contract_every_evaluation_follows(robot, tmp_path):
    from motionvl.rl.evaluate import batch_evaluation_env

    cfg = tiny_config(gait_feedforward=0.3, gait_stride_feedforward=0.2, gait_stand_below=-1.0)
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    assert vec.env.contract.gait_feedforward == 0.3
    path = export_policy(runner.alg.get_policy(), tmp_path / "p.onnx", PolicyContract.for_training(robot, cfg.env))
    policy = load_policy(path)
    c = policy.contract
    assert (c.gait_feedforward, c.gait_stride_feedforward, c.gait_stand_below) == pytest.approx((0.3, 0.2, -1.0))
    assert c.feedforward_joints == (("left_hip_pitch", "left_knee", "left_ankle_pitch"),
                                    ("right_hip_pitch", "right_knee", "right_ankle_pitch"))
    # evaluation applies the policy's own contract, not the defaults of an EnvConfig
    env = batch_evaluation_env(policy, seconds=1.0, episodes=2, robot=robot)
    assert env.contract == c and env.cfg.gait_feedforward == 0.0
    assert np.any(env.action_law.feedforward(np.array([[0.5, 0, 0]]), np.array([0.25])) != 0.0)
    # a file of the earlier metadata format is refused, naming why
    meta = c.to_metadata()
    meta["format"] = "motionvl-policy/1"
    old = tmp_path / "old.onnx"
    import onnx
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, {k: json.dumps(v) for k, v in meta.items()})
    onnx.save(model, str(old))
    with pytest.raises(ContractError, match="format is 'motionvl-policy/1'"):
        load_policy(old)


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
    assert agree_on_standing(explicit(0.1), tiny_config(gait_feedforward=0.2).env).standing_thresholds() == \
        dict.fromkeys(gait_terms, 0.1)
    # without the feedforward the env's threshold is unused: the spec trains as written
    assert agree_on_standing(explicit(0.1), tiny_config(gait_stand_below=-1.0).env).standing_thresholds() == \
        dict.fromkeys(gait_terms, 0.1)
    assert agree_on_standing(reference, tiny_config(gait_stand_below=-1.0).env) is reference
    # a weight-0 term pays nothing, so its threshold cannot disagree
    off = explicit(0.1).with_weights(dict.fromkeys(gait_terms, 0.0))
    assert agree_on_standing(off, stepping_cfg.env).standing_thresholds() == {}


def test_onnx_matches_torch_with_normalisation(robot, tmp_path):
    cfg = tiny_config()
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    actor = runner.alg.get_policy()
    actor.train()
    gen = torch.Generator().manual_seed(0)
    actor.obs_normalizer.update(torch.randn(256, vec.num_obs, generator=gen) * 3.0 + 1.5)  # non-trivial statistics
    actor.eval()
    assert not torch.allclose(actor.obs_normalizer.mean, torch.zeros(vec.num_obs))
    path = export_policy(actor, tmp_path / "p.onnx", PolicyContract.for_training(robot, cfg.env))
    policy = load_policy(path)
    assert policy.velocity_estimator is None, "no estimator, no estimator metadata"
    obs = torch.randn(64, vec.num_obs, generator=gen) * 4.0
    with torch.no_grad():
        expected = actor(TensorDict({"policy": obs}, batch_size=[64])).clamp(-1, 1).numpy()
    got = policy(obs.numpy())
    assert got.shape == (64, robot.num_joints)
    assert np.max(np.abs(got - expected)) < 1e-5
    assert np.allclose(policy(obs[0].numpy()), got[0], atol=1e-6)


def test_a_reused_graph_carries_the_new_weights_and_a_stale_one_falls_back_to_a_full_export(robot, tmp_path,
                                                                                            monkeypatch):
    import onnx

    from motionvl.rl import export

    cfg = tiny_config()
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    actor = runner.alg.get_policy()
    meta = PolicyContract.for_training(robot, cfg.env)
    export_policy(actor, tmp_path / "first.onnx", meta)  # this architecture's graph, if no test exported it yet
    torch_exports = []
    full_export = export._torch_export
    monkeypatch.setattr(export, "_torch_export", lambda *a: torch_exports.append(1) or full_export(*a))
    gen = torch.Generator().manual_seed(1)

    def train_a_little():
        with torch.no_grad():
            for p in actor.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        actor.train()
        actor.obs_normalizer.update(torch.randn(256, vec.num_obs, generator=gen) * 2.0 - 0.5)
        actor.eval()

    def onnx_vs_torch(path) -> float:
        obs = torch.randn(64, vec.num_obs, generator=gen) * 3.0
        with torch.no_grad():
            expected = actor(TensorDict({"policy": obs}, batch_size=[64])).clamp(-1, 1).numpy()
        return float(np.max(np.abs(load_policy(path)(obs.numpy()) - expected)))

    train_a_little()
    path = export_policy(actor, tmp_path / "reused.onnx", meta)
    assert torch_exports == [], "the same architecture reuses the graph"
    assert onnx_vs_torch(path) < 1e-5
    assert load_policy(path).metadata["joint_names"] == list(robot.joint_names)
    # a graph holding a tensor under a name the actor does not have (as a constant the exporter folded):
    # writing the weights misses it, ONNX Runtime disagrees with torch, and the policy is exported afresh
    key = export.PolicyExportWrapper(actor).architecture()
    stale = export._GRAPHS[key]
    first = next(i for i in stale.graph.initializer if i.name == "mlp.0.weight")
    first.name = "folded_weight"
    for node in stale.graph.node:
        node.input[:] = ["folded_weight" if x == "mlp.0.weight" else x for x in node.input]
    onnx.checker.check_model(stale)
    train_a_little()
    path = export_policy(actor, tmp_path / "fresh.onnx", meta)
    assert torch_exports == [1]
    assert onnx_vs_torch(path) < 1e-5
    assert "mlp.0.weight" in {i.name for i in export._GRAPHS[key].graph.initializer}, "the fresh graph replaced it"


def test_contract_round_trip_and_mismatch(trained_run, robot):
    policy = load_policy(trained_run[0] / "policy.onnx")
    policy.contract.check_robot(robot)
    assert policy.contract == PolicyContract.from_metadata(policy.metadata)
    assert policy.contract.joint_names == robot.joint_names
    assert [b.name for b in policy.contract.obs_layout][:3] == ["base_ang_vel", "projected_gravity", "command"]
    c = policy.contract
    assert c.history_frames == 0 and c.gait_period == pytest.approx(0.7) and c.gait_feedforward == 0.0
    assert policy.metadata["velocity_limit"] == robot.velocity_limit.tolist(), "the deployment node enforces them"
    names = list(robot.joint_names)
    names[2], names[3] = names[3], names[2]
    with pytest.raises(ContractError, match="joint order"):
        dataclasses.replace(c, joint_names=tuple(names)).check_robot(robot)
    with pytest.raises(ContractError, match="joint count"):
        dataclasses.replace(c, joint_names=tuple(names[:-1])).check_robot(robot)
    with pytest.raises(ContractError, match="kp"):
        dataclasses.replace(c, kp=(1.0,) * robot.num_joints).check_robot(robot)
    other = robot.action_scales.copy()
    other[3] *= 2.0
    with pytest.raises(ContractError, match="action_scale"):
        dataclasses.replace(c, action_scale=tuple(other)).check_robot(robot)


def test_a_policy_that_sees_its_heading_error_carries_it_in_its_contract_and_evaluates(robot, tmp_path):
    cfg = tiny_config(heading_observation=True)
    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    path = export_policy(runner.alg.get_policy(), tmp_path / "p.onnx", PolicyContract.for_training(robot, cfg.env))
    policy = load_policy(path)
    assert policy.contract.heading_observation
    assert policy.num_obs == vec.num_obs == LocomotionEnv(robot, tiny_config(heading_observation=False).env).num_obs + 1
    layout = policy.metadata["obs_layout"]
    assert [b["name"] for b in layout][:4] == ["base_ang_vel", "projected_gravity", "command", "heading_error"]
    assert layout[3]["clip"] == 1.0  # what a deployment needs to build the input
    assert sum(b["size"] for b in layout) == policy.num_obs
    result = evaluate(policy, seconds=0.2, episodes=2, command=(0.4, 0.0, 0.0), robot=robot)
    assert result["episodes"] == 2  # the evaluation env gave the policy the input it was trained with


def test_metadata_describes_every_observation_entry_of_an_env_with_history(robot):
    env = LocomotionEnv(robot, tiny_config(obs_history=3, heading_observation=True).env)
    layout = PolicyContract.for_training(robot, env.cfg).to_metadata()["obs_layout"]
    assert sum(b["size"] for b in layout) == env.num_obs
    history = layout[-1]
    assert history["name"] == "history" and history["frames"] == 3
    frame_size = env.contract.frame_size
    assert [(b["name"], b["size"]) for b in history["frame"]] == [(b.name, b.size) for b in env.contract.history_frame]
    assert history["size"] == 3 * frame_size

    # what a deployment must rebuild from that description: zeros after a reset, then each step the
    # previous observation's proprioceptive blocks (already scaled) in front, the oldest frame dropped
    starts = np.cumsum([0] + [b["size"] for b in layout])
    blocks = {b["name"]: slice(int(a), int(a + b["size"])) for b, a in zip(layout, starts)}
    frame_of = lambda obs: np.concatenate([obs[:, blocks[b["name"]]] for b in history["frame"]], axis=1)  # noqa: E731
    previous = [env.observations().copy()]
    assert np.all(previous[0][:, blocks["history"]] == 0.0) and history["reset_value"] == 0.0
    rng = np.random.default_rng(0)
    for _ in range(4):
        obs, *_ = env.step(rng.uniform(-1, 1, (env.num_envs, env.num_joints)))
        frames = obs[:, blocks["history"]].reshape(env.num_envs, 3, frame_size)
        expected = [frame_of(p) for p in previous[::-1][:3]]
        expected += [np.zeros_like(expected[0])] * (3 - len(expected))
        np.testing.assert_allclose(frames, np.stack(expected, axis=1), atol=1e-12)
        previous.append(obs.copy())


# ---------------------------------------------------------------------- evaluation
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


# ---------------------------------------------------------------------- config
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


def test_the_shipped_training_config_randomises_with_the_papers_ranges_and_each_switch_turns_off():
    r = TrainConfig.from_yaml(None).env.randomization
    assert (r.friction, tuple(r.friction_range)) == (True, (0.2, 1.3))
    assert (r.gain_scale, tuple(r.gain_scale_range)) == (True, (0.8, 1.2))
    assert (r.joint_friction, tuple(r.joint_friction_range)) == (True, (0.1, 3.0))
    assert (r.push, r.push_interval_s) == (True, 8.0)
    assert (r.latency, tuple(r.latency_range)) == (True, (1, 10))
    for switch in ("friction", "gain_scale", "joint_friction", "push", "latency"):
        off = TrainConfig.from_yaml(None, overrides=[f"env.randomization.{switch}=false"]).env.randomization
        assert getattr(off, switch) is False
        assert all(getattr(off, other) for other in ("friction", "gain_scale", "joint_friction", "push", "latency")
                   if other != switch)


def test_training_config_loads_and_rejects_bad_values(tmp_path):
    cfg = TrainConfig.from_yaml(ROOT / "config" / "training.yaml")
    assert cfg.to_rsl_rl()["algorithm"]["num_learning_epochs"] == cfg.ppo.num_learning_epochs
    bad = tmp_path / "bad.yaml"
    for text, msg in (("ppo: {num_epochs: 3}", "unknown keys"), ("ppo: {num_mini_batches: two}", "expected a number"),
                      ("env: {num_env: 3}", "unknown keys"), ("[1, 2]", "expected a mapping"),
                      ("ppo: {schedule: cosine}", "schedule"), ("update_torch_threads: 0", "update_torch_threads"),
                      ("env: {commands: {heading_gain: -0.5}}", "heading_gain"),
                      ("policy_average_iterations: 0.5", "policy_average_iterations"),
                      ("policy_average_growth: -1", "policy_average_growth"),
                      ("env: {randomization: {push_velocity_final: fast}}", "push_velocity_final"),
                      ("env: {randomization: {push_velocity_final: -0.1}}", "push_velocity_final"),
                      ("env: {randomization: {push_decay_iterations: [900, 600]}}", "push_decay_iterations"),
                      ("env: {randomization: {push_decay_iterations: [600]}}", "push_decay_iterations"),
                      ("env: {randomization: {push_decay_iterations: [true, 600]}}", "push_decay_iterations"),
                      ("env: {randomization: {latency_max_start: 11}}", "latency_max_start"),
                      ("env: {randomization: {latency_max_start: 0}}", "latency_max_start"),
                      ("env: {randomization: {latency_max_start: 2.5}}", "latency_max_start"),
                      ("env: {randomization: {latency_range: [0, 10]}}", "latency_range"),
                      ("env: {randomization: {latency_range: [8, 4]}}", "latency_range"),
                      ("env: {randomization: {latency_widen_iterations: [180, 60]}}", "latency_widen_iterations"),
                      ("env: {rough_from_iteration: -1}", "rough_from_iteration"),
                      ("env: {rough_from_iteration: true}", "expected a number"),
                      ("env: {commands: {adaptive_fraction: 1.5}}", "adaptive_fraction"),
                      ("env: {commands: {adaptive_bins: [5, 3]}}", "adaptive_bins"),
                      ("env: {commands: {adaptive_bins: [5, 0, 3]}}", "adaptive_bins"),
                      ("ppo: {estimator_num_epochs: 0}", "estimator_num_epochs"),
                      ("ppo: {estimator_num_epochs: 1.5}", "estimator_num_epochs")):
        bad.write_text(text)
        with pytest.raises(ConfigError, match=msg):
            TrainConfig.from_yaml(bad)


def test_push_schedule_lowers_training_pushes_by_iteration_and_continues_after_a_resume(robot, tmp_path):
    schedule = RandomizationConfig(push_velocity=0.75, push_velocity_final=0.5, push_decay_iterations=(600, 1200))
    assert [schedule.push_velocity_at(i) for i in (0, 600, 900, 1200, 5000)] == pytest.approx([0.75, 0.75, 0.625, 0.5, 0.5])
    assert RandomizationConfig(push_velocity=0.75).push_velocity_at(5000) == 0.75, "no final value: no schedule"
    assert dataclasses.replace(schedule, push_decay_iterations=(10, 10)).push_velocity_at(10) == 0.5
    run_dir = tmp_path / "run"
    cfg = tiny_config(randomization=RandomizationConfig(push_velocity=0.8, push_velocity_final=0.2,
                                                        push_decay_iterations=(1, 4)))
    train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=2, progress=False, robot=robot)
    train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=5, progress=False, robot=robot)
    lines = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    # a record's push velocity is the one its iteration trained with: the schedule at the iterations done before it
    assert [r["push_velocity"] for r in lines] == pytest.approx([0.8, 0.8, 0.6, 0.4, 0.2])


def test_latency_schedule_widens_the_training_draw_by_iteration_and_continues_after_a_resume(robot, tmp_path):
    schedule = RandomizationConfig(latency_range=(1, 10), latency_max_start=2, latency_widen_iterations=(60, 180))
    assert [schedule.latency_max_at(i) for i in (0, 60, 120, 180, 5000)] == [2, 2, 6, 10, 10]
    assert RandomizationConfig().latency_max_at(0) == 10, "no start value: the whole range from the first iteration"
    run_dir = tmp_path / "run"
    cfg = tiny_config(randomization=RandomizationConfig(latency_max_start=1, latency_widen_iterations=(1, 4)))
    train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=2, progress=False, robot=robot)
    train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=5, progress=False, robot=robot)
    lines = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    # 1 -> 10 over iterations 1..4: tops 1, 1, 4, 7, 10 (4 and 7 round from 4.0 and 7.0)
    assert [r["latency_max"] for r in lines] == [1, 1, 4, 7, 10]
    # without randomised latency the record has no top to report
    plain = tiny_config(randomization=RandomizationConfig(latency=False))
    train_policy(tmp_path / "plain", PlaceholderReward(), plain, max_iterations=1, progress=False, robot=robot)
    assert "latency_max" not in json.loads((tmp_path / "plain" / "history.jsonl").read_text().splitlines()[0])


def test_desired_kl_schedule_sets_the_adaptive_target_by_iteration_and_continues_after_a_resume(robot, tmp_path):
    ppo = PPOConfig(desired_kl=0.02, desired_kl_final=0.005, desired_kl_decay_iterations=(2000, 3500))
    assert [ppo.desired_kl_at(i) for i in (0, 2000, 2750, 3500, 9000)] == pytest.approx([0.02, 0.02, 0.0125, 0.005, 0.005])
    assert PPOConfig(desired_kl=0.03).desired_kl_at(9000) == 0.03, "no final value: no schedule"
    run_dir = tmp_path / "run"
    cfg = tiny_config()
    cfg.ppo = dataclasses.replace(cfg.ppo, desired_kl=0.04, desired_kl_final=0.01, desired_kl_decay_iterations=(1, 4))
    train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=2, progress=False, robot=robot)
    train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=5, progress=False, robot=robot)
    lines = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    # the target rsl_rl's adaptive schedule compared the iteration's KL with, from the run's config copy after the resume
    assert [r["desired_kl"] for r in lines] == pytest.approx([0.04, 0.04, 0.03, 0.02, 0.01])
    bad = tmp_path / "bad.yaml"
    for text, msg in (("ppo: {desired_kl_final: 0}", "desired_kl_final"), ("ppo: {desired_kl_final: low}", "desired_kl_final"),
                      ("ppo: {desired_kl: -0.01}", "desired_kl"),
                      ("ppo: {desired_kl_decay_iterations: [3500, 2000]}", "desired_kl_decay_iterations"),
                      ("ppo: {desired_kl_decay_iterations: [2000]}", "desired_kl_decay_iterations")):
        bad.write_text(text)
        with pytest.raises(ConfigError, match=msg):
            TrainConfig.from_yaml(bad)


def test_gait_period_schedule_drives_the_phase_clock_and_the_contract_and_continues_after_a_resume(robot, tmp_path):
    schedule = EnvConfig(gait_period_s=0.7, gait_period_final_s=0.6, gait_period_change_iterations=(1300, 1500))
    assert [schedule.gait_period_at(i) for i in (0, 1300, 1400, 1500, 9000)] == pytest.approx([0.7, 0.7, 0.65, 0.6, 0.6])
    assert EnvConfig(gait_period_s=0.7).gait_period_at(9000) == 0.7, "no final value: no schedule"
    cfg = tiny_config(gait_period_s=0.8, gait_period_final_s=0.4, gait_period_change_iterations=(1, 3))
    # an env built for a later iteration (a resumed run) runs its phase clock at that iteration's period
    env = build_runner(cfg, PlaceholderReward(), robot, iteration=3)[0].env
    assert env.gait_period == pytest.approx(0.4)
    for _ in range(3):
        obs = env.step(np.zeros((env.num_envs, env.num_joints)))[0]
    phase = 2 * np.pi * env.episode_length * env.dt / 0.4
    np.testing.assert_allclose(obs[:, -2:], np.stack([np.sin(phase), np.cos(phase)], axis=1), atol=1e-9)
    run_dir = tmp_path / "run"
    train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=2, progress=False, robot=robot)
    assert load_policy(run_dir / "policy.onnx").contract.gait_period == pytest.approx(0.8), "trained at 0.8 so far"
    train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=4, progress=False, robot=robot)
    lines = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    # a record's period is the one its iteration trained with: the schedule at the iterations done before it
    assert [r["gait_period_s"] for r in lines] == pytest.approx([0.8, 0.8, 0.6, 0.4])
    assert load_policy(run_dir / "policy.onnx").contract.gait_period == pytest.approx(0.4), "the period the policy ended on"
    bad = tmp_path / "bad.yaml"
    for text in ("env: {gait_period_final_s: 0}", "env: {gait_period_final_s: fast}", "env: {gait_period_s: -0.7}",
                 "env: {gait_period_change_iterations: [1500, 1300]}", "env: {gait_period_change_iterations: [true, 9]}"):
        bad.write_text(text)
        with pytest.raises(ConfigError, match="gait_period"):
            TrainConfig.from_yaml(bad)


def test_training_config_overrides_are_checked_like_the_file(tmp_path):
    base = ROOT / "config" / "training.yaml"
    cfg = TrainConfig.from_yaml(base, ["seed=3", "ppo.desired_kl=0.03", "ppo.symmetry_augmentation=true",
                                       "ppo.actor_hidden_dims=[64, 32]", "env.commands.vx=[0.0, 0.8]"])
    assert (cfg.seed, cfg.ppo.desired_kl, cfg.ppo.symmetry_augmentation) == (3, 0.03, True)
    assert tuple(cfg.ppo.actor_hidden_dims) == (64, 32) and tuple(cfg.env.commands.vx) == (0.0, 0.8)
    assert cfg.ppo.num_mini_batches == TrainConfig.from_yaml(base).ppo.num_mini_batches  # the rest is the file's
    for override, msg in (("ppo.desird_kl=0.03", "unknown keys"), ("ppo.desired_kl=abc", "expected a number"),
                          ("seed.x=1", "seed is a value"), ("ppo.desired_kl", "KEY=VALUE"), ("ppo..x=1", "KEY=VALUE"),
                          ("update_torch_threads=0", "update_torch_threads")):
        with pytest.raises(ConfigError, match=msg):
            TrainConfig.from_yaml(base, [override])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "motionvl.cli", "train-policy", "--out", str(out), "--set",
                           "ppo.desird_kl=0.03", "--minutes", "0.1"], capture_output=True, text=True, env=env,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "desird_kl" in proc.stderr and not out.exists()


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
        assert row["gait_period_s"] == cfg["env"]["gait_period_s"]  # the policy's clock: the step-frequency goal's
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


# ---------------------------------------------------------------------- policy averaging
def test_policy_average_is_an_ema_of_parameters_with_the_current_normaliser():
    from motionvl.rl.averaging import PolicyAverage

    class Actor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.register_buffer("stat", torch.zeros(2))

    actor = Actor()
    average = PolicyAverage(actor, iterations=2)  # decay 0.5
    assert average.updates == 0 and torch.equal(average.averaged_actor(actor).layer.weight, actor.layer.weight)
    seen = []
    for value in (1.0, 3.0, 7.0):
        with torch.no_grad():
            actor.layer.weight.fill_(value)
            actor.stat.fill_(value)
        average.update(actor)
        seen.append(value)
    # W0 = 1, W1 = 0.5 * 1 + 0.5 * 3 = 2, W2 = 0.5 * 2 + 0.5 * 7 = 4.5
    averaged = average.averaged_actor(actor)
    assert average.updates == 3 and torch.allclose(averaged.layer.weight, torch.full((1, 2), 4.5))
    assert torch.equal(averaged.stat, torch.full((2,), 7.0)), "normaliser statistics are the current actor's"
    assert torch.equal(actor.layer.weight, torch.full((1, 2), 7.0)), "the training actor is left alone"
    again = PolicyAverage(Actor(), iterations=2)
    again.load_state_dict(average.state_dict())
    assert again.updates == 3 and torch.allclose(again.averaged_actor(actor).layer.weight, averaged.layer.weight)
    with pytest.raises(ValueError, match=">= 1"):
        PolicyAverage(actor, iterations=0.5)
    with pytest.raises(ValueError, match=">= 0"):
        PolicyAverage(actor, iterations=1, growth=-0.1)


def test_growing_policy_average_horizon():
    from motionvl.rl.averaging import PolicyAverage

    actor = torch.nn.Linear(1, 1, bias=False)
    # time constant max(1, 1 x k) at the k-th update: weight 1/k, the running arithmetic mean
    mean = PolicyAverage(actor, iterations=1, growth=1.0)
    # time constant max(4, 0.5 x k): fixed 1/4 until k = 8, then 2/k
    late = PolicyAverage(actor, iterations=4, growth=0.5)
    values = [1.0, 3.0, 8.0, 0.0, 2.0, 6.0, 1.0, 3.0, 9.0, 7.0]
    expect_late = None
    for k, value in enumerate(values, start=1):
        with torch.no_grad():
            actor.weight.fill_(value)
        mean.update(actor)
        late.update(actor)
        expect_late = value if k == 1 else expect_late + (value - expect_late) / max(4.0, 0.5 * k)
        assert late.horizon(k) == max(4.0, 0.5 * k)
    assert torch.allclose(mean.averaged_actor(actor).weight, torch.tensor([[sum(values) / len(values)]]))
    assert torch.allclose(late.averaged_actor(actor).weight, torch.tensor([[expect_late]]))


def test_averaged_run_exports_the_average_and_the_last_iterate_and_resumes_it(robot, tmp_path):
    from motionvl.rl.averaging import PolicyAverage

    cfg = tiny_config()
    cfg.policy_average_iterations = 3.0
    run_dir = tmp_path / "avg"
    first = train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=2, progress=False, robot=robot)
    assert first.last_iterate_path == run_dir / "policy_last_iterate.onnx" and first.last_iterate_path.is_file()
    result = train_policy(run_dir, PlaceholderReward(), None, resume=True, max_iterations=4, progress=False, robot=robot)
    state = torch.load(run_dir / "checkpoints/latest.pt", weights_only=False)
    assert state["infos"]["policy_average"]["average"]["n_averaged"] == 4, "the average survives a resume"

    vec, runner = build_runner(cfg, PlaceholderReward(), robot)
    runner.load(str(run_dir / "checkpoints/latest.pt"))
    actor = runner.alg.get_policy()
    average = PolicyAverage(actor, cfg.policy_average_iterations)
    average.load_state_dict(state["infos"]["policy_average"])
    obs = torch.randn(32, vec.num_obs, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expect_avg = average.averaged_actor(actor)(TensorDict({"policy": obs}, batch_size=[32])).clamp(-1, 1).numpy()
        expect_last = actor(TensorDict({"policy": obs}, batch_size=[32])).clamp(-1, 1).numpy()
    got_avg, got_last = load_policy(result.policy_path)(obs.numpy()), load_policy(result.last_iterate_path)(obs.numpy())
    assert np.max(np.abs(got_avg - expect_avg)) < 1e-5 and np.max(np.abs(got_last - expect_last)) < 1e-5
    assert np.max(np.abs(got_avg - got_last)) > 1e-4, "policy.onnx is the average, not the last iterate"
    cfg.policy_average_iterations = 0
    plain = train_policy(tmp_path / "plain", PlaceholderReward(), cfg, max_iterations=1, progress=False, robot=robot)
    assert plain.last_iterate_path is None and not (tmp_path / "plain" / "policy_last_iterate.onnx").exists()


def test_policy_average_scan_rebuilds_what_training_exported(robot, tmp_path):
    cfg = tiny_config()  # save_interval 1: every iterate on disk
    cfg.policy_average_iterations = 1.0
    cfg.policy_average_growth = 1.0  # max(1, k): training exports the plain mean of iterates 1..3
    run_dir = tmp_path / "run"
    result = train_policy(run_dir, PlaceholderReward(), cfg, max_iterations=3, progress=False, robot=robot)
    # the scan rebuilds the env from the run's files: a library spec in place of the placeholder
    (run_dir / "reward_spec.yaml").write_text((ROOT / "config" / "rewards" / "reference.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = tmp_path / "scan"
    proc = subprocess.run([sys.executable, "bench/policy_average_scan.py", str(run_dir), "--horizons", "1:1", "--window", "2",
                           "--run-average", "--episodes", "2", "--seconds", "0.3", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["policy"] for r in rows] == ["last iterate", "the run's own moving average",
                                         "moving average, max(1, 1 x it) iterations", "mean of checkpoints 2..3 (2)"]
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


def test_selection_exports_the_best_validated_candidate_within_the_budget(robot, tmp_path):
    from motionvl.rl.config import SelectionConfig

    cfg = tiny_config()
    cfg.minutes = 0.4
    cfg.selection = SelectionConfig(minutes=1.0, every=2, episodes=2, seconds=0.5, seed=11)  # stretch: 1/4 of 24 s
    run_dir = tmp_path / "sel"
    result = train_policy(run_dir, PlaceholderReward(), cfg, progress=False, robot=robot)
    record = json.loads((run_dir / "selection.json").read_text())
    candidates = record["candidates"]
    # how many fit in the 6 s stretch depends on the machine's speed (the iteration budget's test
    # below counts them exactly); the run's last policy and its last iterate are candidates too
    budget = cfg.minutes * 60
    final = [c for c in candidates if c.get("final_of_budget_s") == budget]
    assert {c["actor"] for c in final} == {"exported", "last_iterate"}
    assert all(c["iteration"] == result.iterations for c in final)
    grid = [c for c in candidates if c not in final]
    assert all(c["iteration"] % 2 == 0 and budget - 6.0 - 1e-6 <= c["elapsed_s"] <= budget for c in grid)
    best = max(candidates, key=lambda c: (c["success_rate"], c["task_score"], c["iteration"], c["actor"] == "exported"))
    assert record["chosen_iteration"] == best["iteration"] == result.selected_iteration
    assert record["chosen_actor"] == best["actor"] == result.selected_actor
    assert (run_dir / "policy.onnx").read_bytes() == (run_dir / best["onnx"]).read_bytes()
    assert (run_dir / "policy_final.onnx").is_file()
    # the recorded scores are the evaluation's: the same episodes give the same numbers again
    again = evaluate(run_dir / best["onnx"], seconds=0.5, episodes=2, randomize=True, command=cfg.selection.command, seed=11,
                     robot=robot, robot_dt=False)  # validated at the training physics (selection.training_physics)
    assert again["task_score"] == best["task_score"] and again["success_rate"] == best["success_rate"]


def test_selection_chooses_within_the_final_stretch_of_the_budget(tmp_path):
    from motionvl.rl.config import SelectionConfig
    from motionvl.rl.selection import PolicySelection

    sel = PolicySelection(SelectionConfig(minutes=1.0, every=10), tmp_path)
    assert not sel.due(10, elapsed_s=500.0, budget_s=600.0), "before the stretch"
    assert sel.due(550, elapsed_s=550.0, budget_s=600.0) and not sel.due(555, elapsed_s=550.0, budget_s=600.0)
    assert not sel.due(590, elapsed_s=590.0, budget_s=600.0, validation_s=15.0), "no time left to validate"
    sel.candidates = [
        {"iteration": 740, "elapsed_s": 560.0, "success_rate": 0.9, "task_score": 0.9},  # a 10-minute run's stretch
        {"iteration": 1500, "elapsed_s": 1150.0, "success_rate": 0.7, "task_score": 0.8},  # resumed to 20 minutes
        {"iteration": 1510, "elapsed_s": 1160.0, "success_rate": 0.7, "task_score": 0.85},
        {"iteration": 1520, "elapsed_s": 1170.0, "success_rate": 0.6, "task_score": 0.99}]
    assert sel.best(600.0)["iteration"] == 740
    assert sel.best(1200.0)["iteration"] == 1510, "earlier budgets' candidates do not compete; ties go to task score"
    assert sel.best(3600.0) is None
    assert sel.stretch_s(600.0) == 60.0 and sel.stretch_s(120.0) == 30.0, "at most a quarter of a short budget"
    # a resumed run keeps its candidates while the validation episodes stay the same, and only then
    sel._write()
    assert len(PolicySelection(SelectionConfig(minutes=2.0, every=20), tmp_path).candidates) == 4
    with pytest.warns(UserWarning, match="other episodes"):
        other = PolicySelection(SelectionConfig(minutes=1.0, every=10, seed=1), tmp_path)
    assert other.candidates == [] and other.best(600.0) is None


def test_selection_over_an_iteration_budget_counts_iterations_not_seconds(tmp_path):
    from motionvl.rl.config import SelectionConfig
    from motionvl.rl.selection import PolicySelection

    sel = PolicySelection(SelectionConfig(minutes=0.0, iterations=60, every=10), tmp_path)
    assert sel.stretch_iterations(3600) == 60 and sel.stretch_iterations(120) == 30 and sel.stretch_iterations(None) == 0
    due = [i for i in range(0, 3700, 5) if sel.due(i, elapsed_s=1.0, budget_s=1e9, max_iterations=3600)]
    assert due == [3550, 3560, 3570, 3580, 3590, 3600], "the last 60 iterations, whatever the clock says"
    assert not any(sel.due(i, elapsed_s=1.0, budget_s=1e9) for i in range(0, 3700, 10)), "no iteration budget"
    sel.candidates = [{"iteration": i, "elapsed_s": 0.0, "success_rate": 0.9, "task_score": s}
                      for i, s in ((600, 0.99), (3550, 0.5), (3590, 0.8), (3600, 0.7))]
    assert sel.best(1e9, max_iterations=3600)["iteration"] == 3590, "earlier budgets' candidates do not compete"
    assert sel.best(1e9, max_iterations=600)["iteration"] == 600
    assert sel.best(1e9, max_iterations=3000) is None
    for bad in (True, -1, 1.5):
        with pytest.raises(ConfigError, match="iterations"):
            TrainConfig.from_dict({"selection": {"iterations": bad}})


def test_an_iteration_budget_validates_its_last_iterations_and_repeats_exactly(robot, tmp_path):
    from motionvl.rl.config import SelectionConfig

    cfg = tiny_config()
    cfg.save_interval = 50
    cfg.selection = SelectionConfig(minutes=0.0, iterations=4, every=2, episodes=2, seconds=0.5, seed=11,
                                    final_candidates=False)  # the grid alone (the final ones: the test below)
    runs = [train_policy(tmp_path / name, PlaceholderReward(), cfg, max_iterations=12, progress=False, robot=robot)
            for name in ("a", "b")]
    records = [json.loads((r.run_dir / "selection.json").read_text()) for r in runs]
    # the stretch is min(4, a quarter of 12) = 3 iterations: 10 and 12 are on the grid
    assert [c["iteration"] for c in records[0]["candidates"]] == [10, 12]
    best = max(records[0]["candidates"], key=lambda c: (c["success_rate"], c["task_score"], c["iteration"]))
    assert records[0]["chosen_iteration"] == best["iteration"] == runs[0].selected_iteration
    assert (runs[0].run_dir / "policy.onnx").read_bytes() == (runs[0].run_dir / best["onnx"]).read_bytes()
    strip = lambda rec: [{k: v for k, v in c.items() if k != "elapsed_s"} for c in rec["candidates"]]  # noqa: E731
    assert strip(records[1]) == strip(records[0]), "a second run of the same budget validates the same candidates"
    assert records[1]["chosen_iteration"] == records[0]["chosen_iteration"]
    # resumed to a larger budget, the run chooses among the new stretch's candidates only
    more = train_policy(runs[0].run_dir, PlaceholderReward(), None, resume=True, max_iterations=16, progress=False,
                        robot=robot)
    record = json.loads((runs[0].run_dir / "selection.json").read_text())
    assert [c["iteration"] for c in record["candidates"]] == [10, 12, 14, 16]
    assert more.selected_iteration in (14, 16) and record["chosen_iteration"] == more.selected_iteration


def test_selection_at_the_training_physics_validates_there_and_keeps_its_episodes_apart(robot, tmp_path):
    from motionvl.rl.config import SelectionConfig
    from motionvl.rl.selection import PolicySelection

    cfg = tiny_config()
    cfg.save_interval = 50
    cfg.selection = SelectionConfig(minutes=0.0, iterations=2, every=2, episodes=2, seconds=0.5, seed=11,
                                    final_candidates=False, training_physics=True)
    result = train_policy(tmp_path / "run", PlaceholderReward(), cfg, max_iterations=8, progress=False, robot=robot)
    record = json.loads((result.run_dir / "selection.json").read_text())
    (candidate,) = record["candidates"]
    train_dt = cfg.env.sim_dt or robot.sim_dt
    assert train_dt != robot.sim_dt and candidate["sim_dt"] == train_dt
    again = evaluate(result.run_dir / candidate["onnx"], seconds=0.5, episodes=2, randomize=True,
                     command=cfg.selection.command, seed=11, robot=robot, robot_dt=False)
    assert (again["task_score"], again["success_rate"]) == (candidate["task_score"], candidate["success_rate"])
    # scores at one rate do not compete with scores at the other on resume
    robot_rate = SelectionConfig(iterations=2, every=2, episodes=2, seconds=0.5, seed=11, training_physics=False)
    with pytest.warns(UserWarning, match="other episodes"):
        assert PolicySelection(robot_rate, result.run_dir).candidates == []
    assert len(PolicySelection(cfg.selection, result.run_dir).candidates) == 1
    # a record written before the option existed was validated at the robot's rate and stays comparable there
    path = result.run_dir / "selection.json"
    old = json.loads(path.read_text())
    del old["config"]["training_physics"]
    path.write_text(json.dumps(old))
    assert len(PolicySelection(robot_rate, result.run_dir).candidates) == 1
    with pytest.warns(UserWarning, match="other episodes"):
        assert PolicySelection(cfg.selection, result.run_dir).candidates == []


def test_final_candidates_keep_their_validation_time_free_and_compete_in_their_own_budget(tmp_path):
    from motionvl.rl.config import SelectionConfig
    from motionvl.rl.selection import PolicySelection

    plain = PolicySelection(SelectionConfig(minutes=1.0, every=10, final_candidates=False), tmp_path, averaging=True)
    assert plain.final_count() == 0 and plain.reserve_s(20.0) == 0.0
    sel = PolicySelection(SelectionConfig(minutes=1.0, every=10, final_candidates=True), tmp_path, averaging=True)
    assert sel.final_count() == 2 and sel.reserve_s(20.0) == 40.0, "the averaged policy and the last iterate"
    assert sel.reserve_s(20.0, max_iterations=3600) == 0.0, "an iteration budget's validations cost no training"
    single = PolicySelection(SelectionConfig(minutes=1.0, every=10, final_candidates=True), tmp_path)
    assert single.final_count() == 1 and single.reserve_s(20.0) == 20.0
    # a grid validation must leave the final ones their time
    assert plain.due(550, elapsed_s=550.0, budget_s=600.0, validation_s=20.0)
    assert not sel.due(550, elapsed_s=550.0, budget_s=600.0, validation_s=20.0)
    assert sel.due(540, elapsed_s=540.0, budget_s=600.0, validation_s=20.0)
    # before the first validation its length comes from the rollout: 128 episodes of 10 s at 500 Hz
    # (640k physics steps) at 25 us a step (half-speed machine: 1.25 s for 512 envs x 24 x 4) is 16 s
    first = PolicySelection(SelectionConfig(minutes=1.0, every=10, episodes=128, seconds=10.0), tmp_path, averaging=True)
    assert first.expected_validation_s(physics_step_s=1.25 / (512 * 24 * 4), sim_dt=0.002) == pytest.approx(16.28, abs=0.01)
    assert not first.due(560, elapsed_s=560.0, budget_s=600.0, validation_s=16.28), "a first validation leaves room too"
    sel.candidates = [
        {"iteration": 20, "actor": "exported", "elapsed_s": 40.0, "success_rate": 0.9, "task_score": 0.9,
         "final_of_budget_s": 120.0},  # a 2-minute run whose slow start put its end before the stretch
        {"iteration": 700, "actor": "exported", "elapsed_s": 560.0, "success_rate": 0.5, "task_score": 0.9},
        {"iteration": 730, "actor": "exported", "elapsed_s": 580.0, "success_rate": 0.6, "task_score": 0.8,
         "final_of_budget_s": 600.0},
        {"iteration": 730, "actor": "last_iterate", "elapsed_s": 590.0, "success_rate": 0.6, "task_score": 0.8,
         "final_of_budget_s": 600.0}]
    assert sel.best(120.0)["iteration"] == 20, "the final candidate competes in its own budget"
    best = sel.best(600.0)
    assert (best["iteration"], best["actor"]) == (730, "exported"), "a tie goes to the policy the run exports"
    sel.candidates[3]["success_rate"] = 0.7
    assert sel.best(600.0)["actor"] == "last_iterate"
    assert sel.best(1200.0) is None, "nor in a longer one it was resumed to"


def test_final_candidates_validate_the_last_iterate_beside_the_average(robot, tmp_path):
    from motionvl.rl.config import SelectionConfig

    cfg = tiny_config()
    cfg.save_interval = 50
    cfg.selection = SelectionConfig(minutes=0.0, iterations=4, every=2, episodes=2, seconds=0.5, seed=11,
                                    final_candidates=True)
    result = train_policy(tmp_path / "run", PlaceholderReward(), cfg, max_iterations=12, progress=False, robot=robot)
    record = json.loads((result.run_dir / "selection.json").read_text())
    kinds = [(c["iteration"], c["actor"]) for c in record["candidates"]]
    assert kinds == [(10, "exported"), (12, "exported"), (12, "last_iterate")]
    iterate = next(c for c in record["candidates"] if c["actor"] == "last_iterate")
    obs = np.random.default_rng(1).normal(size=(8, load_policy(result.policy_path).num_obs)).astype(np.float32)
    # the iterate candidate is the policy the run ended on before averaging, not the average
    assert np.max(np.abs(load_policy(result.run_dir / iterate["onnx"])(obs)
                         - load_policy(result.last_iterate_path)(obs))) < 1e-6
    assert np.max(np.abs(load_policy(result.run_dir / "selection" / "policy_12.onnx")(obs)
                         - load_policy(result.run_dir / "policy_final.onnx")(obs))) < 1e-6
    best = max(record["candidates"], key=lambda c: (c["success_rate"], c["task_score"], c["iteration"],
                                                    c["actor"] == "exported"))
    assert (record["chosen_iteration"], record["chosen_actor"]) == (best["iteration"], best["actor"])
    assert (result.run_dir / "policy.onnx").read_bytes() == (result.run_dir / best["onnx"]).read_bytes()


def test_a_resumed_session_walks_the_same_rough_ground_with_new_random_draws(robot):
    cfg = tiny_config(terrain="rough")
    first, _ = build_runner(cfg, PlaceholderReward(), robot)
    resumed, _ = build_runner(cfg, PlaceholderReward(), robot, seed_offset=40, iteration=40)
    np.testing.assert_array_equal(first.env.model.hfield_data, resumed.env.model.hfield_data)
    assert first.env.rng.random() != resumed.env.rng.random()
    other_run, _ = build_runner(dataclasses.replace(cfg, seed=cfg.seed + 1), PlaceholderReward(), robot)
    assert not np.array_equal(first.env.model.hfield_data, other_run.env.model.hfield_data)

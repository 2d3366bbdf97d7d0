"""PPO training of a locomotion policy on a reward spec, with rsl_rl's runner and PPO.

Run directory layout (everything a later step needs, nothing else):

    RUN_DIR/config.yaml            the TrainConfig used (env + ppo + run settings)
    RUN_DIR/reward_spec.yaml       the reward spec trained on (its to_dict())
    RUN_DIR/tb/                    TensorBoard event files
    RUN_DIR/checkpoints/model_<it>.pt, latest.pt   rsl_rl checkpoints (+ our counters and the policy average in "infos")
    RUN_DIR/checkpoints/latest_episodes.pt   the episodes in flight at latest.pt (resumed runs continue them)
    RUN_DIR/history.jsonl          one JSON record per PPO iteration
    RUN_DIR/term_stats.json        per-term episode reward mean/min/max/last over training
                                   (the "reward reflection" fed back to the LLM)
    RUN_DIR/reward_failure.json    only when a generated reward term failed in training (deadline, crash,
                                   non-finite or out-of-range value): why; train_policy then raises
                                   RewardValidationError with the same bounded message
    RUN_DIR/policy.onnx            the exported actor with the deployment contract (with
                                   policy_average_iterations: the average of the recent iterates)
    RUN_DIR/policy_last_iterate.onnx   only with averaging on: the last iterate, for comparison
    RUN_DIR/selection/, selection.json  with held-out selection (selection.minutes > 0, or an
                                   iteration budget and selection.iterations > 0): the candidates
                                   validated on held-out episodes and their scores; policy.onnx is
                                   then the best of them and policy_final.onnx the policy the run ended on

`train_policy(...)` runs until the time budget (summed over resumed sessions) or the iteration
limit is reached, the `on_iteration` callback returns False or SIGINT arrives; it then saves,
exports and returns a `TrainResult`. A killed run resumes from checkpoints/latest.pt
(`resume=True`) and loses at most `save_interval` iterations; with latest_episodes.pt it continues the
environments' episodes and random streams, so a run stopped and resumed at a checkpoint trains as the
same run trained in one go would (the same history, on the same thread count). A new run may instead
start from another run's checkpoint with another reward spec (`warm_start`, motionvl.rl.warm_start).

A history record (one line of history.jsonl, and the argument of `on_iteration`) holds:
iteration, total_steps, elapsed_s, steps_per_s, collect_s, learn_s, episodes (finished in the
iteration), mean_step_reward, mean_return, mean_episode_length (steps), mean_episode_length_s,
fall_fraction, terms {term: mean episode reward per episode second}, losses {value, surrogate,
entropy, symmetry with the mirror options, estimator with the velocity estimator}, learning_rate,
action_std, command_level (curriculum)
command_tracking_error (the env's last windowed |command_xy - v_xy|, None before the first
window; without the steps just after a push with EnvConfig.commands.curriculum_push_settle_s),
push_velocity (the iteration's push strength, RandomizationConfig.push_velocity_at), with latency
randomisation latency_max (the top of the iteration's latency draw in robot PD steps,
RandomizationConfig.latency_max_at),
desired_kl (the adaptive schedule's target of the iteration, PPOConfig.desired_kl_at), gait_period_s
(the phase clock's period, EnvConfig.gait_period_at) and, with terrain 'mixed', rough_fraction (the
share of resets on rough ground, EnvConfig.rough_fraction_at).
Values are None when no episode finished.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch
import yaml

from motionvl.envs.locomotion import LocomotionEnv
from motionvl.policy_io import PolicyContract
from motionvl.rewards.sandbox.errors import RewardCodeError
from motionvl.rewards.validation import RewardValidationError
from motionvl.rl.averaging import PolicyAverage
from motionvl.rl.config import TrainConfig
from motionvl.rl.export import export_policy
from motionvl.rl.mirror_loss import LeanMirrorLoss
from motionvl.rl.selection import PolicySelection
from motionvl.rl.vecenv import LocomotionVecEnv
from motionvl.rl.warm_start import WarmStart
from motionvl.robot import ConfigError, RobotConfig, load_robot_config

if TYPE_CHECKING:  # rsl_rl is imported where a runner is built
    from motionvl.rl.estimator import EstimatorTraining

IterationCallback = Callable[[dict], "bool | None"]


@dataclasses.dataclass
class TrainResult:
    run_dir: Path
    """The run directory."""
    policy_path: Path
    """The exported ONNX policy."""
    iterations: int
    """PPO iterations completed in total (over all sessions)."""
    total_steps: int
    """Policy steps (env transitions) collected in total."""
    elapsed_s: float
    """Training wall time in total."""
    steps_per_s: float
    """Policy steps per second of this session (rollout + update; the selection's validation left out)."""
    stop_reason: str
    """'time budget', 'max iterations', 'callback' or 'interrupted'."""
    term_stats: dict
    """Contents of term_stats.json."""
    last_iterate_path: Path | None = None
    """policy_last_iterate.onnx when the run exports an averaged policy (policy_average_iterations), else None."""
    selected: dict | None = None
    """With selection on: the validated candidate exported as policy.onnx (iteration, scores), else None."""

    @property
    def selected_iteration(self) -> int | None:
        """The iteration policy.onnx comes from when held-out selection chose it, else None."""
        return self.selected["iteration"] if self.selected else None

    @property
    def selected_actor(self) -> str | None:
        """Which policy of that iteration policy.onnx is: 'exported' (the moving average when averaging
        is on) or 'last_iterate' (the iterate itself, a final candidate); None without a choice."""
        return self.selected.get("actor", "exported") if self.selected else None


# ---------------------------------------------------------------------- building blocks
def build_runner(train_cfg: TrainConfig, reward_fn, robot: RobotConfig | None = None, device: str | None = None,
                 seed_offset: int = 0, iteration: int = 0):
    """(LocomotionVecEnv, rsl_rl OnPolicyRunner) for `train_cfg`; the runner does not log or save by itself.
    iteration: the run's iteration training starts at (a resumed run's), for the env's schedules."""
    from rsl_rl.runners import OnPolicyRunner

    robot = robot or load_robot_config()
    _validate_reward(reward_fn, robot, train_cfg.env)
    reward_fn = agree_on_standing(reward_fn, train_cfg.env)
    device = device or train_cfg.resolved_device()
    if train_cfg.torch_threads:
        torch.set_num_threads(int(train_cfg.torch_threads))
    seed = train_cfg.seed + seed_offset
    torch.manual_seed(seed)
    terrain_seed = train_cfg.seed if train_cfg.env.terrain_seed is None else train_cfg.env.terrain_seed
    env_cfg = dataclasses.replace(train_cfg.env, seed=seed, terrain_seed=terrain_seed)
    env = LocomotionEnv(robot, env_cfg, reward_fn=reward_fn, iteration=iteration)
    vec = LocomotionVecEnv(env, device=device)
    if train_cfg.ppo.init_at_random_ep_len:
        rng = np.random.default_rng(seed)
        env.episode_length[:] = rng.integers(0, env.max_episode_length, env.num_envs)
    with _quiet():
        runner = OnPolicyRunner(vec, train_cfg.to_rsl_rl(), log_dir=None, device=device)
    if runner.alg.symmetry is not None and runner.alg.symmetry.use_mirror_loss:
        # same loss and gradient, less work (on a share of each mini-batch with ppo.mirror_loss_fraction < 1)
        runner.alg.symmetry = LeanMirrorLoss.replacing(runner.alg.symmetry, fraction=train_cfg.ppo.mirror_loss_fraction)
    return vec, runner


def _validate_reward(reward_fn, robot: RobotConfig, env_cfg) -> None:
    """A reward spec passes the one validation (motionvl.rewards.validate_spec) before anything trains on it, its
    generated code checked at this env's batch size; a plain callable is the caller's own code. The check of a
    piece of generated code runs once per process and batch size."""
    from motionvl.rewards import validate_spec
    from motionvl.rewards.spec import RewardSpec

    if isinstance(reward_fn, RewardSpec):
        validate_spec(reward_fn, robot, env_cfg=env_cfg)


def _close_reward(reward_fn) -> None:
    """Stop the worker process of a spec's generated terms (a later call would start a new one)."""
    if hasattr(reward_fn, "close"):
        reward_fn.close()


def agree_on_standing(reward_fn, env_cfg):
    """The reward to train with the stepping feedforward: its gait terms stand when the fold rests.

    With env.gait_feedforward on, the fold rests while every command component is at or below
    env.gait_stand_below. Gait terms whose spec sets no stand_below take that threshold; one that sets a
    different one would pay for both feet down while the fold steps (or the reverse): ConfigError. Any two
    negative thresholds agree (neither ever stands). Without the feedforward the reward is returned as is."""
    if not env_cfg.gait_feedforward or not hasattr(reward_fn, "standing_below"):
        return reward_fn
    env_value = float(env_cfg.gait_stand_below)
    resolved = reward_fn.standing_below(env_value)
    disagree = {name: value for name, value in resolved.standing_thresholds().items()
                if not (value == env_value or (value < 0 and env_value < 0))}
    if disagree:
        listed = ", ".join(f"{name} {value:g}" for name, value in disagree.items())
        raise ConfigError(f"the reward's gait terms and the stepping feedforward disagree on when the robot "
                          f"stands: env.gait_stand_below is {env_value:g} but the reward spec sets stand_below "
                          f"{listed}. Remove those params (the terms then follow env.gait_stand_below), set them "
                          f"to {env_value:g}, or set env.gait_stand_below to theirs")
    return resolved


def update_thread_count(train_cfg: TrainConfig) -> int | None:
    """torch threads for the PPO update: the config's, capped at the cores this process may use."""
    from motionvl.sim.backend import default_num_threads

    if train_cfg.update_torch_threads is None:
        return None
    return min(int(train_cfg.update_torch_threads), default_num_threads())


def run_iteration(runner, vec: LocomotionVecEnv, update_threads: int | None = None,
                  estimator: EstimatorTraining | None = None) -> dict:
    """One PPO iteration with rsl_rl's algorithm: rollout of num_steps_per_env steps, returns, update.
    update_threads: torch threads during the update only (the physics threads idle then).
    estimator: with the velocity estimator on, fits it on the same rollout after PPO's update."""
    from rsl_rl.utils import check_nan

    alg, steps = runner.alg, runner.cfg["num_steps_per_env"]
    alg.train_mode()
    t0 = time.perf_counter()
    obs = vec.get_observations().to(runner.device)
    with torch.inference_mode():
        for _ in range(steps):
            actions = alg.act(obs)
            obs, rewards, dones, extras = vec.step(actions.to(vec.device))
            check_nan(obs, rewards, dones)
            obs, rewards, dones = obs.to(runner.device), rewards.to(runner.device), dones.to(runner.device)
            alg.process_env_step(obs, rewards, dones, extras)
        alg.compute_returns(obs)
    t1 = time.perf_counter()
    rollout_threads = torch.get_num_threads()
    if update_threads:
        torch.set_num_threads(update_threads)
    try:
        losses = alg.update()  # clears only the storage's write cursor: the rollout is still there
        if estimator is not None:
            losses["estimator"] = estimator.update(alg.storage)
    finally:
        torch.set_num_threads(rollout_threads)
    t2 = time.perf_counter()
    runner.current_learning_iteration += 1
    return {"collect_s": t1 - t0, "learn_s": t2 - t1, "steps": steps * vec.num_envs, "losses": losses,
            "learning_rate": float(alg.learning_rate), "action_std": float(alg.get_policy().output_std.detach().mean()),
            **vec.pop_stats()}


def term_stats(records: list[dict], series_points: int = 10) -> dict:
    """Per-term episode reward statistics over training from history records (Eureka's reward reflection).

    For every reward term: mean, min, max and last of the per-iteration mean episode reward
    (per second of episode), and a short series sampled over training; the same for the mean
    episode length (s) and return.
    """
    def summary(points: list[tuple[int, float]]) -> dict:
        if not points:
            return {}
        values = np.array([v for _, v in points])
        idx = np.unique(np.linspace(0, len(points) - 1, min(series_points, len(points))).round().astype(int))
        return {"mean": float(values.mean()), "min": float(values.min()), "max": float(values.max()),
                "last": float(values[-1]), "series": [[int(points[i][0]), round(float(points[i][1]), 6)] for i in idx]}

    terms: dict[str, list] = {}
    for r in records:
        for k, v in (r.get("terms") or {}).items():
            terms.setdefault(k, []).append((r["iteration"], v))
    pick = lambda key: [(r["iteration"], r[key]) for r in records if r.get(key) is not None]  # noqa: E731
    last = records[-1] if records else {}
    return {
        "iterations": int(last.get("iteration", 0)),
        "total_steps": int(last.get("total_steps", 0)),
        "terms": {k: summary(v) for k, v in terms.items()},
        "episode_length_s": summary(pick("mean_episode_length_s")),
        "episode_return": summary(pick("mean_return")),
        "fall_fraction": summary(pick("fall_fraction")),
    }


# ---------------------------------------------------------------------- the run
def train_policy(run_dir: str | Path, reward_spec=None, train_cfg: TrainConfig | str | Path | None = None,
                 minutes: float | None = None, resume: bool = False, progress: bool = True,
                 on_iteration: IterationCallback | None = None, robot: RobotConfig | None = None,
                 max_iterations: int | None = None, warm_start: str | Path | None = None) -> TrainResult:
    """Train (or resume) a policy in `run_dir` and export it to run_dir/policy.onnx.

    reward_spec: a RewardSpec (callable state -> (total, terms), with to_dict()), a path to a spec
        file, or None (on resume: the run's reward_spec.yaml; else the reference spec).
    train_cfg: a TrainConfig, a YAML path, or None (on resume: the run's config.yaml; else
        config/training.yaml).
    minutes: overrides train_cfg.minutes, the budget of the whole run over all sessions.
    on_iteration: called with each iteration's history record; returning False stops training.
    max_iterations: overrides train_cfg.max_iterations (total iterations of the run).
    warm_start: overrides train_cfg.warm_start: start a new run from another run's checkpoint
        (a run directory or a checkpoint file; motionvl.rl.warm_start says what carries over).
    """
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / "checkpoints"
    latest = ckpt_dir / "latest.pt"
    if resume and not latest.exists():
        raise FileNotFoundError(f"cannot resume: no checkpoint at {latest}")
    if not resume and latest.exists():
        raise FileExistsError(f"{run_dir} already holds a run; pass resume=True (--resume) or use a new directory")
    cfg = _resolve_config(train_cfg, run_dir, resume)
    if minutes is not None:
        cfg.minutes = float(minutes)
    if max_iterations is not None:
        cfg.max_iterations = int(max_iterations) if isinstance(max_iterations, np.integer) else max_iterations
    if warm_start is not None:
        if resume:
            raise ConfigError(f"cannot warm-start {run_dir} while resuming it: a resumed run continues from its own "
                              f"checkpoint. Warm-start a new run directory")
        cfg.warm_start = str(warm_start)
    cfg.validate("train_policy budget")  # the arguments are checked like the config's own keys
    # a resumed run began from its parent already: config.yaml keeps the path as the run's record
    parent = None if resume or cfg.warm_start is None else WarmStart.load(cfg.warm_start, cfg.to_dict(), run_dir)
    if parent is not None:  # config.yaml names the very file the run started from
        cfg.warm_start = str(parent.checkpoint.resolve())
    resolved = _resolve_reward(reward_spec, run_dir, resume)
    robot = robot or load_robot_config()
    _validate_reward(resolved, robot, cfg.env)  # before the run directory is written
    # the run's reward_spec.yaml records the thresholds the gait terms train with
    spec = agree_on_standing(resolved, cfg.env)
    if resume and reward_spec is not None:
        _refuse_another_reward(spec, run_dir)

    ckpt_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    if not resume or reward_spec is not None:
        if hasattr(spec, "save"):
            spec.save(run_dir / "reward_spec.yaml")
        else:
            spec_dict = spec.to_dict() if hasattr(spec, "to_dict") else {"reward": repr(spec)}
            (run_dir / "reward_spec.yaml").write_text(yaml.safe_dump(spec_dict, sort_keys=False))

    infos: dict = {}
    start_it = 0
    if resume:
        infos = torch.load(latest, weights_only=False, map_location="cpu").get("infos") or {}
        start_it = int(infos.get("iteration", 0))
    # the schedules run on the parent's iterations plus this run's
    schedule_offset = parent.iteration if parent is not None else int(infos.get("schedule_offset", 0))
    vec, runner = build_runner(cfg, spec, robot, seed_offset=start_it, iteration=schedule_offset + start_it)
    from motionvl.rl.estimator import estimator_training

    estimator = estimator_training(runner, vec, cfg.ppo)
    if parent is not None:
        parent.apply(runner, estimator, vec.env)
    average = (PolicyAverage(runner.alg.get_policy(), cfg.policy_average_iterations, cfg.policy_average_growth)
               if cfg.policy_average_iterations else None)
    if resume:
        try:
            runner.load(str(latest), map_location=runner.device)
        except RuntimeError as exc:
            if "state_dict" not in str(exc):  # not a shape/key mismatch (e.g. a damaged file): torch's own words
                raise
            raise RuntimeError(f"cannot resume {run_dir}: its checkpoint does not fit the networks this version builds "
                               f"({vec.num_obs} actor / {vec.num_obs + vec.num_privileged_obs} critic inputs, "
                               f"config {run_dir / 'config.yaml'}); it was written by another MotionVL version or "
                               f"config. Start a new run directory. Torch said: {str(exc).splitlines()[0]}") from exc
        runner.current_learning_iteration = start_it
        if estimator is not None and "estimator_training" in infos:
            estimator.load_state_dict(infos["estimator_training"])
        if average is not None and "policy_average" in infos:
            average.load_state_dict(infos["policy_average"])
        if cfg.env.commands.curriculum:
            vec.env.command_level = float(infos.get("command_level", 0.0))
        cell_error = np.asarray(infos.get("command_cell_error", []), dtype=float)
        if cell_error.shape == vec.env.command_cell_error.shape:  # another grid starts over
            vec.env.command_cell_error[:] = cell_error
        _resume_episodes(ckpt_dir / EPISODES_FILE, start_it, vec)
    history = _load_history(run_dir / "history.jsonl", start_it)
    total_steps = int(infos.get("total_steps", 0))
    elapsed0 = float(infos.get("elapsed_s", 0.0))

    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir / "tb"), purge_step=start_it + 1 if resume else None, flush_secs=10)
    budget_s = cfg.minutes * 60.0
    bar = _progress_bar(progress, cfg, elapsed0, start_it)
    session_t0 = time.perf_counter()
    session_steps, it, last_iter_s, stop_reason = 0, start_it, 0.0, "time budget"
    failure = None  # a RewardValidationError when a generated term fails during training

    def save() -> None:
        state = {"iteration": it, "total_steps": total_steps, "elapsed_s": elapsed0 + time.perf_counter() - session_t0,
                 "command_level": vec.env.command_level, "command_cell_error": vec.env.command_cell_error.tolist(),
                 "train_config": cfg.to_dict(), "schedule_offset": schedule_offset,
                 **({"policy_average": average.state_dict()} if average is not None else {}),
                 **({"estimator_training": estimator.state_dict()} if estimator is not None else {})}
        # the episodes first: a crash between the two files leaves episodes newer than latest.pt, which a resume
        # recognises by their iteration and does not use
        _save_episodes(ckpt_dir / EPISODES_FILE, it, vec)
        tmp = ckpt_dir / "latest.pt.tmp"
        runner.save(str(tmp), infos=state)
        os.replace(tmp, latest)
        _copy(latest, ckpt_dir / f"model_{it}.pt")
        _write_json(run_dir / "term_stats.json", term_stats(history))

    def metadata() -> PolicyContract:  # the contract of the iterate just trained, with the gait period it was trained at
        return PolicyContract.for_training(robot, cfg.env, gait_period=vec.env.gait_period)

    selection = (PolicySelection(cfg.selection, run_dir, robot, averaging=average is not None)
                 if cfg.selection.enabled_for(cfg.max_iterations) else None)
    last_validation_s = validation_s = validation_guess_s = 0.0

    def exported_actor():
        actor = runner.alg.get_policy()
        return average.averaged_actor(actor) if average is not None else actor

    update_threads = update_thread_count(cfg)
    with (run_dir / "history.jsonl").open("a") as hist_file:
        while True:
            elapsed = elapsed0 + time.perf_counter() - session_t0
            if cfg.max_iterations is not None and it >= cfg.max_iterations:
                stop_reason = "max iterations"
                break
            # only once the stretch holds a candidate (maybe from before a resume): without one there are no final ones
            reserve_s = 0.0 if selection is None else selection.reserve_s(
                last_validation_s or (validation_guess_s if selection.best(budget_s) is not None else 0.0),
                cfg.max_iterations)
            if elapsed + last_iter_s + reserve_s > budget_s:
                break
            schedule_it = schedule_offset + it
            vec.env.push_velocity = cfg.env.randomization.push_velocity_at(schedule_it)
            vec.env.latency_max = cfg.env.randomization.latency_max_at(schedule_it)
            runner.alg.desired_kl = cfg.ppo.desired_kl_at(schedule_it)
            vec.env.rough_fraction = cfg.env.rough_fraction_at(schedule_it)
            vec.env.gait_period = cfg.env.gait_period_at(schedule_it)
            try:
                info = run_iteration(runner, vec, update_threads, estimator)
            except KeyboardInterrupt:  # Ctrl-C / SIGINT: keep what was learnt, save and export
                stop_reason = "interrupted"
                break
            except RewardCodeError as exc:  # a generated term failed in its worker: the candidate fails, the run
                failure = RewardValidationError(  # directory keeps its last checkpoint (resumable)
                    exc.problems, f"reward spec '{getattr(spec, 'name', '')}'", f"failed in training at iteration {it + 1}")
                break
            it += 1
            if average is not None:
                average.update(runner.alg.get_policy())
            total_steps += info["steps"]
            session_steps += info["steps"]
            last_iter_s = info["collect_s"] + info["learn_s"]
            if selection is not None:  # timed once validated; until then, from this rollout's cost per physics step
                validation_guess_s = last_validation_s or selection.expected_validation_s(
                    info["collect_s"] / (info["steps"] * vec.env.decimation),
                    vec.env.sim_dt if cfg.selection.training_physics else robot.sim_dt)
            record = _record(it, total_steps, elapsed0 + time.perf_counter() - session_t0, info, vec.env.dt)
            record["command_level"] = vec.env.command_level
            record["command_tracking_error"] = vec.env.window_tracking_error
            if cfg.env.commands.adaptive_fraction > 0:  # per cell of the adaptive grid, C order (vx, vy, yaw_rate)
                record["command_cell_error"] = [None if not np.isfinite(e) else round(float(e), 4)
                                                for e in vec.env.command_cell_error]
            record["push_velocity"] = vec.env.push_velocity
            if cfg.env.randomization.latency:
                record["latency_max"] = vec.env.latency_max
            record["desired_kl"] = runner.alg.desired_kl
            if cfg.env.terrain == "mixed":
                record["rough_fraction"] = vec.env.rough_fraction
            record["gait_period_s"] = vec.env.gait_period
            history.append(record)
            hist_file.write(json.dumps(record) + "\n")
            hist_file.flush()
            _log_tensorboard(writer, record, info)
            _update_bar(bar, record, cfg, last_iter_s)
            if it % cfg.save_interval == 0:
                save()
            now = elapsed0 + time.perf_counter() - session_t0
            if selection is not None and selection.due(it, now, budget_s, validation_guess_s, cfg.max_iterations):
                if bar is not None:  # the bar stands still for the validation's seconds: say why
                    bar.set_postfix_str(f"it={it} validating the policy on {cfg.selection.episodes} held-out episodes")
                t0 = time.perf_counter()
                selection.validate(exported_actor(), metadata(), it, now)
                last_validation_s = time.perf_counter() - t0
                validation_s += last_validation_s
            if on_iteration is not None and on_iteration(record) is False:
                stop_reason = "callback"
                break
    if failure is not None:
        if bar is not None:
            bar.close()
        writer.close()
        _close_reward(spec)
        _write_json(run_dir / FAILURE_FILE, {"iteration": it + 1, "message": str(failure), "problems": failure.problems})
        raise failure
    ended_on_iterations = cfg.max_iterations if stop_reason == "max iterations" else None
    # the final candidates join the stretch's pool, never start one: a budget too short for the grid stays as it was
    if (selection is not None and selection.final_count() and it > start_it
            and stop_reason in ("time budget", "max iterations")
            and selection.best(budget_s, ended_on_iterations) is not None):
        if bar is not None:
            bar.set_postfix_str(f"it={it} validating the final policy on {cfg.selection.episodes} held-out episodes")
        t0 = time.perf_counter()
        selection.validate_final(exported_actor(), runner.alg.get_policy(), metadata(), it,
                                 elapsed0 + time.perf_counter() - session_t0, budget_s)
        validation_s += time.perf_counter() - t0
    session_s = time.perf_counter() - session_t0
    if bar is not None:
        bar.close()
    writer.close()
    _close_reward(spec)
    save()
    last_iterate_path = None
    if average is not None:
        last_iterate_path = export_policy(runner.alg.get_policy(), run_dir / "policy_last_iterate.onnx", metadata())
    policy_path = export_policy(exported_actor(), run_dir / "policy.onnx", metadata())
    selected = selection.install(policy_path, budget_s, ended_on_iterations) if selection is not None else None
    return TrainResult(run_dir=run_dir, policy_path=policy_path, iterations=it, total_steps=total_steps,
                       elapsed_s=elapsed0 + session_s, steps_per_s=session_steps / max(session_s - validation_s, 1e-9),
                       stop_reason=stop_reason, term_stats=term_stats(history), last_iterate_path=last_iterate_path,
                       selected=selected)


# ---------------------------------------------------------------------- helpers
FAILURE_FILE = "reward_failure.json"
"""In the run directory when a generated reward term failed during training: the iteration, the bounded message
and its problems (what the policy_trainer node reports as `failed`)."""
EPISODES_FILE = "latest_episodes.pt"
"""In checkpoints/: the episodes in flight at latest.pt (physics, per-env buffers, random generators),
so that a resumed run continues them rather than restarting every environment at once."""


def _save_episodes(path: Path, iteration: int, vec: LocomotionVecEnv) -> None:
    saved = {"iteration": iteration, "episodes": vec.episode_state(), "torch_rng": torch.get_rng_state()}
    if torch.cuda.is_available():
        saved["cuda_rng"] = torch.cuda.get_rng_state_all()
    tmp = path.with_name(path.name + ".tmp")
    torch.save(saved, tmp)
    os.replace(tmp, path)


def _resume_episodes(path: Path, iteration: int, vec: LocomotionVecEnv) -> bool:
    """Continue the episodes saved with latest.pt (and the random streams): the resumed run then repeats the
    one it resumes, iteration for iteration. Without a usable file (a run written before they were saved, one
    resumed with another env size, a damaged file) every environment starts a new episode, with a warning."""
    reason = _load_episodes(path, iteration, vec)
    if reason is None:
        return True
    import warnings

    warnings.warn(f"resuming at iteration {iteration} with every environment in a new episode: {reason}", stacklevel=3)
    return False


def _load_episodes(path: Path, iteration: int, vec: LocomotionVecEnv) -> str | None:
    """None once the saved episodes and random streams are back in place; else why they are not used."""
    if not path.exists():
        return f"{path.name} is missing (a run written by an earlier MotionVL version)"
    try:
        saved = torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - a damaged file must not block resuming the model itself
        return f"{path.name} cannot be read ({type(exc).__name__}: {exc})"
    if saved.get("iteration") != iteration:
        return f"{path.name} is from iteration {saved.get('iteration')}, the checkpoint from {iteration}"
    try:
        vec.load_episode_state(saved["episodes"])
    except ValueError as exc:
        return f"its episodes do not fit this env ({exc})"
    torch.set_rng_state(saved["torch_rng"])
    if "cuda_rng" in saved and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda_rng"])
    return None


ENV_KEYS_ADDED_LATER = {"critic_sees_randomization": False, "heading_observation": False}
"""EnvConfig keys whose default changed after runs were written: a resumed run whose config copy
lacks one gets the value it was trained with (its checkpoints have those network shapes)."""


def _resolve_config(train_cfg, run_dir: Path, resume: bool) -> TrainConfig:
    if isinstance(train_cfg, TrainConfig):
        return dataclasses.replace(train_cfg)
    if train_cfg is not None:
        return TrainConfig.from_yaml(train_cfg)
    if resume and (run_dir / "config.yaml").exists():
        cfg = TrainConfig.from_yaml(run_dir / "config.yaml")
        # keys a run's config copy predates keep the behaviour the run was trained with, not today's default
        written = (yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("env") or {}
        for key, before in ENV_KEYS_ADDED_LATER.items():
            if key not in written:
                setattr(cfg.env, key, before)
        return cfg
    return TrainConfig.from_yaml()


def _resolve_reward(reward_spec, run_dir: Path, resume: bool):
    if reward_spec is not None and not isinstance(reward_spec, (str, Path)):
        return reward_spec
    from motionvl.rewards.spec import load_reward_spec

    if reward_spec is None and resume and (run_dir / "reward_spec.yaml").exists():
        reward_spec = run_dir / "reward_spec.yaml"
    return load_reward_spec(reward_spec)


def _refuse_another_reward(spec, run_dir: Path) -> None:
    """A resumed run keeps the reward it was trained on: its history, term statistics and checkpoints belong to
    that reward, so another spec is a new run (a synthesizer reusing a candidate id, a wrong --reward)."""
    from motionvl.rewards.spec import RewardSpec, load_reward_spec

    saved_path = run_dir / "reward_spec.yaml"
    if not isinstance(spec, RewardSpec) or not saved_path.exists():
        return
    try:
        saved = load_reward_spec(saved_path)
    except ConfigError:  # not a RewardSpec file (a run on a custom reward callable): nothing to compare
        return
    if saved != spec:
        raise ConfigError(f"cannot resume {run_dir} with another reward spec: it was trained on {saved_path} "
                          f"('{saved.name}'), the one given differs ('{spec.name}'). Resume without a reward spec, "
                          f"or train the new spec in a new run directory")


def _load_history(path: Path, upto: int) -> list[dict]:
    """History records of iterations <= upto; the file is rewritten without later (lost) iterations."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records = [r for r in records if r["iteration"] <= upto]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def _record(it: int, total_steps: int, elapsed: float, info: dict, dt: float) -> dict:
    length = info["mean_episode_length"]
    return {
        "iteration": it, "total_steps": total_steps, "elapsed_s": round(elapsed, 3),
        "steps_per_s": round(info["steps"] / (info["collect_s"] + info["learn_s"]), 1),
        "collect_s": round(info["collect_s"], 4), "learn_s": round(info["learn_s"], 4),
        "episodes": info["episodes"], "mean_step_reward": info["mean_step_reward"], "mean_return": info["mean_return"],
        "mean_episode_length": length, "mean_episode_length_s": None if length is None else length * dt,
        "fall_fraction": info["fall_fraction"], "terms": info["terms"], "losses": info["losses"],
        "learning_rate": info["learning_rate"], "action_std": info["action_std"],
    }


def _log_tensorboard(writer, r: dict, info: dict) -> None:
    it = r["iteration"]
    scalars = {"Train/mean_reward": r["mean_return"], "Train/mean_episode_length": r["mean_episode_length"],
               "Train/mean_step_reward": r["mean_step_reward"], "Train/fall_fraction": r["fall_fraction"],
               "Perf/steps_per_s": r["steps_per_s"], "Perf/collection_time": r["collect_s"],
               "Perf/learning_time": r["learn_s"], "Loss/learning_rate": r["learning_rate"],
               "Policy/mean_std": r["action_std"], "Train/command_level": r.get("command_level"),
               "Train/command_tracking_error": r.get("command_tracking_error"), "Train/push_velocity": r.get("push_velocity"),
               "Train/latency_max": r.get("latency_max"),
               "Train/desired_kl": r.get("desired_kl"),
               "Train/rough_fraction": r.get("rough_fraction"), "Train/gait_period_s": r.get("gait_period_s")}
    scalars.update({f"Loss/{k}": v for k, v in r["losses"].items()})
    scalars.update({f"Episode_Reward/{k}": v for k, v in r["terms"].items()})
    for key, value in scalars.items():
        if value is not None and math.isfinite(value):
            writer.add_scalar(key, value, it)


def _progress_bar(progress: bool, cfg: TrainConfig, elapsed0: float, start_it: int):
    if not progress:
        return None
    from tqdm import tqdm

    if cfg.max_iterations is not None:
        return tqdm(total=cfg.max_iterations, initial=start_it, unit="it", dynamic_ncols=True, desc="train")
    return tqdm(total=round(cfg.minutes * 60), initial=round(elapsed0), unit="s", dynamic_ncols=True, desc="train",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total}s [{elapsed}<{remaining}{postfix}]")


def _update_bar(bar, r: dict, cfg: TrainConfig, last_iter_s: float) -> None:
    if bar is None:
        return
    bar.update(1 if cfg.max_iterations is not None else max(0, round(r["elapsed_s"]) - bar.n))
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    bar.set_postfix_str(f"it={r['iteration']} steps/s={r['steps_per_s']:.0f} rew={fmt(r['mean_return'], '.2f')} "
                        f"len={fmt(r['mean_episode_length'], '.0f')} cmd_level={r.get('command_level', 1.0):.1f}",
                        refresh=False)


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.write_bytes(src.read_bytes())
    os.replace(tmp, dst)


class _quiet:
    """Silence rsl_rl's construction prints (model summaries, resolved observation sets)."""

    def __enter__(self):
        import contextlib
        import io
        import warnings

        self._stack = contextlib.ExitStack()
        self._stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        self._stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)

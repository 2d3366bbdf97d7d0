"""PPO training of a locomotion policy on a reward spec, with rsl_rl's runner and PPO.

The run directory's files are motionvl.rl.run_dir's.

`train_policy(...)` runs until the time budget (summed over resumed sessions) or the iteration
limit is reached, the `on_iteration` callback returns False or SIGINT arrives; it then saves,
exports and returns a `TrainResult`. A killed run resumes from checkpoints/latest.pt
(`resume=True`) and loses at most `save_interval` iterations; it continues the environments' episodes and
random streams saved with that checkpoint, so a run killed at any moment and resumed trains as the same
run trained in one go would (the same history, on the same thread counts: `adapt_update_threads` false). A new run may instead
start from another run's checkpoint with another reward spec (`warm_start`, motionvl.rl.warm_start).

A history record (one line of history.jsonl, and the argument of `on_iteration`) holds:
iteration, total_steps, elapsed_s, steps_per_s, collect_s, learn_s, episodes (finished in the
iteration), mean_step_reward, mean_return, mean_episode_length (steps), mean_episode_length_s,
fall_fraction, terms {term: mean episode reward per episode second}, losses {value, surrogate,
entropy, symmetry with the mirror options, estimator with the velocity estimator}, learning_rate,
action_std, command_level (curriculum),
command_tracking_error (the env's last windowed |command_xy - v_xy|, None before the first window),
gait_period_s (the phase clock's period) and, with terrain 'mixed', rough_fraction (the share of resets
on rough ground): the settings EnvConfig.SCHEDULES move by iteration; on a terrain with levels,
terrain_level (the mean level over the envs: the curriculum's progress, or the fixed level).
Values are None when no episode finished.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from motionvl.envs.locomotion import LocomotionEnv
from motionvl.policy_io import PolicyContract
from motionvl.rewards.messages import quote
from motionvl.rewards.sandbox.errors import RewardCodeError
from motionvl.rewards.validation import RewardValidationError
from motionvl.rl.averaging import PolicyAverage
from motionvl.rl.config import TrainConfig
from motionvl.rl.export import export_policy
from motionvl.rl.mirror_loss import LeanMirrorLoss
from motionvl.rl.threads import UpdateThreads
from motionvl.rl.run_dir import (CHECKPOINTS, LATEST, checkpoint_infos, load_history, resume_episodes, save_checkpoint,
                                 write_atomic, write_json, write_yaml)
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
    warm_start_iteration: int = 0
    """The parent's iterations a warm-started run continued its schedules from; 0 for a run from scratch."""

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
    reward_fn = bound_reward_cost(agree_on_standing(reward_fn, train_cfg.env), train_cfg)
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
        runner.alg.symmetry = LeanMirrorLoss.replacing(runner.alg.symmetry)  # same loss and gradient, less work
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


def bound_reward_cost(reward_fn, train_cfg: TrainConfig):
    """The reward with its generated terms' CPU time per step bounded at train_cfg.reward_cost_limit times the
    reference reward's (RewardSpec.with_cost_limit: the same object when already so, or without generated code);
    a plain callable as it is."""
    if not hasattr(reward_fn, "with_cost_limit"):
        return reward_fn
    return reward_fn.with_cost_limit(train_cfg.reward_cost_limit)


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
    """The most torch threads the PPO update may use: the config's, capped at the cores this process may use."""
    from motionvl.sim.backend import default_num_threads

    if train_cfg.update_torch_threads is None:
        return None
    return min(int(train_cfg.update_torch_threads), default_num_threads())


def update_threads_for(train_cfg: TrainConfig) -> UpdateThreads | None:
    """The update's thread chooser (None: the update keeps the rollout's torch threads)."""
    most = update_thread_count(train_cfg)
    return None if most is None else UpdateThreads(most, adapt=train_cfg.adapt_update_threads)


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
    episode length (s) and return, and on a terrain with levels for the mean terrain level.
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
        **({"terrain_level": summary(pick("terrain_level"))} if any("terrain_level" in r for r in records) else {}),
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
    _check_run_dir(run_dir, resume)
    cfg = _run_config(train_cfg, run_dir, resume, minutes, max_iterations, warm_start)
    # a resumed run began from its parent already: config.yaml keeps the path as the run's record
    parent = None if resume or cfg.warm_start is None else WarmStart.load(cfg.warm_start, cfg.to_dict(), run_dir)
    if parent is not None:  # config.yaml names the very file the run started from
        cfg.warm_start = str(parent.checkpoint.resolve())
    robot = robot or load_robot_config()
    spec = _run_reward(reward_spec, run_dir, resume, cfg, robot)
    _write_run_files(run_dir, cfg, spec, with_spec=not resume or reward_spec is not None)
    session = _Session.start(run_dir, cfg, spec, robot, resume=resume, parent=parent, progress=progress)
    return session.finish(session.train(on_iteration))


FAILURE_FILE = "reward_failure.json"
"""In the run directory when a generated reward term failed during training: the iteration, the bounded message
and its problems (what the policy_trainer node reports as `failed`)."""


def _check_run_dir(run_dir: Path, resume: bool) -> None:
    latest = run_dir / CHECKPOINTS / LATEST
    if resume and not latest.exists():
        raise FileNotFoundError(f"cannot resume: no checkpoint at {latest}")
    if not resume and latest.exists():
        raise FileExistsError(f"{run_dir} already holds a run; pass resume=True (--resume) or use a new directory")


def _run_config(train_cfg, run_dir: Path, resume: bool, minutes, max_iterations, warm_start) -> TrainConfig:
    """The run's TrainConfig with train_policy's arguments applied, checked like the config's own keys."""
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
    cfg.validate("train_policy budget")
    return cfg


def _run_reward(reward_spec, run_dir: Path, resume: bool, cfg: TrainConfig, robot: RobotConfig):
    """The reward the run trains on, validated before the run directory is written; a resumed run refuses
    another spec than its own."""
    resolved = _resolve_reward(reward_spec, run_dir, resume)
    _validate_reward(resolved, robot, cfg.env)
    # the run's reward_spec.yaml records the thresholds the gait terms train with
    spec = agree_on_standing(resolved, cfg.env)
    if resume and reward_spec is not None:
        _refuse_another_reward(spec, run_dir)
    return bound_reward_cost(spec, cfg)


def _write_run_files(run_dir: Path, cfg: TrainConfig, spec, with_spec: bool) -> None:
    (run_dir / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    write_yaml(run_dir / "config.yaml", cfg.to_dict())
    if not with_spec:
        return
    if hasattr(spec, "to_yaml"):  # a RewardSpec, in its own layout (code blocks kept readable)
        write_atomic(run_dir / "reward_spec.yaml", spec.to_yaml())
    else:
        write_yaml(run_dir / "reward_spec.yaml", spec.to_dict() if hasattr(spec, "to_dict") else {"reward": repr(spec)})


class _Session:
    """One session of a training run (a new run, or a resumed one's next): the runner with its companions
    (estimator training, policy average, held-out selection), the run's counters and its logs."""

    def __init__(self, run_dir: Path, cfg: TrainConfig, spec, robot: RobotConfig, vec: LocomotionVecEnv, runner,
                 estimator: EstimatorTraining | None, average: PolicyAverage | None, infos: dict, resume: bool,
                 schedule_offset: int, progress: bool):
        self.run_dir, self.cfg, self.spec, self.robot, self.vec, self.runner = run_dir, cfg, spec, robot, vec, runner
        self.estimator, self.average = estimator, average
        self.schedule_offset = schedule_offset
        """The parent's iterations of a warm-started run: its schedules continue from there."""
        self.start_it = self.it = int(infos.get("iteration", 0))
        self.total_steps = int(infos.get("total_steps", 0))
        self.elapsed0 = float(infos.get("elapsed_s", 0.0))
        self.history = load_history(run_dir / "history.jsonl", self.start_it)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tb"), purge_step=self.start_it + 1 if resume else None,
                                    flush_secs=10)
        self.budget_s = cfg.minutes * 60.0
        self.selection = (PolicySelection(cfg.selection, run_dir, robot, averaging=average is not None,
                                          terrain=cfg.env.terrain, terrain_level=cfg.env.terrain_level, task=cfg.task)
                          if cfg.selection.enabled_for(cfg.max_iterations) else None)
        self.bar = _progress_bar(progress, cfg, self.elapsed0, self.start_it)
        self.session_t0 = time.perf_counter()
        self.session_steps, self.last_iter_s = 0, 0.0
        self.validation_s = self.last_validation_s = self.validation_guess_s = 0.0
        self.failure: RewardValidationError | None = None
        """Set when a generated reward term failed in training: the run ends without an export."""

    @classmethod
    def start(cls, run_dir: Path, cfg: TrainConfig, spec, robot: RobotConfig, resume: bool,
              parent: WarmStart | None, progress: bool) -> "_Session":
        """Build the runner for a new run (from scratch or from `parent`) or restore a resumed one's."""
        from motionvl.rl.estimator import estimator_training

        infos = checkpoint_infos(run_dir) if resume else {}
        start_it = int(infos.get("iteration", 0))
        schedule_offset = parent.iteration if parent is not None else int(infos.get("schedule_offset", 0))
        vec, runner = build_runner(cfg, spec, robot, seed_offset=start_it, iteration=schedule_offset + start_it)
        estimator = estimator_training(runner, vec, cfg.ppo)
        if parent is not None:
            parent.apply(runner, estimator, vec.env)
        average = (PolicyAverage(runner.alg.get_policy(), cfg.policy_average_iterations)
                   if cfg.policy_average_iterations else None)
        if resume:
            _restore(run_dir, infos, cfg, vec, runner, estimator, average)
        return cls(run_dir, cfg, spec, robot, vec, runner, estimator, average, infos, resume, schedule_offset, progress)

    # ------------------------------------------------------------------ state
    def elapsed(self) -> float:
        """Training wall time of the whole run so far (all sessions)."""
        return self.elapsed0 + time.perf_counter() - self.session_t0

    def exported_actor(self):
        """What policy.onnx would hold now: the moving average with averaging on, else the last iterate."""
        actor = self.runner.alg.get_policy()
        return self.average.averaged_actor(actor) if self.average is not None else actor

    def task_metadata(self) -> dict | None:
        """The run's task (TrainConfig.task) for the exported policies' metadata; None without one."""
        return {"task": self.cfg.task} if self.cfg.task else None

    def metadata(self) -> PolicyContract:
        """The contract of the iterate just trained, with the gait period it trained at."""
        return PolicyContract.for_training(self.robot, self.cfg.env, gait_period=self.vec.env.gait_period)

    def save(self) -> None:
        infos = {"iteration": self.it, "total_steps": self.total_steps, "elapsed_s": self.elapsed(),
                 "command_level": self.vec.env.command_level, "train_config": self.cfg.to_dict(),
                 **({"terrain_levels": self.vec.env.terrain_level.tolist()} if self.vec.env.terrain_curriculum else {}),
                 "schedule_offset": self.schedule_offset,
                 **({"policy_average": self.average.state_dict()} if self.average is not None else {}),
                 **({"estimator_training": self.estimator.state_dict()} if self.estimator is not None else {})}
        save_checkpoint(self.run_dir, self.it, self.runner, infos, self.vec)
        write_json(self.run_dir / "term_stats.json", term_stats(self.history))

    # ------------------------------------------------------------------ the loop
    def train(self, on_iteration: IterationCallback | None) -> str:
        """Iterate until the budget, the callback or SIGINT stops the run; returns the stop reason."""
        cfg, update_threads = self.cfg, update_threads_for(self.cfg)
        with (self.run_dir / "history.jsonl").open("a") as hist_file:
            while True:
                if cfg.max_iterations is not None and self.it >= cfg.max_iterations:
                    return "max iterations"
                if self.elapsed() + self.last_iter_s + self._final_reserve_s() > self.budget_s:
                    return "time budget"
                try:
                    record = self._iterate(update_threads)
                except KeyboardInterrupt:  # Ctrl-C / SIGINT: keep what was learnt, save and export
                    return "interrupted"
                except RewardCodeError as exc:  # a generated term failed in its worker: the candidate fails, the
                    self.failure = RewardValidationError(  # run directory keeps its last checkpoint (resumable)
                        exc.problems, f"reward spec {quote(getattr(self.spec, 'name', ''))}",
                        f"failed in training at iteration {self.it + 1}")
                    return "reward failure"
                self.history.append(record)
                hist_file.write(json.dumps(record) + "\n")
                hist_file.flush()
                _update_bar(self.bar, record, cfg, self.last_iter_s)
                if self.it % cfg.save_interval == 0:
                    self.save()
                self._validate_if_due()
                if on_iteration is not None and on_iteration(record) is False:
                    return "callback"

    def _iterate(self, update_threads: UpdateThreads | None) -> dict:
        """One PPO iteration at the schedules' settings of this iteration; returns its history record."""
        env = self.vec.env
        env.follow_schedules(self.schedule_offset + self.it)
        threads = update_threads.choose() if update_threads is not None else None
        info = run_iteration(self.runner, self.vec, threads, self.estimator)
        if update_threads is not None:
            update_threads.record(threads, info["learn_s"])
        self.it += 1
        if self.average is not None:
            self.average.update(self.runner.alg.get_policy())
        self.total_steps += info["steps"]
        self.session_steps += info["steps"]
        self.last_iter_s = info["collect_s"] + info["learn_s"]
        if self.selection is not None:  # timed once validated; until then, from this rollout's cost per physics step
            self.validation_guess_s = self.last_validation_s or self.selection.expected_validation_s(
                info["collect_s"] / (info["steps"] * env.decimation),
                env.sim_dt if self.cfg.selection.training_physics else self.robot.sim_dt)
        record = _record(self.it, self.total_steps, self.elapsed(), info, env.dt)
        record["command_level"] = env.command_level
        record["command_tracking_error"] = env.window_tracking_error
        if self.cfg.env.terrain == "mixed":
            record["rough_fraction"] = env.rough_fraction
        if env.mean_terrain_level is not None:
            record["terrain_level"] = env.mean_terrain_level
        record["gait_period_s"] = env.gait_period
        if threads is not None:
            record["update_threads"] = threads
        _log_tensorboard(self.writer, record)
        return record

    # ------------------------------------------------------------------ held-out selection
    def _final_reserve_s(self) -> float:
        """Seconds kept free at the end of a time budget for the final candidates' validation: only once the
        stretch holds a candidate (maybe from before a resume), as without one there are no final ones."""
        if self.selection is None:
            return 0.0
        guess = self.validation_guess_s if self.selection.best(self.budget_s) is not None else 0.0
        return self.selection.reserve_s(self.last_validation_s or guess, self.cfg.max_iterations)

    def _validate_if_due(self) -> None:
        now = self.elapsed()
        if self.selection is None or not self.selection.due(self.it, now, self.budget_s, self.validation_guess_s,
                                                            self.cfg.max_iterations):
            return
        self._say(f"validating the policy on {self.cfg.selection.episodes} held-out episodes")
        t0 = time.perf_counter()
        self.selection.validate(self.exported_actor(), self.metadata(), self.it, now)
        self.last_validation_s = time.perf_counter() - t0
        self.validation_s += self.last_validation_s

    def _validate_final(self, stop_reason: str) -> None:
        """The final candidates join the stretch's pool, never start one: a budget too short for the grid
        exports what it ends on."""
        selection, ended_on = self.selection, self._ended_on_iterations(stop_reason)
        if (selection is None or not selection.final_count() or self.it <= self.start_it
                or stop_reason not in ("time budget", "max iterations")
                or selection.best(self.budget_s, ended_on) is None):
            return
        self._say(f"validating the final policy on {self.cfg.selection.episodes} held-out episodes")
        t0 = time.perf_counter()
        selection.validate_final(self.exported_actor(), self.runner.alg.get_policy(), self.metadata(), self.it,
                                 self.elapsed(), self.budget_s)
        self.validation_s += time.perf_counter() - t0

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.writer.close()
        _close_reward(self.spec)

    def _ended_on_iterations(self, stop_reason: str) -> int | None:
        return self.cfg.max_iterations if stop_reason == "max iterations" else None

    def _say(self, what: str) -> None:
        if self.bar is not None:  # the bar stands still for the validation's seconds: say why
            self.bar.set_postfix_str(f"it={self.it} {what}")

    # ------------------------------------------------------------------ the end
    def finish(self, stop_reason: str) -> TrainResult:
        """Validate the final candidates, save, export policy.onnx (the selection's choice) and report; after a
        reward failure, record it (FAILURE_FILE) and raise it instead."""
        if self.failure is not None:
            self._close()
            write_json(self.run_dir / FAILURE_FILE, {"iteration": self.it + 1, "message": str(self.failure),
                                                     "problems": self.failure.problems})
            raise self.failure
        self._validate_final(stop_reason)
        session_s = time.perf_counter() - self.session_t0
        self._close()
        self.save()
        last_iterate_path = None
        if self.average is not None:
            last_iterate_path = export_policy(self.runner.alg.get_policy(), self.run_dir / "policy_last_iterate.onnx",
                                              self.metadata(), extra_metadata=self.task_metadata())
        policy_path = export_policy(self.exported_actor(), self.run_dir / "policy.onnx", self.metadata(),
                                    extra_metadata=self.task_metadata())
        selected = (self.selection.install(policy_path, self.budget_s, self._ended_on_iterations(stop_reason))
                    if self.selection is not None else None)
        return TrainResult(run_dir=self.run_dir, policy_path=policy_path, iterations=self.it,
                           total_steps=self.total_steps, elapsed_s=self.elapsed0 + session_s,
                           steps_per_s=self.session_steps / max(session_s - self.validation_s, 1e-9),
                           stop_reason=stop_reason, term_stats=term_stats(self.history),
                           last_iterate_path=last_iterate_path, selected=selected,
                           warm_start_iteration=self.schedule_offset)


def _restore(run_dir: Path, infos: dict, cfg: TrainConfig, vec: LocomotionVecEnv, runner,
             estimator: EstimatorTraining | None, average: PolicyAverage | None) -> None:
    """A resumed run's networks, optimisers, policy average, curriculum level and episodes in flight."""
    try:
        runner.load(str(run_dir / CHECKPOINTS / LATEST), map_location=runner.device)
    except RuntimeError as exc:
        if "state_dict" not in str(exc):  # not a shape/key mismatch (e.g. a damaged file): torch's own words
            raise
        raise RuntimeError(f"cannot resume {run_dir}: its checkpoint does not fit the networks this version builds "
                           f"({vec.num_obs} actor / {vec.num_obs + vec.num_privileged_obs} critic inputs, "
                           f"config {run_dir / 'config.yaml'}); it was written by another MotionVL version or "
                           f"config. Start a new run directory. Torch said: {str(exc).splitlines()[0]}") from exc
    runner.current_learning_iteration = int(infos.get("iteration", 0))
    if estimator is not None and "estimator_training" in infos:
        estimator.load_state_dict(infos["estimator_training"])
    if average is not None and "policy_average" in infos:
        average.load_state_dict(infos["policy_average"])
    if cfg.env.commands.curriculum:
        vec.env.command_level = float(infos.get("command_level", 0.0))
    resume_episodes(run_dir, infos, vec)


# ---------------------------------------------------------------------- helpers
def _resolve_config(train_cfg, run_dir: Path, resume: bool) -> TrainConfig:
    if isinstance(train_cfg, TrainConfig):
        return dataclasses.replace(train_cfg)
    if train_cfg is not None:
        return TrainConfig.from_yaml(train_cfg)
    if resume and (run_dir / "config.yaml").exists():
        return TrainConfig.from_yaml(run_dir / "config.yaml")
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


def _log_tensorboard(writer, r: dict) -> None:
    it = r["iteration"]
    scalars = {"Train/mean_reward": r["mean_return"], "Train/mean_episode_length": r["mean_episode_length"],
               "Train/mean_step_reward": r["mean_step_reward"], "Train/fall_fraction": r["fall_fraction"],
               "Perf/steps_per_s": r["steps_per_s"], "Perf/collection_time": r["collect_s"],
               "Perf/learning_time": r["learn_s"], "Loss/learning_rate": r["learning_rate"],
               "Policy/mean_std": r["action_std"], "Train/command_level": r.get("command_level"),
               "Train/command_tracking_error": r.get("command_tracking_error"),
               "Train/rough_fraction": r.get("rough_fraction"), "Train/gait_period_s": r.get("gait_period_s"),
               "Train/terrain_level": r.get("terrain_level")}
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
                        f"len={fmt(r['mean_episode_length'], '.0f')} cmd_level={r.get('command_level', 1.0):.1f}"
                        + (f" terrain={r['terrain_level']:.1f}" if "terrain_level" in r else ""),
                        refresh=False)


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

"""Training jobs for reward candidates: parsing requests and running them one at a time.

The policy_trainer node is a thin ROS adapter over `TrainingQueue`: a request (JSON) names a
candidate, its reward spec and a budget; the queue trains each candidate in its own run
directory on a worker thread and reports status, per-iteration progress, per-term statistics
and the exported policy through callbacks.

Request payload (JSON object):
    {"candidate_id": "iter2-k3",          # unique, used as the run directory name
     "spec": {...},                       # a reward spec (RewardSpec.to_dict() form, may carry code)
     "minutes": 2.0,                      # optional training budget (default: the queue's)
     "max_iterations": 50,                # optional iteration cap (held-out selection then runs over
                                          # its last quarter, at most selection.iterations)
     "iterations": 60,                    # optional: PPO iterations to train in this job (a warm-started
                                          # run counts its own); replaces max_iterations and minutes
     "warm_start": "runs/parent",         # optional: a new run from another run's checkpoint with this
                                          # spec (motionvl.rl.warm_start says what carries over)
     "overrides": ["env.num_envs=512"],   # optional training config overrides (dotted KEY=VALUE)
     "run_dir": "/abs/path",              # optional: train here instead of <runs_dir>/<candidate_id>
     "evaluate": true,                    # optional: run the reward-free task evaluation after
     "evaluation": {"episodes": 64, ...}, # optional keyword arguments of motionvl.rl.evaluate.evaluate
                                          # (episodes, seconds, command, randomize, seed, robot_dt, pushes,
                                          # success_fraction, criterion, terrain, terrain_level)
     "request_id": "iter2-k3@5f3a"}       # optional: echoed in every message about this request

A finished job leaves its outcome (what run_job returns) in <run dir>/outcome.json as well.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import re
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from motionvl.rewards import validate_spec
from motionvl.rewards.spec import RewardSpec
from motionvl.task import DEFAULT_COMMAND

if TYPE_CHECKING:
    from motionvl.rl.config import TrainConfig

StatusFn = Callable[[dict], None]

_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")


REQUEST_KEYS = ("candidate_id", "spec", "minutes", "max_iterations", "iterations", "warm_start", "overrides",
                "run_dir", "evaluate", "evaluation", "request_id")
EVALUATION_KEYS = ("episodes", "seconds", "command", "randomize", "seed", "robot_dt", "pushes", "success_fraction",
                   "criterion", "terrain", "terrain_level")
"""What a request's "evaluation" may set of motionvl.rl.evaluate.evaluate's arguments."""
OUTCOME_FILE = "outcome.json"
"""In a job's run directory once it finished: run_job's outcome (JSON)."""


class JobError(ValueError):
    """A training request is malformed; the message says what to fix."""


@dataclasses.dataclass
class TrainingJob:
    candidate_id: str
    spec: RewardSpec
    minutes: float | None = None
    max_iterations: int | None = None
    evaluate: bool = True
    iterations: int | None = None
    """PPO iterations to train (a warm-started run counts its own); overrides max_iterations, and without
    minutes the iterations alone are the budget."""
    warm_start: str | None = None
    """A run directory (or checkpoint file) to start from (train_policy's warm_start; motionvl.rl.warm_start)."""
    overrides: tuple = ()
    """Training config overrides, "dotted.key=value"."""
    run_dir: str | None = None
    """Train here instead of <runs_dir>/<candidate_id>."""
    evaluation: dict | None = None
    """Keyword arguments of the reward-free evaluation (EVALUATION_KEYS); None: the queue's defaults."""
    request_id: str | None = None
    """The sender's name for this request, echoed in every message about it (tells a re-sent request apart)."""

    @classmethod
    def from_json(cls, text: str) -> "TrainingJob":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JobError(f"request is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise JobError("request must be a JSON object")
        unknown = set(raw) - set(REQUEST_KEYS)
        if unknown:
            raise JobError(f"unknown request keys {sorted(unknown)} (known: {list(REQUEST_KEYS)})")
        cid = raw.get("candidate_id")
        if not isinstance(cid, str) or not _ID_PATTERN.match(cid):
            raise JobError("candidate_id must be 1-80 characters of letters, digits, '_', '-', '.'")
        if "spec" not in raw:
            raise JobError("request has no 'spec' (a reward spec object)")
        try:
            spec = RewardSpec.from_dict(raw["spec"], where=f"candidate {cid}")
            validate_spec(spec)  # at intake, so that a failing term is rejected before the queue
        except ValueError as exc:  # RewardSpecError / RewardValidationError: bounded messages for the LLM
            raise JobError(str(exc)) from exc
        minutes = raw.get("minutes")
        if minutes is not None and (not isinstance(minutes, (int, float)) or minutes <= 0):
            raise JobError("minutes must be a positive number")
        for key in ("max_iterations", "iterations"):
            value = raw.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise JobError(f"{key} must be a positive integer")
        for key in ("warm_start", "run_dir"):
            if raw.get(key) is not None and (not isinstance(raw[key], str) or not raw[key]):
                raise JobError(f"{key} must be a path")
        if raw.get("request_id") is not None and not isinstance(raw["request_id"], str):
            raise JobError("request_id must be a string")
        overrides = raw.get("overrides") or []
        if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
            raise JobError("overrides must be a list of 'dotted.key=value' strings")
        evaluation = raw.get("evaluation")
        if evaluation is not None:
            if not isinstance(evaluation, dict) or set(evaluation) - set(EVALUATION_KEYS):
                raise JobError(f"evaluation must be an object with keys among {list(EVALUATION_KEYS)}")
        return cls(cid, spec, None if minutes is None else float(minutes), raw.get("max_iterations"),
                   bool(raw.get("evaluate", True)), iterations=raw.get("iterations"), warm_start=raw.get("warm_start"),
                   overrides=tuple(overrides), run_dir=raw.get("run_dir"), evaluation=evaluation,
                   request_id=raw.get("request_id"))

    def to_json(self) -> str:
        out = {"candidate_id": self.candidate_id, "spec": self.spec.to_dict(), "evaluate": self.evaluate}
        for key in ("minutes", "max_iterations", "iterations", "warm_start", "run_dir", "evaluation", "request_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.overrides:
            out["overrides"] = list(self.overrides)
        return json.dumps(out)


@dataclasses.dataclass
class QueueSettings:
    """How a trainer budgets and evaluates the candidates it is sent (a policy_trainer node's parameters)."""

    default_minutes: float = 2.0
    """Training budget of a candidate that names none, minutes."""
    eval_seconds: float = 10.0
    """Length of each evaluation episode after training, seconds."""
    eval_episodes: int = 8
    """Parallel evaluation episodes after training."""
    eval_command_vx: float = DEFAULT_COMMAND[0]
    """Forward velocity command of the evaluation of a request that names no command, m/s (the search's requests
    carry their task's)."""

    def validate(self) -> "QueueSettings":
        if not (self.default_minutes > 0 and self.eval_seconds > 0 and self.eval_episodes >= 1):
            raise ValueError("default_minutes and eval_seconds must be > 0 and eval_episodes >= 1")
        return self


def import_training_stack() -> None:
    """Import what a job runs: torch and rsl_rl, the evaluator, the ONNX exporter and ONNX Runtime (5 s here).
    Imports hold the GIL for up to a second at a time, longer under load; made by the training thread at its
    first job, they stall every other thread of the process, and a trainer node asked to stop then could not
    finish within its shutdown budget. A process that trains calls this before it takes work."""
    import motionvl.rl.evaluate  # noqa: F401
    import motionvl.rl.export  # noqa: F401
    import motionvl.rl.trainer  # noqa: F401
    import onnxruntime  # noqa: F401
    import onnxscript  # noqa: F401 - the exporter's own imports on its first export (2 s of them)
    import torch.export  # noqa: F401


def run_job(job: TrainingJob, runs_dir: str | Path, *, train_config=None,
            default_minutes: float = QueueSettings.default_minutes,
            evaluation: dict | None = None, progress_bar: bool = False,
            on_iteration: Callable[[dict], "bool | None"] | None = None,
            on_phase: Callable[[str], None] | None = None, robot=None) -> dict:
    """Train one job (resuming its run directory if it holds a checkpoint), evaluate it, return the outcome:
    candidate_id, policy_path, run_dir, iterations (this run's own), start_iteration (the parent's iterations a
    warm-started run continued the schedules from, else 0), total_steps, steps_per_s, elapsed_s (the run's
    training time over its sessions), stop_reason, selected_iteration, selected_actor,
    term_stats, evaluation (None without one), train_wall_s and eval_wall_s (this call's seconds in each), complete.
    A job is complete when its budget ran out; one stopped early (on_iteration returned False, SIGINT) is neither
    evaluated nor written to outcome.json: its run resumes from its checkpoint when the job is sent again.
    on_iteration gets each PPO iteration's history record (False stops training); on_phase the phases
    'training' and 'evaluating'; robot: the RobotConfig to train and evaluate on (None: config/robot.yaml).
    Exceptions propagate (the caller reports the candidate as failed)."""
    from motionvl.rl.trainer import train_policy  # torch is heavy: import on first use

    run_dir = Path(job.run_dir) if job.run_dir else Path(runs_dir) / job.candidate_id
    resume = (run_dir / "checkpoints" / "latest.pt").exists()
    cfg = _training_config(train_config, job.overrides)
    max_iterations = job.iterations or job.max_iterations
    minutes = job.minutes or (1e6 if job.iterations else default_minutes)  # an iteration budget alone
    if on_phase:
        on_phase("training")
    t0 = time.monotonic()
    # a resumed warm-started run continues from its own checkpoint (which remembers where its parent stopped)
    result = train_policy(run_dir, job.spec, cfg, minutes=minutes, resume=resume, progress=progress_bar,
                          on_iteration=on_iteration, max_iterations=max_iterations, robot=robot,
                          warm_start=None if resume else job.warm_start)
    outcome = {"candidate_id": job.candidate_id, "policy_path": str(result.policy_path), "run_dir": str(run_dir),
               "iterations": result.iterations, "start_iteration": result.warm_start_iteration,
               "total_steps": result.total_steps, "steps_per_s": result.steps_per_s, "elapsed_s": result.elapsed_s,
               "stop_reason": result.stop_reason, "selected_iteration": result.selected_iteration,
               "selected_actor": result.selected_actor, "term_stats": result.term_stats, "evaluation": None,
               "train_wall_s": time.monotonic() - t0, "eval_wall_s": 0.0,
               "complete": result.stop_reason in ("max iterations", "time budget")}
    if not outcome["complete"]:
        return outcome
    if job.evaluate:
        from motionvl.rl.evaluate import evaluate

        if on_phase:
            on_phase("evaluating")
        kwargs = {**(evaluation or {}), **(job.evaluation or {})}
        if "command" in kwargs:
            kwargs["command"] = tuple(float(c) for c in kwargs["command"])
        t0 = time.monotonic()
        outcome["evaluation"] = evaluate(result.policy_path, robot=robot, **kwargs)
        outcome["eval_wall_s"] = time.monotonic() - t0
    tmp = run_dir / (OUTCOME_FILE + ".tmp")
    tmp.write_text(json.dumps(outcome, default=float))
    tmp.replace(run_dir / OUTCOME_FILE)
    return outcome


def _training_config(train_config, overrides) -> "TrainConfig | str | Path | None":
    if not overrides:
        return train_config
    from motionvl.rl.config import TrainConfig

    if isinstance(train_config, TrainConfig):
        from motionvl.rl.config import apply_overrides

        return TrainConfig.from_dict(apply_overrides(train_config.to_dict(), overrides), "training config with overrides")
    return TrainConfig.from_yaml(train_config or None, overrides=tuple(overrides))


class TrainingQueue:
    """Trains queued jobs one after another on a worker thread."""

    def __init__(self, runs_dir: str | Path, *, train_config=None, settings: QueueSettings | None = None,
                 on_status: StatusFn | None = None, on_progress: StatusFn | None = None,
                 on_statistics: StatusFn | None = None, on_policy: StatusFn | None = None, progress_bar: bool = False,
                 robot=None):
        """robot: the RobotConfig every job trains and evaluates on (None: the package's config/robot.yaml)."""
        self.runs_dir = Path(runs_dir)
        self.robot = robot
        self.train_config = train_config
        settings = (settings or QueueSettings()).validate()
        self.default_minutes = settings.default_minutes
        self.eval_seconds, self.eval_episodes = settings.eval_seconds, settings.eval_episodes
        self.eval_command = (settings.eval_command_vx, 0.0, 0.0)
        self._emit = {k: fn or (lambda _msg: None) for k, fn in
                      (("status", on_status), ("progress", on_progress), ("statistics", on_statistics), ("policy", on_policy))}
        self.progress_bar = progress_bar
        self._jobs: queue.Queue = queue.Queue()
        self._cancel = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # which request waits, trains or was dropped: one decision at a time
        self._waiting: set[str] = set()  # request ids queued
        self._dropped: set[str] = set()  # request ids cancelled while queued (the worker skips them)
        self._training: str | None = None  # the request id in training
        self.current: str | None = None
        self._thread = threading.Thread(target=self._work, name="training-queue", daemon=True)
        self._thread.start()

    def submit(self, job: TrainingJob) -> None:
        if job.request_id:
            with self._lock:
                self._waiting.add(job.request_id)
        # "queued" goes out before the worker can take the job, so it never follows that job's "training"
        self._emit["status"]({"candidate_id": job.candidate_id, **({"request_id": job.request_id} if job.request_id else {}),
                              "state": "queued", "message": "", "queue_length": self._jobs.qsize() + 1})
        self._jobs.put(job)

    def pending(self) -> int:
        """Jobs waiting behind the one in training."""
        with self._lock:
            return max(0, self._jobs.qsize() - len(self._dropped))

    def cancel(self, request_id: str) -> str | None:
        """Cancel one request (by its request_id): 'dropped' if it was waiting (it will not train and nothing is
        reported about it again), 'stopping' if it trains (it stops after its current iteration, saved and
        exported, and is reported 'cancelled'), None if the queue does not hold it (finished or unknown)."""
        if not request_id:
            return None
        with self._lock:
            if self._training == request_id:
                self._cancel.set()
                return "stopping"
            if request_id in self._waiting:
                self._waiting.discard(request_id)
                self._dropped.add(request_id)
                return "dropped"
        return None

    def busy(self) -> bool:
        """Whether the worker still runs (after shutdown: a job that has not ended yet)."""
        return self._thread.is_alive()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop: the job in training ends after its current iteration (saved and exported, not
        evaluated), queued jobs are left; waits up to `timeout` s (None: until then) for the worker."""
        self._stop.set()
        self._cancel.set()
        self._jobs.put(None)
        self._thread.join(timeout)

    # ------------------------------------------------------------------ worker
    def _work(self) -> None:
        while not self._stop.is_set():
            job = self._jobs.get()
            try:
                if job is not None:
                    self._run(job)
            finally:
                self._jobs.task_done()

    def _run(self, job: TrainingJob) -> None:
        if self._stop.is_set():  # shut down while it waited: leave the job untouched
            return
        with self._lock:
            if job.request_id in self._dropped:  # cancelled while it waited
                self._dropped.discard(job.request_id)
                return
            self._waiting.discard(job.request_id)
            self._training = job.request_id
            self.current, cid = job.candidate_id, job.candidate_id
            self._cancel.clear()
        run_dir = Path(job.run_dir) if job.run_dir else self.runs_dir / cid
        resume = (run_dir / "checkpoints" / "latest.pt").exists()
        ids = {"candidate_id": cid, **({"request_id": job.request_id} if job.request_id else {})}
        self._emit["status"]({**ids, "state": "training", "message": str(run_dir), "resumed": resume})

        def on_iteration(record: dict):
            self._emit["progress"]({**ids, "phase": "training", **record})
            return not (self._cancel.is_set() or self._stop.is_set())

        def on_phase(phase: str) -> None:  # the status message marks the start of training
            if phase != "training":
                self._emit["progress"]({**ids, "phase": phase})

        try:
            outcome = run_job(job, self.runs_dir, train_config=self.train_config, default_minutes=self.default_minutes,
                              evaluation={"seconds": self.eval_seconds, "episodes": self.eval_episodes,
                                          "command": self.eval_command},
                              progress_bar=self.progress_bar, on_iteration=on_iteration, on_phase=on_phase,
                              robot=self.robot)
            self._emit["statistics"]({**ids, "term_stats": outcome["term_stats"]})
            self._emit["policy"]({**ids, **{k: v for k, v in outcome.items() if k != "term_stats"}})
            state = "done" if outcome["complete"] else "cancelled"
            self._emit["status"]({**ids, "state": state, "message": outcome["stop_reason"]})
        except Exception as exc:  # a failed candidate must not take the node down
            self._emit["status"]({**ids, "state": "failed", "message": f"{type(exc).__name__}: {exc}",
                                  "traceback": traceback.format_exc(limit=5)})
        finally:
            with self._lock:
                self.current = self._training = None


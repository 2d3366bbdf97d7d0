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
     "evaluate": true}                    # optional: run the reward-free task evaluation after
"""

from __future__ import annotations

import dataclasses
import json
import queue
import re
import threading
import traceback
from pathlib import Path
from typing import Callable

from motionvl.rewards import validate_spec
from motionvl.rewards.spec import RewardSpec

StatusFn = Callable[[dict], None]

_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")


class JobError(ValueError):
    """A training request is malformed; the message says what to fix."""


@dataclasses.dataclass
class TrainingJob:
    candidate_id: str
    spec: RewardSpec
    minutes: float | None = None
    max_iterations: int | None = None
    evaluate: bool = True

    @classmethod
    def from_json(cls, text: str) -> "TrainingJob":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise JobError(f"request is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise JobError("request must be a JSON object")
        unknown = set(raw) - {"candidate_id", "spec", "minutes", "max_iterations", "evaluate"}
        if unknown:
            raise JobError(f"unknown request keys {sorted(unknown)}")
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
        iters = raw.get("max_iterations")
        if iters is not None and (not isinstance(iters, int) or iters < 1):
            raise JobError("max_iterations must be a positive integer")
        return cls(cid, spec, None if minutes is None else float(minutes), iters, bool(raw.get("evaluate", True)))


class TrainingQueue:
    """Trains queued jobs one after another on a worker thread."""

    def __init__(self, runs_dir: str | Path, *, train_config=None, default_minutes: float = 2.0,
                 eval_seconds: float = 10.0, eval_episodes: int = 8, eval_command=(0.6, 0.0, 0.0),
                 on_status: StatusFn | None = None, on_progress: StatusFn | None = None,
                 on_statistics: StatusFn | None = None, on_policy: StatusFn | None = None, progress_bar: bool = False):
        self.runs_dir = Path(runs_dir)
        self.train_config = train_config
        self.default_minutes = default_minutes
        self.eval_seconds, self.eval_episodes, self.eval_command = eval_seconds, eval_episodes, tuple(eval_command)
        self._emit = {k: fn or (lambda _msg: None) for k, fn in
                      (("status", on_status), ("progress", on_progress), ("statistics", on_statistics), ("policy", on_policy))}
        self.progress_bar = progress_bar
        self._jobs: queue.Queue = queue.Queue()
        self._cancel = threading.Event()
        self._stop = threading.Event()
        self.current: str | None = None
        self._thread = threading.Thread(target=self._work, name="training-queue", daemon=True)
        self._thread.start()

    def submit_json(self, text: str) -> TrainingJob | None:
        """Parse and queue a request; a bad one is reported as 'rejected' and returns None."""
        try:
            job = TrainingJob.from_json(text)
        except JobError as exc:
            cid = _peek_id(text)
            self._emit["status"]({"candidate_id": cid, "state": "rejected", "message": str(exc)})
            return None
        self.submit(job)
        return job

    def submit(self, job: TrainingJob) -> None:
        self._jobs.put(job)
        self._emit["status"]({"candidate_id": job.candidate_id, "state": "queued", "message": "",
                              "queue_length": self._jobs.qsize()})

    def cancel_current(self) -> bool:
        if self.current is None:
            return False
        self._cancel.set()
        return True

    def shutdown(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._cancel.set()
        self._jobs.put(None)
        self._thread.join(timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued job finished (for tests and scripts)."""
        done = threading.Event()

        def check():
            self._jobs.join()
            done.set()

        threading.Thread(target=check, daemon=True).start()
        return done.wait(timeout)

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
        from motionvl.rl.trainer import train_policy  # torch is heavy: import on first use

        self.current, cid = job.candidate_id, job.candidate_id
        self._cancel.clear()
        run_dir = self.runs_dir / cid
        resume = (run_dir / "checkpoints" / "latest.pt").exists()
        self._emit["status"]({"candidate_id": cid, "state": "training", "message": str(run_dir), "resumed": resume})

        def on_iteration(record: dict):
            self._emit["progress"]({"candidate_id": cid, **record})
            return not self._cancel.is_set()

        try:
            result = train_policy(run_dir, job.spec, self.train_config, minutes=job.minutes or self.default_minutes,
                                  resume=resume, progress=self.progress_bar, on_iteration=on_iteration,
                                  max_iterations=job.max_iterations)
            self._emit["statistics"]({"candidate_id": cid, "term_stats": result.term_stats})
            evaluation = None
            if job.evaluate:
                from motionvl.rl.evaluate import evaluate

                evaluation = evaluate(result.policy_path, seconds=self.eval_seconds, episodes=self.eval_episodes,
                                      command=self.eval_command)
            self._emit["policy"]({"candidate_id": cid, "policy_path": str(result.policy_path), "run_dir": str(run_dir),
                                  "iterations": result.iterations, "total_steps": result.total_steps,
                                  "steps_per_s": result.steps_per_s, "stop_reason": result.stop_reason,
                                  "selected_iteration": result.selected_iteration,
                                  "selected_actor": result.selected_actor,
                                  "evaluation": evaluation})
            state = "cancelled" if result.stop_reason == "callback" else "done"
            self._emit["status"]({"candidate_id": cid, "state": state, "message": result.stop_reason})
        except Exception as exc:  # a failed candidate must not take the node down
            self._emit["status"]({"candidate_id": cid, "state": "failed", "message": f"{type(exc).__name__}: {exc}",
                                  "traceback": traceback.format_exc(limit=5)})
        finally:
            self.current = None


def _peek_id(text: str) -> str | None:
    try:
        raw = json.loads(text)
        cid = raw.get("candidate_id") if isinstance(raw, dict) else None
        return cid if isinstance(cid, str) else None
    except (json.JSONDecodeError, AttributeError):
        return None

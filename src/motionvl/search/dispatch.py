"""Handing candidates to trainers with a wall-clock limit and a heartbeat; a lost trainer's candidate moves on.

A trainer is a `TrainerSlot`: it takes one `TrainingJob` at a time and, when polled, says whether the
job still runs (with the time of its last sign of progress: a PPO iteration or a phase change), is
done (the outcome of `motionvl.rl.jobs.run_job`), failed (a reason), or whether the trainer itself
is gone. `Dispatcher.run` feeds the jobs to whichever slots are free and yields one result per job:

- a job running longer than its limit, or without progress for `heartbeat_s`, is stopped and fails
  with that reason (a stalled or crashed trainer never hangs the search);
- a job whose trainer disappeared goes back to the queue for another trainer (at most
  `max_redispatch` times); with no trainer left it fails.

`LocalProcessSlot` trains in a child process of this one (`python -m motionvl.search.worker`); the
orchestrator node's slots are policy_trainer nodes on the ROS graph.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Protocol

from motionvl.rl.jobs import OUTCOME_FILE, TrainingJob
from motionvl.search.worker import HEARTBEAT_FILE, LOG_FILE


STOPPED = "the search is stopping"
"""The reason of the jobs a stopping dispatcher hands back unfinished (their runs resume later)."""


@dataclasses.dataclass
class SlotState:
    kind: str
    """'idle', 'running', 'done', 'failed' or 'gone' (the trainer itself disappeared)."""
    beat: float | None = None
    """time.time() of the job's last sign of progress (running)."""
    iteration: int | None = None
    """The job's last reported PPO iteration (running)."""
    phase: str | None = None
    """The job's last reported phase: 'starting', 'training', 'evaluating'."""
    outcome: dict | None = None
    """run_job's outcome (done)."""
    reason: str | None = None
    """Why the job failed or the trainer is gone."""


class TrainerSlot(Protocol):
    name: str

    def start(self, job: TrainingJob) -> None: ...

    def poll(self) -> SlotState: ...

    def stop(self) -> None:
        """Stop the job in progress (the slot is idle afterwards)."""

    def close(self) -> None: ...


@dataclasses.dataclass
class JobResult:
    job: TrainingJob
    ok: bool
    outcome: dict | None
    reason: str | None
    trainer: str | None
    wall_s: float


class Dispatcher:
    """Runs jobs on the slots `slots()` returns (re-read every poll: trainers may come and go)."""

    def __init__(self, slots: Callable[[], list], *, limit_s: Callable[[TrainingJob], float], heartbeat_s: float,
                 max_redispatch: int = 2, poll_s: float = 0.5, on_progress: Callable[[str, SlotState], None] | None = None,
                 log: Callable[[str], None] = print, no_trainer_s: float = 0.0,
                 should_stop: Callable[[], bool] = lambda: False):
        """no_trainer_s: how long to wait for a trainer to appear before the waiting jobs fail.
        should_stop: polled; once true every unfinished job comes back with reason STOPPED (running ones
        are stopped: their runs keep their checkpoints)."""
        self.slots, self.limit_s, self.heartbeat_s = slots, limit_s, float(heartbeat_s)
        self.no_trainer_s = float(no_trainer_s)
        self.should_stop = should_stop
        self.max_redispatch, self.poll_s = int(max_redispatch), float(poll_s)
        self.on_progress = on_progress or (lambda cid, state: None)
        self.log = log

    def run(self, jobs: list[TrainingJob]) -> Iterator[JobResult]:
        pending = collections.deque(jobs)
        moves: dict[str, int] = collections.Counter()
        running: dict[str, tuple] = {}  # slot name -> (slot, job, started, last beat)
        last_seen = time.time()  # the last time any trainer was there
        waiting_said = False
        while pending or running:
            if self.should_stop():
                for slot, job, started, _ in running.values():
                    slot.stop()
                    yield JobResult(job, False, None, STOPPED, slot.name, time.time() - started)
                for job in pending:
                    yield JobResult(job, False, None, STOPPED, None, 0.0)
                return
            slots = self.slots()
            if slots:
                last_seen, waiting_said = time.time(), False
            elif pending and not running and not waiting_said and self.no_trainer_s > 0:
                self.log(f"waiting up to {self.no_trainer_s:.0f} s for a trainer")
                waiting_said = True
            free = [s for s in slots if s.name not in running]
            while pending and free:
                slot, job = free.pop(0), pending.popleft()
                slot.start(job)
                now = time.time()
                running[slot.name] = (slot, job, now, now)
                self.log(f"{job.candidate_id}: training on {slot.name}")
            if pending and not running and not slots and time.time() - last_seen >= self.no_trainer_s:
                while pending:
                    job = pending.popleft()
                    yield JobResult(job, False, None, f"no trainer is available (waited {self.no_trainer_s:.0f} s)",
                                    None, 0.0)
                continue
            time.sleep(self.poll_s)
            for name, (slot, job, started, beat) in list(running.items()):
                state = slot.poll()
                now = time.time()
                if state.kind == "running":
                    beat = max(beat, state.beat or beat)
                    running[name] = (slot, job, started, beat)
                    self.on_progress(job.candidate_id, state)
                    reason = None
                    if now - started > self.limit_s(job):
                        reason = f"exceeded its wall-clock limit of {self.limit_s(job):.0f} s on {name}"
                    elif now - beat > self.heartbeat_s:
                        reason = (f"no progress from {name} for {now - beat:.0f} s (heartbeat limit {self.heartbeat_s:.0f} s; "
                                  f"last: {state.phase or 'starting'}, iteration {state.iteration})")
                    if reason:
                        slot.stop()
                        del running[name]
                        yield JobResult(job, False, None, reason, name, now - started)
                    continue
                del running[name]
                if state.kind == "done":
                    yield JobResult(job, True, state.outcome, None, name, now - started)
                elif state.kind == "gone":
                    moves[job.candidate_id] += 1
                    if moves[job.candidate_id] <= self.max_redispatch:
                        self.log(f"{job.candidate_id}: {name} disappeared ({state.reason}); handing it to another trainer")
                        pending.appendleft(job)
                    else:
                        yield JobResult(job, False, None, f"its trainer disappeared {moves[job.candidate_id]} times "
                                                          f"(last {name}: {state.reason})", name, now - started)
                else:  # failed, or idle: the trainer forgot the job (restarted)
                    yield JobResult(job, False, None, state.reason or f"{name} dropped the job", name, now - started)


# ----------------------------------------------------------------------------- local child processes
def _die_with_parent() -> None:  # in the child, before exec: SIGKILL when this process dies (Linux)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LocalProcessSlot:
    """Trains one job at a time in a child process of this one (`python -m motionvl.search.worker`), kept for the
    next job so that imports and the first ONNX export are paid once. The job's run directory holds job.json,
    heartbeat.json, outcome.json and trainer.log. The child dies with this process (a killed search leaves no
    orphan training into its run directories); a child that died is replaced at the next job."""

    def __init__(self, name: str = "local-0", *, runs_dir: str | Path, train_config: str | Path | None = None,
                 evaluation: dict | None = None, robot_config: str | Path | None = None, cpus=None):
        """robot_config: the robot YAML the jobs train and evaluate on (None: the package's config/robot.yaml);
        cpus: the cores the child runs on (None: every core; several local slots get disjoint shares)."""
        self.name = name
        self.cpus = list(cpus) if cpus else None
        self.runs_dir, self.train_config, self.evaluation = Path(runs_dir), train_config, evaluation
        self.robot_config = robot_config
        self._proc: subprocess.Popen | None = None
        self._dir: Path | None = None
        self._cid: str | None = None
        self._started = 0.0

    def _process(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            args = [sys.executable, "-m", "motionvl.search.worker", "--runs-dir", str(self.runs_dir)]
            if self.train_config:
                args += ["--train-config", str(self.train_config)]
            if self.evaluation:
                args += ["--evaluation", json.dumps(self.evaluation)]
            if self.robot_config:
                args += ["--robot-config", str(self.robot_config)]
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            with (self.runs_dir / f"{self.name}.log").open("ab") as log:
                self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                              preexec_fn=self._preexec, start_new_session=True, text=True,
                                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self._proc

    def _preexec(self) -> None:  # in the child, before exec
        _die_with_parent()
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)

    def start(self, job: TrainingJob) -> None:
        run_dir = Path(job.run_dir) if job.run_dir else self.runs_dir / job.candidate_id
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in (HEARTBEAT_FILE, OUTCOME_FILE):
            (run_dir / stale).unlink(missing_ok=True)
        (run_dir / "job.json").write_text(job.to_json())
        proc = self._process()
        self._dir, self._cid, self._started = run_dir, job.candidate_id, time.time()
        try:
            proc.stdin.write(f"{run_dir / 'job.json'}\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the child died: poll() reports it

    def poll(self) -> SlotState:
        if self._cid is None:
            return SlotState("idle")
        outcome = _read_json(self._dir / OUTCOME_FILE)
        if outcome is not None and outcome.get("candidate_id") == self._cid:
            self._cid = None
            if "error" in outcome:
                return SlotState("failed", reason=f"training failed: {outcome['error']}")
            return SlotState("done", outcome=outcome)
        code = self._proc.poll() if self._proc is not None else -1
        if code is not None:
            if self._proc is not None:
                self._proc.stdin.close()
            self._cid, self._proc = None, None
            how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            return SlotState("failed", reason=f"trainer process ended ({how}): {_tail(self._dir / LOG_FILE)}")
        beat = _read_json(self._dir / HEARTBEAT_FILE) or {}
        return SlotState("running", beat=beat.get("time", self._started), iteration=beat.get("iteration"),
                         phase=beat.get("phase"))

    def stop(self) -> None:
        """Stop the job in progress by ending the process (a stalled training may not heed anything gentler)."""
        proc, self._proc, self._cid = self._proc, None, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            proc.stdin.close()

    def close(self) -> None:
        if self._cid is not None:
            self.stop()
            return
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()  # the worker ends after its current job; stop() if it must end now
                proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        elif proc is not None:
            proc.stdin.close()


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _tail(path: Path, lines: int = 6, chars: int = 800) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [ln for ln in text.splitlines() if ln.strip() and "\r" not in ln][-lines:]
    return " | ".join(kept)[-chars:] or "(empty log)"

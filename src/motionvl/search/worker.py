"""A search's trainer process: `python -m motionvl.search.worker [--runs-dir D] [--train-config Y] [--robot-config R]`.

Reads the paths of job files (motionvl.rl.jobs requests) from stdin, one per line, and trains and
evaluates each in turn (motionvl.rl.jobs.run_job) in the job's run directory, so the imports and the
first ONNX export are paid once per process, not once per candidate. For each job it redirects its
output to the run's trainer.log, rewrites heartbeat.json ({time, phase, iteration}) at every PPO
iteration and phase change, and writes outcome.json (atomically): run_job's outcome, or
{"candidate_id", "error"} with the traceback when the job failed (the process then takes the next
job). A run directory holding a checkpoint resumes, so a killed search continues its candidate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from motionvl.rl.jobs import OUTCOME_FILE

HEARTBEAT_FILE = "heartbeat.json"
LOG_FILE = "trainer.log"


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, default=float))
    os.replace(tmp, path)


def _log_to(path: Path) -> None:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so native libraries' too) to `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def serve_one(job_path: Path, runs_dir: Path, train_config: str | None, evaluation: dict | None, robot=None) -> None:
    from motionvl.rl.jobs import TrainingJob, run_job

    job = TrainingJob.from_json(job_path.read_text())
    run_dir = Path(job.run_dir) if job.run_dir else runs_dir / job.candidate_id
    run_dir.mkdir(parents=True, exist_ok=True)
    _log_to(run_dir / LOG_FILE)
    beat_path = run_dir / HEARTBEAT_FILE

    def beat(phase: str, iteration: int | None = None) -> None:
        write_json(beat_path, {"time": time.time(), "phase": phase, "iteration": iteration, "pid": os.getpid()})

    beat("starting")
    try:
        outcome = run_job(job, runs_dir, train_config=train_config, evaluation=evaluation, robot=robot,
                          on_iteration=lambda record: beat("training", record["iteration"]), on_phase=beat)
    except Exception as exc:  # noqa: BLE001 - reported as the candidate's failure; the process takes the next job
        traceback.print_exc()
        outcome = {"candidate_id": job.candidate_id, "error": f"{type(exc).__name__}: {exc}"}
    if not outcome.get("complete"):  # run_job writes a complete job's own
        outcome.setdefault("error", f"training stopped before its budget ({outcome.get('stop_reason')})")
        write_json(run_dir / OUTCOME_FILE, outcome)
    beat("done", outcome.get("iterations"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m motionvl.search.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="parent of run directories of jobs naming none")
    parser.add_argument("--train-config", default=None, help="training YAML (default: the package's)")
    parser.add_argument("--evaluation", default=None, help="JSON object: default evaluation arguments")
    parser.add_argument("--robot-config", default=None, help="robot YAML (default: the package's config/robot.yaml)")
    args = parser.parse_args(argv)
    evaluation = json.loads(args.evaluation) if args.evaluation else None
    import motionvl.rl.evaluate  # noqa: F401 - the heavy imports (torch, MuJoCo) before the first job's clock starts
    import motionvl.rl.trainer  # noqa: F401
    from motionvl.robot import load_robot_config

    robot = load_robot_config(args.robot_config)
    for line in sys.stdin:
        if line.strip():
            serve_one(Path(line.strip()), args.runs_dir, args.train_config, evaluation, robot=robot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

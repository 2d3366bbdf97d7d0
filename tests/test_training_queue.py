"""The training queue's status order: a job is reported queued before it is reported training."""
from __future__ import annotations

import threading
import time

from motionvl.rewards.spec import RewardSpec
from motionvl.rl.jobs import TrainingJob, TrainingQueue
from rl_fixtures import tiny_config


def test_a_job_is_reported_queued_before_training_even_when_the_worker_takes_it_at_once(tmp_path):
    statuses: list[tuple[str, str]] = []
    training = threading.Event()

    def on_status(record):
        statuses.append((record["candidate_id"], record["state"]))
        if record["state"] == "training":
            training.set()

    queue = TrainingQueue(tmp_path / "runs", train_config=tiny_config(), on_status=on_status)
    real_put = queue._jobs.put

    def put_then_let_the_worker_start(job):  # the worker wins any race with the submitting thread
        real_put(job)
        assert training.wait(60), "the idle worker never took the job"

    queue._jobs.put = put_then_let_the_worker_start
    try:
        queue.submit(TrainingJob("only", RewardSpec.from_dict({"name": "r", "terms": {"alive": 1.0}}),
                                 max_iterations=1, evaluate=False))
        deadline = time.monotonic() + 300
        while ("only", "done") not in statuses and ("only", "failed") not in statuses:
            assert time.monotonic() < deadline, statuses
            time.sleep(0.1)
    finally:
        queue.shutdown()
    states = [state for cid, state in statuses if cid == "only"]
    assert states[:2] == ["queued", "training"] and states[-1] == "done", statuses

"""Where generated terms run: the worker process (read-only shared state, limits, deadline, crash
containment), the in-process path, the check's training-like batches, and the positive control (the
reference reward's terms as generated code give the library's numbers, isolated or not)."""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest

from motionvl.rewards.sandbox import (
    OUTPUT_LIMIT,
    InProcessTerms,
    IsolatedTerms,
    RewardCodeError,
    check_reward_code,
    compile_code,
    random_reward_state,
)
from motionvl.rewards.sandbox.readonly import frozen, frozen_state
from motionvl.rewards.sandbox.test_states import extreme_reward_state, rollout_pool
from motionvl.rewards.spec import load_reward_spec
from motionvl.rewards.state import RewardState

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
GOOD = (Path(__file__).parent / "data" / "good_rewards" / "tracking.py").read_text()
REFERENCE_GENERATED = ROOT / "config" / "rewards" / "reference_generated.yaml"
BIG_WORK = """
def _reward_big(state):
    wide = state.joint_pos * 2.0
    total = np.zeros_like(state.joint_pos)
    for i in range(8):
        total = total + np.exp(-np.abs(wide))
    return np.exp(-np.mean(total, axis=1))
"""


@pytest.fixture(scope="module")
def pool():
    return rollout_pool(seed=7)


def snapshot(state: RewardState) -> dict:
    return {f.name: np.copy(getattr(state, f.name)) for f in dataclasses.fields(state)}


def assert_unchanged(state: RewardState, before: dict):
    for name, value in before.items():
        np.testing.assert_array_equal(getattr(state, name), value, err_msg=name)


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- read-only state -------------------------------------------------------------------------------
def test_frozen_arrays_cannot_be_made_writable():
    source = np.arange(6.0).reshape(2, 3)
    copy = frozen(source)
    np.testing.assert_array_equal(copy, source)
    for view in (copy, copy.T, copy[:, 1], copy.reshape(-1)):
        with pytest.raises(ValueError):
            view.setflags(write=True)
        with pytest.raises(ValueError, match="read-only"):
            view[0] = 1.0
    source[0, 0] = 99.0  # a copy: the env's later writes do not show through either
    assert copy[0, 0] == 0.0
    state = frozen_state(random_reward_state(4, np.random.default_rng(0)), fields={"base_pos", "joint_pos"})
    assert state.joint_pos.flags.writeable is False and state.joint_vel is None and state.dt > 0


def test_worker_maps_the_state_read_only_and_leaves_the_callers_state_alone(pool):
    runner = IsolatedTerms(compile_code(GOOD))
    state = pool.sample(64, np.random.default_rng(0))
    before = snapshot(state)
    try:
        values = runner.evaluate(state)
        pid = runner._worker.proc.pid
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        shared = [line for line in maps if "motionvl-reward-state" in line]
        assert shared and all(line.split()[1] == "r--s" for line in shared), shared  # read-only, shared
    finally:
        runner.close()
    assert_unchanged(state, before)
    assert sorted(values) == ["fall", "tilt", "track_forward_speed", "track_yaw_rate"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_isolated_and_in_process_terms_agree_with_each_other(pool):
    compiled = compile_code(GOOD)
    isolated, local = IsolatedTerms(compiled), InProcessTerms(compiled)
    try:
        for n in (1, 33, 512):  # a new state layout each time: the worker gets a new mapping
            state = pool.sample(n, np.random.default_rng(n))
            a, b = isolated.evaluate(state), local.evaluate(state)
            assert a.keys() == b.keys()
            for name in a:
                np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    finally:
        isolated.close()


# -- positive control: the reference reward as generated code ---------------------------------------
def test_reference_terms_as_generated_code_give_the_library_numbers(pool):
    generated = load_reward_spec(REFERENCE_GENERATED)
    library = load_reward_spec(None)
    # each named after its library term with `_gen` added (a generated term may not take a library name)
    assert [(t.name, t.weight) for t in generated.terms] == [(f"{t.name}_gen", t.weight) for t in library.terms]
    local = generated.with_isolation(False)
    try:
        rng = np.random.default_rng(1)
        for state in (pool.sample(512, rng), extreme_reward_state(64, rng, "mixed"), random_reward_state(64, rng)):
            total, terms = generated(state)
            ref_total, ref_terms = library(state)
            np.testing.assert_allclose(total, ref_total, rtol=1e-12, atol=1e-15)
            for name, value in ref_terms.items():
                np.testing.assert_allclose(terms[f"{name}_gen"], value, rtol=1e-12, atol=1e-15, err_msg=name)
                np.testing.assert_array_equal(local(state)[1][f"{name}_gen"], terms[f"{name}_gen"], err_msg=name)
    finally:
        generated.close()


# -- deadline, crashes and limits ------------------------------------------------------------------
def test_a_call_past_its_deadline_kills_the_worker_and_names_the_term(pool):
    runner = IsolatedTerms(compile_code(GOOD + "\n" + BIG_WORK), deadline_s=1e-3)
    state = pool.sample(65_536, np.random.default_rng(2))  # ~50 ms of work against a 1 ms deadline
    try:
        with pytest.raises(RewardCodeError, match=r"^line \d+: deadline: `_\w+` did not return within 0.001 s on "
                                                  r"65536 environments, so its worker was stopped"):
            runner.evaluate(state)
        assert runner._worker is None and psutil.Process().children(recursive=True) == []
        with pytest.raises(RewardCodeError, match="deadline"):  # final: the candidate has failed
            runner.evaluate(random_reward_state(2, np.random.default_rng(0)))
    finally:
        runner.close()


def test_a_worker_that_dies_fails_the_candidate_with_the_signal(pool):
    runner = IsolatedTerms(compile_code(GOOD))
    state = pool.sample(16, np.random.default_rng(3))
    try:
        runner.evaluate(state)
        os.kill(runner._worker.proc.pid, signal.SIGKILL)
        with pytest.raises(RewardCodeError, match=r"^line \d+: crashed: the worker running `_\w+` on 16 environments "
                                                  r"was killed by SIGKILL"):
            runner.evaluate(state)
        assert psutil.Process().children(recursive=True) == []
    finally:
        runner.close()


def test_ctrl_c_stops_a_call_that_hangs_and_the_next_call_gets_a_fresh_worker(pool):
    runner = IsolatedTerms(compile_code(GOOD), deadline_s=120.0)
    state = pool.sample(16, np.random.default_rng(5))
    try:
        expected = runner.evaluate(state)
        hung = runner._worker.proc.pid
        os.kill(hung, signal.SIGSTOP)  # a call that never returns, as far as this process can tell
        # Ctrl-C as the kernel may hand it over: to another thread (here the timer's), not the waiting one
        timer = threading.Timer(0.5, lambda: signal.pthread_kill(threading.get_ident(), signal.SIGINT))
        # Python's own Ctrl-C handling, whatever an earlier test (a node's runtime, rclpy) left installed
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                runner.evaluate(state)
            timer.join()
        finally:
            signal.signal(signal.SIGINT, previous)
        assert not psutil.pid_exists(hung)  # the hung worker was killed and reaped
        # not a failure of the candidate (as the deadline's would be, which is final): a new worker answers
        again = runner.evaluate(state)
        for name, value in expected.items():
            np.testing.assert_array_equal(again[name], value)
    finally:
        runner.close()


def test_the_worker_memory_limit_stops_an_allocation_the_guard_allows(pool):
    wide = "def _reward_wide(state):\n    w = np.zeros_like(state.joint_pos) + state.joint_pos\n    return w[:, 0]\n"
    runner = IsolatedTerms(compile_code(wide), memory_bytes=8 << 20)
    rss_before = max_rss_mb()
    try:
        with pytest.raises(RewardCodeError, match=r"^line \d+: memory: "):
            runner.evaluate(random_reward_state(65_536, np.random.default_rng(4)))  # (N, 12) float64: 6 MB each
    finally:
        runner.close()
    assert max_rss_mb() - rss_before < 200  # the batch itself, built here; the term's arrays stayed in the worker


def test_worker_limits_forbid_new_files_and_sockets(tmp_path):
    probe = (
        "import os, socket, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from motionvl.rewards.sandbox.worker import _limit_resources\n"
        "_limit_resources(1 << 30)\n"
        "for make in (lambda: open('pwned_probe.txt', 'w'), lambda: socket.socket(), lambda: os.pipe()):\n"
        "    try:\n        make()\n        print('opened')\n    except OSError as exc:\n        print('blocked', exc.errno)\n"
    )
    result = subprocess.run([sys.executable, "-I", "-c", probe, str(SRC)], cwd=tmp_path, capture_output=True,
                            text=True, env={"PATH": os.defpath}, timeout=60)
    assert result.stdout.split("\n")[:3] == ["blocked 24"] * 3, result  # EMFILE: no descriptor number left
    assert os.listdir(tmp_path) == []


def test_a_bad_value_found_by_the_parent_too_and_failures_are_final():
    compiled = compile_code("def _reward_x(state):\n    return state.base_height * 0.0 + 5.0 * state.gait_phase\n")
    runner = IsolatedTerms(compiled)
    try:
        assert np.all(runner.evaluate(random_reward_state(8, np.random.default_rng(0)))["x"] <= OUTPUT_LIMIT)
        state = dataclasses.replace(random_reward_state(8, np.random.default_rng(0)), gait_phase=np.full(8, 3.0))
        with pytest.raises(RewardCodeError, match=r"^line 1: output-range: `_reward_x` returned 15 \(8 of 8"):
            runner.evaluate(state)
        with pytest.raises(RewardCodeError, match="output-range"):
            runner.evaluate(random_reward_state(8, np.random.default_rng(0)))
    finally:
        runner.close()


# -- the check runs candidates like training ---------------------------------------------------------
def test_rollout_states_hold_falls_impacts_and_resets(pool):
    rows = pool.rows
    assert len(rows["base_pos"]) >= 1000
    assert rows["terminated"].any()
    assert rows["foot_contact_force"].max() > 500.0  # landings harder than the old check's largest force
    assert (rows["base_height"] < 0.5).any() and (rows["base_height"] > 0.7).any()


def test_check_batches_meet_the_conditions_training_meets_and_are_fresh(monkeypatch):
    from motionvl.envs.config import EnvConfig
    from motionvl.rewards.sandbox.test_states import BATCHES, check_batches

    seen, workers = [], []
    real = IsolatedTerms.evaluate

    def spy(self, state):
        seen.append(state)
        out = real(self, state)
        workers.append(self._worker.proc.pid)
        return out

    monkeypatch.setattr(IsolatedTerms, "evaluate", spy)
    check_reward_code(GOOD)
    check_reward_code(GOOD)
    calls = sum(c for _, c, _ in BATCHES)
    assert len(seen) == 2 * calls
    first, second = seen[:calls], seen[calls:]
    assert not np.array_equal(first[0].base_pos, second[0].base_pos)  # a fresh seed per check
    # the run's environment count first, then fewer and one (the evaluations sharing the reward), one worker
    sizes = [s.num_envs for s in first]
    runs = sum(c for _, c, size in BATCHES if size == "run")
    assert set(sizes[:runs]) == {512} and 1 < sizes[runs] < 512 and sizes[-1] == 1
    assert len(set(workers[:calls])) == 1
    # the recorded rollouts at both gait periods training runs at (the old check's rollouts: 0.6 s only)
    training = EnvConfig()
    labelled = list(check_batches(512, np.random.default_rng(0)))
    assert [label for label, _ in labelled] == [label for label, _ in check_batches(512, np.random.default_rng(1))]
    rollout_periods = {state.gait_period for label, state in labelled if label.startswith("rollout")}
    assert rollout_periods == {training.gait_period_schedule.start, training.gait_period_s}
    # states as far from the start, and feet as long in the air, as a training episode allows (the old check's
    # random-policy rollouts ended within 1.2 s, less than a metre from where they started)
    reach = max(np.abs(s.base_pos[:, :2]).max() for s in first if s.base_pos[:, :2].max() < 999)
    assert reach > 10.0 and max(s.foot_air_time.max() for s in first) >= 0.9 * training.episode_length_s
    assert any(s.terminated.all() for s in seen) and any(s.foot_contact_force.max() >= 5e3 for s in seen)


def test_check_names_the_batch_and_the_seed():
    source = "def _cost_flip(state):\n    return 1.0 / (1.0 - state.projected_gravity[:, 2]) * 0.0\n"
    with pytest.raises(RewardCodeError) as info:
        check_reward_code(source, seed=5)
    assert info.value.problems[0].startswith("line 1: non-finite: `_cost_flip` returned NaN/inf")
    assert "extreme-high batch 1 of 1, 512 environments, seed 5]" in info.value.problems[0]


def test_good_generated_terms_train_the_same_isolated_or_in_process(tmp_path):
    """Positive control in training: the worker changes nothing a run records (timing fields aside)."""
    from motionvl.rl.trainer import train_policy
    from rl_fixtures import tiny_config

    timing = {"elapsed_s", "collect_s", "learn_s", "steps_per_s"}
    histories = []
    spec = load_reward_spec(REFERENCE_GENERATED)
    for name, variant in (("isolated", spec), ("in_process", spec.with_isolation(False))):
        train_policy(tmp_path / name, variant, tiny_config(), max_iterations=2, progress=False)
        records = [json.loads(line) for line in (tmp_path / name / "history.jsonl").read_text().splitlines()]
        histories.append([{k: v for k, v in r.items() if k not in timing} for r in records])
    assert len(histories[0]) == 2 and histories[0] == histories[1]
    assert set(histories[0][-1]["terms"]) == {t.name for t in spec.terms}

"""The PPO update's thread count follows the machine: the most threads alone, one beside other busy processes.

Update times are fed from a model of this 2-core machine (2 threads faster alone, 10-30x slower beside CPU
hogs, 1 thread only losing its share): the chooser must settle on the faster count, move when the load
starts and stops, and keep what its probes of the slow count cost small."""

from __future__ import annotations

import pytest

from motionvl.rl.threads import UpdateThreads

ALONE = {1: 0.33, 2: 0.23}
LOADED = {1: 0.60, 2: 10.0}


def run(chooser: UpdateThreads, schedule) -> list:
    """Feed `schedule` (a pace table per iteration); the thread counts used, in order."""
    used = []
    for pace in schedule:
        n = chooser.choose()
        chooser.record(n, pace[n])
        used.append(n)
    return used


def test_alone_it_uses_the_most_threads_and_probes_rarely():
    used = run(UpdateThreads(2), [ALONE] * 200)
    assert used[:3] == [2, 2, 1]  # an unmeasured first update, then each count once
    assert used[3:].count(1) <= 20 and used[-10:].count(2) >= 9


def test_load_moves_it_to_one_thread_within_a_few_iterations_and_back_when_the_load_ends():
    used = run(UpdateThreads(2), [ALONE] * 50 + [LOADED] * 300 + [ALONE] * 50)
    loaded = used[50:350]
    assert loaded[5:].count(1) >= len(loaded[5:]) - 2, "more than two slow probes under steady load"
    after = used[350:]
    assert after[5:].count(2) >= len(after[5:]) - 5, "did not go back to two threads alone"
    cost = sum((LOADED if 50 <= i < 350 else ALONE)[n] for i, n in enumerate(used))
    best = 50 * ALONE[2] + 300 * LOADED[1] + 50 * ALONE[2]
    assert cost <= best * 1.25


def test_a_single_slow_update_does_not_make_it_probe():
    chooser = UpdateThreads(2)
    run(chooser, [ALONE] * 30)
    used = run(chooser, [ALONE] * 5 + [{1: 0.33, 2: 1.0}] + [ALONE] * 3)
    assert used.count(1) <= 1


@pytest.mark.parametrize("most,adapt", [(1, True), (2, False)])
def test_a_fixed_count_stays(most, adapt):
    assert set(run(UpdateThreads(most, adapt=adapt), [LOADED] * 30)) == {most}


def test_cores_are_split_among_trainers_that_share_a_machine():
    from motionvl.rl.threads import cpu_shares

    assert cpu_shares(1, [0, 1]) == [[0, 1]]
    assert cpu_shares(2, [0, 1]) == [[0], [1]]
    assert cpu_shares(2, [0, 1, 2, 3, 4]) == [[0, 1], [2, 3, 4]]
    assert cpu_shares(3, [4, 6]) == [[4], [6], [4]]

"""How many torch threads the PPO update gets, chosen from the update's own measured time.

On a machine shared with other processes, a multi-threaded update is fragile: torch's OpenMP threads meet
at a barrier after every small operation, and when another process holds one of the cores the others wait
out its time slice at each barrier. On 2 cores with two CPU hogs the update went from ~0.5 s to 5-16 s an
iteration with 2 threads, while 1 thread only loses its share of the core. Alone, 2 threads are faster.

`UpdateThreads` measures both as training runs: it uses the thread count whose recent updates were fastest,
tries every count once at the start, and tries another count again when the one in use changes its pace (a
process started or stopped beside it) or on a probing schedule whose interval grows with what the last probe
cost (so a machine under steady load pays for a slow probe rarely). The load average is no use here:
it lags by a minute.
"""

from __future__ import annotations

import statistics
from collections import deque

RECENT = 5
"""Updates remembered per thread count (their median is the count's pace)."""
WARMUP = 1
"""Leading updates not measured: the first one pays for allocations."""
PROBE_EVERY = 10
"""Fewest iterations between probes of a thread count not in use."""
PROBE_BUDGET = 0.05
"""After a probe that lost, the next waits until probing costs at most this share of the update time: a count
that took r times the best waits (r - 1) / PROBE_BUDGET iterations (2 threads beside two CPU hogs: ~300)."""
MAX_PROBE_EVERY = 400
SHIFT = 1.4
"""Two updates in a row this factor slower (or faster) than the median before them mean the machine changed."""


class UpdateThreads:
    """Choose the update's torch thread count among 1..`max_threads` from measured update times."""

    def __init__(self, max_threads: int, adapt: bool = True):
        self.max_threads = max(1, int(max_threads))
        self.adapt = bool(adapt) and self.max_threads > 1
        self.times: dict[int, deque] = {n: deque(maxlen=RECENT) for n in range(1, self.max_threads + 1)}
        self.skipped = 0
        self.next_probe = PROBE_EVERY
        self.iteration = 0
        self.current = self.max_threads
        self.probing: int | None = None
        self.switches = 0
        self._drift = 0  # consecutive updates of the count in use off its pace in one direction (+ slower, - faster)

    def choose(self) -> int:
        """The thread count for the next update."""
        if not self.adapt:
            return self.max_threads
        untried = [n for n, t in sorted(self.times.items(), reverse=True) if not t]
        if self.skipped >= WARMUP and untried:
            self.probing = untried[0]
        elif self.skipped >= WARMUP and self.iteration >= self.next_probe:
            others = [n for n in self.times if n != self.current]
            self.probing = min(others, key=lambda n: (len(self.times[n]), n))
        else:
            self.probing = None
        return self.probing or self.current

    def record(self, threads: int, seconds: float) -> None:
        """The update just run with `threads` threads took `seconds`."""
        self.iteration += 1
        if not self.adapt:
            return
        if self.skipped < WARMUP:
            self.skipped += 1
            return
        probe = self.probing
        self.probing = None
        if probe is not None:
            self.times[probe].clear()  # what a probe measures replaces what the count did under older conditions
        history = self.times[threads]
        shifted = False
        if probe is None and threads == self.current and len(history) >= 3:
            ratio = seconds / statistics.median(history)
            step = 1 if ratio > SHIFT else -1 if ratio < 1 / SHIFT else 0
            self._drift = self._drift + step if step and (self._drift * step) >= 0 else step
            shifted = abs(self._drift) >= 2
        history.append(seconds)
        best = min((n for n, t in self.times.items() if t), key=lambda n: statistics.median(self.times[n]))
        if best != self.current:
            self.current = best
            self.switches += 1
        if probe is not None and all(self.times.values()):
            paces = [statistics.median(t) for t in self.times.values()]
            ratio = max(paces) / min(paces)  # what probing the slowest count again would cost
            self.probe_every = min(MAX_PROBE_EVERY, max(PROBE_EVERY, round((ratio - 1) / PROBE_BUDGET)))
            self.next_probe = self.iteration + self.probe_every
        if shifted:  # the machine changed under the count in use: its last two updates are its pace now, and
            self._drift = 0  # the other counts are measured again at once
            recent = list(history)[-2:]
            history.clear()
            history.extend(recent)
            for n in self.times:
                if n != threads:
                    self.times[n].clear()
            self.next_probe = self.iteration

    def pace(self) -> dict:
        """Median update seconds per thread count, as measured recently (for the history and the bench)."""
        return {n: round(statistics.median(t), 4) for n, t in self.times.items() if t}


def cpu_shares(count: int, cpus=None) -> list[list[int]]:
    """The cores of this process (or `cpus`) split among `count` processes that share them on purpose (several
    trainers on one machine): contiguous blocks when there are cores enough, else one core each, round robin."""
    import os

    cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if count <= len(cpus):
        bounds = [round(i * len(cpus) / count) for i in range(count + 1)]
        return [cpus[bounds[i]:bounds[i + 1]] for i in range(count)]
    return [[cpus[i % len(cpus)]] for i in range(count)]


def pin_process(cpus) -> None:
    """Keep this process, every thread it has and every thread it starts, on `cpus` (Linux)."""
    import os

    cpus = sorted({int(c) for c in cpus})
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def pinned(cpus):
    """A `preexec_fn` that keeps a child process (and the threads it starts) on `cpus` (None: no change)."""
    import os

    if not cpus:
        return None

    def pin() -> None:
        os.sched_setaffinity(0, list(cpus))
    return pin

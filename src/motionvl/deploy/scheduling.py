"""Timing of the control loop: absolute monotonic deadlines, real-time priority, loop statistics.

The loop never sleeps "a period after the work" (which drifts by the work's duration every
cycle): each deadline is the previous deadline plus one period, and a loop that falls more than a
period behind skips to the next deadline ahead of now and counts the cycles it lost.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
import threading
import time

import numpy as np

MCL_CURRENT, MCL_FUTURE = 1, 2


@dataclasses.dataclass
class RealtimeStatus:
    """What the system granted when the control loop asked for real-time scheduling."""

    requested_priority: int
    scheduler: str = "SCHED_OTHER"
    memory_locked: bool = False
    notes: list = dataclasses.field(default_factory=list)
    """Why something was refused, or what was not asked for."""

    @property
    def granted(self) -> bool:
        return self.scheduler.startswith("SCHED_FIFO")

    def describe(self) -> str:
        mem = "memory locked" if self.memory_locked else "memory not locked"
        return f"{self.scheduler}, {mem}" + (f" ({'; '.join(self.notes)})" if self.notes else "")


def request_realtime(priority: int = 50, lock_memory: bool = True, all_threads: bool = True) -> RealtimeStatus:
    """Ask for SCHED_FIFO at `priority` (for every thread of the process when `all_threads`: the
    middleware's receive threads carry the state to the loop) and lock memory (mlockall), saying
    what was refused and why; priority 0 asks for nothing."""
    status = RealtimeStatus(int(priority))
    if priority <= 0:
        status.notes.append("real-time priority not requested (priority 0)")
    elif not hasattr(os, "sched_setscheduler"):
        status.notes.append("SCHED_FIFO is not available on this platform")
    else:
        tids = [int(t) for t in os.listdir("/proc/self/task")] if all_threads and os.path.isdir("/proc/self/task") \
            else [0]
        try:
            for tid in tids:
                try:
                    os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(int(priority)))
                except ProcessLookupError:  # a thread that ended meanwhile
                    pass
            status.scheduler = f"SCHED_FIFO {int(priority)}"
        except PermissionError as exc:
            status.notes.append(f"SCHED_FIFO {priority} refused ({exc.strerror}): needs CAP_SYS_NICE or an rtprio "
                                "limit (e.g. '@realtime - rtprio 95' in /etc/security/limits.conf, or docker "
                                "--cap-add=SYS_NICE --ulimit rtprio=95)")
        except OSError as exc:
            status.notes.append(f"SCHED_FIFO {priority} refused ({exc.strerror})")
    if lock_memory and priority > 0:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mlockall(MCL_CURRENT | MCL_FUTURE) == 0:
            status.memory_locked = True
        else:
            err = ctypes.get_errno()
            status.notes.append(f"mlockall refused ({os.strerror(err)}): needs CAP_IPC_LOCK or a memlock limit "
                                "(ulimit -l unlimited)")
    return status


def release_realtime() -> None:
    """Undo `request_realtime` for every thread of the process (SCHED_OTHER, memory unlocked): a process
    that goes on to start others (a benchmark) must not hand its priority down to them."""
    if hasattr(os, "sched_setscheduler") and os.path.isdir("/proc/self/task"):
        for tid in (int(t) for t in os.listdir("/proc/self/task")):
            try:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            except OSError:  # a thread that ended meanwhile, or nothing to undo
                pass
    ctypes.CDLL(None, use_errno=True).munlockall()


def set_thread_scheduling(priority: int = 0, affinity=()) -> str:
    """For the calling thread: SCHED_FIFO at `priority` (0: SCHED_OTHER, so that a thread started by a
    real-time one does not keep its priority) and the CPUs it may run on (empty: leave as is).
    Returns what it got, in words (a refusal says why)."""
    said = []
    if hasattr(os, "sched_setscheduler"):
        try:
            if priority > 0:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(priority)))
                said.append(f"SCHED_FIFO {int(priority)}")
            else:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
                said.append("SCHED_OTHER")
        except OSError as exc:
            said.append(f"scheduling unchanged ({exc.strerror})")
    if affinity:
        said.append(set_affinity(affinity))
    return ", ".join(said) or "scheduling unchanged"


def set_affinity(cpus) -> str:
    """Pin the calling thread to `cpus` (as ros2_control's cpu_affinity); returns what it got."""
    cpus = sorted({int(c) for c in cpus})
    try:
        os.sched_setaffinity(0, cpus)
        return f"CPUs {cpus}"
    except (OSError, ValueError) as exc:
        return f"CPU affinity {cpus} refused ({getattr(exc, 'strerror', None) or exc})"


SWITCH_INTERVAL_S = 0.0005
"""The GIL switch interval a real-time process sets (Python's default is 5 ms): how long a thread that
wants the GIL waits before it asks the holder to let go. The control loop shares the GIL with the
executor, the policy worker and the middleware's Python callbacks: with the default, one Python-bound
step of another thread can hold the loop for 5 ms, more than two 500 Hz periods. `motionvl bench
deploy` measures the wait (`gil_wait_ms`) at both settings."""


def set_switch_interval(seconds: float) -> str:
    """sys.setswitchinterval(seconds) when > 0 (the interpreter's default otherwise); returns it in words."""
    if seconds > 0:
        sys.setswitchinterval(float(seconds))
    return f"GIL switch interval {sys.getswitchinterval() * 1e3:g} ms"


def gil_wait(switch_interval: float, samples: int = 200, period: float = 0.002) -> dict:
    """How late a thread waking every `period` gets the GIL back while another thread runs pure Python
    (a policy step hung in Python code, a busy callback), at `switch_interval`. Returns p50/p99/max
    of (wake - deadline) in ms. The interval is restored afterwards."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval)
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            x += 1

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    late = []
    try:
        deadline = time.monotonic() + period
        for _ in range(samples):
            time.sleep(max(0.0, deadline - time.monotonic()))
            late.append(time.monotonic() - deadline)
            deadline += period
            if time.monotonic() > deadline:
                deadline = time.monotonic() + period
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(before)
    r = Rolling(samples)
    for v in late:
        r.add(v)
    return r.summary_ms()


class Rolling:
    """The last `size` samples of one quantity, for percentiles."""

    def __init__(self, size: int = 20000):
        self._data = np.zeros(int(size))
        self._n = 0

    def add(self, value: float) -> None:
        self._data[self._n % len(self._data)] = value
        self._n += 1

    @property
    def count(self) -> int:
        return self._n

    def values(self) -> np.ndarray:
        return self._data[:min(self._n, len(self._data))].copy()

    def summary_ms(self) -> dict:
        v = self.values()
        if v.size == 0:
            return {"p50": None, "p99": None, "max": None, "n": 0}
        return {"p50": round(float(np.percentile(v, 50)) * 1e3, 4), "p99": round(float(np.percentile(v, 99)) * 1e3, 4),
                "max": round(float(v.max()) * 1e3, 4), "n": int(v.size)}


class LoopStatistics:
    """Periods, period errors, latencies and policy inference times of the command cycles."""

    def __init__(self, period: float, size: int = 20000):
        self.period = float(period)
        self.intervals = Rolling(size)
        """Seconds between the starts of successive cycles."""
        self.period_error = Rolling(size)
        """|interval - period|."""
        self.latency = Rolling(size)
        """From what triggered a cycle (a state's arrival, or the deadline) to its command being sent."""
        self.inference = Rolling(size)
        """ONNX Runtime time of each policy step."""
        self.step_latency = Rolling(size)
        """`latency` of the cycles that started a policy step (the others only run the PD law)."""
        self.cycles = 0
        self.overruns = 0
        """Cycles that finished later than one period after their trigger."""
        self.lost_cycles = 0
        """Deadlines the clock-driven loop skipped because it was more than a period late."""
        self.late_cycles = 0
        """RUN cycles that commanded damping because their policy period's step was not back in time."""
        self.skipped_steps = 0
        """Policy steps not started because the one before was still running."""
        self._last_start: float | None = None

    def cycle_started(self, t: float) -> None:
        if self._last_start is not None:
            interval = t - self._last_start
            self.intervals.add(interval)
            self.period_error.add(abs(interval - self.period))
        self._last_start = t
        self.cycles += 1

    def summary(self) -> dict:
        return {"cycles": self.cycles, "overruns": self.overruns, "lost_cycles": self.lost_cycles,
                "late_cycles": self.late_cycles, "skipped_steps": self.skipped_steps,
                "period_ms": self.intervals.summary_ms(), "period_error_ms": self.period_error.summary_ms(),
                "latency_ms": self.latency.summary_ms(), "step_latency_ms": self.step_latency.summary_ms(),
                "inference_ms": self.inference.summary_ms()}


class DeadlineClock:
    """Absolute deadlines t0 + k x period on the monotonic clock."""

    def __init__(self, period: float, start: float | None = None, clock=time.monotonic):
        self.period = float(period)
        self.clock = clock
        self.next = (clock() if start is None else start) + self.period

    def wait(self, stop: threading.Event) -> tuple[float | None, int]:
        """Sleep until the next deadline (or `stop`); returns (deadline, deadlines skipped), deadline
        None when stopped. A loop more than a period late skips to the first deadline ahead of now."""
        now = self.clock()
        lost = 0
        if now - self.next > self.period:
            lost = int((now - self.next) // self.period)
            self.next += lost * self.period
        delay = self.next - now
        if delay > 0 and stop.wait(delay):
            return None, lost
        if stop.is_set():
            return None, lost
        deadline = self.next
        self.next += self.period
        return deadline, lost


class StatePacer:
    """Which joint states start a command cycle when the state stream paces the loop.

    A drive may publish its joint states faster than the command rate (ros2_control's joint state
    broadcaster and vendor bridges often run at 500 Hz-1 kHz): one cycle per state would run the
    policy, its gait clock, the STAND ramp and the cmd_vel rate limit that many times too fast. A
    state starts a cycle when its stamp (the drive's own clock, so jitter in delivery does not
    matter) reaches the next due time, less `slack` periods; due times advance one period per
    cycle (the mean rate is the command rate whenever states come at least that often) and never
    fall more than a period behind the stamps (no burst of cycles after a gap). States slower than
    the command rate each start a cycle.
    """

    def __init__(self, period: float, slack: float = 0.25):
        self.period = float(period)
        self.slack = float(slack) * self.period
        self.next_due: float | None = None

    def due(self, stamp: float) -> bool:
        if self.next_due is not None and stamp < self.next_due - self.slack:
            return False
        if self.next_due is None:
            self.next_due = stamp + self.period
        else:
            self.next_due = max(self.next_due + self.period, stamp + self.period - self.slack)
        return True

"""Policy steps where they cannot hold the command stream: inline, or on a thread of their own.

A policy step is the observation, the ONNX inference and the action law (`run_step`). The
controller hands each step to a runner and takes its result when it is there:

- `InlineRunner` runs the step in the caller (the in-process playback in simulated time, the core's
  tests): `submit` returns when the step has, so a slow step makes its cycle late (the controller's
  overrun streak counts that).
- `PolicyWorker` runs it on a daemon thread below the control loop's priority (SCHED_FIFO one
  below the loop's, or plain SCHED_OTHER when the loop has no real-time priority). The loop waits
  for the result only until the step's deadline; a step that is not back by then leaves the loop
  free to command damping on schedule (and to answer the e-stop, mode requests and signals), and
  `cancel` asks ONNX Runtime to end a run in progress (`RunOptions.terminate`). A step that hangs
  in Python cannot be ended: its thread is left behind (a daemon) and a new policy gets a new worker.

One step at a time: a step due while another is running is not started (the controller counts it).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np

from motionvl.deploy.faults import first_non_finite

INTERRUPT_SLICE_S = 0.001
"""While a cycle waits for a policy step, how often it looks whether something more urgent came."""


@dataclasses.dataclass
class StepRequest:
    """What a policy step reads, copied at the cycle that made it due (the loop goes on meanwhile)."""

    step: int
    """Index of the step in RUN (0 at the first RUN cycle): which policy period it is for."""
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    base_quat: np.ndarray
    base_gyro: np.ndarray
    command: np.ndarray
    time_s: float
    """The gait clock: seconds of RUN at this step."""


@dataclasses.dataclass
class StepResult:
    step: int
    target: np.ndarray | None = None
    """Joint targets (J,), None when the step failed (see `problem`)."""
    seconds: float = 0.0
    """ONNX Runtime time of the inference (0 when it did not run)."""
    problem: str | None = None
    """Why there is no target, for the fault's reason."""
    kind: str = ""
    """The fault kind of `problem`: 'non_finite_policy' or 'internal'."""


def run_step(policy, request: StepRequest, run_options=None, names=None) -> StepResult:
    """One policy step: observation, inference, action law; a problem is returned, never raised.
    `names`: the joints, to name one in a problem."""
    try:
        io = policy.io
        obs = io.observe(joint_pos=request.joint_pos, joint_vel=request.joint_vel, imu_quat=request.base_quat,
                         imu_gyro=request.base_gyro, command=request.command, time_s=request.time_s)
        if run_options is not None:  # the policy's session runs with these (another thread may terminate it)
            policy.run_options = run_options
        action, seconds = policy.act(obs)
        bad = first_non_finite(names, {"action": action})
        if bad:
            return StepResult(request.step, None, seconds, f"policy output before scaling: {bad}", "non_finite_policy")
        target = io.targets(action)[0]
        # a finite action gives a finite target unless the contract's action law does not (a NaN
        # clip or feed-forward amplitude in the metadata): the clip would pass NaN on
        bad = first_non_finite(names, {"joint target": target})
        if bad:
            return StepResult(request.step, None, seconds, f"action law of a finite action: {bad}", "non_finite_policy")
        return StepResult(request.step, target, seconds)
    except Exception as exc:  # ONNX Runtime, the observation or the action law: whatever raises damps
        return StepResult(request.step, None, 0.0, f"policy step raised {type(exc).__name__}: {exc}", "internal")


class InlineRunner:
    """Runs each step in the caller's thread (see the module docstring)."""

    def __init__(self, policy, names=None):
        self.policy = policy
        self.names = names
        self._result: StepResult | None = None

    @property
    def busy(self) -> bool:
        return False

    @property
    def step(self) -> int | None:
        return None

    def submit(self, request: StepRequest) -> None:
        self._result = run_step(self.policy, request, names=self.names)

    def wait(self, timeout: float, interrupt=None) -> StepResult | None:
        return self.poll()

    def poll(self) -> StepResult | None:
        result, self._result = self._result, None
        return result

    def cancel(self) -> None:
        pass

    def close(self, timeout: float = 0.0) -> bool:
        return True


class PolicyWorker:
    """Runs each step on a thread of its own (see the module docstring). `priority`: the SCHED_FIFO
    priority the worker takes (0: SCHED_OTHER); `affinity`: CPUs it may run on (empty: any)."""

    def __init__(self, policy, names=None, priority: int = 0, affinity=()):
        self.policy = policy
        self.names = names
        self.priority = int(priority)
        self.affinity = tuple(affinity)
        # two locks used as binary semaphores: cheaper to hand over than Events (no condition inside)
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._request: StepRequest | None = None
        self._result: StepResult | None = None
        self._busy = False
        self._closed = False
        self._run_options = None
        self._cancelled = False
        self.scheduling = "not started"
        """What the worker thread got (priority, affinity), for the node's report."""
        self.started_at: float | None = None
        """Monotonic time the running step started (None when idle)."""
        self._thread = threading.Thread(target=self._serve, name="policy-step", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """A step was submitted and its result not yet taken."""
        return self._busy

    @property
    def step(self) -> int | None:
        """The index of the step submitted and not yet taken (None when idle)."""
        return self._request.step if self._busy and self._request is not None else None

    def submit(self, request: StepRequest) -> None:
        if self._busy or self._closed:
            raise RuntimeError("a policy step is still running" if self._busy else "the worker is closed")
        self._busy, self._cancelled = True, False
        self._request = request
        self.started_at = time.monotonic()
        self._go.release()

    def wait(self, timeout: float, interrupt=None) -> StepResult | None:
        """The result of the submitted step if it is back within `timeout` seconds, else None; `interrupt()`
        True ends the wait early (looked at every INTERRUPT_SLICE_S: an e-stop must not wait for a step)."""
        if not self._busy:
            return None
        end = time.monotonic() + max(0.0, timeout)
        while True:
            left = end - time.monotonic()
            slice_ = left if interrupt is None else min(left, INTERRUPT_SLICE_S)
            if self._done.acquire(timeout=max(0.0, slice_)):
                return self._take()
            if left <= slice_ or (interrupt is not None and interrupt()):
                return None

    def poll(self) -> StepResult | None:
        """The result of the submitted step if it is back now, else None (never blocks)."""
        if not self._busy or not self._done.acquire(blocking=False):
            return None
        return self._take()

    def _take(self) -> StepResult:
        result, self._result, self._busy, self.started_at = self._result, None, False, None
        return result

    def cancel(self) -> None:
        """Ask ONNX Runtime to end the run in progress (its result then reports the cancellation)."""
        self._cancelled = True
        options = self._run_options
        if options is not None:
            options.terminate = True

    def close(self, timeout: float = 0.0) -> bool:
        """Stop the worker: cancel a run in progress and wait up to `timeout` s for the thread to end.
        False when it is still running (a step that hangs outside ONNX Runtime): it is left behind."""
        self._closed = True
        self.cancel()
        try:  # wake a worker waiting for work, also one whose last result nobody took
            self._go.release()
        except RuntimeError:  # a submitted step it has not picked up yet already woke it
            pass
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _serve(self) -> None:
        from motionvl.deploy.scheduling import set_thread_scheduling

        self.scheduling = set_thread_scheduling(self.priority, self.affinity)
        try:
            import onnxruntime as ort
        except ImportError:  # a stand-in policy (tests) without ONNX Runtime: no cancellation
            ort = None
        while True:
            self._go.acquire()
            request = self._request
            if self._closed:  # a step submitted but not started is dropped: nobody waits for it any more
                return
            options = ort.RunOptions() if ort is not None else None
            self._run_options = options  # first, then the flag: cancel() sets them the other way round
            if options is not None and self._cancelled:  # cancelled before it started
                options.terminate = True
            self._result = run_step(self.policy, request, options, self.names)
            self._run_options = None
            self._done.release()
            if self._closed:
                return

"""Action goals whose work runs on a thread of the node's own (a training, a model call).

The action server's execute callback is a coroutine that awaits `QueuedGoal.done`: a waiting or working
goal holds no executor thread, so goals queue side by side with cancels, heartbeats and other callbacks.
The work thread calls `finish(result)`; the coroutine resumes and ends the goal with `conclude(how)`.
"""

from __future__ import annotations

import time

from rclpy.task import Future

CANCEL_SETTLE_S = 1.0
"""Longest wait for the server to mark a goal CANCELING after its cancel callback accepted (microseconds in use)."""


class QueuedGoal:
    def __init__(self, handle, executor):
        self.handle, self.executor = handle, executor
        self.done: Future = Future(executor=executor)
        self.cancelling = False
        """A cancel was accepted (set by the node's cancel callback)."""

    def finish(self, result) -> None:
        """Called once the work ended (any thread): the goal's coroutine resumes with `result`."""
        if self.done.done():
            return
        self.done.set_result(result)
        try:
            self.executor.wake()  # the coroutine resumes at the executor's next look, not at its next timer
        except Exception:  # noqa: BLE001 - the executor is shutting down: nobody waits for the result
            pass

    def conclude(self, how: str) -> None:
        """End the goal: 'succeed', 'abort' or 'cancel' (canceled when a cancel was accepted, else aborted)."""
        if how == "cancel":
            if self.cancelling:
                # a goal finished by its cancel callback: the server turns the callback's ACCEPT into CANCELING
                # right after it returns (on another executor thread); canceled() is legal from then on
                deadline = time.monotonic() + CANCEL_SETTLE_S
                while not self.handle.is_cancel_requested and time.monotonic() < deadline:
                    time.sleep(0.001)
            if self.handle.is_cancel_requested:
                self.handle.canceled()
                return
            how = "abort"
        if how == "succeed":
            self.handle.succeed()
        else:
            self.handle.abort()

"""Action goals: the server side whose work runs on a thread of the node's own (a training, a model call),
and the client side's one-shot call (`goal_result`).

The action server's execute callback is a coroutine that awaits `QueuedGoal.done`: a waiting or working
goal holds no executor thread, so goals queue side by side with cancels, heartbeats and other callbacks.
The work thread calls `finish(result)`; the coroutine resumes and ends the goal with `conclude(how)`.
"""

from __future__ import annotations

import threading
import time

from rclpy.action import ActionClient as _RclpyActionClient
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


class ActionClient(_RclpyActionClient):
    """rclpy's ActionClient with two of its 9.1 races closed (the wheels' rclpy; both fixed upstream).

    - Creation while an executor spins the node on another thread: rclpy adds the client to the node's waitables
      and wakes the executor before it creates the lock the executor's next look (`get_num_entities`) takes
      (ros2/rclpy#1589): the executor thread raised AttributeError and the node stopped. Here the lock exists
      before the client is added, and stays the one lock (rclpy's later assignment is ignored).
    - `send_goal_async` registers the goal's future twice, the second time outside the lock (ros2/rclpy#1532):
      an answer taken in between completes the first future, the returned one never completes (a caller waits
      out its timeout for a goal the server accepted), and a feedback message can come before its callback is
      registered. The lock is re-entrant and held across the call, so the executor takes nothing for this client
      until the returned future and the feedback callback are in place; the orphaned first future is dropped."""

    def __init__(self, *args, **kwargs):
        self._lock = threading.RLock()
        super().__init__(*args, **kwargs)

    def __setattr__(self, name, value):
        if name == "_lock" and "_lock" in self.__dict__:
            return
        super().__setattr__(name, value)

    def send_goal_async(self, goal, feedback_callback=None, goal_uuid=None):
        with self._lock:
            before = list(self._futures)
            future = super().send_goal_async(goal, feedback_callback, goal_uuid)
            for orphan in [f for f in self._futures if f is not future and not any(f is b for b in before)]:
                self.remove_future(orphan)
        return future


def destroy_actions(node) -> None:
    """Destroy the node's action servers and clients, which rclpy's destroy_node leaves alone. Each holds the
    node's handle in a reference cycle with the node, so left to themselves they go with a later garbage
    collection, on whatever thread runs it, tearing DDS entities down under the GIL: the kind of hang rclpy
    works around for publishers and services by destroying them eagerly. Call it from destroy_node, when no
    thread of the node's own still uses them."""
    from rclpy.action import ActionServer

    for waitable in list(node.waitables):
        if isinstance(waitable, (_RclpyActionClient, ActionServer)):
            waitable.destroy()


def goal_result(client, goal, timeout_s: float, server: str):
    """Send `goal` on the ActionClient and wait for its end: (status, result message). RuntimeError when the
    server refuses the goal or a request fails on the wire; TimeoutError when no result comes within
    `timeout_s`, after cancelling the goal (a waiting one is dropped, a call in flight answers unheard).
    The answers arrive on the node's executor: call this from another thread."""
    done = threading.Event()
    answer: dict = {}

    def on_result(future) -> None:
        try:
            answer["response"] = future.result()
        except Exception as exc:  # noqa: BLE001 - the result request failed on the wire
            answer["error"] = RuntimeError(f"the result request to {server} failed: {exc}")
        done.set()

    def on_handle(future) -> None:
        try:
            handle = answer["handle"] = future.result()
        except Exception as exc:  # noqa: BLE001 - the goal request failed on the wire
            answer["error"] = RuntimeError(f"the goal request to {server} failed: {exc}")
            done.set()
            return
        if not handle.accepted:
            answer["error"] = RuntimeError(f"{server} did not accept the goal")
            done.set()
            return
        handle.get_result_async().add_done_callback(on_result)

    client.send_goal_async(goal).add_done_callback(on_handle)
    if not done.wait(timeout_s):
        if answer.get("handle") is not None:
            answer["handle"].cancel_goal_async()
        raise TimeoutError(f"{server} did not answer within {timeout_s:g} s")
    if "error" in answer:
        raise answer["error"]
    return answer["response"].status, answer["response"].result
